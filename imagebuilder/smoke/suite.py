"""imagebuilder's smoke suite. Runs INSIDE an image, with the image's own Python.

Standard library and torch only; imports nothing from the host package, and imports torch only inside
the checks (so the decision logic can be unit-tested on a host without torch). Usage:

    python suite.py --expect '{"torch": "2.6.0", "cuda": "12.4", ...}' --report /tmp/report.json

Checks, each with its own timeout, each a record {name, status, value, expected, reason, duration}:
  versions    torch/python/triton/torchvision/torchaudio, accelerator, torch.version.cuda, cuDNN
              (run time = compile time = pin), the NCCL really loaded, sm_XY of every GPU in the arch
              list, driver >= the CUDA floor. Run in a child with LD_LIBRARY_PATH cleaned.
  health      /dev/shm size, memlock limit, the image's user (non-root, the planned UID/GID) and a
              writable home and working folder.
  toolchain   a C compiler that builds and runs a program (torch.compile needs one: Inductor on CPU,
              Triton's launchers on GPU). devel images: a C++ extension built with
              torch.utils.cpp_extension.load_inline and its result checked; CUDA devel images: nvcc is
              the image's CUDA, and a CUDA kernel is built, loaded and (on a GPU) run and checked.
  distributed one process per GPU: NCCL eager init, all_reduce, all_gather_into_tensor,
              reduce_scatter_tensor with exact values, barrier, destroy (gloo x2 on CPU). On failure
              it is re-run with NCCL_DEBUG=INFO and the log is attached.
  fsdp        a torch.compile'd FSDP2 model: 3 AdamW steps with grad clipping, bf16 mixed precision on
              GPU; loss finite, parameters changed, equal to an unsharded reference within tolerance.
  throughput  bf16 matmul TFLOP/s per GPU against a floor (fraction of the model's dense peak), or a
              GFLOP/s floor on CPU. An unknown GPU model is a skip that says so.
  layers      shell commands contributed by the image's layers (layer.yaml `smoke:`).

Statuses: pass, fail, skip (with a reason), warn (never fails the run). Exit code 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

Record = dict[str, Any]
NO_GPU = "no GPU visible in this container"

# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s, from the vendors' data sheets. Matched against
# torch.cuda.get_device_name() by the first pattern that all words of appear in the name.
GPU_PEAKS_BF16: tuple[tuple[tuple[str, ...], float], ...] = (
    (("GH200",), 989.4),
    (("H200",), 989.4),
    (("H100", "NVL"), 835.0),
    (("H100", "PCIE"), 756.5),
    (("H100",), 989.4),  # SXM5 (e.g. "NVIDIA H100 80GB HBM3")
    (("H800",), 989.4),
    (("B200",), 2250.0),
    (("A100",), 312.0),
    (("A800",), 312.0),
    (("L40S",), 362.1),
    (("L40",), 181.0),
    (("L4",), 121.0),
    (("A10G",), 70.0),
)


# ------------------------------------------------------------------------------------------ records


def record(name: str, status: str, *, value: Any = None, expected: Any = None, reason: str = "",
           duration: float = 0.0, **extra: Any) -> Record:
    return {"name": name, "status": status, "value": value, "expected": expected, "reason": reason,
            "duration": round(duration, 3), **extra}


def base_version(text: str | None) -> str | None:
    """'2.6.0+cu124' -> '2.6.0'."""
    return None if text is None else text.split("+", 1)[0]


def compare(name: str, value: Any, expected: Any, *, what: str = "") -> Record:
    ok = value == expected
    reason = "" if ok else f"{what or name}: got {value!r}, expected {expected!r}"
    return record(name, "pass" if ok else "fail", value=value, expected=expected, reason=reason)


# ------------------------------------------------------------------------------ pure decision logic


def version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in str(text).split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def at_least(version: str, floor: str) -> bool:
    a, b = version_tuple(version), version_tuple(floor)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def arch_covered(capability: tuple[int, int], arch_list: list[str]) -> tuple[bool, str]:
    """Is a GPU of this compute capability served by a build with this arch list? Native SASS for the
    exact sm_XY (or sm_XYa), else PTX (compute_XY) at or below it, which the driver JIT-compiles."""
    major, minor = capability
    want = major * 10 + minor
    sass = {int("".join(ch for ch in a[3:] if ch.isdigit())) for a in arch_list if a.startswith("sm_")}
    ptx = {int("".join(ch for ch in a[8:] if ch.isdigit())) for a in arch_list if a.startswith("compute_")}
    if want in sass:
        return True, f"sm_{want}"
    usable = sorted(p for p in ptx if p <= want)
    if usable:
        return True, f"PTX compute_{usable[-1]}"
    return False, ""


def gpu_peak(name: str) -> float | None:
    upper = name.upper()
    for words, peak in GPU_PEAKS_BF16:
        if all(w in upper for w in words):
            return peak
    return None


def throughput_verdict(name: str, tflops: float, fraction: float,
                       floors: list[list[Any]] | None = None) -> Record:
    """Measured bf16 TFLOP/s against the matrix's own floor for this GPU name (`smoke.gpu_floors`, matched as
    a case-insensitive substring), else `fraction` of the model's dense peak from the table; an unknown
    model with no floor of its own is a skip that says so (and a skip blocks publishing on a GPU run)."""
    own = next((float(floor) for pattern, floor in floors or [] if str(pattern).upper() in name.upper()), None)
    if own is not None:
        ok = tflops >= own
        return record("throughput", "pass" if ok else "fail", value=round(tflops, 1), expected=f">= {own:g}",
                      device=name, floor_from="smoke.gpu_floors",
                      reason="" if ok else f"{tflops:.1f} TFLOP/s is below the matrix's floor {own:g} for {name}")
    peak = gpu_peak(name)
    if peak is None:
        return record("throughput", "skip", value=round(tflops, 1), device=name,
                      reason=f"unknown GPU model {name!r}: no dense bf16 peak in the table and no smoke.gpu_floors "
                             f"entry for it, so no floor (measured {tflops:.1f} TFLOP/s)")
    floor = fraction * peak
    ok = tflops >= floor
    return record("throughput", "pass" if ok else "fail", value=round(tflops, 1), expected=f">= {floor:.1f}",
                  fraction_of_peak=round(tflops / peak, 3), peak=peak, device=name,
                  reason="" if ok else f"{tflops:.1f} TFLOP/s is below the floor {floor:.1f} "
                                       f"({fraction:.0%} of {name}'s {peak:.0f})")


def clean_library_path(value: str, listdir: Callable[[str], list[str]]) -> tuple[str, list[str]]:
    """Keep only LD_LIBRARY_PATH folders that hold the driver (libcuda) and none of the CUDA libraries
    the wheels bring, so nothing on the system can shadow the wheels' cuDNN/NCCL/cuBLAS."""
    kept: list[str] = []
    dropped: list[str] = []
    shadowing = ("libcudnn", "libnccl", "libcublas", "libcudart", "libnvrtc", "libcusparse", "libcufft")
    for folder in [p for p in value.split(":") if p]:
        try:
            names = listdir(folder)
        except OSError:
            dropped.append(folder)
            continue
        driver = any(n.startswith(("libcuda.so", "libnvidia-ml.so")) for n in names)
        shadows = any(n.startswith(shadowing) for n in names)
        (kept if driver and not shadows else dropped).append(folder)
    return ":".join(kept), dropped


# ----------------------------------------------------------------------------------------- versions


def _cudnn_str(v: Any) -> str:
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v)
    v = int(v)
    if v >= 90000:  # cuDNN 9: major*10000 + minor*100 + patch
        return f"{v // 10000}.{(v // 100) % 100}.{v % 100}"
    return f"{v // 1000}.{(v // 100) % 10}.{v % 100}"  # cuDNN 8


def runtime_nccl() -> tuple[str, str]:
    """The version of the libnccl this process really uses (ncclGetVersion), and its path.
    torch.cuda.nccl.version() is the version torch was compiled against, which an override changes not."""
    import ctypes
    import glob

    import torch  # noqa: F401 - loads libtorch_cuda and, with it, the libnccl it links

    path = None
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            if "libnccl.so" in line:
                path = line.split()[-1]
                break
    if path is None:
        found = sorted(p for d in sys.path for p in glob.glob(os.path.join(d, "nvidia", "nccl", "lib", "libnccl.so*")))
        path = found[0] if found else "libnccl.so.2"
    lib = ctypes.CDLL(path)
    code = ctypes.c_int()
    if lib.ncclGetVersion(ctypes.byref(code)) != 0:
        raise RuntimeError(f"ncclGetVersion failed in {path}")
    v = code.value
    major, rest = (v // 10000, v % 10000) if v >= 10000 else (v // 1000, v % 1000)
    return f"{major}.{rest // 100}.{rest % 100}", path


def driver_version() -> str | None:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            for word in f.read().split():
                if word.count(".") >= 1 and word.replace(".", "").isdigit():
                    return word
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0].strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return None


def check_versions(expect: dict[str, Any]) -> list[Record]:
    import importlib.metadata as md

    import torch

    out: list[Record] = []
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if expect.get("python"):
        out.append(compare("versions.python", py, expect["python"]))
    if expect.get("torch"):
        out.append(compare("versions.torch", base_version(torch.__version__), expect["torch"]))
    for pkg in ("torchvision", "torchaudio", "triton"):
        if expect.get(pkg):
            try:
                got = base_version(md.version(pkg))
            except md.PackageNotFoundError:
                got = None
            out.append(compare(f"versions.{pkg}", got, expect[pkg]))
    cuda = torch.version.cuda
    if "accelerator" in expect:
        acc = expect["accelerator"]
        if acc == "cpu":
            out.append(compare("versions.accelerator", "cpu" if cuda is None else f"cuda {cuda}", "cpu"))
        else:
            out.append(compare("versions.accelerator", None if cuda is None else "cu" + cuda.replace(".", ""), acc))
    if "cuda" in expect:
        out.append(compare("versions.cuda", cuda, expect["cuda"]))
    if expect.get("cudnn"):
        want = ".".join(str(expect["cudnn"]).split(".")[:3])
        try:
            runtime = torch.backends.cudnn.version()
            got = None if runtime is None else _cudnn_str(runtime)
            compiled = _cudnn_str(torch._C._cudnn.getCompileVersion()) if hasattr(torch._C, "_cudnn") else None
            rec = compare("versions.cudnn", got, want, what="cuDNN loaded at run time")
            rec["compiled"] = compiled
            mismatch = compiled is not None and compiled != got and not expect.get("cudnn_override")
            if rec["status"] == "pass" and mismatch:
                rec.update(status="fail", reason=f"cuDNN loaded at run time is {got}, torch was built with {compiled}")
            out.append(rec)
        except Exception as exc:  # noqa: BLE001 - any failure to load is the finding
            out.append(record("versions.cudnn", "fail", expected=want, reason=f"cuDNN did not load: {exc}"))
    if expect.get("nccl"):
        want = str(expect["nccl"])
        try:
            runtime, path = runtime_nccl()
            rec = compare("versions.nccl", runtime, want, what="NCCL loaded at run time")
            raw = torch.cuda.nccl.version()
            rec["compiled"] = ".".join(str(x) for x in raw) if isinstance(raw, tuple) else str(raw)
            rec["library"] = path
            out.append(rec)
        except Exception as exc:  # noqa: BLE001
            out.append(record("versions.nccl", "fail", expected=want, reason=f"NCCL did not load: {exc}"))
    if cuda is not None:
        out.extend(check_gpu_versions(expect))
    out.append(record("versions.library_path", "pass", value=os.environ.get("LD_LIBRARY_PATH", ""),
                      reason="checked with LD_LIBRARY_PATH cleaned of folders that could shadow the wheels"))
    return out


def check_gpu_versions(expect: dict[str, Any]) -> list[Record]:
    import torch

    if not torch.cuda.is_available():
        return [record("versions.gpu_arch", "skip", reason=NO_GPU), record("versions.driver", "skip", reason=NO_GPU)]
    out: list[Record] = []
    arch_list = torch.cuda.get_arch_list()
    missing = []
    seen = []
    for i in range(torch.cuda.device_count()):
        cap = torch.cuda.get_device_capability(i)
        ok, how = arch_covered(cap, arch_list)
        seen.append(f"cuda:{i} sm_{cap[0]}{cap[1]} ({how or 'not covered'})")
        if not ok:
            missing.append(f"cuda:{i} {torch.cuda.get_device_name(i)} is sm_{cap[0]}{cap[1]}")
    out.append(record("versions.gpu_arch", "fail" if missing else "pass", value=seen, expected=arch_list,
                      reason="; ".join(missing) + " - not in torch.cuda.get_arch_list()" if missing else ""))
    driver = driver_version()
    floor = expect.get("driver_floor")
    if driver is None:
        out.append(record("versions.driver", "fail", expected=floor, reason="the NVIDIA driver version is unreadable"))
    elif not floor:
        out.append(record("versions.driver", "skip", value=driver,
                          reason=f"no driver floor known for CUDA {expect.get('cuda')}"))
    else:
        ok = at_least(driver, str(floor))
        out.append(record("versions.driver", "pass" if ok else "fail", value=driver, expected=f">= {floor}",
                          reason="" if ok else
                          f"driver {driver} is older than {floor}, the floor for CUDA {expect.get('cuda')}"))
    return out


# ------------------------------------------------------------------------------------------- health


def check_health(expect: dict[str, Any], min_shm: int = 1 << 30) -> list[Record]:
    import resource

    out: list[Record] = []
    try:
        st = os.statvfs("/dev/shm")
        shm = st.f_blocks * st.f_frsize
        ok = shm >= min_shm
        out.append(record("health.shm", "pass" if ok else "fail", value=shm, expected=f">= {min_shm}",
                          reason="" if ok else f"/dev/shm is {shm / 2**20:.0f} MiB; NCCL and DataLoader workers need "
                                               "at least 1 GiB: run the container with --shm-size=2g (shm_size)"))
    except OSError as exc:
        out.append(record("health.shm", "fail", reason=f"/dev/shm is not there: {exc}"))
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    unlimited = soft == resource.RLIM_INFINITY
    out.append(record("health.memlock", "pass" if unlimited or soft >= 1 << 30 else "warn",
                      value="unlimited" if unlimited else soft, expected="unlimited",
                      reason="" if unlimited else f"memlock is {soft} bytes; NCCL over InfiniBand/RDMA needs it "
                                                  "unlimited: --ulimit memlock=-1"))
    out.extend(check_user(expect.get("user")))
    return out


def check_user(want: dict[str, Any] | None) -> list[Record]:
    """The image's default user: not root, the UID/GID the matrix planned, a writable home and cwd."""
    uid, gid = os.geteuid(), os.getegid()
    value = f"{uid}:{gid}"
    if not want:
        return [record("health.user", "warn" if uid == 0 else "pass", value=value,
                       reason="the image's default user is root; prefer a non-root USER" if uid == 0 else "")]
    expected = f"{want['uid']}:{want['gid']}"
    if uid == 0:
        rec = record("health.user", "fail", value=value, expected=expected,
                     reason="the image runs as root; every imagebuilder image ends with its non-root USER")
    else:
        rec = compare("health.user", value, expected, what="the image's user (uid:gid)")
    out = [rec]
    home = os.environ.get("HOME", "")
    for name, path in (("health.home", home), ("health.workdir", os.getcwd())):
        ok = bool(path) and os.path.isdir(path) and os.access(path, os.W_OK)
        out.append(record(name, "pass" if ok else "fail", value=path,
                          reason="" if ok else f"{path or '$HOME (unset)'} is not a folder the user can write"))
    if home and want.get("home"):
        out.append(compare("health.home_path", home, want["home"], what="$HOME"))
    return out


# --------------------------------------------------------------------------------------- toolchain

C_PROGRAM = "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 6 * 7); return 0; }\n"
CPP_OP = "torch::Tensor axpb(torch::Tensor x, double a, double b) { return x * a + b; }"
CUDA_OP = r"""
__global__ void axpb_kernel(const float* x, float* y, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}
torch::Tensor axpb_cuda(torch::Tensor x, double a, double b) {
  auto y = torch::empty_like(x);
  int n = x.numel();
  axpb_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)a, (float)b, n);
  return y;
}
"""
CUDA_DECL = "torch::Tensor axpb_cuda(torch::Tensor x, double a, double b);"
NO_COMPILER = ("no C compiler (cc/gcc) in this image: torch.compile cannot build kernels here (Inductor on CPU "
               "and Triton's launchers on GPU call one); keep gcc in every flavor")


def check_compiler() -> Record:
    import shutil

    t0 = time.monotonic()
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return record("toolchain.cc", "fail", reason=NO_COMPILER)
    work = tempfile.mkdtemp(prefix="ib-cc-")
    src, exe = os.path.join(work, "t.c"), os.path.join(work, "t")
    with open(src, "w", encoding="utf-8") as f:
        f.write(C_PROGRAM)
    build = subprocess.run([cc, src, "-o", exe], capture_output=True, text=True)
    if build.returncode != 0:
        return record("toolchain.cc", "fail", value=cc,
                      reason=f"{cc} cannot build a C program: {(build.stderr.strip().splitlines() or ['?'])[-1]}")
    got = subprocess.run([exe], capture_output=True, text=True).stdout.strip()
    rec = compare("toolchain.cc", got, "42", what=f"a C program built by {cc}")
    rec["duration"] = round(time.monotonic() - t0, 3)
    return rec


def check_toolchain(expect: dict[str, Any], gpus: int) -> list[Record]:
    out = [check_compiler()]
    if expect.get("flavor") != "devel":
        return out
    import torch
    from torch.utils.cpp_extension import load_inline

    t0 = time.monotonic()
    try:
        module = load_inline("ib_cpp_ext", cpp_sources=[CPP_OP], functions=["axpb"],
                             build_directory=tempfile.mkdtemp(prefix="ib-ext-"))
    except Exception as exc:  # noqa: BLE001 - a failed build is the finding
        out.append(record("toolchain.cpp_extension", "fail", reason=_build_error("a C++ extension", exc)))
        return out
    x = torch.arange(8, dtype=torch.float64)
    ok = torch.equal(module.axpb(x, 3.0, 1.0), x * 3 + 1)
    out.append(record("toolchain.cpp_extension", "pass" if ok else "fail", value="3x+1 on arange(8)",
                      duration=time.monotonic() - t0,
                      reason="" if ok else "the C++ extension built by load_inline returned a wrong result"))
    if expect.get("accelerator") in (None, "cpu"):
        return out
    out.append(check_nvcc(expect.get("cuda")))
    if out[-1]["status"] != "pass":
        return out
    if gpus == 0:  # build for one architecture only: nothing here can say which GPU will run it
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    t0 = time.monotonic()
    try:
        module = load_inline("ib_cuda_ext", cpp_sources=[CUDA_DECL], cuda_sources=[CUDA_OP], functions=["axpb_cuda"],
                             build_directory=tempfile.mkdtemp(prefix="ib-cuda-ext-"))
    except Exception as exc:  # noqa: BLE001
        out.append(record("toolchain.cuda_extension", "fail", reason=_build_error("a CUDA extension", exc)))
        return out
    out.append(record("toolchain.cuda_extension", "pass", value="built and loaded with nvcc",
                      duration=time.monotonic() - t0))
    if gpus == 0:
        out.append(record("toolchain.cuda_kernel", "skip", reason=NO_GPU))
        return out
    x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    y = module.axpb_cuda(x, 3.0, 1.0)
    torch.cuda.synchronize()
    ok = torch.equal(y, x * 3 + 1)
    out.append(record("toolchain.cuda_kernel", "pass" if ok else "fail", value="3x+1 on 2^20 floats",
                      reason="" if ok else "the CUDA kernel built with nvcc returned a wrong result"))
    return out


def _build_error(what: str, exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()] or lines
    return f"building {what} with load_inline failed: " + " | ".join(errors[-4:])[:600]


def check_nvcc(cuda: str | None) -> Record:
    import re

    home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    nvcc = os.path.join(home, "bin", "nvcc")
    try:
        text = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return record("toolchain.nvcc", "fail", expected=cuda, reason=f"no working nvcc at {nvcc}: {exc}")
    match = re.search(r"release (\d+\.\d+)", text)
    want = ".".join(str(cuda).split(".")[:2]) if cuda else None
    return compare("toolchain.nvcc", match.group(1) if match else None, want, what=f"CUDA of {nvcc}")


# --------------------------------------------------------------------------------------- processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(target: Callable[..., None], world: int, args: tuple[Any, ...], timeout: float) -> list[dict[str, Any]]:
    """Run `target(rank, world, port, queue, *args)` in `world` spawned processes; collect one dict per rank."""
    import multiprocessing as mp
    import queue as queue_mod

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=target, args=(r, world, port, results, *args)) for r in range(world)]
    for p in procs:
        p.start()
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < world and time.monotonic() < deadline:
            try:
                got.append(results.get(timeout=1.0))
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs):
                    break
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    if len(got) < world:
        raise RuntimeError(f"only {len(got)} of {world} ranks reported within {timeout:.0f} s")
    errors = [g["error"] for g in got if g.get("error")]
    if errors:
        raise RuntimeError(errors[0])
    return sorted(got, key=lambda g: int(g["rank"]))


def _init(rank: int, world: int, port: int, backend: str) -> Any:
    import datetime

    import torch
    import torch.distributed as dist

    kwargs: dict[str, Any] = {}
    if backend == "nccl":
        torch.cuda.set_device(rank)
        kwargs["device_id"] = torch.device("cuda", rank)  # eager init: a broken NCCL fails here, not later
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60), **kwargs)
    return dist


def _collectives_worker(rank: int, world: int, port: int, results: Any, backend: str) -> None:
    import torch

    out: dict[str, Any] = {"rank": rank}
    try:
        t0 = time.monotonic()
        dist = _init(rank, world, port, backend)
        out["init_s"] = round(time.monotonic() - t0, 3)
        dev = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        t = torch.full((4,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        out["all_reduce"] = t.tolist()
        mine = torch.full((2,), float(rank), device=dev)
        gathered = torch.empty(2 * world, device=dev)
        dist.all_gather_into_tensor(gathered, mine)
        out["all_gather"] = gathered.tolist()
        try:
            src = torch.arange(2 * world, dtype=torch.float32, device=dev) + rank
            dst = torch.empty(2, device=dev)
            dist.reduce_scatter_tensor(dst, src)
            out["reduce_scatter"] = dst.tolist()
        except (RuntimeError, NotImplementedError) as exc:
            out["reduce_scatter_unsupported"] = str(exc).splitlines()[0][:200]
        dist.barrier()
        dist.destroy_process_group()
        out["ok"] = True
    except Exception:  # noqa: BLE001 - reported to the parent
        out["error"] = _error_line()
    results.put(out)


def _error_line() -> str:
    """The first line of the exception being handled: torch appends hints after the real message."""
    exc = sys.exc_info()[1]
    if exc is None:
        return "unknown error"
    lines = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
    return lines[0][:500] if lines else type(exc).__name__


def collectives_expected(world: int) -> dict[str, list[float]]:
    total = float(sum(range(1, world + 1)))
    gathered = [float(r) for r in range(world) for _ in range(2)]
    scatter = {r: [float(world * (2 * r + j) + sum(range(world))) for j in range(2)] for r in range(world)}
    return {"all_reduce": [total] * 4, "all_gather": gathered, **{f"reduce_scatter.{r}": v for r, v in scatter.items()}}


def check_distributed(backend: str, world: int) -> list[Record]:
    start = time.monotonic()
    got = _spawn(_collectives_worker, world, (backend,), timeout=180)
    want = collectives_expected(world)
    dur = time.monotonic() - start
    out = [record(f"distributed.{backend}_init", "pass", value={"world_size": world,
                  "init_s": max(g["init_s"] for g in got)}, expected={"world_size": world}, duration=dur)]
    for op in ("all_reduce", "all_gather"):
        values = [g[op] for g in got]
        ok = all(v == want[op] for v in values)
        out.append(record(f"distributed.{op}", "pass" if ok else "fail", value=values[0], expected=want[op],
                          reason="" if ok else f"{op} gave {values}"))
    if any("reduce_scatter_unsupported" in g for g in got):
        out.append(record("distributed.reduce_scatter", "skip",
                          reason=f"{backend} has no reduce_scatter_tensor: {got[0].get('reduce_scatter_unsupported')}"))
    else:
        bad = [g["rank"] for g in got if g["reduce_scatter"] != want[f"reduce_scatter.{g['rank']}"]]
        out.append(record("distributed.reduce_scatter", "fail" if bad else "pass",
                          value=[g["reduce_scatter"] for g in got],
                          expected=[want[f"reduce_scatter.{r}"] for r in range(world)],
                          reason=f"wrong values on ranks {bad}" if bad else ""))
    out.append(record("distributed.barrier_destroy", "pass", value=world))
    return out


# --------------------------------------------------------------------------------------------- fsdp


def _fully_shard() -> tuple[Any, Any]:
    import torch

    major, minor = version_tuple(base_version(torch.__version__) or "0")[:2]
    if (major, minor) >= (2, 6):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    else:  # 2.4, 2.5
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    return fully_shard, MixedPrecisionPolicy


def _model(dim: int, blocks: int) -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(dim)
            self.up = nn.Linear(dim, 4 * dim)
            self.down = nn.Linear(4 * dim, dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(blocks))
            self.head = nn.Linear(dim, dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    return Net()


def _fsdp_worker(rank: int, world: int, port: int, results: Any, backend: str) -> None:
    import copy

    import torch

    out: dict[str, Any] = {"rank": rank}
    try:
        dist = _init(rank, world, port, backend)
        from torch.distributed.device_mesh import init_device_mesh

        fully_shard, MixedPrecisionPolicy = _fully_shard()
        gpu = backend == "nccl"
        device = torch.device("cuda", rank) if gpu else torch.device("cpu")
        mesh = init_device_mesh("cuda" if gpu else "cpu", (world,))
        dim, steps = (512, 3) if gpu else (64, 3)
        torch.manual_seed(0)
        model = _model(dim, 2).to(device)
        reference = copy.deepcopy(model)
        before = [p.detach().clone() for p in model.parameters()]
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if gpu else None
        kwargs = {"mesh": mesh, **({"mp_policy": mp} if mp is not None else {})}
        for block in model.blocks:
            block.compile()
            fully_shard(block, **kwargs)
        fully_shard(model, **kwargs)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(1)
        batches = [(torch.randn(16, dim, generator=gen).to(device), torch.randn(16, dim, generator=gen).to(device))
                   for _ in range(steps)]  # the same data on every rank: FSDP must then equal one model
        def step(net: Any, optim: Any, x: Any, y: Any, autocast: bool) -> float:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                loss = torch.nn.functional.mse_loss(net(x).float(), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            optim.step()
            optim.zero_grad()
            return float(loss.item())

        losses, ref_losses = [], []
        t0 = time.monotonic()
        for x, y in batches:
            losses.append(step(model, opt, x, y, autocast=False))  # FSDP's MixedPrecisionPolicy casts itself
            ref_losses.append(step(reference, ref_opt, x, y, autocast=gpu))
        out["step_s"] = round(time.monotonic() - t0, 3)
        after = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
        out["changed"] = sum(int(not torch.equal(a.detach().float().cpu(), b.float().cpu()))
                             for a, b in zip(after, before))
        out["params"] = len(before)
        out["losses"] = losses
        out["ref_losses"] = ref_losses
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        out["error"] = _error_line()
    results.put(out)


def fsdp_verdict(losses: list[float], ref_losses: list[float], changed: int, params: int,
                 tol: float) -> tuple[str, str]:
    import math

    if not all(math.isfinite(v) for v in losses):
        return "fail", f"a loss is not finite: {losses}"
    if changed < params:
        return "fail", f"only {changed} of {params} parameters changed after the steps"
    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(losses, ref_losses))
    if worst > tol:
        return "fail", f"losses {losses} differ from the unsharded reference {ref_losses} by {worst:.2%} (> {tol:.0%})"
    return "pass", ""


CPU_FSDP2_SINCE = (2, 7)  # torch 2.6's FSDP2 assumes CUDA streams ('Stream' has no 'record_event' on CPU)


def check_fsdp(backend: str, world: int) -> list[Record]:
    import torch

    start = time.monotonic()
    name = f"fsdp.compiled_step_{'cuda' if backend == 'nccl' else 'cpu'}"
    try:
        got = _spawn(_fsdp_worker, world, (backend,), timeout=600)
    except RuntimeError as exc:
        release = version_tuple(base_version(torch.__version__) or "0")[:2]
        if backend == "gloo" and release < CPU_FSDP2_SINCE:
            return [record(name, "skip", duration=time.monotonic() - start,
                           reason=f"FSDP2 does not run on CPU in torch {torch.__version__} ({exc})")]
        raise
    g = got[0]
    tol = 0.05 if backend == "nccl" else 1e-3
    status, reason = fsdp_verdict(g["losses"], g["ref_losses"], g["changed"], g["params"], tol)
    return [record(name, status, value=g["losses"],
                   expected=g["ref_losses"], reason=reason, duration=time.monotonic() - start, world_size=world,
                   step_s=g["step_s"])]


# --------------------------------------------------------------------------------------- throughput


def check_throughput(expect: dict[str, Any], gpus: int) -> list[Record]:
    import statistics

    import torch

    out: list[Record] = []
    if gpus == 0:
        n, reps = 1024, 5
        a, b = torch.randn(n, n), torch.randn(n, n)
        for _ in range(2):
            a @ b
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
        gflops = 2 * n**3 / statistics.median(times) / 1e9
        floor = float(expect.get("cpu_gflops_floor") or 5.0)
        ok = gflops >= floor
        return [record("throughput.cpu", "pass" if ok else "fail", value=round(gflops, 1), expected=f">= {floor}",
                       reason="" if ok else f"fp32 matmul {gflops:.1f} GFLOP/s is below the floor {floor}",
                       unit="GFLOP/s", size=n)]
    fraction = float(expect.get("throughput_floor") or 0.6)
    n, warmup, reps = 8192, 5, 20
    for i in range(gpus):
        with torch.cuda.device(i):
            a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            for _ in range(warmup):
                a @ b
            torch.cuda.synchronize()
            times = []
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                a @ b
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1000)
            tflops = 2 * n**3 / statistics.median(times) / 1e12
            rec = throughput_verdict(torch.cuda.get_device_name(i), tflops, fraction, expect.get("gpu_floors"))
            rec.update(name=f"throughput.cuda:{i}", unit="TFLOP/s", size=n, reps=reps)
            out.append(rec)
            del a, b
    return out


# ------------------------------------------------------------------------------------------- layers


def check_commands(commands: list[dict[str, str]], timeout: float = 300.0) -> list[Record]:
    """Checks that layers contribute (layer.yaml `smoke:`), inherited down the tree: each must exit 0."""
    out: list[Record] = []
    for cmd in commands:
        t0 = time.monotonic()
        try:
            proc = subprocess.run(["sh", "-c", cmd["run"]], capture_output=True, text=True, timeout=timeout)
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            ok = proc.returncode == 0
            out.append(record(cmd["name"], "pass" if ok else "fail", value=proc.returncode, expected=0,
                              duration=time.monotonic() - t0,
                              reason="" if ok else f"`{cmd['run']}` exited {proc.returncode}: " + " | ".join(tail)))
        except subprocess.TimeoutExpired:
            out.append(record(cmd["name"], "fail", expected=0, duration=time.monotonic() - t0,
                              reason=f"`{cmd['run']}` timed out after {timeout:.0f} s"))
    return out


# --------------------------------------------------------------------------------------- the runner


def _child(kind: str, payload: dict[str, Any], timeout: float,
           env: dict[str, str] | None = None) -> tuple[list[Record], str]:
    """Run one check kind in a child process (own timeout, own environment); its records and output."""
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as tmp:
        path = tmp.name
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--payload", json.dumps(payload), "--out", path]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env or dict(os.environ), start_new_session=True)
    try:
        logs, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        logs, _ = proc.communicate()
        os.unlink(path)
        return [record(kind, "fail", reason=f"timed out after {timeout:.0f} s; killed")], logs
    try:
        with open(path, encoding="utf-8") as f:
            records = json.load(f)
    except (OSError, ValueError):
        tail = " | ".join(logs.strip().splitlines()[-3:])
        records = [record(kind, "fail", reason=f"the check crashed (exit {proc.returncode}): {tail}")]
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return records, logs


def _worker(kind: str, payload: dict[str, Any], out_path: str) -> int:
    expect = payload.get("expect", {})
    try:
        if kind == "versions":
            records = check_versions(expect)
        elif kind == "distributed":
            records = check_distributed(payload["backend"], payload["world"])
        elif kind == "fsdp":
            records = check_fsdp(payload["backend"], payload["world"])
        elif kind == "throughput":
            records = check_throughput(expect, payload["gpus"])
        elif kind == "toolchain":
            records = check_toolchain(expect, payload["gpus"])
        else:
            raise ValueError(f"unknown worker {kind}")
    except Exception as exc:  # noqa: BLE001 - a crash in a check is that check failing
        records = [record(kind, "fail", reason=f"{type(exc).__name__}: {str(exc).strip()[:500]}")]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(records, f)
    return 0


def probe_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.version.cuda and torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001
        return 0


def run(expect: dict[str, Any], commands: list[dict[str, str]] | None = None,
        only: tuple[str, ...] = ()) -> dict[str, Any]:
    started = time.monotonic()
    checks: list[Record] = []
    cuda_image = expect.get("accelerator") not in (None, "cpu")
    gpus = probe_gpus() if expect.get("accelerator") != "cpu" else 0
    gpu_run = cuda_image and gpus > 0

    def want(kind: str) -> bool:
        return not only or kind in only

    def timed(kind: str, payload: dict[str, Any], timeout: float, env: dict[str, str] | None = None,
              nccl_debug: bool = False) -> None:
        t0 = time.monotonic()
        records, logs = _child(kind, {"expect": expect, **payload}, timeout, env)
        failed = any(r["status"] == "fail" for r in records)
        if failed and nccl_debug:
            records, logs = _child(kind, {"expect": expect, **payload}, timeout,
                                   {**(env or os.environ), "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"})
            for r in records:
                r["rerun_with_nccl_debug"] = True
                if r["status"] == "fail":
                    r["log"] = logs.strip().splitlines()[-200:]
        elapsed = time.monotonic() - t0
        for r in records:
            if not r.get("duration"):
                r["duration"] = round(elapsed / max(1, len(records)), 3)
        checks.extend(records)

    if want("versions"):
        env = dict(os.environ)
        cleaned, dropped = clean_library_path(env.get("LD_LIBRARY_PATH", ""), os.listdir)
        env["LD_LIBRARY_PATH"] = cleaned
        timed("versions", {}, 300, env)
        if dropped:
            checks[-1]["dropped"] = dropped
    if want("health"):
        checks.extend(check_health(expect))
    backend, world = ("nccl", gpus) if gpu_run else ("gloo", 2)
    if want("distributed"):
        timed("distributed", {"backend": backend, "world": world}, 240, nccl_debug=gpu_run)
        if cuda_image and not gpu_run:
            checks.append(record("distributed.nccl_init", "skip", reason=NO_GPU))
    if want("fsdp"):
        timed("fsdp", {"backend": backend, "world": world}, 900, nccl_debug=gpu_run)
        if cuda_image and not gpu_run:
            checks.append(record("fsdp.compiled_step_cuda", "skip", reason=NO_GPU))
    if want("throughput"):
        timed("throughput", {"gpus": gpus if gpu_run else 0}, 300)
        if cuda_image and not gpu_run:
            checks.append(record("throughput.cuda", "skip", reason=NO_GPU))
    if want("toolchain"):
        timed("toolchain", {"gpus": gpus if gpu_run else 0}, 900)
    if want("layers"):
        checks.extend(check_commands(commands or []))
    return {
        "suite": "imagebuilder-smoke",
        "version": 2,
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "gpus": gpus,
        "gpu_verified": gpu_run,
        "expect": expect,
        "checks": checks,
        "passed": all(c["status"] != "fail" for c in checks),
        "duration": round(time.monotonic() - started, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="imagebuilder-smoke")
    parser.add_argument("--expect", default="{}", help="JSON object of expected versions and floors")
    parser.add_argument("--commands", default="[]", help="JSON list of {name, run} shell checks from the layers")
    parser.add_argument("--only", default="", help="comma-separated check kinds to run (default: all)")
    parser.add_argument("--report", default="", help="also write the JSON report here")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--payload", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args.worker, json.loads(args.payload), args.out)
    only = tuple(k for k in args.only.split(",") if k)
    report = run(json.loads(args.expect), json.loads(args.commands), only)
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
