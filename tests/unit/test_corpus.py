"""Bad input is caught before anything slow starts: every file of tests/corpus/ is a broken input, run
in-process through `imagebuilder build`'s error path. Each must exit 2 with one or two lines (the error
naming the file and the key, entry or template line, and maybe a hint), no traceback, and nothing built or
reported. The engine here is a fake that knows no image and can build nothing; the integration test
`test_corpus.py` runs the same corpus on the real engine and counts its images before and after.

A corpus file says what it expects in its first comment lines:
  # expect: text the error must contain
  # where: text naming the place (default: the file's own name)
  # hint: text the hint line must contain
  # args: extra command-line arguments
  # env: environment variables for the run (NAME=value ...)
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from imagebuilder import cli
from imagebuilder.errors import EngineError
from imagebuilder.ports.engine import DockerEngine

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted((ROOT / "tests" / "corpus").glob("*.yaml"))


def header(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("# ") or ":" not in line:
            break
        key, _, value = line[2:].partition(": ")
        out[key] = value
    return out


@dataclass(frozen=True)
class CorpusRun:
    code: int
    err: str
    out: str


def run_case(path: Path, report: Path, capsys: pytest.CaptureFixture[str]) -> CorpusRun:
    """One corpus file through the CLI's `main`, in this process (with its `env:` set for the call)."""
    args = ["build", "--matrix", str(path.relative_to(ROOT)), "--report", str(report), "--no-push",
            *shlex.split(header(path).get("args", ""))]
    env = dict(item.split("=", 1) for item in shlex.split(header(path).get("env", "")))
    saved = {name: os.environ.get(name) for name in env}
    capsys.readouterr()
    os.environ.update(env)
    try:
        code = cli.main(args)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    captured = capsys.readouterr()
    return CorpusRun(code, captured.err, captured.out)


def check(path: Path, run: CorpusRun, report: Path) -> None:
    """What every corpus case must show: exit 2, one error line naming the place (and maybe a hint)."""
    want = header(path)
    lines = run.err.strip().splitlines()
    assert run.code == 2, (path.name, run.err[-2000:], run.out[-2000:])
    assert "Traceback" not in run.err + run.out
    assert 1 <= len(lines) <= 2, run.err
    assert lines[0].startswith("error: ") and want["expect"] in lines[0], run.err
    assert want.get("where", path.name) in lines[0], run.err
    if "hint" in want:
        assert len(lines) == 2 and want["hint"] in lines[1], run.err
    assert not report.exists()  # nothing reported: the run never started


@dataclass
class NoImages:
    """An engine that has no image and cannot pull one; anything else it is asked is a test failure."""

    asked: list[str] = field(default_factory=list)
    run_labels: dict[str, str] = field(default_factory=dict)

    def image_id(self, ref: str) -> str | None:
        self.asked.append(ref)
        return None

    def pull(self, ref: str, *args: object, **kwargs: object) -> str:
        raise EngineError(f"pull {ref}: no such image")


def test_every_case_breaks_something_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """No two cases end in the same error: each guards a check of its own (a copy of a case, or a case that no
    longer reaches the check it names, shows up here as a duplicate)."""
    monkeypatch.setattr(DockerEngine, "connect", classmethod(lambda cls, url=None, timeout=600: NoImages()))
    monkeypatch.setenv("IMAGEBUILDER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(ROOT)
    seen: dict[str, str] = {}
    for path in CORPUS:
        first = run_case(path, tmp_path / path.stem, capsys).err.strip().splitlines()[:1]
        assert first, path.name
        assert first[0] not in seen, f"{path.name} and {seen.get(first[0])} fail the same way: {first[0]}"
        seen[first[0]] = path.name
    assert all("expect" in header(p) for p in CORPUS)


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_a_broken_input_is_one_clear_error(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    engine = NoImages()
    monkeypatch.setattr(DockerEngine, "connect", classmethod(lambda cls, url=None, timeout=600: engine))
    monkeypatch.setenv("IMAGEBUILDER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(ROOT)
    report = tmp_path / "r"
    check(path, run_case(path, report, capsys), report)


def not_a_matrix(kind: str, tmp: Path) -> Path:
    if kind == "device":
        return Path("/dev/zero")  # read until the machine ran out of memory
    path = tmp / f"{kind}.yaml"
    if kind == "fifo":
        os.mkfifo(path)  # opening it would wait for a writer
    else:
        path.write_bytes(b"# " + b"x" * (2 << 20) + b"\n")
    return path


@pytest.mark.parametrize(("kind", "expect"), [("device", "not a regular file"), ("fifo", "not a regular file"),
                                              ("large", "at most 1048576 are read")])
def test_a_file_that_is_not_a_matrix_is_one_clear_error(kind: str, expect: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(DockerEngine, "connect", classmethod(lambda cls, url=None, timeout=600: NoImages()))
    monkeypatch.setenv("IMAGEBUILDER_CACHE_DIR", str(tmp_path / "cache"))
    path, report = not_a_matrix(kind, tmp_path), tmp_path / "r"
    started = time.monotonic()
    code = cli.main(["build", "--matrix", str(path), "--report", str(report), "--no-push"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {path}: ") and expect in err and "Traceback" not in err, err
    assert time.monotonic() - started < 5 and not report.exists()
