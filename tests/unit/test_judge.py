"""The host judges a suite report (`smoke.judge`): the image reports, the host decides against the checks it
expects and what it knows of its own GPUs. Every rule here was seen failing with the rule removed."""

from __future__ import annotations

from typing import Any

from imagebuilder.smoke.floors import Floors
from imagebuilder.smoke.judge import expected_checks, judge
from imagebuilder.smoke.runner import GpuHost, SmokeReport

from .fakes import DRIVER, H100, suite_report

CPU = {"python": "3.11", "torch": "2.13.0", "accelerator": "cpu", "cuda": None, "cudnn": None, "nccl": None,
       "user": {"uid": 1000, "gid": 1000, "home": "/home/ml"}, "flavor": "runtime"}
CUDA = {**CPU, "accelerator": "cu130", "cuda": "13.0", "cudnn": "9.13.0", "nccl": "2.27.7"}
LAYERS = [{"name": "layer.task.0", "run": "python -c 'import task'"}]
HOST = GpuHost(("/dev/nvidia0", "/dev/nvidiactl"), (H100,), DRIVER)


def report(expect: dict[str, Any], *, gpus: int = 0, mode: str = "none", exit_code: int = 0,
           **statuses: str) -> SmokeReport:
    raw = suite_report(expect, LAYERS, gpus, **statuses)
    return SmokeReport(passed=raw["passed"], checks=tuple(raw["checks"]), duration=1.0, exit_code=exit_code,
                       raw=raw, gpu_verified=raw["gpu_verified"], gpu_mode=mode)


def test_an_honest_whole_run_passes() -> None:
    verdict = judge(report(CPU), CPU, LAYERS, host=GpuHost())
    assert verdict.passed and verdict.reasons == () and not verdict.gpu_verified
    on_gpu = judge(report(CUDA, gpus=1, mode="devices"), CUDA, LAYERS, host=HOST)
    assert on_gpu.passed and on_gpu.gpu_verified


def test_a_report_that_lacks_an_expected_check_fails_whatever_it_says() -> None:
    """An image that writes a passing report of its own (one check, `passed: true`) and exits is not a pass."""
    lone = SmokeReport(passed=True, checks=({"name": "versions.torch", "status": "pass"},), duration=0.1,
                       exit_code=0, raw={"passed": True, "gpus": 0, "checks": []})
    verdict = judge(lone, CPU, LAYERS, host=GpuHost())
    assert not verdict.passed and "the report lacks 19 expected check(s): versions.python" in verdict.why()
    dropped = judge(report(CPU, **{"layer.task.0": "drop"}), CPU, LAYERS, host=GpuHost())  # a layer's own check
    assert not dropped.passed and "layer.task.0" in dropped.why()
    assert "toolchain.cpp_extension" in expected_checks({**CPU, "flavor": "devel"}, [], gpu_run=False)


def test_a_failed_check_or_exit_code_fails_even_if_the_report_says_passed() -> None:
    said_passed = report(CPU, **{"versions.torch": "fail:2.12.0 instead of 2.13.0"})
    lying = SmokeReport(True, said_passed.checks, 1.0, 0, said_passed.raw)
    assert judge(lying, CPU, LAYERS, host=GpuHost()).why() == "versions.torch: 2.12.0 instead of 2.13.0"
    exited = judge(report(CPU, exit_code=3), CPU, LAYERS, host=GpuHost())
    assert not exited.passed and exited.why() == "the suite exited 3"


def test_gpus_given_and_none_seen_fails_naming_the_likely_cause() -> None:
    blind = judge(report(CUDA, mode="devices"), CUDA, LAYERS, host=HOST)
    assert not blind.passed and not blind.gpu_verified
    assert "the host gave the container its GPUs (devices), but the suite saw none: likely cause:" in blind.why()
    cpu_torch = judge(report(CUDA, mode="devices", **{"versions.accelerator": "fail:cpu"}), CUDA, LAYERS, host=HOST)
    assert "its torch is not the expected CUDA build (cpu)" in cpu_torch.why()


def test_gpu_verified_is_the_hosts_conclusion() -> None:
    claimed = judge(report(CUDA, gpus=1, mode="none"), CUDA, LAYERS, host=GpuHost())  # no GPU given
    assert not claimed.passed and "claims 1 GPU(s), but the host gave the container none" in claimed.why()
    other_model = judge(report(CUDA, gpus=1, mode="devices"), CUDA, LAYERS,
                        host=GpuHost(HOST.devices, ("NVIDIA H200",), DRIVER))
    assert not other_model.passed and f"the suite reports GPU model(s) {H100}; this host's driver names NVIDIA " \
        "H200" in other_model.why()
    other_driver = judge(report(CUDA, gpus=1, mode="devices"), CUDA, LAYERS, host=GpuHost(HOST.devices, (H100,), "1.0"))
    assert not other_driver.passed and f"the suite reports driver {DRIVER}; this host's driver is 1.0" in \
        other_driver.why()


def test_a_skip_on_a_gpu_run_fails_unless_allowed_and_is_then_still_said() -> None:
    skipped = report(CUDA, gpus=1, mode="devices", **{"throughput.cuda:0": "skip:unknown GPU model"})
    assert "a skip is not a pass on a GPU run: throughput.cuda:0" in judge(skipped, CUDA, LAYERS, host=HOST).why()
    allowed = judge(skipped, CUDA, LAYERS, host=HOST, allow_skip=("throughput",))
    assert allowed.passed and allowed.allowed_skips == ("throughput.cuda:0: unknown GPU model",)
    cpu = report(CUDA, **{"distributed.nccl_init": "skip:no GPU"})  # a CPU run skips GPU checks by design
    assert judge(cpu, CUDA, LAYERS, host=GpuHost()).passed


def test_a_probe_of_some_kinds_is_judged_by_those_kinds() -> None:
    only = report(CPU)
    versions = SmokeReport(True, tuple(c for c in only.checks if str(c["name"]).startswith("versions.")), 1.0, 0,
                           only.raw)
    assert judge(versions, CPU, LAYERS, host=GpuHost(), kinds=("versions",)).passed
    assert not judge(versions, CPU, LAYERS, host=GpuHost()).passed


# ------------------------------------------------------------------- issue 42: the host names the runner

TWO = GpuHost(("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"), (H100,), DRIVER, count=2, interconnect="nvlink")
FLOORS = Floors.from_doc({"runners": [{"models": [H100], "count": 2, "interconnect": "nvlink", "command": "measured",
                                       "metrics": {"all_reduce.busbw.256MiB": [268.0, 271.0, 270.0, 266.0, 272.0]}}]},
                         "test floors")


def on_two(busbw: float | None = 270.0, *, gpus: int = 2, visible: tuple[str, ...] = (),
           **statuses: str) -> SmokeReport:
    raw = suite_report(CUDA, LAYERS, gpus, **statuses)
    for check in raw["checks"]:
        if check["name"] == "distributed.all_reduce" and busbw is not None:
            check["metrics"] = [{"name": "all_reduce.busbw.256MiB", "unit": "GB/s", "reps": [busbw] * 5}]
    return SmokeReport(passed=raw["passed"], checks=tuple(raw["checks"]), duration=1.0, exit_code=0, raw=raw,
                       gpu_verified=True, gpu_mode="devices", visible=visible)


def test_the_suite_must_see_every_gpu_the_host_gave_it() -> None:
    assert judge(on_two(), CUDA, LAYERS, host=TWO, floors=FLOORS).gpu_verified
    hidden = judge(on_two(gpus=1, visible=("CUDA_VISIBLE_DEVICES=0 (the image's environment)",)), CUDA, LAYERS,
                   host=TWO, floors=FLOORS)
    assert not hidden.passed and not hidden.gpu_verified
    assert hidden.reasons[0] == (f"the host gave the container 2 GPU(s) ({H100}); the suite saw 1: a pass on fewer "
                                 "GPUs is no pass of this runner; likely cause: CUDA_VISIBLE_DEVICES=0 (the image's "
                                 "environment)")
    unsaid = judge(on_two(gpus=1), CUDA, LAYERS, host=TWO, floors=FLOORS)  # the cause is named even when unseen
    assert "likely cause: CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES set in the image" in unsaid.why()
    raw = on_two()
    world = tuple({**c, "value": {"world_size": 1}} if c["name"] == "distributed.nccl_init" else c for c in raw.checks)
    narrow = judge(SmokeReport(True, world, 1.0, 0, raw.raw, gpu_verified=True, gpu_mode="devices"), CUDA, LAYERS,
                   host=TWO, floors=FLOORS)
    assert "the collectives ran with world size 1; the host gave the container 2 GPU(s)" in narrow.why()


def test_a_report_naming_no_gpu_model_or_driver_is_not_gpu_verified() -> None:
    raw = on_two()
    nameless = tuple({k: v for k, v in c.items() if k not in ("device", "value")} for c in raw.checks)
    verdict = judge(SmokeReport(True, nameless, 1.0, 0, raw.raw, gpu_verified=True, gpu_mode="devices"), CUDA, LAYERS,
                    host=TWO, floors=FLOORS)
    assert not verdict.passed and not verdict.gpu_verified
    assert f"the report names no GPU model; this host's driver names {H100}" in verdict.why()
    assert f"the suite reports driver none; this host's driver is {DRIVER}" in verdict.why()


def test_collectives_below_their_floor_fail_and_an_unknown_runner_is_said_not_gated() -> None:
    assert FLOORS.table[f"2x {H100} (nvlink)"]["all_reduce.busbw.256MiB"].value == 133.0  # half the lowest run
    slow = judge(on_two(3.1, visible=("NCCL_P2P_DISABLE=1 (the image's environment)",)), CUDA, LAYERS, host=TWO,
                 floors=FLOORS)
    assert not slow.passed and slow.why() == (
        f"collective bus bandwidth below its floor on 2x {H100} (nvlink); likely cause: NCCL_P2P_DISABLE=1 (the "
        "image's environment): all_reduce.busbw.256MiB 3.1 GB/s (floor 133) (each floor 0.5 x the lowest of 5 clean "
        "runs, test floors)")
    missing = judge(on_two(None), CUDA, LAYERS, host=TWO, floors=FLOORS)
    assert "all_reduce.busbw.256MiB not measured (floor 133)" in missing.why()
    pcie = GpuHost(TWO.devices, (H100,), DRIVER, count=2, interconnect="pcie")
    ungated = judge(on_two(3.1), CUDA, LAYERS, host=pcie, floors=FLOORS)
    assert ungated.passed and ungated.notes == (
        f"collective bandwidth not gated: no floor measured for 2x {H100} (pcie) in test floors (recorded, and "
        "judged by the regression gate within its lineage)",)
    assert judge(on_two(3.1), CUDA, LAYERS, host=HOST, floors=FLOORS).notes == ()  # one GPU: no collective floor


def test_the_rules_are_named_by_content() -> None:
    """N16: the spec key holds the hash of the judge, the metrics' meaning, the floors and the regression gate."""
    from imagebuilder.evidence import passes
    from imagebuilder.smoke import judge as judge_mod

    assert {"smoke/judge.py", "smoke/metrics.py", "evidence/regression.py", "smoke/floors.py",
            "data/busbw_floors.json", "data/perf_noise.json"} <= set(judge_mod.RULE_FILES)
    whole = judge_mod.rules()
    assert whole.startswith("host-judge/") and len(whole) == len("host-judge/") + 64
    before = passes.spec_key({"expect": {}})
    judge_mod.RULE_FILES = judge_mod.RULE_FILES[1:]  # another content of the rules: another spec
    try:
        assert judge_mod.rules() != whole and passes.spec_key({"expect": {}}) != before
    finally:
        judge_mod.RULE_FILES = ("smoke/judge.py", *judge_mod.RULE_FILES)


def test_the_shipped_floors_are_the_measured_ones() -> None:
    """imagebuilder/data/busbw_floors.json, from benchmarks/gpu_host_truth.sh on 2x H200 (NVLink): 6 clean runs."""
    shipped = Floors.measured()
    h200 = shipped.table["2x NVIDIA H200 (nvlink)"]
    assert h200["all_reduce.busbw.256MiB"].runs == 6 and h200["all_reduce.busbw.256MiB"].value == 0.5 * 265.14
    assert "benchmarks/gpu_host_truth.sh" in shipped.commands["2x NVIDIA H200 (nvlink)"]
    assert f"2x {H100} (nvlink)" not in shipped.table  # not measured: not gated, and said


def test_a_probe_of_some_kinds_on_gpus_is_held_to_what_those_kinds_name() -> None:
    raw = on_two()
    fsdp_only = tuple(c for c in raw.checks if str(c["name"]).startswith("fsdp."))
    probe = SmokeReport(True, fsdp_only, 1.0, 0, raw.raw, gpu_verified=True, gpu_mode="devices")
    assert judge(probe, CUDA, LAYERS, host=TWO, floors=FLOORS, kinds=("fsdp",)).passed  # names no model: not asked
    assert not judge(probe, CUDA, LAYERS, host=TWO, floors=FLOORS, kinds=("fsdp", "throughput")).passed
