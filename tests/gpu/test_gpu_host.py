"""Runs only where there is a GPU (the offline GPU host); everywhere else it is skipped with its reason.
The suite runs on the host's own torch with what that install promises: its torch and Python, its CUDA as the
accelerator (cuNNN), and its CUDA/cuDNN/NCCL versions as torch reports them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[2] / "imagebuilder" / "smoke" / "suite.py"
PROBE = ("import json, sys, torch; v = torch.version.cuda; n = torch.cuda.nccl.version() if v else None; "
         "print(json.dumps({'gpus': torch.cuda.device_count(), 'torch': torch.__version__.split('+')[0], "
         "'python': '%d.%d' % sys.version_info[:2], 'cuda': v, 'accelerator': 'cu' + v.replace('.', '') if v else "
         "'cpu', 'nccl': '.'.join(map(str, n)) if isinstance(n, tuple) else None}))")


def _host() -> dict[str, object] | None:
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    return json.loads(probe.stdout) if probe.returncode == 0 else None


HOST = _host() if Path("/dev/nvidia0").exists() else None
pytestmark = pytest.mark.skipif(not HOST or not HOST["gpus"],
                                reason="no GPU on this host: the GPU proof runs with benchmarks/gpu_smoke.py there")


def test_suite_passes_on_this_hosts_gpus(tmp_path: Path) -> None:
    assert HOST is not None
    expect = {k: HOST[k] for k in ("torch", "python", "cuda", "accelerator", "nccl")}
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(SUITE), "--report", str(report), "--expect", json.dumps(expect),
                           "--only", "versions,distributed,fsdp,throughput"],
                          capture_output=True, text=True, timeout=600)
    data = json.loads(report.read_text())
    assert data["gpu_verified"] is True
    failed = [c for c in data["checks"] if c["status"] == "fail"]
    assert not failed and proc.returncode == 0, failed
    names = {c["name"] for c in data["checks"]}
    assert {"versions.torch", "versions.accelerator", "versions.nccl", "fsdp.compiled_step_cuda"} <= names
