"""Host side of the smoke suite: copy it into a container of the image, run it with the image's own
Python (shm_size set, a timeout, the container always removed) and read back its JSON report."""

from __future__ import annotations

import glob
import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..declarations import schema
from ..ports import Engine, LineSink
from . import suite_data, suite_source

SUITE_PATH = "/opt/imagebuilder-smoke/suite.py"
CHECK_KINDS = ("versions", "health", "distributed", "fsdp", "throughput", "toolchain", "layers")  # the suite's
REPORT_PATH = "/opt/imagebuilder-smoke/report.json"  # not under /tmp: that is a tmpfs, gone when the container stops
COMPILE_PATH = "/opt/imagebuilder-smoke/compile"  # where the image's compile cache volume is mounted
COMPILE_VOLUME = "imagebuilder-compile-"  # + the image's ID: its compile cache on this engine


def compile_cache(image_id: str) -> tuple[dict[str, Any], dict[str, str], dict[str, bytes]]:
    """What gives a smoke container of the image `image_id` (its ID, `sha256:<hex>`) the compile cache of that image
    on this engine: a volume named by the ID, its binds, the environment that points Inductor and Triton into it,
    and the file that makes its folder writable by the image's user. Only containers of that very image mount it,
    so what one run of an image compiled (Inductor's C++ kernels on CPU, Triton's on GPUs) a later run of the same
    image loads instead of compiling again (~35 s of the CPU suite's FSDP check), as the engine's build cache
    serves a step it has run; the code is the image's own either way, and the suite still counts what Inductor
    compiled or loaded and what ran. Another image, a rebuilt one included, starts cold."""
    volume = COMPILE_VOLUME + image_id.removeprefix("sha256:")
    binds = {volume: {"bind": COMPILE_PATH, "mode": "rw"}}
    env = {"TORCHINDUCTOR_CACHE_DIR": f"{COMPILE_PATH}/inductor", "TRITON_CACHE_DIR": f"{COMPILE_PATH}/triton"}
    return binds, env, {f"{COMPILE_PATH}/image": image_id.encode()}


def _beside_suite() -> dict[str, bytes]:
    """The suite's data files (its GPU peak table), at their place beside it in the container."""
    return {f"{SUITE_PATH.rsplit('/', 1)[0]}/{name}": data for name, data in suite_data().items()}


def check_kind(name: str) -> str | None:
    """The kind (`CHECK_KINDS`, what `smoke --only` takes) a check of the suite's report belongs to, by its name:
    `versions.torch` is a `versions` check, `layer.task.0` a `layers` one."""
    prefix = name.split(".", 1)[0]
    prefix = "layers" if prefix == "layer" else prefix
    return prefix if prefix in CHECK_KINDS else None


@dataclass(frozen=True)
class SmokeReport:
    passed: bool
    checks: tuple[dict[str, Any], ...]
    duration: float
    exit_code: int | None
    raw: dict[str, Any] = field(default_factory=dict)
    log_tail: str = ""
    gpu_verified: bool = False
    gpu_mode: str = "none"
    visible: tuple[str, ...] = ()  # variables that narrow the GPUs a container sees, as the image or matrix set them

    def failures(self) -> list[str]:
        return [f"{c['name']}: {c.get('reason') or 'failed'}" for c in self.checks if c.get("status") == "fail"]

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "duration": round(self.duration, 3), "exit_code": self.exit_code,
                "gpu_mode": self.gpu_mode, "gpu_verified": self.gpu_verified, "gpus": self.raw.get("gpus"),
                "checks": list(self.checks)}


def gpu_mode(requested: str, *, has_toolkit: bool, devices: list[str]) -> str:
    """`auto`: the NVIDIA toolkit if the engine has it, else raw devices if /dev/nvidia0 exists, else none."""
    if requested != "auto":
        return requested
    if has_toolkit:
        return "all"
    return "devices" if any(d.endswith("/nvidia0") for d in devices) else "none"


def gpu_options(mode: str, devices: list[str], driver_dir: str,
                image_env: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Host-config options and environment that give a container the GPUs:
    `all` - docker's DeviceRequest (the NVIDIA container toolkit); `cdi` - CDI device names;
    `devices` - every /dev/nvidia* character device plus the driver folder, read-only, on the library path."""
    # (plain mappings: the engine's client makes its DeviceRequest and Ulimit of them; only ports/ imports docker)
    if mode == "all":
        return {"device_requests": [{"count": -1, "capabilities": [["gpu"]]}]}, {}
    if mode == "cdi":
        return {"device_requests": [{"driver": "cdi", "device_ids": ["nvidia.com/gpu=all"]}]}, {}
    if mode != "devices" or not devices:
        return {}, {}
    current = dict(item.split("=", 1) for item in image_env if "=" in item)
    libs = [f"{driver_dir}/lib64", f"{driver_dir}/lib"]
    path = [p for p in current.get("LD_LIBRARY_PATH", "").split(":") if p]
    # Without the toolkit nothing puts the driver into the container's ld cache, and Triton looks for
    # libcuda with `ldconfig -p`: point it at the mounted driver instead.
    env = {"LD_LIBRARY_PATH": ":".join(path + [p for p in libs if p not in path]),
           "TRITON_LIBCUDA_PATH": f"{driver_dir}/lib64"}
    if f"{driver_dir}/bin" not in current.get("PATH", ""):
        env["PATH"] = current.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") \
            + f":{driver_dir}/bin"
    return {
        "devices": [f"{d}:{d}:rwm" for d in devices],
        "binds": {driver_dir: {"bind": driver_dir, "mode": "ro"}} if os.path.isdir(driver_dir) else {},
    }, env


def nvidia_devices() -> list[str]:
    """Every /dev/nvidia* character device on this host (nvidia0.., nvidiactl, nvidia-uvm, ...)."""
    found = []
    for path in sorted(glob.glob("/dev/nvidia*")):
        try:
            if stat.S_ISCHR(os.stat(path).st_mode):
                found.append(path)
        except OSError:
            continue
    return found


def _nvidia_smi(*args: str) -> str | None:
    """What nvidia-smi prints with `args`; None without nvidia-smi, or when it fails."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def gpu_rows(text: str | None) -> list[tuple[str, str]]:
    """(model, driver version) of each GPU from `nvidia-smi --query-gpu=name,driver_version
    --format=csv,noheader`: one row per GPU."""
    rows = [tuple(part.strip() for part in line.rsplit(",", 1)) for line in (text or "").splitlines() if "," in line]
    return [(row[0], row[1]) for row in rows if len(row) == 2 and row[0]]


def interconnect_of(topology: str | None, count: int) -> str:
    """How this host's GPUs talk to each other, from `nvidia-smi topo -m`: `nvlink` when every pair of GPUs is
    joined by NVLink (`NV<n>`), `pcie` when a pair is not, `single` for one GPU, `` when nvidia-smi did not say."""
    if count == 1:
        return "single"
    rows = [line.split() for line in (topology or "").splitlines() if re.match(r"GPU\d+\s", line)]
    pairs = [cell for i, row in enumerate(rows) for j, cell in enumerate(row[1:count + 1]) if i != j]
    if not rows or len(pairs) < count * (count - 1):
        return ""
    return "nvlink" if all(re.fullmatch(r"NV\d+", cell) for cell in pairs) else "pcie"


@dataclass(frozen=True)
class Runner:
    """What a suite ran on, as far as its speed and its verdict go: the one shape of a runner. A GPU runner is its
    GPU models (sorted), their count, the driver and the interconnect, as the host's nvidia-smi names them
    (`GpuHost.runner`); a CPU runner its CPU model and count. A pass record states it (`GpuHost.facts`), a
    lineage is measured on one (`evidence.history`). Where an engine runs a job is another thing:
    `emit.graph.CiRunner`."""

    kind: str  # gpu | cpu
    models: tuple[str, ...] = ()  # GPU models (sorted), or the CPU model
    count: int = 0  # GPUs, or CPUs
    driver: str | None = None
    interconnect: str = ""  # nvlink | pcie | single (GPU runners, as nvidia-smi says)

    def label(self) -> str:
        what = " + ".join(self.models) or "unknown"
        if self.kind == "gpu":
            link = f" ({self.interconnect})" if self.interconnect else ""
            return f"{self.count}x {what}{link}, driver {self.driver or 'unknown'}"
        return f"CPU {what} x{self.count}"

    def short(self) -> str:
        """`2x NVIDIA H200` (a GPU runner), `1x AMD EPYC` (a CPU one): the count and the models, as a table cell."""
        return f"{self.count}x {' + '.join(self.models) or self.kind}"

    def noise_key(self) -> str:
        """The key of this runner's measured noise (`data/perf_noise.json`): `cpu`, or the GPUs' count and models
        (`gpu/2x NVIDIA H200`): what makes a metric as precise as it is, not the driver or the link."""
        if self.kind != "gpu":
            return self.kind
        return f"gpu/{self.count}x {' + '.join(self.models) or 'unknown'}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "models": list(self.models), "count": self.count, "driver": self.driver,
                "interconnect": self.interconnect}

    @classmethod
    def from_json(cls, doc: Any) -> Runner | None:
        try:
            return cls(str(doc["kind"]), tuple(str(m) for m in doc.get("models") or ()), int(doc.get("count") or 0),
                       str(doc["driver"]) if doc.get("driver") else None, str(doc.get("interconnect") or ""))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


@dataclass(frozen=True)
class GpuHost:
    """What this host offers the suite, as the host itself knows it (never from a report): its /dev/nvidia*
    devices, its GPU models, their count, the driver and the interconnect (as nvidia-smi names them), and
    its CPU. This is the runner a pass is recorded against."""

    devices: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    driver: str | None = None  # the driver version, as nvidia-smi says
    cpu: str = ""  # the CPU model, as /proc/cpuinfo says (a CPU run's history is this CPU's)
    cpus: int = 0
    count: int = 0  # GPUs nvidia-smi lists (0: not known; then the /dev/nvidia<N> devices are counted)
    interconnect: str = ""  # nvlink | pcie | single | "" (not known)
    env: tuple[tuple[str, str], ...] = ()  # the host's variables every smoke container gets (`forwarded`)

    @property
    def gpus(self) -> int:
        """The GPUs this host gives a container: nvidia-smi's count, else its /dev/nvidia<N> devices."""
        return self.count or sum(1 for d in self.devices if re.fullmatch(r"/dev/nvidia\d+", d))

    @classmethod
    def probe(cls) -> GpuHost:
        gpus = gpu_rows(_nvidia_smi("--query-gpu=name,driver_version", "--format=csv,noheader"))
        topology = _nvidia_smi("topo", "-m") if len(gpus) > 1 else None
        return cls(tuple(nvidia_devices()), tuple(sorted({name for name, _ in gpus})),
                   gpus[0][1] if gpus else None, cpu_model(), os.cpu_count() or 0, len(gpus),
                   interconnect_of(topology, len(gpus)) if gpus else "", tuple(forwarded(os.environ).items()))

    def runner(self, *, gpu: bool = True) -> Runner:
        """The runner this host is: its GPUs (models, count, driver, interconnect), or with `gpu` false (a run
        that was not GPU-verified) its CPU."""
        if gpu:
            return Runner("gpu", tuple(self.models), self.gpus, self.driver, self.interconnect)
        return Runner("cpu", (self.cpu,) if self.cpu else (), self.cpus)

    def facts(self) -> dict[str, Any]:
        """The GPU runner as a pass record states it (`gpu`): its models, count, driver and interconnect (the
        runner's JSON form, but its kind, which the record says itself), and the forwarded environment."""
        shown = {k: v for k, v in self.runner().to_json().items() if k != "kind"}
        return {**shown, "env": dict(self.env)}


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name; '' where the system does not say."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return ""


FORWARDED_ENV = ("NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_")
VISIBILITY_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def forwarded(host_env: Mapping[str, str]) -> dict[str, str]:
    """The host's variables every smoke container gets (NCCL/NVSHMEM/symmetric-memory tuning and safety
    switches); a pass records them, since they change what the collectives measure."""
    return {k: v for k, v in sorted(host_env.items()) if k.startswith(FORWARDED_ENV)}


def narrowing(image_env: list[str], configured: Mapping[str, str]) -> tuple[str, ...]:
    """`NAME=value (where)` for each variable of the image or of `smoke.env` that narrows the GPUs a container
    sees, or tunes NCCL: what a verdict names as the likely cause of fewer GPUs, or slow collectives."""
    image = dict(item.split("=", 1) for item in image_env if "=" in item)
    wanted = [k for k in [*image, *configured] if k in VISIBILITY_ENV or k.startswith(FORWARDED_ENV)]
    return tuple(dict.fromkeys([f"{k}={image[k]} (the image's environment)" for k in wanted if k in image]
                               + [f"{k}={configured[k]} (smoke.env)" for k in wanted if k in configured]))


def memlock_limit() -> int:
    """As much locked memory as this host allows (-1: unlimited); NCCL over RDMA wants it unlimited, and an
    engine cannot grant a container more than its own hard limit."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return -1 if hard == resource.RLIM_INFINITY else int(hard)


def container_env(host_env: Mapping[str, str], configured: Mapping[str, str],
                  gpu_env: Mapping[str, str]) -> dict[str, str]:
    """The smoke container's environment: the host's NCCL/NVSHMEM/symmetric-memory settings (site tuning
    and safety switches such as NCCL_NVLS_ENABLE=0 must reach the container), the matrix's `smoke.env`,
    the GPU access variables; NCCL talks over loopback, since the container has no other network."""
    env = forwarded(host_env)
    env.setdefault("NCCL_SOCKET_IFNAME", "lo")
    env.update(configured)
    env.update(gpu_env)
    return env


def _report(file_text: bytes, logs: str) -> dict[str, Any]:
    """The suite's JSON report: the file it wrote, else the JSON object it printed last."""
    for text in (file_text.decode(errors="replace"), logs[logs.rfind('\n{\n  "checks"') + 1:] if logs else ""):
        try:
            raw = json.loads(text) if text.strip() else None
        except (ValueError, RecursionError):  # (a report nested past Python's stack is no report)
            continue
        if isinstance(raw, dict):
            return raw
    return {}


def run_smoke(engine: Engine, image: str, expect: dict[str, Any], *, timeout: float, shm_size: str,
              gpus: str = schema.value("smoke.gpus"), driver_dir: str = schema.value("smoke.driver_dir"),
              env: Mapping[str, str] | None = None,
              commands: list[dict[str, str]] | None = None, sink: LineSink | None = None,
              only: tuple[str, ...] = (), devices: tuple[str, ...] | None = None) -> SmokeReport:
    """Run the suite in a fresh container of `image`. `only`: just these kinds of checks (a diagnostic run of
    `imagebuilder smoke`; a build always runs the whole suite). `devices`: this host's /dev/nvidia* (default:
    looked up). The report says what the host gave the container (`gpu_mode`); whether it passed is for
    `judge` to say."""
    found = list(nvidia_devices() if devices is None else devices)
    mode = gpu_mode(gpus, has_toolkit=engine.has_nvidia_runtime(), devices=found)
    inspected = engine.inspect(image)
    image_env = inspected["Config"].get("Env") or []
    gpu_config, gpu_env = gpu_options(mode, found, driver_dir, image_env)
    visible = narrowing(image_env, env or {})
    cache_binds, cache_env, cache_files = compile_cache(str(inspected["Id"])) if inspected.get("Id") else ({}, {}, {})
    engine.prune_volumes(COMPILE_VOLUME)  # the compile caches of images no longer on the engine
    host_config: dict[str, Any] = {
        "shm_size": shm_size, "network_mode": "none",
        # A fresh, executable /tmp: some images have none, and Inductor/Triton build and load code there.
        "tmpfs": {"/tmp": "rw,exec,nosuid,nodev"},
        "ulimits": [{"name": "memlock", "soft": memlock_limit(), "hard": memlock_limit()}], **gpu_config,
        "binds": {**gpu_config.get("binds", {}), **cache_binds},
    }
    command = ["sh", "-c", 'exec "$(command -v python || command -v python3)" "$@"', "smoke",
               SUITE_PATH, "--expect", json.dumps(expect, sort_keys=True),
               "--commands", json.dumps(commands or []), "--report", REPORT_PATH, "--only", ",".join(only)]
    result = engine.run(image, command, files={SUITE_PATH: suite_source(), **_beside_suite(), **cache_files},
                        fetch=(REPORT_PATH,), timeout=timeout, host_config=host_config,
                        env={**cache_env, **container_env(os.environ, env or {}, gpu_env)}, sink=sink)
    if result.exit_code is None:
        tail = "\n".join(result.logs.strip().splitlines()[-30:])
        return SmokeReport(False, ({"name": "suite", "status": "fail", "reason":
                                    f"timed out after {timeout:.0f} s; the container was killed"},),
                           result.duration, None, log_tail=tail, gpu_mode=mode, visible=visible)
    return report_of(result.files.get(REPORT_PATH, b""), result.logs, result.exit_code, result.duration, mode,
                     visible)


def report_of(file_text: bytes, logs: str, exit_code: int, duration: float, mode: str,
              visible: tuple[str, ...]) -> SmokeReport:
    """The report of a suite that ended with `exit_code`: the file it wrote (else the JSON it printed last), as
    the container said it; a report whose checks or GPU count are malformed is the suite's failure."""
    tail = "\n".join(logs.strip().splitlines()[-30:])
    raw = _report(file_text, logs)
    checks_ok = isinstance(raw.get("checks"), list) and raw["checks"] and \
        all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in raw["checks"])
    if not checks_ok or not isinstance(raw.get("gpus", 0), int):
        reason = f"the suite exited {exit_code} without a report" if not raw.get("checks") else \
            "the report is not the suite's (its checks or its GPU count are malformed)"
        return SmokeReport(False, ({"name": "suite", "status": "fail", "reason": reason},),
                           duration, exit_code, log_tail=tail, gpu_mode=mode, visible=visible)
    checks = tuple(raw["checks"])
    passed = bool(raw.get("passed")) and exit_code == 0
    return SmokeReport(passed, checks, duration, exit_code, raw, tail,
                       gpu_verified=bool(raw.get("gpu_verified")), gpu_mode=mode, visible=visible)
