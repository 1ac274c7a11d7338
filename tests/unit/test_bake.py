"""`export bake`: a docker-bake.json that bake's file format accepts, chains layers through named
contexts, and matches its golden file for the default matrix."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from imagebuilder.cli import main
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.plan import bake, keys
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.render import Renderer

from ..conftest import MatrixWriter

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "docker-bake.json"
SCHEMA = json.loads((Path(__file__).parent / "data" / "bake.schema.json").read_text())


def export(tmp_path: Path, *flags: str) -> dict[str, dict[str, dict[str, object]]]:
    out = tmp_path / "out" / "docker-bake.json"
    code = main(["--offline", "--engine", "unix:///nonexistent.sock", "export", "bake", "--matrix",
                 str(ROOT / "matrix.yaml"), "-o", str(out), *flags])
    assert code == 0
    return dict(json.loads(out.read_text()))


def test_bake_file_is_valid_and_chained(tmp_path: Path) -> None:
    doc = export(tmp_path, "--public-tags")
    jsonschema.validate(doc, SCHEMA)
    targets = doc["target"]
    # 7 entries x os, cuda (5 CUDA entries), torch, devel (2 devel entries), business, task, jupyter, ssh = 49 nodes;
    # one target per distinct image: one os for all, and the devel entries' cuda/torch are runtime's (9 fewer)
    assert len(targets) == 40
    os_target = targets["2_11_0-cu130-py3_11-runtime--os"]
    assert "127.0.0.1:5000/ml/pytorch:2.8.0-cpu-py3.11-devel-os" in os_target["tags"]  # type: ignore[operator]
    for name, target in targets.items():
        dockerfile = (tmp_path / "out" / str(target["context"]) / "Dockerfile").read_text()
        first_from = re.search(r"^FROM (\S+)", dockerfile, re.MULTILINE)
        assert first_from, name
        if name.endswith("--os"):
            assert "contexts" not in target and first_from.group(1) in ("debian:bookworm", "ubuntu:24.04",
                                                                        "ubuntu:22.04")
        else:  # the parent tag the Dockerfile names is bound to the parent's target
            contexts = target["contexts"]
            assert isinstance(contexts, dict) and list(contexts) == [first_from.group(1)]
            parent = str(contexts[first_from.group(1)]).removeprefix("target:")
            assert parent in targets and first_from.group(1) in targets[parent]["tags"]  # type: ignore[operator]
    for group in doc["group"].values():
        assert all(t in targets for t in group["targets"])  # type: ignore[union-attr]


@pytest.mark.parametrize("breakage", ["tag instead of tags", "contexts as a list", "a target without context"])
def test_the_schema_refuses_our_file_broken_the_way_a_bug_would(tmp_path: Path, breakage: str) -> None:
    """The check above is seen failing on the exported file itself, broken in the fields imagebuilder writes."""
    doc = export(tmp_path)
    target = next(t for t in doc["target"].values() if "contexts" in t)
    if breakage == "tag instead of tags":
        target["tag"] = target.pop("tags")
    elif breakage == "contexts as a list":
        target["contexts"] = list(target["contexts"])  # type: ignore[call-overload]
    else:
        del target["context"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


def test_bake_names_key_tags_only_unless_told(tmp_path: Path, write_matrix: MatrixWriter, header: str,
                                              table: CompatTable) -> None:
    """What bake builds has not passed the suite: by default a target carries its key tag alone (none when the
    keys are unknown: no engine), never a public tag or alias."""
    assert all(t["tags"] == [] for t in export(tmp_path)["target"].values())
    path = write_matrix(header + "aliases: ['latest-{layer}']\nmatrix: {torch: [2.6.0], accelerator: [cpu], "
                        "python: ['3.11']}\n")
    plan = keys.assign(plan_mod.make(matrix_mod.load(path, table, env={}), Renderer()),
                       {"debian:bookworm": "sha256:" + "1" * 64})
    doc = bake.bake_file(plan, tmp_path / "c", tmp_path)
    assert [t["tags"] for t in doc["target"].values()] == [[keys.cache_ref(n)] for n in plan.nodes]
    public = bake.bake_file(plan, tmp_path / "c", tmp_path, public=True)
    assert all(set(n.tags) | set(n.aliases) | {keys.cache_ref(n)} == set(t["tags"])
               for n, t in zip(plan.nodes, public["target"].values(), strict=True))


def test_bake_golden(tmp_path: Path, update_golden: bool) -> None:
    text = json.dumps(export(tmp_path, "--public-tags"), indent=2) + "\n"
    if update_golden:
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8"), "docker-bake.json changed; run with --update-golden"
