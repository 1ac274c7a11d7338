"""One real CUDA image: PyPI's torch with its nvidia-* wheels. Without a GPU, the CUDA, cuDNN and NCCL
libraries still load, so the versions inside the image are checked against the plan's."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuilder.engine import Engine

from .conftest import REGISTRY, CliRun, report

pytestmark = pytest.mark.cuda


def test_cuda_image_versions_equal_the_plan(engine: Engine, base_image: str, repository: str, tmp_path: Path,
                                            cli: Callable[..., CliRun]) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(textwrap.dedent(f"""
        version: 1
        base_image: debian:bookworm
        registry: {REGISTRY}/itest
        repository: {repository}
        layers: [base]
        matrix:
          torch: ["2.6.0"]
          accelerator: [cu124]
          python: ["3.11"]
        """).lstrip())
    planned = json.loads(cli("plan", "--matrix", str(matrix), "--json").out)[0]["entry"]
    assert (planned["cuda"], planned["cudnn"], planned["nccl"]) == ("12.4", "9.1.0.70", "2.21.5")

    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-push")
    assert run.code == 0, run.text[-4000:]
    (node,) = report(tmp_path / "r")["nodes"]
    checks = {c["name"]: c for c in node["smoke_report"]["checks"]}
    assert all(c["status"] == "pass" for c in checks.values()), checks
    assert checks["versions.cuda"]["value"] == planned["cuda"]
    assert checks["versions.cudnn"]["value"] == "9.1.0"  # the runtime reports major.minor.patch
    assert planned["cudnn"].startswith(checks["versions.cudnn"]["value"] + ".")
    assert checks["versions.nccl"]["value"] == planned["nccl"]
    assert checks["versions.triton"]["value"] == planned["triton"]
    assert checks["versions.torchvision"]["value"] == planned["torchvision"]
    assert checks["versions.accelerator"]["value"] == "cu124"

    # The installed nvidia wheels are exactly the pins of the plan, and nothing was cached on the way.
    out = engine.run(node["image"], ["sh", "-c", "pip freeze | grep -E '^nvidia-(cudnn|nccl)-cu12=='; "
                     "find / -xdev \\( -name '*.whl' -o -path /root/.cache/pip \\) -print 2>/dev/null"], timeout=120)
    assert sorted(out.logs.split()) == ["nvidia-cudnn-cu12==9.1.0.70", "nvidia-nccl-cu12==2.21.5"]
