"""The performance history on the real engine and registry (issue 29): two images of one lineage (the CPU chain's
task node, in this test's own repository), the second with a layer that makes every matmul do twice the work.
The second passes every check of the suite, its throughput floor included, and fails on the history: its
matmul against the median of the lineage's passes, read from the signed pass records in the registry."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.registry import Registry

from .conftest import ROOT, Chain, CliRun, cpu_matrix, report
from .test_publishing import chain_layers_matrix

PUBLIC = "2.13.0-cpu-py3.11-runtime-task"


def test_a_slower_image_fails_on_its_history_not_on_the_floor(
        engine: DockerEngine, registry: str, wheelhouse: Path, cpu_chain: Chain, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    # 1. The chain's images published into this repository: nothing builds, no suite runs; the leaf's pass (from
    # the session's mirror) is written beside its digest with its metrics: the first point of the lineage.
    (tmp_path / "first").mkdir()
    first = chain_layers_matrix(tmp_path / "first", repository, wheelhouse, cpu_chain, engine)
    run = cli("build", "--matrix", str(first), "--report", str(tmp_path / "r1"))
    assert run.code == 0, run.text[-3000:]
    task = {n["layer"]: n for n in report(tmp_path / "r1")["nodes"]}["task"]
    # (what the gate said of it when the chain was verified depends on what other tests of the session put in the
    # chain's repository: `first` or `ok`; in this repository it is the only point)
    assert task["smoke"] == "cached" and task["performance"]["verdict"] in ("first", "ok")
    history = cli("history", "--matrix", str(first), "--json")
    assert history.code == 0, history.text[-2000:]
    (lineage,) = json.loads(history.out)
    assert [p["manifest"] for p in lineage["points"]] == [task["digest"]]
    assert lineage["runner"]["kind"] == "cpu" and "matmul.fp32.256" in lineage["points"][0]["metrics"]
    table = cli("history", "--matrix", str(first))
    # (a lineage is a cell: flavor, accelerator family and layer, with the runner; the versions are its pins)
    assert table.code == 0 and "cpu-runtime/task" in table.out and "first" in table.out, table.text
    # (`history` judges the series as it stands: here the image is its lineage's first)

    # 2. The same node, its task layer given a sitecustomize that doubles every matmul's work: a new image of the
    # lineage (the chain's layers below it are the same images).
    layers = tmp_path / "layers"
    shutil.copytree(cpu_chain.folder / "layers" / "task", layers / "task")
    shutil.copytree(ROOT / "tests" / "mutants" / "slower_matmul", layers / "task" / "mutant")
    dockerfile = layers / "task" / "Dockerfile.j2"
    dockerfile.write_text(dockerfile.read_text() + "COPY mutant/ /opt/mutant/\n"
                          "ENV PYTHONPATH=/opt/mutant IB_MUTANT_MATMUL_EXTRA=1.0\n")
    slower = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, business, task]",
                        extra=f"layers_path: [{layers}, {cpu_chain.folder / 'layers'}]\n")
    run = cli("build", "--matrix", str(slower), "--report", str(tmp_path / "r2"))
    assert run.code == 1, run.text[-3000:]
    nodes = {n["layer"]: n for n in report(tmp_path / "r2")["nodes"]}
    leaf = nodes["task"]
    assert nodes["business"]["image"] == cpu_chain.nodes["business"]["image"]  # built on the same parent
    assert leaf["build"] == "built" and leaf["smoke"] == "failed" and leaf["publish"] == "held"
    checks = {c["name"]: c for c in leaf["smoke_report"]["checks"]}
    assert all(c["status"] != "fail" for c in checks.values()), leaf["smoke_report"]
    floor = checks["throughput.cpu"]  # ~half the clean matmul's GFLOP/s, still above the floor
    assert floor["status"] == "pass" and floor["value"] >= 25, floor
    perf = leaf["performance"]
    assert perf["verdict"] == "regressed" and perf["baseline_of"] == [task["digest"]]
    row = {r["metric"]: r for r in perf["rows"]}["matmul.fp32.256"]
    assert row["regressed"] and row["change"] < -0.35 and row["threshold"] < 0.4, row
    assert leaf["error"].startswith("performance regressed on CPU "), leaf["error"]
    assert f"matmul.fp32.256 {row['value']:.4g} GFLOP/s against a baseline of {row['baseline']:.4g}" in leaf["error"]
    assert "--accept-regression" in run.text
    # Nothing of it was published: the public tag still names the first image; no record beside the second.
    reg = Registry.for_host(registry)
    assert reg.manifest_digest(f"itest/{repository}", PUBLIC) == task["digest"]
    history = cli("history", "--matrix", str(slower), "--json")
    assert [p["manifest"] for p in json.loads(history.out)[0]["points"]] == [task["digest"]]
    summary = (tmp_path / "r2" / "summary.md").read_text()
    assert "### Performance" in summary and "regressed" in summary
