"""The bad-input corpus on the real engine: the whole corpus runs in this process (see
tests/unit/test_corpus.py for what each case must say) against the real engine, which is asked what it has
but never to build, pull, tag, push or run anything: nothing was built, pulled or tagged for any bad input.
(The engine's calls are recorded rather than its image set compared, so a test building beside this one,
in another pytest-xdist worker, cannot make it flaky.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagebuilder.ports.engine import DockerEngine

from ..unit.test_corpus import CORPUS, check, run_case
from .conftest import ROOT

CHANGES = ("build", "push", "tag", "untag", "run", "remove_image", "container")


def test_the_whole_corpus_builds_nothing_on_the_real_engine(engine: DockerEngine, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("IMAGEBUILDER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(ROOT)
    asked: list[str] = []
    changed: list[str] = []
    for name in CHANGES:  # every call that would change the engine's images or start a container
        def refuse(self: DockerEngine, *args: Any, _name: str = name, **kwargs: Any) -> Any:
            changed.append(f"{_name}{args[:1]}")
            raise AssertionError(f"a bad input reached engine.{_name}")
        monkeypatch.setattr(DockerEngine, name, refuse)
    real_image_id, real_pull = DockerEngine.image_id, DockerEngine.pull
    pulled: list[str] = []
    monkeypatch.setattr(DockerEngine, "image_id", lambda self, ref: asked.append(ref) or real_image_id(self, ref))
    monkeypatch.setattr(DockerEngine, "pull", lambda self, ref, *a, **k: pulled.append(ref) or real_pull(self, ref,
                                                                                                         *a, **k))
    for path in CORPUS:
        report = tmp_path / path.stem
        check(path, run_case(path, report, capsys), report)
    assert changed == []  # nothing was built, tagged, pushed or run
    assert all(real_image_id(engine, ref) is None for ref in pulled)  # a missing base image is looked for, not got
    assert asked and pulled  # the real engine was asked (a missing base image is looked for there)
