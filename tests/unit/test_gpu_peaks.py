"""The GPU peak table (`imagebuilder/data/gpu_peaks.json`) has one home, read on both sides: by the matrix loader
(`input/gpus.py`: the bounds of `smoke.gpu_floors`) and by the suite inside images, which finds it beside itself
because the host copies it in with the suite (`smoke.suite_data`), and which fails rather than guess without it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from imagebuilder.evidence import passes
from imagebuilder.input import gpus
from imagebuilder.ports import RunResult
from imagebuilder.smoke import suite, suite_data, suite_source
from imagebuilder.smoke.runner import SUITE_PATH, run_smoke


def _suite_at(folder: Path) -> ModuleType:
    """The suite as a module loaded from `folder` (where an image has it), not from the package."""
    spec = importlib.util.spec_from_file_location(f"suite_in_{folder.name}", folder / "suite.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Engine:
    """Just enough of an engine to see what `run_smoke` copies into the suite's container."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def has_nvidia_runtime(self) -> bool:
        return False

    def inspect(self, image: str) -> dict[str, Any]:
        return {"Config": {"Env": []}}

    def prune_volumes(self, prefix: str) -> int:
        return 0

    def run(self, image: str, command: list[str], **kwargs: Any) -> RunResult:
        self.files = dict(kwargs["files"])
        return RunResult(1, "", {}, 0.0)


def test_the_loader_and_the_suite_read_one_table_by_one_rule() -> None:
    names = [*gpus.names(), "NVIDIA GeForce RTX 3090", "h100 pcie", "Mystery GPU 9000", "NVIDIA L4"]
    assert len(gpus.names()) >= 13
    for name in names:
        assert gpus.peak(name) == suite.gpu_peak(name), name
    assert [model for model, _ in gpus.gpus_matching("H100")] == [
        "NVIDIA H100 NVL", "NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB", "H100"]
    assert gpus.gpus_matching("RTX 3090") == []


def test_the_host_copies_the_table_beside_the_suite_and_the_suite_finds_it_there(tmp_path: Path) -> None:
    engine = _Engine()
    run_smoke(engine, "img", {"accelerator": "cpu"}, timeout=60, shm_size="1g", gpus="none",  # type: ignore[arg-type]
              devices=())
    folder = SUITE_PATH.rsplit("/", 1)[0]
    assert engine.files == {SUITE_PATH: suite_source(), f"{folder}/gpu_peaks.json": suite_data()["gpu_peaks.json"]}
    image = tmp_path / "opt" / "imagebuilder-smoke"  # the container's folder, with no package data/ above it
    image.mkdir(parents=True)
    for path, data in engine.files.items():
        (image / path.rsplit("/", 1)[1]).write_bytes(data)
    copied = _suite_at(image)
    assert copied.gpu_peak("NVIDIA H200") == 989.4 and copied.gpu_peak("NVIDIA H100 PCIe") == 756.5
    ran = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import suite; "
                          "print(suite.gpu_peak('NVIDIA A100-SXM4-80GB'))", str(image)],
                         capture_output=True, text=True, cwd=tmp_path, check=True)
    assert ran.stdout.strip() == "312.0"  # as the image runs it: the file alone, its own Python


def test_a_suite_without_its_table_fails_rather_than_guess(tmp_path: Path) -> None:
    (tmp_path / "suite.py").write_bytes(suite_source())
    alone = _suite_at(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"gpu_peaks\.json"):
        alone.gpu_peak("NVIDIA H200")


def test_the_table_is_part_of_what_a_pass_is_a_pass_of(monkeypatch: pytest.MonkeyPatch) -> None:
    before = passes.suite_hash()
    edited = {name: data.replace(b"989.4", b"989.5") for name, data in suite_data().items()}
    monkeypatch.setattr(passes, "suite_data", lambda: edited)
    assert passes.suite_hash() != before
