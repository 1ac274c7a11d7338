"""Hostile values (tests/hostile/values.yaml), at least 20 across every key that reaches a template: each is
refused before anything starts (exit 2, one message naming the file and key, a secret never printed), or
accepted and printed only where it is inert. The integration test builds the inert ones for real."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagebuilder import cli
from imagebuilder.ports.engine import DockerEngine

from .test_corpus import NoImages

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ROOT / "tests" / "hostile"
CASES: list[dict[str, str]] = yaml.safe_load((HOSTILE / "values.yaml").read_text(encoding="utf-8"))


def put(doc: dict[str, Any], key: str, value: str) -> None:
    """Set a dotted key (list items by index) in a YAML document, creating mappings on the way."""
    *parents, last = key.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if isinstance(node, str):  # a string where the path goes on (pip_index_url): replaced by a mapping
            raise AssertionError(f"{key}: {part} is a string")
    if isinstance(node, list):
        node[int(last):int(last) + 1] = [value]
    else:
        node[last] = value


def hostile_copy(tmp_path: Path, case: dict[str, str]) -> tuple[Path, Path]:
    """tests/hostile copied, with the case's value written at its key; (matrix, the file the key is in)."""
    folder = tmp_path / "hostile"
    shutil.copytree(HOSTILE, folder)
    layer = case["key"].startswith("layer.")
    target = folder / ("probe/layer.yaml" if layer else "matrix.yaml")
    doc = yaml.safe_load(target.read_text(encoding="utf-8"))
    if case["key"].startswith("tags.") or case["key"].startswith("aliases."):
        doc[case["key"].split(".")[0]] = ["{entry}-{layer}"]
    if case["key"] == "build.pip_index_url":
        doc["build"].pop("pip_index_url")
    put(doc, case["key"].removeprefix("layer."), case["value"])
    target.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return folder / "matrix.yaml", target


def run_cli(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            tmp_path: Path) -> tuple[int, str]:
    monkeypatch.setattr(DockerEngine, "connect", classmethod(lambda cls, url=None, timeout=600: NoImages()))
    monkeypatch.setenv("IMAGEBUILDER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    code = cli.main(args)
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def test_the_corpus_covers_every_key_that_reaches_a_template() -> None:
    assert len(CASES) >= 20
    keys = {".".join(case["key"].split(".")[:2 if case["key"].startswith("layer.") else 1]) for case in CASES}
    for wanted in ("build", "vars", "user", "smoke", "tags", "aliases", "repository", "base_image",
                   "layer.packages", "layer.pip", "layer.vars", "layer.description"):
        assert wanted in keys, wanted
    assert {case["expect"] for case in CASES} == {"refused", "inert"}


REFUSED = [c for c in CASES if c["expect"] == "refused"]
INERT = [c for c in CASES if c["expect"] == "inert"]


@pytest.mark.parametrize("case", REFUSED, ids=[f"{c['key']}={c['value'][:30]}" for c in REFUSED])
def test_a_hostile_value_is_refused_naming_its_key(case: dict[str, str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    matrix, target = hostile_copy(tmp_path, case)
    report = tmp_path / "report"
    code, text = run_cli(["build", "--matrix", str(matrix), "--report", str(report), "--no-push"], monkeypatch,
                         capsys, tmp_path)
    lines = text.strip().splitlines()
    assert code == 2, text
    assert "Traceback" not in text and 1 <= len(lines) <= 2, text
    assert lines[0].startswith("error: ") and case["says"] in lines[0], text
    assert target.name in lines[0], text  # the file ...
    leaf_key = case["key"].split(".")[-1]
    assert (f"[{leaf_key}]" if leaf_key.isdigit() else leaf_key.split(";")[0]) in lines[0], text  # ... and the key
    if "secret" in case:
        assert case["secret"] not in text
    assert not report.exists()


@pytest.mark.parametrize("case", INERT, ids=[f"{c['key']}={c['value'][:30]}" for c in INERT])
def test_an_accepted_hostile_value_is_printed_only_where_it_is_inert(
        case: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    matrix, _ = hostile_copy(tmp_path, case)
    out = tmp_path / "rendered"
    code, text = run_cli(["render", "--matrix", str(matrix), "--out", str(out)], monkeypatch, capsys, tmp_path)
    assert code == 0, text
    dockerfile = (out / "2.6.0-cpu-py3.11-runtime" / "probe" / "Dockerfile").read_text(encoding="utf-8")
    value = case["value"]
    if case["key"] == "build.index_url":  # a URL never stands in shell text: it is the build arg's default
        assert f"ARG IMAGEBUILDER_INDEX_URL={shlex.quote(value)}\n" in dockerfile
        assert dockerfile.count(value) == 1
    else:
        assert shlex.quote(value) in dockerfile and value not in dockerfile.replace(shlex.quote(value), "")
