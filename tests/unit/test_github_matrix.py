"""`plan --format github-matrix` produces what .github/workflows/nightly.yml reads from it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from imagebuilder.cli import main

ROOT = Path(__file__).resolve().parents[2]
NIGHTLY = ROOT / ".github" / "workflows" / "nightly.yml"


def generated(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, list[dict[str, object]]]:
    code = main(["--offline", "--engine", "unix:///nonexistent.sock", "plan", "--matrix", str(ROOT / "matrix.yaml"),
                 "--format", "github-matrix", *extra])
    out = capsys.readouterr().out
    assert code == 0
    assert "\n" not in out.strip()  # one line: it goes into $GITHUB_OUTPUT as matrix=<json>
    return dict(json.loads(out))


def test_one_job_per_entry_on_the_right_runners(capsys: pytest.CaptureFixture[str]) -> None:
    doc = generated(capsys, "--gpu-runner", "self-hosted,h100", "--cpu-runner", "ubuntu-24.04")
    jobs = {j["id"]: j for j in doc["include"]}
    assert set(jobs) == {"2.11.0-cu130-py3.11-runtime", "2.11.0-cu130-py3.11-devel", "2.6.0-cu124-py3.11-runtime",
                         "2.7.1-cu126-py3.11-runtime", "2.8.0-cu128-py3.11-runtime", "2.8.0-cpu-py3.11-runtime",
                         "2.8.0-cpu-py3.11-devel"}
    assert {j["flavor"] for j in jobs.values()} == {"runtime", "devel"}
    assert jobs["2.6.0-cu124-py3.11-runtime"]["runs_on"] == ["self-hosted", "h100"]
    assert jobs["2.6.0-cu124-py3.11-runtime"]["gpu"] is True and jobs["2.6.0-cu124-py3.11-runtime"]["cuda"] == "12.4"
    assert jobs["2.8.0-cpu-py3.11-runtime"]["runs_on"] == ["ubuntu-24.04"]
    assert jobs["2.8.0-cpu-py3.11-runtime"]["only"] == "2.8.0-cpu-py3.11-runtime/*"
    assert all(j["nodes"] == 5 for j in jobs.values())  # base, business, task, jupyter, ssh


def test_the_nightly_workflow_reads_only_keys_the_matrix_has(capsys: pytest.CaptureFixture[str]) -> None:
    workflow = yaml.safe_load(NIGHTLY.read_text())
    plan_step = next(s for s in workflow["jobs"]["plan"]["steps"] if s.get("id") == "plan")
    assert "--format github-matrix" in plan_step["run"]
    build = workflow["jobs"]["build"]
    assert build["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert build["runs-on"] == "${{ matrix.runs_on }}"
    used = set(re.findall(r"matrix\.([A-Za-z_]+)", yaml.safe_dump(build)))
    assert {"id", "only", "runs_on"} <= used
    for job in generated(capsys)["include"]:
        assert used <= set(job), f"the workflow reads {sorted(used - set(job))}, which the matrix lacks"
