"""The bad-input corpus on the real engine: the whole corpus runs in this process (see
tests/unit/test_corpus.py for what each case must say), and the engine's image set is the same before and
after: nothing was built, pulled or tagged for any bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuilder.engine import Engine

from ..unit.test_corpus import CORPUS, check, run_case
from .conftest import ROOT


def test_the_whole_corpus_builds_nothing_on_the_real_engine(engine: Engine, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("IMAGEBUILDER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(ROOT)
    images = {i["Id"] for i in engine.api.images(all=True)}
    tags = sorted(t for i in engine.api.images(all=True) for t in i.get("RepoTags") or [])
    for path in CORPUS:
        report = tmp_path / path.stem
        check(path, run_case(path, report, capsys), report)
    assert {i["Id"] for i in engine.api.images(all=True)} == images  # nothing was built or pulled
    assert sorted(t for i in engine.api.images(all=True) for t in i.get("RepoTags") or []) == tags
