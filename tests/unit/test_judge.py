"""The host judges a suite report (`smoke.judge`): the image reports, the host decides against the checks it
expects and what it knows of its own GPUs. Every rule here was seen failing with the rule removed."""

from __future__ import annotations

from typing import Any

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
    assert not verdict.passed and "the report lacks 16 expected check(s): versions.python" in verdict.why()
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
