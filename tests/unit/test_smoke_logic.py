"""The smoke suite's decision logic, without a GPU (and without torch: the suite imports it lazily)."""

from __future__ import annotations

from typing import Any

import pytest

from imagebuilder.smoke import suite
from imagebuilder.smoke.runner import gpu_mode, gpu_options


@pytest.mark.parametrize(("cap", "arch", "ok", "how"), [
    ((9, 0), ["sm_80", "sm_90"], True, "sm_90"),
    ((9, 0), ["sm_80", "sm_90a"], True, "sm_90"),
    ((9, 0), ["sm_80", "compute_80"], True, "PTX compute_80"),
    ((8, 6), ["sm_80", "sm_90"], False, ""),
    ((10, 0), ["sm_90", "compute_90"], True, "PTX compute_90"),
    ((7, 5), ["sm_80", "compute_80"], False, ""),
])
def test_arch_coverage(cap: tuple[int, int], arch: list[str], ok: bool, how: str) -> None:
    assert suite.arch_covered(cap, arch) == (ok, how)


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA H100 80GB HBM3", 989.4),
    ("NVIDIA H100 PCIe", 756.5),
    ("NVIDIA H100 NVL", 835.0),
    ("NVIDIA H200", 989.4),
    ("NVIDIA GH200 480GB", 989.4),
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA L40S", 362.1),
    ("NVIDIA L40", 181.0),
    ("NVIDIA L4", 121.0),
    ("NVIDIA GeForce RTX 3090", None),
])
def test_peak_table(name: str, peak: float | None) -> None:
    assert suite.gpu_peak(name) == peak


def test_throughput_verdicts() -> None:
    ok = suite.throughput_verdict("NVIDIA H200", 785.0, 0.6)
    assert ok["status"] == "pass" and ok["fraction_of_peak"] == round(785 / 989.4, 3)
    slow = suite.throughput_verdict("NVIDIA H200", 500.0, 0.6)
    assert slow["status"] == "fail" and "below the floor 593.6" in slow["reason"]
    unknown = suite.throughput_verdict("Mystery GPU 9000", 100.0, 0.6)
    assert unknown["status"] == "skip" and "unknown GPU model 'Mystery GPU 9000'" in unknown["reason"]


@pytest.mark.parametrize(("driver", "floor", "ok"), [
    ("580.65.06", "580.65.06", True), ("580.82.07", "580.65.06", True), ("550.54.14", "570.26", False),
    ("570.26", "570.26.01", False), ("575.51.03", "570.26", True),
])
def test_driver_floor(driver: str, floor: str, ok: bool) -> None:
    assert suite.at_least(driver, floor) is ok


def test_library_path_keeps_only_the_driver() -> None:
    listing = {"/usr/local/nvidia/lib64": ["libcuda.so.1", "libnvidia-ml.so.1"],
               "/usr/local/cuda/lib64": ["libcudart.so.12", "libcudnn.so.9"],
               "/opt/other": ["libfoo.so"]}

    def listdir(path: str) -> list[str]:
        if path not in listing:
            raise FileNotFoundError(path)
        return listing[path]
    kept, dropped = suite.clean_library_path("/usr/local/cuda/lib64:/usr/local/nvidia/lib64:/opt/other:/gone",
                                             listdir)
    assert kept == "/usr/local/nvidia/lib64"
    assert dropped == ["/usr/local/cuda/lib64", "/opt/other", "/gone"]


def test_collective_values() -> None:
    want = suite.collectives_expected(2)
    assert want["all_reduce"] == [3.0] * 4
    assert want["all_gather"] == [0.0, 0.0, 1.0, 1.0]
    assert (want["reduce_scatter.0"], want["reduce_scatter.1"]) == ([1.0, 3.0], [5.0, 7.0])
    assert suite.collectives_expected(1)["reduce_scatter.0"] == [0.0, 1.0]


def test_gpu_mode_auto() -> None:
    assert gpu_mode("auto", has_toolkit=True, devices=["/dev/nvidia0"]) == "all"
    assert gpu_mode("auto", has_toolkit=False, devices=["/dev/nvidiactl", "/dev/nvidia0"]) == "devices"
    assert gpu_mode("auto", has_toolkit=False, devices=[]) == "none"
    assert gpu_mode("none", has_toolkit=True, devices=["/dev/nvidia0"]) == "none"


def test_raw_device_options_keep_the_images_library_path(tmp_path: object) -> None:
    config, env = gpu_options("devices", ["/dev/nvidia0", "/dev/nvidiactl"], "/drv",
                              ["PATH=/opt/venv/bin:/usr/bin", "LD_LIBRARY_PATH=/opt/lib"])
    assert config["devices"] == ["/dev/nvidia0:/dev/nvidia0:rwm", "/dev/nvidiactl:/dev/nvidiactl:rwm"]
    assert env["LD_LIBRARY_PATH"] == "/opt/lib:/drv/lib64:/drv/lib"
    assert env["PATH"] == "/opt/venv/bin:/usr/bin:/drv/bin"
    assert env["TRITON_LIBCUDA_PATH"] == "/drv/lib64"
    assert gpu_options("none", ["/dev/nvidia0"], "/drv", []) == ({}, {})


def test_container_env_forwards_nccl_settings() -> None:
    from imagebuilder.smoke.runner import container_env

    env = container_env({"NCCL_NVLS_ENABLE": "0", "HOME": "/root", "NVSHMEM_DISABLE_NVLS": "1"},
                        {"NCCL_DEBUG": "WARN"}, {"LD_LIBRARY_PATH": "/drv/lib64"})
    assert env == {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "NCCL_SOCKET_IFNAME": "lo",
                   "NCCL_DEBUG": "WARN", "LD_LIBRARY_PATH": "/drv/lib64"}


def test_a_failed_nccl_check_is_rerun_with_nccl_debug_and_the_log_attached(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str | None]] = []

    def fake_child(kind: str, payload: dict[str, object], timeout: float,
                   env: dict[str, str] | None = None) -> tuple[list[dict[str, object]], str]:
        calls.append((kind, (env or {}).get("NCCL_DEBUG")))
        if kind == "distributed":
            log = "NCCL INFO Bootstrap : Using lo\nNCCL WARN connect failed" if env and env.get("NCCL_DEBUG") else ""
            return [suite.record("distributed.nccl_init", "fail", reason="init timed out")], log
        return [suite.record(kind, "pass")], ""

    monkeypatch.setattr(suite, "probe_gpus", lambda: 2)
    monkeypatch.setattr(suite, "_child", fake_child)
    report = suite.run({"accelerator": "cu130"}, [])
    assert ("distributed", None) in calls and ("distributed", "INFO") in calls
    nccl = next(c for c in report["checks"] if c["name"] == "distributed.nccl_init")
    assert nccl["rerun_with_nccl_debug"] is True
    assert nccl["log"] == ["NCCL INFO Bootstrap : Using lo", "NCCL WARN connect failed"]
    assert report["passed"] is False and report["gpu_verified"] is True
    assert ("versions", None) in calls and ("throughput", None) in calls  # versions/throughput are not re-run
    assert calls.count(("versions", None)) == 1


@pytest.mark.parametrize(("message", "retry"), [
    ("push r:5000/p:t: Put \"http://r:5000/v2/p/blobs/uploads/\": read tcp: connection reset by peer", True),
    ("received unexpected HTTP status: 503 Service Unavailable", True),
    ("dial tcp 127.0.0.1:5000: connect: connection refused", True),
    ("net/http: request canceled (Client.Timeout exceeded while awaiting headers)", True),
    ("unauthorized: authentication required", False),
    ("denied: requested access to the resource is denied", False),
    ("manifest invalid: manifest invalid", False),
])
def test_transient_push_errors(message: str, retry: bool) -> None:
    from imagebuilder.ports.engine import transient

    assert transient(message) is retry


def test_user_check_fails_on_root_and_on_another_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    want = {"uid": 1000, "gid": 1000, "home": "/home/ml"}
    monkeypatch.setattr(suite.os, "geteuid", lambda: 0)
    monkeypatch.setattr(suite.os, "getegid", lambda: 0)
    (rec, *_rest) = suite.check_user(want)
    assert (rec["status"], rec["value"]) == ("fail", "0:0") and "runs as root" in rec["reason"]
    monkeypatch.setattr(suite.os, "geteuid", lambda: 1001)
    monkeypatch.setattr(suite.os, "getegid", lambda: 1000)
    (rec, *_rest) = suite.check_user(want)
    assert (rec["status"], rec["expected"]) == ("fail", "1000:1000")
    monkeypatch.setattr(suite.os, "geteuid", lambda: 0)
    (rec,) = suite.check_user(None)  # no plan for the user (imagebuilder smoke IMAGE): root is a warning
    assert rec["status"] == "warn"


def test_home_that_the_user_cannot_write_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(suite.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(suite.os, "getegid", lambda: 1000)
    monkeypatch.setenv("HOME", "/nonexistent-home")
    got = {r["name"]: r for r in suite.check_user({"uid": 1000, "gid": 1000, "home": "/home/ml"})}
    assert got["health.user"]["status"] == "pass"
    assert got["health.home"]["status"] == "fail" and "/nonexistent-home" in got["health.home"]["reason"]
    assert got["health.home_path"]["status"] == "fail"


def test_a_missing_compiler_is_said_explicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    rec = suite.check_compiler()
    assert rec["status"] == "fail" and "torch.compile cannot build kernels" in rec["reason"]


def test_the_host_compiler_builds_and_runs_the_probe() -> None:
    assert suite.check_compiler()["status"] == "pass"  # this machine has gcc (make test installs nothing else)


# ---------------------------------------------------------------- issue 47: the GPU metrics measured as benchmarks


def test_a_window_is_about_twenty_milliseconds_of_calls() -> None:
    assert suite.window_calls(0.0016) == 12  # an 8192^3 bf16 matmul on an H200
    assert suite.window_calls(0.17) == 1  # a training step longer than a window: one a window
    assert suite.window_calls(0.0) >= 1


def test_the_training_benchmark_is_sized_from_the_gpus_memory() -> None:
    assert suite.train_blocks(141e9) == 8 and suite.train_blocks(80e9) == 8  # H200, H100: the whole stack
    assert suite.train_blocks(24e9) == 5 and suite.train_blocks(10e9) == 2  # an L4; a MIG slice
    assert suite.train_blocks(1e9) == 1


def _rank(rank: int, **extra: object) -> dict[str, object]:
    return {"rank": rank, "train": [96000.0, 96100.0, 95900.0], "compile_s": 7.5, "steps_per_window": 1,
            "config": {"blocks": 8}, "counters": {"frames": 1, "graphs": 1}, **extra}


def test_the_training_record_carries_the_bench_metrics() -> None:
    one = suite.train_record([_rank(0)], 1)
    assert (one["name"], one["status"], one["value"]) == ("throughput.train", "pass", 96000.0)
    assert [m["name"] for m in one["metrics"]] == ["bench.train.samples_per_s"]
    two = suite.train_record([_rank(0, **{"all_reduce.1MiB": [30.0], "all_reduce.256MiB": [299.0]}), _rank(1)], 2)
    assert [m["name"] for m in two["metrics"]] == ["bench.train.samples_per_s", "bench.all_reduce.busbw.1MiB",
                                                   "bench.all_reduce.busbw.256MiB"]


def test_a_training_benchmark_that_broke_or_ran_eagerly_fails() -> None:
    broken = suite.train_record([_rank(0), {"rank": 1, "error": "CUDA out of memory"}], 2)
    assert broken["status"] == "fail" and "rank 1: CUDA out of memory" in broken["reason"]
    eager = suite.train_record([_rank(0, counters={"frames": 0, "graphs": 0})], 1)
    assert eager["status"] == "fail" and "compiled nothing" in eager["reason"] and "metrics" not in eager


def test_each_image_mounts_its_own_compile_cache_and_nothing_else_does(tmp_path: object) -> None:
    """The suite's container of an image mounts that image's compile cache volume (named by its ID) with Inductor and
    Triton pointed into it and its folder writable by the image's user; another image, a rebuilt one with the same
    tags included, gets another volume. The driver's bind stays beside it on a GPU host."""
    from imagebuilder.ports import RunResult
    from imagebuilder.smoke.runner import COMPILE_PATH, run_smoke

    class Engine:
        def __init__(self, image_id: str) -> None:
            self.image_id = image_id
            self.seen: dict[str, Any] = {}

        def has_nvidia_runtime(self) -> bool:
            return False

        def inspect(self, image: str) -> dict[str, object]:
            return {"Id": self.image_id, "Config": {"Env": []}}

        def prune_volumes(self, prefix: str) -> int:
            self.pruned = prefix
            return 0

        def run(self, image: str, command: list[str], **kwargs: Any) -> RunResult:
            self.seen = kwargs
            return RunResult(1, "", {}, 0.0)

    volumes = []
    for image_id in ("sha256:" + "a" * 64, "sha256:" + "b" * 64):
        engine = Engine(image_id)
        run_smoke(engine, "repo:tag", {"accelerator": "cpu"}, timeout=60, shm_size="1g",  # type: ignore[arg-type]
                  gpus="devices", driver_dir=str(tmp_path), devices=("/dev/nvidia0",))
        binds = engine.seen["host_config"]["binds"]
        (volume,) = [name for name, bind in binds.items() if bind["bind"] == COMPILE_PATH]
        assert binds[volume]["mode"] == "rw" and binds[str(tmp_path)]["mode"] == "ro"  # (the driver's, read-only)
        assert volume == "imagebuilder-compile-" + image_id.removeprefix("sha256:")
        env = engine.seen["env"]
        assert env["TORCHINDUCTOR_CACHE_DIR"].startswith(COMPILE_PATH + "/")
        assert env["TRITON_CACHE_DIR"].startswith(COMPILE_PATH + "/")
        assert engine.seen["files"][f"{COMPILE_PATH}/image"] == image_id.encode()
        assert engine.pruned == "imagebuilder-compile-"  # (the volumes of images gone from the engine)
        volumes.append(volume)
    assert volumes[0] != volumes[1]


def test_the_suite_leaves_the_precompiled_headers_out_of_the_cache(tmp_path: object) -> None:
    from pathlib import Path

    cache = Path(str(tmp_path))
    (cache / "precompiled_headers").mkdir()
    (cache / "precompiled_headers" / "x.h.gch").write_bytes(b"0" * 10)
    (cache / "fxgraph").mkdir()
    suite.drop_precompiled_headers(str(cache))
    suite.drop_precompiled_headers("")  # (no cache: nothing to do)
    assert sorted(p.name for p in cache.iterdir()) == ["fxgraph"]
