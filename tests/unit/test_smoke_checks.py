"""The decisions of the suite's FSDP, compile, throughput and versions checks, without torch: each is fed the
numbers a clean image gives (it passes) and those a broken one gives (it fails, and says what)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.smoke import suite

NAMES = ["blocks.0.up.weight", "blocks.0.up.bias", "blocks.0.norm.weight", "head.weight"]
LOSSES = [0.7697, 0.7206, 0.6404, 0.5436, 0.4481]  # a clean CPU run: -42 %
CLEAN = dict.fromkeys(NAMES, 3e-7)  # a clean CPU run's gaps are 1e-7..5e-6
MOVES = dict.fromkeys(NAMES, 0.1)
COUNTS = {"frames": 4, "frames_tried": 4, "graphs": 2, "aot_graphs": 2, "inductor_graphs": 4, "inductor_calls": 4,
          "backends": ["inductor"], "graph_breaks": 0, "break_reasons": [], "recompiles": 0}


def test_relative_gaps_are_the_update_error_per_tensor() -> None:
    gaps = suite.relative_gaps(["a", "b", "c", "d"], [[0.5, 1.0], [0.0, 0.0], [1e-3, 0.0], [2e-7, 0.1]])
    assert gaps["a"] == 0.5 and gaps["b"] == 0.0 and gaps["c"] == math.inf
    assert gaps["d"] == pytest.approx(2e-6)


def test_fsdp_passes_a_clean_run() -> None:
    assert suite.fsdp_verdict(LOSSES, LOSSES, CLEAN, CLEAN, MOVES, 1e-3) == ("pass", "")


@pytest.mark.parametrize(("scale", "gap"), [(0.0, 1.0), (0.5, 0.5), (2.0, 1.0)])
def test_fsdp_fails_on_lost_or_scaled_weight_gradients(scale: float, gap: float) -> None:
    """grad_zero/half/double: the weight matrices' first gradients are off by |1 - scale| (measured)."""
    grads = {k: (gap if k.endswith("weight") and "norm" not in k else 3e-7) for k in NAMES}
    status, reason = suite.fsdp_verdict(LOSSES, LOSSES, grads, CLEAN, MOVES, 1e-3)
    assert status == "fail"
    assert "2 of 4 first-step gradients differ from the unsharded reference by more than 0.001" in reason
    assert "blocks.0.up.weight" in reason and "head.weight" in reason and "up.bias" not in reason


def test_fsdp_fails_on_parameters_that_did_not_follow_the_reference() -> None:
    params = {**CLEAN, "head.weight": 0.476}
    status, reason = suite.fsdp_verdict(LOSSES, LOSSES, CLEAN, params, MOVES, 1e-3)
    assert status == "fail" and "1 of 4 parameter updates differ" in reason and "head.weight 47.6%" in reason
    assert suite.fsdp_verdict(LOSSES, LOSSES, CLEAN, {**CLEAN, "head.weight": math.nan}, MOVES, 1e-3)[0] == "fail"


def test_fsdp_fails_when_the_loss_does_not_fall() -> None:
    flat = [0.7697, 0.7680, 0.7650, 0.7620, 0.7578]  # the zeroed-gradient mutant's loss: -1.6 %
    status, reason = suite.fsdp_verdict(flat, LOSSES, CLEAN, CLEAN, MOVES, 1e-3)
    assert status == "fail" and "the loss of FSDP fell by 1.5% over 5 steps" in reason
    assert "the reference" not in reason
    assert suite.fsdp_verdict([0.77, math.inf], LOSSES, CLEAN, CLEAN, MOVES, 1e-3)[0] == "fail"
    assert suite.fsdp_verdict([0.7, 0.8], [0.7, 0.8], {}, {}, {}, 1e-3)[0] == "fail"  # a rising loss


def test_fsdp_fails_when_the_reference_leaves_a_tensor_unjudged() -> None:
    status, reason = suite.fsdp_verdict(LOSSES, LOSSES, CLEAN, CLEAN, {**MOVES, "head.weight": 0.0}, 1e-3)
    assert status == "fail" and "the reference did not update head.weight" in reason


def test_gap_summary_names_the_worst_tensor() -> None:
    got = suite.gap_summary({"a": 1e-7, "b": 0.5, "c": 2e-3}, 1e-3)
    assert (got["worst"], got["worst_tensor"], got["median"], got["over_tolerance"]) == (0.5, "b", 2e-3, 2)
    assert got["per_tensor"] == {"a": 1e-7, "b": 0.5, "c": 0.002}


def fake_ranks(grad_gap: float = 3e-7, counts: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    rank = {"names": NAMES, "grad_norms": [[grad_gap * 0.1, 0.1]] * 4, "param_norms": [[3e-8, 0.1]] * 4,
            "losses": LOSSES, "ref_losses": LOSSES, "step_s": 1.0, "reference_autocast": False,
            "compile": counts or COUNTS}
    return [rank, {**rank, "rank": 1}]


def test_fsdp_records_carry_the_gaps_and_the_tolerance() -> None:
    step, compiled = suite.fsdp_records(fake_ranks(), "gloo", 2, 3.0)
    assert (step["name"], step["status"], compiled["name"], compiled["status"]) == (
        "fsdp.compiled_step_cpu", "pass", "fsdp.compiled_graphs_cpu", "pass")
    assert step["value"] == LOSSES and step["expected"] == LOSSES  # the losses stay where readers look
    assert step["tolerance"] == suite.FSDP_TOL["cpu"] and step["param_gap"]["worst"] == pytest.approx(3e-7)
    assert step["loss_drop"] == pytest.approx(0.4178, abs=1e-4) and step["run"]["optimizer"] == "SGD"
    assert compiled["value"]["graphs"] == 4 and compiled["per_rank"][0]["frames"] == 4
    step, _ = suite.fsdp_records(fake_ranks(grad_gap=0.5), "nccl", 2, 3.0)
    assert (step["name"], step["status"]) == ("fsdp.compiled_step_cuda", "fail")
    assert step["grad_gap"]["over_tolerance"] == 4


def test_fsdp_records_time_the_compiled_model_alone() -> None:
    ranks = fake_ranks()
    ranks[0].update(perf={"step_times_s": [0.010, 0.020, 0.012], "warmup_steps": 2}, first_step_s=2.5)
    ranks[1].update(perf={"step_times_s": [0.011, 0.010, 0.030], "warmup_steps": 2}, first_step_s=3.0)
    step, _ = suite.fsdp_records(ranks, "gloo", 2, 3.0)
    perf = step["perf"]
    assert perf["step_times_s"] == [0.011, 0.020, 0.030]  # each step as long as its slowest rank
    assert perf["samples_per_step"] == 32 and perf["median_step_s"] == 0.02 and perf["samples_per_s"] == 1600.0
    assert perf["compile_s"] == 2.98 and perf["warmup_steps"] == 2  # the slowest first step, less a steady one
    samples, compile_s = step["metrics"]
    assert samples["name"] == "fsdp.samples_per_s" and samples["reps"] == pytest.approx([32 / 0.011, 1600, 32 / 0.03])
    assert (compile_s["name"], compile_s["better"], compile_s["reps"]) == ("fsdp.compile_s", "lower", [2.98])


@pytest.mark.parametrize(("counts", "why"), [
    ({**COUNTS, "frames": 0, "frames_tried": 0, "graphs": 0, "aot_graphs": 0}, "compiled nothing"),  # no-op / disabled
    # aot_eager (the compile_aot_eager mutant, counted on torch 2.13): graphs captured and compiled by AOTAutograd,
    # none by Inductor, none of its code ran
    ({**COUNTS, "inductor_graphs": 0, "inductor_calls": 0, "backends": ["aot_eager"]},
     "AOTAutograd compiled 2 graph(s) but Inductor compiled 0 and none of its code ran in a profiled step: the "
     "backend was aot_eager (a fallback, not Inductor)"),
    ({**COUNTS, "inductor_graphs": 2, "inductor_calls": 0}, "Inductor compiled 2 and none of its code ran"),
    ({**COUNTS, "inductor_graphs": 0, "inductor_calls": -1, "backends": []}, "no Inductor graph ran"),
    ({**COUNTS, "frames": 2, "frames_tried": 3, "graphs": 0, "aot_graphs": 0}, "compiled nothing"),  # suppressed errors
    ({**COUNTS, "frames_tried": 5}, "1 of 5 frames failed to compile"),
])
def test_compile_that_did_not_compile_fails(counts: dict[str, Any], why: str) -> None:
    assert suite.compile_verdict([COUNTS, COUNTS]) == ("pass", "")
    # without a profiler (-1), Inductor's own counters speak; a graph loaded from its cache counts as compiled
    assert suite.compile_verdict([{**COUNTS, "inductor_calls": -1}, COUNTS]) == ("pass", "")
    status, reason = suite.compile_verdict([COUNTS, counts])
    assert status == "fail" and reason.startswith("rank 1: ") and why in reason


@pytest.mark.parametrize(("version", "backend", "error", "skip"), [
    ("2.6.0+cu124", "gloo", "AttributeError: 'Stream' object has no attribute 'record_event'", True),
    ("2.5.1", "gloo", "RuntimeError: FSDP requires CUDA for streams", True),
    ("2.6.0", "gloo", "RuntimeError: only 1 of 2 ranks reported within 600 s", False),
    ("2.6.0", "nccl", "AttributeError: 'Stream' object has no attribute 'record_event'", False),
    ("2.7.0", "gloo", "AttributeError: 'Stream' object has no attribute 'record_event'", False),
])
def test_only_the_known_fsdp2_cpu_gap_is_a_skip(version: str, backend: str, error: str, skip: bool) -> None:
    assert suite.fsdp_known_incompatibility(version, backend, error) is skip


def test_a_failed_fsdp_run_fails_both_records_unless_it_is_the_known_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("torch")
    fake.__version__ = "2.6.0+cpu"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake)

    def spawn_fails(error: str) -> Any:
        def spawn(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError(error)
        return spawn

    monkeypatch.setattr(suite, "_spawn", spawn_fails("ValueError: something else broke"))
    step, compiled = suite.check_fsdp("gloo", 2)
    assert (step["status"], compiled["status"]) == ("fail", "fail")
    assert "the FSDP run failed: ValueError: something else broke" in step["reason"]
    monkeypatch.setattr(suite, "_spawn", spawn_fails("AttributeError: 'Stream' object has no attribute 'record_event'"))
    step, compiled = suite.check_fsdp("gloo", 2)
    assert (step["status"], compiled["status"]) == ("skip", "skip")
    assert "FSDP2 does not run on CPU in torch 2.6.0" in step["reason"]


# ------------------------------------------------------------------------------------------ throughput

RANDN = {"mean": 0.001, "std": 1.0, "zero_fraction": 0.0, "distinct": 65536.0}


@pytest.mark.parametrize(("stats", "why"), [
    ({"mean": 0.0, "std": 0.0, "zero_fraction": 1.0, "distinct": 1.0}, "not standard normal"),  # zeros
    ({"mean": 1.0, "std": 0.0, "zero_fraction": 0.0, "distinct": 1.0}, "not standard normal"),  # ones
    ({"mean": 0.0, "std": 1.0, "zero_fraction": 0.5, "distinct": 3.0}, "not random"),  # a pattern
])
def test_matmul_inputs_must_be_random(stats: dict[str, float], why: str) -> None:
    assert suite.data_problem(RANDN) == ""
    assert suite.data_problem({**RANDN, "distinct": 2600.0}) == ""  # bf16 normal samples
    assert why in suite.data_problem(stats)


def test_a_wrong_product_is_no_throughput() -> None:
    assert suite.product_problem(3e-7, "cpu") == "" and suite.product_problem(4e-3, "cuda") == ""
    assert "the product is wrong" in suite.product_problem(1.0, "cpu")
    assert "the product is wrong" in suite.product_problem(math.nan, "cuda")


def test_cpu_throughput_is_judged_on_the_best_repetition_and_keeps_every_one() -> None:
    n = 1024
    healthy = [2 * n**3 / g / 1e9 for g in (40.0, 56.0, 61.0, 35.0)]  # a loaded CI machine (GFLOP/s per rep)
    rec = suite.cpu_throughput_verdict(healthy, n, 30.0, [""])
    assert (rec["status"], rec["value"], rec["median_gflops"]) == ("pass", 61.0, 46.7)
    assert rec["rate_per_rep"] == [40.0, 56.0, 61.0, 35.0] and rec["reps"] == 4 and len(rec["times_s"]) == 4
    slowed = [t * 10 for t in healthy]  # the slow_matmul mutant: every call ~10x slower
    rec = suite.cpu_throughput_verdict(slowed, n, 30.0, [""])
    assert rec["status"] == "fail" and "reached 6.1 GFLOP/s at best in 4 repetitions, below the floor 30" in \
        rec["reason"]
    rec = suite.cpu_throughput_verdict(healthy, n, 30.0, ["the inputs are not random: ..."])
    assert rec["status"] == "fail" and rec["reason"] == "the inputs are not random: ..."


def test_the_default_cpu_floor_is_the_measured_one() -> None:
    from imagebuilder.input.matrix import SmokeSettings

    assert SmokeSettings(timeout=1, shm_size="1g", gpus="none").cpu_gflops_floor == suite.CPU_GFLOPS_FLOOR
    assert suite.CPU_GFLOPS_FLOOR >= 20  # the old 5 GFLOP/s passed a 10x slower matmul (6.7 GFLOP/s here)


# -------------------------------------------------------------------------------------------- versions

TORCH = "/venv/lib/python3.11/site-packages/torch"
NVIDIA = "/venv/lib/python3.11/site-packages/nvidia"
MAPS_CPU = [
    f"7f00-7f01 r-xp 00000000 08:01 11 {TORCH}/lib/libtorch_cpu.so",
    f"7f01-7f02 r--p 00000000 08:01 12 {TORCH}/lib/libc10.so",
    "7f02-7f03 r-xp 00000000 08:01 13 /usr/lib/x86_64-linux-gnu/libc.so.6",
    "7f03-7f04 rw-p 00000000 00:00 0 ",
    "7ffd-7ffe rw-p 00000000 00:00 0 [stack]",
    f"7f04-7f05 r-xp 00000000 08:01 14 {TORCH}/_C.cpython-311-x86_64-linux-gnu.so",
]
MAPS_CUDA = [*MAPS_CPU, f"7f05-7f06 r-xp 00000000 08:01 15 {TORCH}/lib/libtorch_cuda.so",
             f"7f06-7f07 r-xp 00000000 08:01 16 {NVIDIA}/cuda_runtime/lib/libcudart.so.12",
             f"7f07-7f08 r-xp 00000000 08:01 17 {NVIDIA}/cublas/lib/libcublas.so.12",
             f"7f08-7f09 r-xp 00000000 08:01 18 {NVIDIA}/cublas/lib/libcublasLt.so.12",
             f"7f09-7f0a r-xp 00000000 08:01 19 {NVIDIA}/cudnn/lib/libcudnn.so.9",
             f"7f0a-7f0b r-xp 00000000 08:01 20 {NVIDIA}/nccl/lib/libnccl.so.2",
             "7f0b-7f0c r-xp 00000000 08:01 21 /usr/local/nvidia/lib64/libcuda.so.580.65.06"]


def test_mapped_libraries_are_the_shared_objects_of_the_maps() -> None:
    got = suite.mapped_libraries([*MAPS_CPU, f"7f0c-7f0d r-xp 0 08:01 22 {TORCH}/lib/libshm.so (deleted)"])
    assert got == sorted([f"{TORCH}/lib/libtorch_cpu.so", f"{TORCH}/lib/libc10.so", f"{TORCH}/lib/libshm.so",
                          "/usr/lib/x86_64-linux-gnu/libc.so.6", f"{TORCH}/_C.cpython-311-x86_64-linux-gnu.so"])


def test_library_path_passes_the_wheels_own_libraries() -> None:
    rec = suite.library_path_verdict(suite.mapped_libraries(MAPS_CPU), [TORCH], [NVIDIA, TORCH], False)
    assert rec["status"] == "pass" and rec["value"] == [f"{TORCH}/lib/libc10.so", f"{TORCH}/lib/libtorch_cpu.so"]
    rec = suite.library_path_verdict(suite.mapped_libraries(MAPS_CUDA), [TORCH], [NVIDIA, TORCH], True)
    assert rec["status"] == "pass" and f"{NVIDIA}/nccl/lib/libnccl.so.2" in rec["value"]
    assert "/usr/local/nvidia/lib64/libcuda.so.580.65.06" not in rec["value"]  # the driver is the host's


@pytest.mark.parametrize(("line", "cuda", "why"), [
    ("1-2 r-xp 0 08:01 9 /opt/shadow/libnccl.so.2", True, "/opt/shadow/libnccl.so.2 (not from the wheels' folders"),
    ("1-2 r-xp 0 08:01 9 /usr/lib/x86_64-linux-gnu/libcudnn.so.9", True, "libcudnn.so.9 (not from the wheels'"),
    (f"1-2 r-xp 0 08:01 9 {NVIDIA}-evil/cudnn/lib/libcudnn.so.9", True, "(not from the wheels' folders"),
    ("1-2 r-xp 0 08:01 9 /preload/libtorch_cpu.so", False, "/preload/libtorch_cpu.so (torch's own library"),
    (f"1-2 r-xp 0 08:01 9 {NVIDIA}/cudnn/lib/libcudnn.so.9", False, "(a CUDA library in a CPU image)"),
])
def test_library_path_names_the_foreign_library(line: str, cuda: bool, why: str) -> None:
    base = MAPS_CUDA if cuda else MAPS_CPU
    rec = suite.library_path_verdict(suite.mapped_libraries([*base, line]), [TORCH], [NVIDIA, TORCH], cuda)
    assert rec["status"] == "fail" and why in rec["reason"] and len(rec["foreign"]) == 1


def test_library_path_cannot_pass_having_seen_nothing() -> None:
    rec = suite.library_path_verdict(["/usr/lib/libc.so.6"], [TORCH], [NVIDIA], False)
    assert rec["status"] == "fail" and "no libtorch/libc10 is mapped" in rec["reason"]


def test_cuda_libraries_must_be_loaded_and_usable() -> None:
    paths = suite.mapped_libraries(MAPS_CUDA)
    assert suite.cuda_libraries_verdict(paths, "", [])["status"] == "pass"
    without = [p for p in paths if "libcudnn" not in p]
    rec = suite.cuda_libraries_verdict(without, "", [])
    assert rec["status"] == "fail" and rec["reason"] == "not loaded after import torch: libcudnn"
    rec = suite.cuda_libraries_verdict(paths, "OSError: libcudnn_graph.so.9: cannot open shared object file", [])
    assert rec["status"] == "fail" and "using the CUDA libraries failed: OSError: libcudnn_graph" in rec["reason"]
    only_lt = [p for p in paths if not p.endswith("libcublas.so.12")]  # cuBLASLt is not cuBLAS
    assert "libcublas" in suite.cuda_libraries_verdict(only_lt, "", [])["reason"]


def test_a_library_the_wheels_installed_must_still_be_there() -> None:
    """cuDNN's engines are loaded on first use only: a deleted one shows in the wheel's RECORD, not in maps."""
    engines = f"{NVIDIA}/cudnn/lib/libcudnn_engines_precompiled.so.9"
    listing = {"nvidia-cudnn-cu12": [f"{NVIDIA}/cudnn/lib/libcudnn.so.9", engines],
               "torch": [f"{TORCH}/lib/libc10.so"]}
    assert suite.missing_wheel_files(listing, lambda path: True) == []
    gone = suite.missing_wheel_files(listing, lambda path: path != engines)
    assert gone == [f"nvidia-cudnn-cu12: {engines}"]
    rec = suite.cuda_libraries_verdict(suite.mapped_libraries(MAPS_CUDA), "", gone)
    assert rec["status"] == "fail" and "installed by the wheels but missing: nvidia-cudnn-cu12: " in rec["reason"]
    many = suite.cuda_libraries_verdict(suite.mapped_libraries(MAPS_CUDA), "", [f"d: /x/{i}.so" for i in range(7)])
    assert many["reason"].endswith("and 2 more") and len(many["missing_files"]) == 7


def test_torch_version_and_its_metadata_must_both_match() -> None:
    assert suite.torch_version_record("2.13.0+cpu", "2.13.0+cpu", "2.13.0")["status"] == "pass"
    rec = suite.torch_version_record("2.13.0+cpu", "2.12.0", "2.13.0")
    assert rec["status"] == "fail" and "its package metadata says '2.12.0'" in rec["reason"]
    rec = suite.torch_version_record("2.13.1", "2.13.0", "2.13.0")
    assert rec["status"] == "fail" and rec["value"] == "2.13.1"
    assert suite.torch_version_record("2.13.0", None, "2.13.0")["status"] == "fail"


def test_a_package_planned_as_none_must_be_absent() -> None:
    assert suite.package_record("torchvision", None, False, None)["status"] == "pass"
    rec = suite.package_record("torchvision", "0.28.0", True, None)
    assert rec["status"] == "fail" and "torchvision is installed (0.28.0)" in rec["reason"]
    rec = suite.package_record("triton", None, True, None)
    assert rec["status"] == "fail" and rec["value"] == "importable, without package metadata"
    assert suite.package_record("torchvision", "0.28.0+cpu", True, "0.28.0")["status"] == "pass"
    assert suite.package_record("torchvision", None, False, "0.28.0")["status"] == "fail"


def test_absence_checks_fail_on_what_is_there() -> None:
    assert suite.absence_record("versions.cudnn", [], "cuDNN") == suite.record(
        "versions.cudnn", "pass", value=None, expected=None)
    rec = suite.absence_record("versions.nccl", ["torch.distributed has the NCCL backend"], "NCCL")
    assert rec["status"] == "fail" and "NCCL is present in an image that expects none" in rec["reason"]


def test_every_expected_key_has_a_record_when_torch_does_not_import() -> None:
    expect = {"python": "3.11", "torch": "2.13.0", "accelerator": "cpu", "cuda": None, "cudnn": None, "nccl": None,
              "torchvision": None, "flavor": "runtime", "user": {"uid": 1000}}
    got = suite._import_failed(expect, "ImportError: libtorch_cpu.so: cannot open shared object file")
    assert [r["name"] for r in got] == ["versions.torch", "versions.torchvision", "versions.accelerator",
                                        "versions.cuda", "versions.cudnn", "versions.nccl"]
    assert all(r["status"] == "fail" and "import torch failed" in r["reason"] for r in got)


# ----------------------------------------------------------------------------------------- distributed

def rank_report(rank: int, **extra: Any) -> dict[str, Any]:
    want = suite.collectives_expected(2)
    return {"rank": rank, "stage": "done", "init_s": 0.1, "all_reduce": want["all_reduce"],
            "all_gather": want["all_gather"], "reduce_scatter": want[f"reduce_scatter.{rank}"], "ok": True, **extra}


def test_collectives_pass_when_every_rank_got_through() -> None:
    got = suite.collectives_records([rank_report(0), rank_report(1)], "gloo", 2)
    assert [(r["name"], r["status"]) for r in got] == [
        ("distributed.gloo_init", "pass"), ("distributed.all_reduce", "pass"), ("distributed.all_gather", "pass"),
        ("distributed.reduce_scatter", "pass"), ("distributed.barrier_destroy", "pass")]


def test_init_and_barrier_are_real_checks() -> None:
    """They used to be a `pass` written after the fact: a failure there now fails its own record."""
    got = {r["name"]: r for r in suite.collectives_records(
        [rank_report(0), {"rank": 1, "stage": "init", "error": "DistStoreError: timed out"}], "nccl", 2)}
    assert got["distributed.nccl_init"]["status"] == "fail"
    assert got["distributed.nccl_init"]["reason"] == "rank 1: DistStoreError: timed out"
    assert got["distributed.barrier_destroy"]["reason"] == "not reached: init failed first"
    got = {r["name"]: r for r in suite.collectives_records(
        [rank_report(0), rank_report(1, stage="barrier_destroy", error="RuntimeError: barrier failed")], "gloo", 2)}
    assert [got[n]["status"] for n in got] == ["pass", "pass", "pass", "pass", "fail"]
    got = suite.collectives_records([rank_report(0), rank_report(1, all_gather=[0.0, 0.0, 0.0, 0.0])], "gloo", 2)
    assert got[2]["status"] == "fail" and "all_gather gave" in got[2]["reason"]


def test_a_library_gone_from_disk_is_found_from_the_record_itself(tmp_path: Path) -> None:
    """Python 3.12's importlib.metadata leaves files that no longer exist out of `Distribution.files`, so on the
    GPU host's Python 3.12 the cuda_lib_missing mutant passed versions.cuda_libraries (missed on an H100). The
    RECORD is read as it is written; a wheel without a readable RECORD is itself named."""
    info = tmp_path / "nvidia_cudnn_cu13-9.19.0.56.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cudnn-cu13\nVersion: 9.19.0.56\n")
    (tmp_path / "nvidia" / "cudnn" / "lib").mkdir(parents=True)
    (tmp_path / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9").write_bytes(b"x")
    (info / "RECORD").write_text("nvidia/cudnn/lib/libcudnn.so.9,sha256=a,1\n"
                                 "nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9,sha256=b,1\n"
                                 "nvidia_cudnn_cu13-9.19.0.56.dist-info/RECORD,,\n")
    other = tmp_path / "nvidia_nccl_cu13-2.28.9.dist-info"  # no RECORD at all
    other.mkdir()
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-nccl-cu13\nVersion: 2.28.9\n")
    code = ("import sys, json, os; sys.path.insert(0, sys.argv[1]); import suite; "
            "print(json.dumps(suite.missing_wheel_files(suite._wheel_libraries(), os.path.exists)))")
    run = subprocess.run([sys.executable, "-S", "-c", code, str(Path(suite.__file__).parent)], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=60)
    missing = json.loads(run.stdout)
    assert missing[0] == f"nvidia-cudnn-cu13: {tmp_path}/nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9", run
    assert len(missing) == 2 and missing[1].startswith("nvidia-nccl-cu13: ") and "RECORD" in missing[1], run
    assert suite.record_paths(None) is None
