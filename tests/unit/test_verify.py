"""The verify step's rules on the fakes: when a pass found for an image may stand in for running the suite (not a
CUDA image's pass without a GPU where GPUs are; not another GPU model's on a GPU runner), and what a run of the
suite must show to pass (a failed check fails it; on a GPU run so does a skip the matrix does not allow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagebuilder.evidence import passes
from imagebuilder.evidence.passes import PassRecord
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.ledger import BuildStatus, VerifyStatus
from imagebuilder.plan import keys
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.plan import Node
from imagebuilder.plan.render import Renderer
from imagebuilder.run.context import RunContext
from imagebuilder.smoke.runner import GpuHost
from imagebuilder.steps.verify import Verify, refusal

from ..conftest import MatrixWriter
from .fakes import DRIVER, H100, FakeEngine, FakeRegistry, context, suite_report

H200 = "NVIDIA H200"
GPU_HOST = GpuHost(devices=("/dev/nvidia0", "/dev/nvidiactl"), models=(H100,), driver=DRIVER)


def leaf_of(write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path, accelerator: str,
            engine: FakeEngine, extra: str = "") -> tuple[RunContext, Node]:
    path = write_matrix(header + extra + f"matrix: {{torch: [2.6.0], accelerator: [{accelerator}], "
                                         "python: ['3.11']}\n")
    plan = keys.assign(plan_mod.make(matrix_mod.load(path, table, env={}), Renderer()),
                       {"debian:bookworm": "sha256:" + "f" * 64})
    run = context(plan, engine, tmp_path)
    leaf = next(n for n in plan.nodes if n.leaf)
    run.ledger.update(leaf.id, build=BuildStatus.BUILT, image=engine.add({"config": {"Labels": {"n": leaf.id}}}))
    return run, leaf


def mirror(run: RunContext, node: Node, gpu: dict[str, Any]) -> None:
    """An earlier run on this machine passed this very image (the local mirror holds its record)."""
    run.mirror().put(PassRecord(passes.PASSED, config=str(run.ledger[node.id].image),
                                              spec=run.specs.key(node), node=node.id, entry=node.entry.id, gpu=gpu,
                                              date="2026-11-20", suite=passes.suite_hash()))


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine(FakeRegistry())


def test_a_pass_without_a_gpu_does_not_stand_in_where_gpus_are(engine: FakeEngine, write_matrix: MatrixWriter,
                                                                 header: str, table: CompatTable,
                                                                 tmp_path: Path) -> None:
    """CPU fleets build and test what they can; a GPU host tests that image again, on its GPUs."""
    run, leaf = leaf_of(write_matrix, header, table, tmp_path, "cu124", engine)
    mirror(run, leaf, {"verified": False, "kind": "gpu", "models": []})
    assert Verify(host=GpuHost()).leaf(run, leaf)  # no GPU here either: the pass stands in, nothing runs
    assert engine.runs == [] and run.ledger[leaf.id].verify == VerifyStatus.FOUND
    assert Verify(host=GPU_HOST).leaf(run, leaf)
    assert engine.runs == [run.ledger[leaf.id].image] and run.ledger[leaf.id].verify == VerifyStatus.PASSED
    assert run.ledger[leaf.id].gpu_verified is True


def test_a_gpu_runner_tests_again_what_passed_on_another_gpu_model(engine: FakeEngine, write_matrix: MatrixWriter,
                                                                   header: str, table: CompatTable,
                                                                   tmp_path: Path) -> None:
    run, leaf = leaf_of(write_matrix, header, table, tmp_path, "cu124", engine)
    mirror(run, leaf, {"verified": True, "kind": "gpu", "models": [H200]})
    assert Verify(host=GPU_HOST).leaf(run, leaf)  # `build`: a GPU pass is a GPU pass
    assert engine.runs == [] and run.ledger[leaf.id].verify == VerifyStatus.FOUND
    assert Verify(host=GPU_HOST, same_gpu_model=True).leaf(run, leaf)  # `verify`: this host's model, please
    assert len(engine.runs) == 1 and run.ledger[leaf.id].verify == VerifyStatus.PASSED
    mirror(run, leaf, {"verified": True, "kind": "gpu", "models": [H100], "count": 1})
    assert Verify(host=GPU_HOST, same_gpu_model=True).leaf(run, leaf)  # the same model: it stands in
    assert len(engine.runs) == 1 and run.ledger[leaf.id].verify == VerifyStatus.FOUND


def test_refusal_names_both_models_and_the_missing_gpu() -> None:
    on_h200 = PassRecord(passes.PASSED, "sha256:" + "a" * 64, "s" * 64, "n", "e",
                         gpu={"verified": True, "kind": "gpu", "models": [H200]})
    without = PassRecord(passes.PASSED, "sha256:" + "a" * 64, "s" * 64, "n", "e",
                         gpu={"verified": False, "kind": "gpu", "models": []})
    assert refusal(on_h200, "here", gpus_here=True, models_here=()) is None
    assert refusal(on_h200, "here", gpus_here=True, models_here=(H200,)) is None
    assert refusal(on_h200, "here", gpus_here=True, models_here=(H100,)) == (
        f"its pass (here) was on {H200}; this host has {H100}: testing here too")
    assert refusal(without, "here", gpus_here=False, models_here=()) is None
    assert refusal(without, "here", gpus_here=True, models_here=()) == (
        "its pass (here) was without a GPU; GPUs are here: testing again")


def test_a_pass_on_fewer_gpus_over_another_link_or_other_nccl_settings_does_not_stand_in() -> None:
    """issue 42: the runner is models x count x interconnect x forwarded env, as the host names it."""
    two = GpuHost(("/dev/nvidia0", "/dev/nvidia1"), (H100,), DRIVER, count=2, interconnect="nvlink",
                  env=(("NCCL_NVLS_ENABLE", "0"),))
    gpu = {"verified": True, "kind": "gpu", "models": [H100], "count": 2, "interconnect": "nvlink",
           "env": {"NCCL_NVLS_ENABLE": "0"}}

    def on(**changed: Any) -> PassRecord:
        return PassRecord(passes.PASSED, "sha256:" + "a" * 64, "s" * 64, "n", "e", gpu={**gpu, **changed})

    assert refusal(on(), "here", gpus_here=True, models_here=(H100,), host=two) is None
    assert refusal(on(count=1), "here", gpus_here=True, models_here=(H100,), host=two) == (
        "its pass (here) was on 1 GPU(s); this host gives the suite 2: a pass on fewer GPUs does not stand in "
        "for more, testing here")
    assert refusal(on(count=8), "here", gpus_here=True, models_here=(H100,), host=two) is None  # more stands in
    assert "was over pcie; this host's GPUs use nvlink" in str(
        refusal(on(interconnect="pcie"), "here", gpus_here=True, models_here=(H100,), host=two))
    assert "other forwarded NCCL/NVSHMEM settings" in str(
        refusal(on(env={}), "here", gpus_here=True, models_here=(H100,), host=two))


@pytest.mark.parametrize("allow, passed", [("", False), ("allow_skip: [throughput]\n", True)])
def test_a_skip_is_not_a_pass_on_a_gpu_run(engine: FakeEngine, write_matrix: MatrixWriter, header: str,
                                           table: CompatTable, tmp_path: Path, allow: str, passed: bool) -> None:
    engine.report = lambda image, expect, commands, gpus: suite_report(
        expect, commands, gpus, **{"throughput.cuda:0": "skip:unknown GPU model 'Tesla T4'"})
    extra = f"smoke:\n  {allow}" if allow else ""
    run, leaf = leaf_of(write_matrix, header, table, tmp_path, "cu124", engine, extra)
    assert Verify(host=GPU_HOST).leaf(run, leaf) is passed
    record = run.ledger[leaf.id]
    if passed:
        assert record.verify == VerifyStatus.PASSED and record.allowed_skips == (
            "throughput.cuda:0: unknown GPU model 'Tesla T4'",)
        assert run.mirror().get(str(record.image), run.specs.key(leaf)) is not None
    else:
        assert record.verify == VerifyStatus.FAILED and record.record is None
        assert str(record.error).startswith("a skip is not a pass on a GPU run: throughput.cuda:0")
        assert run.mirror().get(str(record.image), run.specs.key(leaf)) is None  # nothing mirrored


def test_a_cpu_run_is_judged_by_what_it_ran(engine: FakeEngine, write_matrix: MatrixWriter, header: str,
                                            table: CompatTable, tmp_path: Path) -> None:
    """Without a GPU the GPU checks skip by design; a failed check still fails the run."""
    engine.report = lambda image, expect, commands, gpus: suite_report(
        expect, commands, gpus, **{"distributed.nccl_init": "skip:no GPU"})
    run, leaf = leaf_of(write_matrix, header, table, tmp_path, "cpu", engine)
    assert Verify().leaf(run, leaf) and run.ledger[leaf.id].verify == VerifyStatus.PASSED
    engine.report = lambda image, expect, commands, gpus: suite_report(
        expect, commands, gpus, **{"versions.torch": "fail:2.5.1"})
    assert not Verify(resmoke=True).leaf(run, leaf)
    assert run.ledger[leaf.id].verify == VerifyStatus.FAILED and "versions.torch: 2.5.1" in str(
        run.ledger[leaf.id].error)


def test_without_the_suite_only_a_pass_of_this_image_counts(engine: FakeEngine, write_matrix: MatrixWriter,
                                                            header: str, table: CompatTable, tmp_path: Path) -> None:
    """`publish` and `build --no-smoke` run nothing: a leaf with no pass of its own image is `skipped`."""
    run, leaf = leaf_of(write_matrix, header, table, tmp_path, "cpu", engine)
    other = PassRecord(passes.PASSED, config="sha256:" + "9" * 64, spec=run.specs.key(leaf), node=leaf.id,
                       entry=leaf.entry.id, gpu={"kind": "cpu"}, suite=passes.suite_hash())
    run.mirror().put(other)  # another image's pass, same spec
    assert Verify(run_suite=False).leaf(run, leaf)
    assert run.ledger[leaf.id].verify == VerifyStatus.SKIPPED and engine.runs == []


@pytest.mark.parametrize("raw", [{"checks": ["versions.torch"]}, {"checks": [{"name": "x", "status": "pass"}],
                                                                  "gpus": "two"}])
def test_a_malformed_report_from_the_image_is_a_failed_run_not_a_crash(engine: FakeEngine, write_matrix: MatrixWriter,
                                                                       header: str, table: CompatTable,
                                                                       tmp_path: Path, raw: dict[str, Any]) -> None:
    engine.report = lambda image, expect, commands, gpus: raw
    run, leaf = leaf_of(write_matrix, header, table, tmp_path, "cpu", engine)
    assert not Verify().leaf(run, leaf)
    assert run.ledger[leaf.id].verify == VerifyStatus.FAILED
    assert "the report is not the suite's" in str(run.ledger[leaf.id].error)


def test_the_runner_is_the_hosts_never_the_reports() -> None:
    """N9: a report naming other devices, or fewer, does not pick the lineage it is judged in."""
    two = GpuHost(("/dev/nvidia0", "/dev/nvidia1"), (H100,), DRIVER, count=2, interconnect="nvlink")
    report = {"gpu_verified": True, "gpus": 1, "checks": [{"name": "throughput.cuda:0", "device": "Tesla T4"}]}
    assert Verify(host=two).runner(report).to_json() == {"kind": "gpu", "models": [H100], "count": 2,
                                                         "driver": DRIVER, "interconnect": "nvlink"}
    facts = Verify(host=two).gpu_facts(report, True)
    assert (facts["models"], facts["count"], facts["interconnect"]) == ([H100], 2, "nvlink")
