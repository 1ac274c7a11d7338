"""`plan --format github-matrix` produces what .github/workflows/nightly.yml reads from it."""

from __future__ import annotations

import dataclasses
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
    # os, cuda (CUDA entries), torch, devel (devel entries), business, task, jupyter, ssh
    assert {j["id"]: j["nodes"] for j in jobs.values()} == {
        "2.11.0-cu130-py3.11-runtime": 7, "2.11.0-cu130-py3.11-devel": 8, "2.6.0-cu124-py3.11-runtime": 7,
        "2.7.1-cu126-py3.11-runtime": 7, "2.8.0-cu128-py3.11-runtime": 7, "2.8.0-cpu-py3.11-runtime": 6,
        "2.8.0-cpu-py3.11-devel": 7}


def test_the_nightly_workflow_reads_only_keys_the_matrix_has(capsys: pytest.CaptureFixture[str]) -> None:
    workflow = yaml.safe_load(NIGHTLY.read_text())
    jobs = workflow["jobs"]
    plan_step = next(s for s in jobs["plan"]["steps"] if s.get("id") == "plan")
    assert "--format github-matrix" in plan_step["run"] and "for wave in 0 1 2" in plan_step["run"]
    # plan -> stage (waves, CPU runners) -> verify (the entry's runners: GPU for CUDA) -> publish (one job)
    assert jobs["stage-wave0"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.wave0) }}"
    assert jobs["stage-wave1"]["needs"] == ["plan", "stage-wave0"]
    assert jobs["stage-wave2"]["needs"] == ["plan", "stage-wave0", "stage-wave1"]
    assert all("stage-wave2" in jobs[v]["needs"] for v in ("verify-gpu", "verify-cpu"))
    assert jobs["publish"]["needs"] == ["verify-gpu", "verify-cpu"]
    # the project's matrix needs every wave the workflow has, and no more (os shared by all, torch by two)
    waves = {job["wave"] for job in generated(capsys)["include"]}
    assert waves == {0, 1, 2} and "--wave 3" in plan_step["run"]
    assert jobs["verify-gpu"]["runs-on"] == jobs["verify-cpu"]["runs-on"] == "${{ matrix.runs_on }}"
    steps = {name: yaml.safe_dump(job) for name, job in jobs.items()}
    assert "imagebuilder stage" in steps["stage-wave0"] and "imagebuilder stage" in steps["stage-wave1"]
    assert "imagebuilder verify" in steps["verify-gpu"] and "imagebuilder verify" in steps["verify-cpu"]
    assert "imagebuilder build" not in "".join(steps.values())
    assert "imagebuilder publish --matrix" in steps["publish"] and "--only" not in steps["publish"]
    for name in ("stage-wave0", "stage-wave1", "stage-wave2", "verify-gpu", "verify-cpu"):
        used = set(re.findall(r"matrix\.([A-Za-z_]+)", steps[name]))
        assert {"id", "only"} <= used
        for job in generated(capsys)["include"]:
            assert used <= set(job), f"{name} reads {sorted(used - set(job))}, which the matrix lacks"


def test_an_entry_sharing_a_node_with_an_earlier_one_waits_for_its_wave(tmp_path: Path) -> None:
    """One base image under two names: the entries' nodes have equal keys, so the second entry's stage job
    waits for the first's wave, which stages them once; an entry of its own is wave 0."""
    from imagebuilder.input import matrix as matrix_mod
    from imagebuilder.input.compat import CompatTable
    from imagebuilder.plan import keys
    from imagebuilder.plan import plan as plan_mod
    from imagebuilder.plan import waves as waves_mod
    from imagebuilder.plan.render import Renderer

    path = tmp_path / "matrix.yaml"
    path.write_text("version: 1\nbase_image: debian:bookworm\nregistry: 127.0.0.1:5000/ml\nrepository: pytorch\n"
                    "layers: [base, task]\ntorch_extras: []\nmatrix: {torch: ['2.8.0'], accelerator: [cpu], "
                    "python: ['3.11'], flavor: [runtime, devel],"
                    " base_image: ['debian:bookworm', 'mirror/debian:12']}\n")
    plan = plan_mod.make(matrix_mod.load(path, CompatTable.load(), env={}), Renderer())
    keyed = keys.assign(plan, {"debian:bookworm": "sha256:" + "1" * 64, "mirror/debian:12": "sha256:" + "2" * 64})
    assert set(waves_mod.waves(keyed).values()) == {0}  # every node of its own: one wave
    # A node two entries share (the same key: e.g. a node no entry names in its labels) is staged by the first
    # entry that has it; the other waits for that wave.
    first, second = keyed.entries()[0].id, keyed.entries()[1].id
    shared = {n.name: n.key for n in keyed.nodes if n.entry.id == first}
    nodes = [dataclasses.replace(n, key=shared["base"]) if n.entry.id == second and n.name == "base" else n
             for n in keyed.nodes]
    waves = waves_mod.waves(keyed.with_nodes(nodes))
    assert waves[first] == 0 and waves[second] == 1
    assert sorted(waves.values()) == [0, 0, 0, 1]
    assert set(waves_mod.waves(plan).values()) == {0}  # without keys: by what each node is made of


def test_the_gpu_runners_key_goes_to_their_verify_jobs_only_and_every_reader_trusts_the_signers() -> None:
    """N15: the GPU runners' signing key reaches the verify jobs of CUDA entries only (verify-gpu); the CPU entries
    are verified on GitHub-hosted runners with the hosted fleet's key, which also signs publish's SBOMs (N4: a
    durable key every reader trusts, not a throw-away one), and both public halves are what every job trusts.
    promote's registry pair goes to the workflow's registry only (N5)."""
    workflow = yaml.safe_load(NIGHTLY.read_text())
    jobs = {name: yaml.safe_dump(job) for name, job in workflow["jobs"].items()}
    assert [name for name, text in jobs.items() if "secrets.IMAGEBUILDER_SIGNING_KEY" in text] == ["verify-gpu"]
    assert sorted(name for name, text in jobs.items() if "secrets.IMAGEBUILDER_HOSTED_KEY" in text) == [
        "publish", "verify-cpu"]
    assert workflow["jobs"]["verify-gpu"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.gpu) }}"
    assert workflow["jobs"]["verify-cpu"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.cpu) }}"
    plan_step = next(s for s in workflow["jobs"]["plan"]["steps"] if s.get("id") == "plan")["run"]
    assert "for kind in gpu cpu" in plan_step and 'plan --verify-on $kind' in plan_step
    trusted = workflow["env"]["IMAGEBUILDER_TRUST_KEYS"]
    assert "keys/signing.pub" in trusted and "keys/hosted.pub" in trusted
    publish = workflow["jobs"]["publish"]["steps"]
    signs = next(i for i, step in enumerate(publish) if "IMAGEBUILDER_HOSTED_KEY" in str(step.get("env")))
    runs = next(i for i, step in enumerate(publish) if "imagebuilder publish" in str(step.get("run")))
    assert signs < runs and "IMAGEBUILDER_SIGNING_KEY=" in publish[signs]["run"]
    promote = next(step for step in publish if "imagebuilder promote" in str(step.get("run")))
    assert promote["env"]["IMAGEBUILDER_REGISTRY_HOSTS"] == "${{ vars.IMAGEBUILDER_REGISTRY }}"
