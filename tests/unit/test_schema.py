"""The matrix schema is the one list of keys: the docs' table of keys is made from it (test_manual.py), the JSON
Schema for editors is made from it and accepts the project's matrices, and every entry says where each of its
values came from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from imagebuilder.errors import InputError
from imagebuilder.input import matrix, schema
from imagebuilder.input.compat import CompatTable

ROOT = Path(__file__).resolve().parents[2]


def test_the_loader_knows_exactly_the_schema_keys() -> None:
    assert set(matrix.TOP_KEYS) == {k.name for k in schema.KEYS if k.parent is None and k.level != schema.INCLUDE}
    assert set(matrix.SMOKE_KEYS) == {k.leaf for k in schema.KEYS if k.parent == "smoke"}
    assert schema.names(schema.AXIS, under="matrix") == matrix.AXES


@pytest.mark.parametrize("path", sorted([*ROOT.glob("examples/*.yaml"), ROOT / "matrix.yaml"]),
                         ids=lambda p: p.name)
def test_the_json_schema_accepts_the_projects_matrices(path: Path) -> None:
    jsonschema.Draft202012Validator.check_schema(schema.json_schema())
    jsonschema.validate(yaml.safe_load(path.read_text(encoding="utf-8")), schema.json_schema())


def test_the_json_schema_refuses_what_the_loader_refuses() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "demo.yaml").read_text(encoding="utf-8"))
    for broken in ({**doc, "bulid": {}}, {**doc, "smoke": {"timeout": "soon"}},
                   {**doc, "matrix": {**doc["matrix"], "accelerator": ["rocm"]}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema.json_schema())


def test_every_default_is_what_the_loader_resolves(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("base_image: debian:bookworm\nregistry: r.example/ns\nrepository: x\nlayers: [base]\n"
                    "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n", encoding="utf-8")
    (e,) = matrix.load(path, CompatTable.load(None), env={}).entries
    origins = dict(e.origins)
    assert origins["torch"] == "m.yaml:5" and origins["registry"] == "m.yaml:2"
    assert origins["smoke.timeout"] == "default"
    smoke, user = e.smoke, e.user
    assert str(smoke.timeout) == schema.default("smoke.timeout") and smoke.shm_size == schema.default("smoke.shm_size")
    assert smoke.gpus == schema.default("smoke.gpus") and smoke.driver_dir == schema.default("smoke.driver_dir")
    assert float(schema.default("smoke.throughput_floor")) == smoke.throughput_floor
    assert float(schema.default("smoke.cpu_gflops_floor")) == smoke.cpu_gflops_floor
    assert (user.name, str(user.uid), str(user.gid), user.workdir) == tuple(
        schema.default(f"user.{k}") for k in ("name", "uid", "gid", "workdir"))
    assert e.build.index_url == schema.default("build.index_url") and e.build.network == schema.default("build.network")
    assert list(e.tags) == yaml.safe_load(schema.default("tags"))
    assert list(e.aliases) == yaml.safe_load(schema.default("aliases"))
    assert e.flavor == yaml.safe_load(schema.default("matrix.flavor"))[0]


def test_a_value_an_include_gives_is_named_at_the_include(tmp_path: Path) -> None:
    """Provenance: a value from an include is reported at the include's line (it was the top-level key's)."""
    path = tmp_path / "m.yaml"
    path.write_text("base_image: debian:bookworm\nregistry: r.example/ns\nrepository: x\nlayers: [base]\n"
                    "smoke: {timeout: 600}\n"
                    "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11', '3.12']}\n"
                    "include:\n  - {python: '3.12', smoke: {shm_size: 4g}, repository: y}\n", encoding="utf-8")
    entries = matrix.load(path, CompatTable.load(None), env={}).entries
    origins = [dict(e.origins) for e in entries]
    assert origins[0]["repository"] == "m.yaml:3" and origins[1]["repository"] == "m.yaml:8"
    assert origins[1]["smoke.shm_size"] == "m.yaml:8" and origins[1]["smoke.timeout"] == "m.yaml:5"
    assert origins[0]["smoke.shm_size"] == "default"
    path.write_text(path.read_text().replace("shm_size: 4g", "shm_size: lots"), encoding="utf-8")
    with pytest.raises(InputError) as info:
        matrix.load(path, CompatTable.load(None), env={})
    assert re.search(r"m\.yaml:8:\d+: include\[0\]\.smoke\.shm_size", str(info.value.where)), info.value.where


def test_schema_command_prints_the_table_and_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    from imagebuilder import cli

    assert cli.main(["schema", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["title"].startswith("imagebuilder matrix.yaml")
    assert cli.main(["schema", "--format", "markdown"]) == 0
    assert capsys.readouterr().out.strip() == schema.markdown().strip()


def test_the_entry_cap_counts_entries_not_include_rules(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    head = "base_image: debian:bookworm\nregistry: r.example/ns\nrepository: x\nlayers: [base]\n"
    path.write_text(head + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11', '3.12']}\n"
                    "include:\n  - {python: '3.12', repository: y}\n", encoding="utf-8")
    assert len(matrix.load(path, CompatTable.load(None), env={}, max_entries=2).entries) == 2
    path.write_text(head + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11', '3.12']}\n"
                    "include:\n  - {torch: 2.7.1, accelerator: cpu, python: '3.12'}\n", encoding="utf-8")
    with pytest.raises(InputError, match="makes 3 entries with its includes; at most 2"):
        matrix.load(path, CompatTable.load(None), env={}, max_entries=2)


def test_a_long_axis_is_refused_before_its_values_are_compared(tmp_path: Path) -> None:
    """An axis of 50 000 values (350 KB, inside the file limits) was compared with itself: ~10^9 steps."""
    path = tmp_path / "m.yaml"
    images = ", ".join(f"a{i}" for i in range(50_000))
    path.write_text("base_image: debian:bookworm\nregistry: r.example/ns\nrepository: x\nlayers: [base]\n"
                    f"matrix: {{torch: [2.6.0], accelerator: [cpu], base_image: [{images}]}}\n", encoding="utf-8")
    with pytest.raises(InputError, match="the axis has 50000 values; at most 1000 entries"):
        matrix.load(path, CompatTable.load(None), env={})


def test_vars_merge_key_by_key_and_a_bad_one_is_named_at_its_include(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("base_image: debian:bookworm\nregistry: r.example/ns\nrepository: x\nlayers: [base]\n"
                    "vars: {team: vision}\nmatrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n"
                    "include:\n  - {python: '3.11', vars: {tier: gold}}\n", encoding="utf-8")
    (e,) = matrix.load(path, CompatTable.load(None), env={}).entries
    assert dict(e.vars) == {"team": "vision", "tier": "gold"}
    path.write_text(path.read_text().replace("tier: gold", "tier: 'a b'"), encoding="utf-8")
    with pytest.raises(InputError) as info:
        matrix.load(path, CompatTable.load(None), env={})
    assert str(info.value.where).startswith(f"{path}:8:") and "include[0].vars.tier" in str(info.value.where)
