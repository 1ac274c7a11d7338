from __future__ import annotations

import pytest

from imagebuilder.errors import InputError
from imagebuilder.input import source


def test_versions_stay_strings() -> None:
    doc = source.parse("python: [3.10, 3.9]\ntorch: 2.6\nflag: true\nnothing: null\n", "m.yaml")
    assert doc.value == {"python": ["3.10", "3.9"], "torch": "2.6", "flag": True, "nothing": None}


def test_positions_are_remembered() -> None:
    doc = source.parse("a:\n  b:\n    - x\n    - y\n", "m.yaml")
    where = doc.where(("a", "b", 1))
    assert (where.file, where.line, where.key) == ("m.yaml", 4, "a.b[1]")


def test_syntax_error_names_line_and_column() -> None:
    with pytest.raises(InputError) as err:
        source.parse("matrix:\n  torch: [2.6.0\n  python: x\n", "bad.yaml")
    assert err.value.where is not None
    assert err.value.where.file == "bad.yaml"
    assert err.value.where.line == 3
    assert "YAML syntax error" in err.value.message


def test_duplicate_keys_are_errors() -> None:
    with pytest.raises(InputError, match="duplicate key 'torch'") as err:
        source.parse("torch: 1\ntorch: 2\n", "d.yaml")
    assert err.value.where is not None and err.value.where.line == 2
