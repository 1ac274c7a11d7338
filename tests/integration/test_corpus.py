"""Bad input is caught before anything slow starts: every file of tests/corpus/ is a broken input, run
through `imagebuilder build` on the real engine. Each must exit 2 with one or two lines (the error naming
the file and the key, entry or template line, and maybe a hint), no traceback, and build nothing.

A corpus file says what it expects in its first comment lines:
  # expect: text the error must contain
  # where: text naming the place (default: the file's own name)
  # hint: text the hint line must contain
  # args: extra command-line arguments
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuilder.engine import Engine

from .conftest import ROOT, CliRun

CORPUS = sorted((ROOT / "tests" / "corpus").glob("*.yaml"))


def header(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("# ") or ":" not in line:
            break
        key, _, value = line[2:].partition(": ")
        out[key] = value
    return out


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 25
    assert all("expect" in header(p) for p in CORPUS)


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_a_broken_input_is_one_clear_error_and_builds_nothing(path: Path, engine: Engine, tmp_path: Path,
                                                               cli: Callable[..., CliRun]) -> None:
    want = header(path)
    images = {i["Id"] for i in engine.api.images(all=True)}
    run = cli("build", "--matrix", str(path.relative_to(ROOT)), "--report", str(tmp_path / "r"), "--no-push",
              *shlex.split(want.get("args", "")))
    lines = run.err.strip().splitlines()
    assert run.code == 2, run.text[-2000:]
    assert "Traceback" not in run.text
    assert 1 <= len(lines) <= 2, run.err
    assert lines[0].startswith("error: ") and want["expect"] in lines[0], run.err
    assert want.get("where", path.name) in lines[0], run.err
    if "hint" in want:
        assert len(lines) == 2 and want["hint"] in lines[1], run.err
    assert {i["Id"] for i in engine.api.images(all=True)} == images  # nothing was built
    assert not (tmp_path / "r").exists()  # nor reported: the run never started
