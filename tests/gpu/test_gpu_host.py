"""Runs only where there is a GPU (the offline GPU host); everywhere else it is skipped with its reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[2] / "imagebuilder" / "smoke" / "suite.py"


def _torch_with_cuda() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True)
    return probe.returncode == 0 and probe.stdout.strip() not in ("", "0")


pytestmark = pytest.mark.skipif(not Path("/dev/nvidia0").exists() or not _torch_with_cuda(),
                                reason="no GPU on this host: the GPU proof runs with benchmarks/gpu_smoke.py there")


def test_suite_passes_on_this_hosts_gpus(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(SUITE), "--report", str(report), "--expect", '{"accelerator": "cu"}'],
                          capture_output=True, text=True, timeout=600)
    data = json.loads(report.read_text())
    assert data["gpu_verified"] is True
    failed = [c for c in data["checks"] if c["status"] == "fail"]
    assert not failed and proc.returncode == 0, failed
