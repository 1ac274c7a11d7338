"""imagebuilder's smoke suite. Runs INSIDE an image, with the image's own Python.

Standard library and torch only; imports nothing from the host package, and imports torch only inside
the checks (so the decision logic can be unit-tested on a host without torch). Usage:

    python suite.py --expect '{"torch": "2.6.0", "cuda": "12.4", ...}' --report /tmp/report.json

Checks, each with its own timeout, each a record {name, status, value, expected, reason, duration, ...}. Every
expected version key yields a record: a planned version must match, a None must be absent.
  versions    torch (torch.__version__ AND its package metadata), python, triton/torchvision/torchaudio (a
              None: not installed, not importable), accelerator, torch.version.cuda, cuDNN and NCCL (the
              ones really loaded; run time = compile time = pin; a None: not available, not mapped), sm_XY
              of every GPU in the arch list, driver >= the CUDA floor. Run in a child with LD_LIBRARY_PATH
              cleaned of folders that could shadow the wheels.
              versions.library_path, in a child with the image's own environment: every torch library
              (libtorch*, libc10*) mapped into the process comes from the torch package, every CUDA library
              (cudart, cuBLAS, cuDNN, NCCL, ...) from the nvidia-* wheels' folders, none from an LD_PRELOAD or
              LD_LIBRARY_PATH shadow, and a CPU image maps none; versions.cuda_libraries (CUDA images):
              cudart/cuBLAS/cuDNN/NCCL are loaded, every shared library the nvidia-* wheels and torch list
              in their RECORD is there, and a cuDNN convolution and a cuBLAS matmul run on a GPU.
  health      /dev/shm size, memlock limit, the image's user (non-root, the planned UID/GID) and a
              writable home and working folder.
  toolchain   a C compiler that builds and runs a program (torch.compile needs one: Inductor on CPU,
              Triton's launchers on GPU). devel images: a C++ extension built with
              torch.utils.cpp_extension.load_inline and its result checked; CUDA devel images: nvcc is
              the image's CUDA, and a CUDA kernel is built, loaded and (on a GPU) run and checked.
  distributed one process per GPU: NCCL eager init, all_reduce, all_gather_into_tensor,
              reduce_scatter_tensor with exact values, barrier, destroy (gloo x2 on CPU). On failure
              it is re-run with NCCL_DEBUG=INFO and the log is attached.
  fsdp        fsdp.compiled_step_{cpu,cuda}: an FSDP2 model whose blocks are torch.compile'd trains 5 SGD
              steps (momentum) on one fixed batch, each rank on its slice, beside an unsharded, eager, fp32
              reference on the whole batch (bf16 mixed precision on GPU, the reference under bf16 autocast):
              losses finite and falling by FSDP_MIN_LOSS_DROP; every parameter tensor's update and first
              gradient equal to the reference's within FSDP_TOL (||p_fsdp - p_ref|| / ||p_ref - p_0||),
              the worst tensors named, every gap in the record. fsdp.compiled_graphs_{cpu,cuda}: torch.compile
              really compiled on every rank (frames, graphs, AOT graphs counted; graph breaks reported).
              Only torch < 2.7's known lack of CPU FSDP2 is a skip; any other error fails both.
  throughput  bf16 matmul TFLOP/s per GPU (CUDA events, median of 20) against a floor (fraction of the
              model's dense peak), or fp32 GFLOP/s on CPU (best of 10) against smoke.cpu_gflops_floor
              (default CPU_GFLOPS_FLOOR, measured by benchmarks/cpu_floor.py); random inputs (checked: not
              zeros or ones), the product checked against float64, every repetition's time in the record.
              An unknown GPU model is a skip that says so.
  layers      shell commands contributed by the image's layers (layer.yaml `smoke:`).

Statuses: pass, fail, skip (with a reason), warn (never fails the run). Exit code 1 if any check failed.
"""

from __future__ import annotations

import argparse
import functools
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

# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s: gpu_peaks.json, the one table the matrix loader reads too.
# In an image it is beside this file (the host copies it in with the suite: `imagebuilder.smoke.suite_data`); run
# from the package, it is in imagebuilder/data/.
PEAKS_FILE = "gpu_peaks.json"


# ------------------------------------------------------------------------------------------ records


def record(name: str, status: str, *, value: Any = None, expected: Any = None, reason: str = "",
           duration: float = 0.0, **extra: Any) -> Record:
    return {"name": name, "status": status, "value": value, "expected": expected, "reason": reason,
            "duration": round(duration, 3), **extra}


def metric(name: str, unit: str, reps: list[float], *, better: str = "higher", stat: str = "median") -> Record:
    """A measurement for the performance history: every repetition, the unit, which way is better, and the
    statistic of the repetitions that stands for the run (`median`, or `max`: the best of a rate, where a
    shared machine's neighbours only ever slow a repetition down). The host computes the statistic itself."""
    return {"name": name, "unit": unit, "better": better, "stat": stat, "reps": [round(float(r), 6) for r in reps]}


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


@functools.cache
def gpu_peaks() -> tuple[tuple[tuple[str, ...], float], ...]:
    """The peak table's rows (words, TFLOP/s), read from `PEAKS_FILE` beside the suite (in an image) or in the
    package's data/ folder; a suite without its table fails the check that asks, never guesses."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, PEAKS_FILE), os.path.join(here, os.pardir, "data", PEAKS_FILE)):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return tuple((tuple(row["words"]), float(row["tflops"])) for row in json.load(f)["peaks"])
    raise FileNotFoundError(f"the GPU peak table {PEAKS_FILE} is not beside the suite ({here})")


def gpu_peak(name: str) -> float | None:
    """The dense bf16 peak of the first row of the table all of whose words are in `name` (any case), or None."""
    upper = name.upper()
    for words, peak in gpu_peaks():
        if all(w.upper() in upper for w in words):
            return peak
    return None


def throughput_verdict(name: str, tflops: float, fraction: float,
                       floors: list[list[Any]] | None = None) -> Record:
    """Measured bf16 TFLOP/s against the matrix's own floor for this GPU name (`smoke.gpu_floors`, matched as
    a case-insensitive substring), else `fraction` of the model's dense peak from the table; an unknown
    model with no floor of its own is a skip that says so (and a skip blocks publishing on a GPU run)."""
    own = next((float(floor) for pattern, floor in floors or [] if str(pattern).upper() in name.upper()), None)
    known = gpu_peak(name)
    if own is not None and known is not None and own < 0.3 * known:  # below the matrix's bound for this GPU
        own = None  # (the matrix refuses such a floor; a report told one anyway is judged by the peak table)
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


VERSION_KEYS = ("python", "torch", "torchvision", "torchaudio", "triton", "accelerator", "cuda", "cudnn", "nccl")


def torch_version_record(runtime: str, metadata: str | None, want: str) -> Record:
    """torch.__version__ and the installed package's metadata (what pip and `importlib.metadata` see) must
    both be the expected release: an altered torch changes one or the other."""
    rec = compare("versions.torch", base_version(runtime), want)
    rec["metadata"] = metadata
    if rec["status"] == "pass" and base_version(metadata) != want:
        rec.update(status="fail", reason=f"torch.__version__ is {runtime}, but its package metadata says {metadata!r}")
    return rec


def package_record(pkg: str, installed: str | None, importable: bool, want: str | None) -> Record:
    """A companion package against its pin; where none is planned (None), it must be absent: not installed
    and not importable (one installed by a later layer is unpinned, and may have replaced torch)."""
    name = f"versions.{pkg}"
    if want is not None:
        return compare(name, base_version(installed), want)
    present = installed or ("importable, without package metadata" if importable else None)
    return record(name, "fail" if present else "pass", value=present, expected=None,
                  reason=f"{pkg} is installed ({present}), and this image plans none: add it to torch_extras to "
                         "pin it with torch" if present else "")


def absence_record(name: str, found: list[str], what: str) -> Record:
    """Something the image must not have (a CPU image: no cuDNN, no NCCL): pass when nothing was found."""
    return record(name, "fail" if found else "pass", value=found or None, expected=None,
                  reason=f"{what} is present in an image that expects none: {'; '.join(found)}" if found else "")


def _mapped(prefix: str) -> list[str]:
    """Files of this process whose name starts with `prefix` (libcudnn, libnccl, ...), from /proc/self/maps."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return [p for p in mapped_libraries(maps.readlines()) if os.path.basename(p).startswith(prefix)]
    except OSError:
        return []


def _import_failed(expect: dict[str, Any], why: str) -> list[Record]:
    """Every expected key's record, failed: torch does not import."""
    return [record(f"versions.{k}", "fail", expected=expect[k], reason=f"not checked: import torch failed: {why}")
            for k in VERSION_KEYS if k in expect and k != "python"]


def check_versions(expect: dict[str, Any]) -> list[Record]:
    """Every expected version key yields a record: a planned version must match; a None must be absent."""
    import importlib.metadata as md
    import importlib.util

    out: list[Record] = []
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if "python" in expect:
        out.append(compare("versions.python", py, expect["python"]))
    try:
        import torch
    except Exception:  # noqa: BLE001 - a torch that does not import is the finding
        return out + _import_failed(expect, _error_line())

    def installed(pkg: str) -> str | None:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return None

    if "torch" in expect:
        out.append(torch_version_record(torch.__version__, installed("torch"), expect["torch"]))
    for pkg in ("torchvision", "torchaudio", "triton"):
        if pkg in expect:
            out.append(package_record(pkg, installed(pkg), importlib.util.find_spec(pkg) is not None, expect[pkg]))
    cuda = torch.version.cuda
    if "accelerator" in expect:
        acc = expect["accelerator"]
        if acc == "cpu":
            out.append(compare("versions.accelerator", "cpu" if cuda is None else f"cuda {cuda}", "cpu"))
        else:
            out.append(compare("versions.accelerator", None if cuda is None else "cu" + cuda.replace(".", ""), acc))
    if "cuda" in expect:
        out.append(compare("versions.cuda", cuda, expect["cuda"]))
    if "cudnn" in expect:
        out.append(cudnn_record(torch, expect) if expect["cudnn"] else absence_record(
            "versions.cudnn", _cudnn_found(torch), "cuDNN"))
    if "nccl" in expect:
        out.append(nccl_record(torch, expect) if expect["nccl"] else absence_record(
            "versions.nccl", _nccl_found(torch), "NCCL"))
    if cuda is not None:
        out.extend(check_gpu_versions(expect))
    return out


def _cudnn_found(torch: Any) -> list[str]:
    found = [f"torch.backends.cudnn is available (cuDNN {torch.backends.cudnn.version()})"] \
        if torch.backends.cudnn.is_available() else []
    return found + _mapped("libcudnn")


def _nccl_found(torch: Any) -> list[str]:
    import torch.distributed as dist

    found = ["torch.distributed has the NCCL backend"] if dist.is_available() and dist.is_nccl_available() else []
    return found + _mapped("libnccl")


def cudnn_record(torch: Any, expect: dict[str, Any]) -> Record:
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
        return rec
    except Exception as exc:  # noqa: BLE001 - any failure to load is the finding
        return record("versions.cudnn", "fail", expected=want, reason=f"cuDNN did not load: {exc}")


def nccl_record(torch: Any, expect: dict[str, Any]) -> Record:
    want = str(expect["nccl"])
    try:
        runtime, path = runtime_nccl()
        rec = compare("versions.nccl", runtime, want, what="NCCL loaded at run time")
        raw = torch.cuda.nccl.version()
        rec["compiled"] = ".".join(str(x) for x in raw) if isinstance(raw, tuple) else str(raw)
        rec["library"] = path
        return rec
    except Exception as exc:  # noqa: BLE001
        return record("versions.nccl", "fail", expected=want, reason=f"NCCL did not load: {exc}")


# ------------------------------------------------------------------------------ where libraries come from

TORCH_LIBS = ("libtorch", "libc10", "libshm", "libcaffe2")  # torch's own: only ever from the torch package
CUDA_LIBS = ("libcudart", "libcublas", "libcudnn", "libnccl", "libnvrtc", "libcusparse", "libcufft", "libcurand",
             "libcusolver", "libnvJitLink", "libcupti", "libnvToolsExt", "libcufile", "libnvshmem")  # the wheels'
# What `import torch` maps in a CUDA image (libtorch_cuda links them), GPU or not; cuDNN's engines and cuBLAS's
# kernels come on first use, which check_libraries makes happen on a GPU.
CUDA_LIBS_LOADED = ("libcudart", "libcublas", "libcudnn", "libnccl")


def mapped_libraries(maps_lines: list[str]) -> list[str]:
    """The shared objects mapped into a process, from its /proc/PID/maps lines: unique paths, sorted."""
    found = set()
    for line in maps_lines:
        parts = line.split(None, 5)
        path = parts[5].strip() if len(parts) == 6 else ""
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        if path.startswith("/") and ".so" in os.path.basename(path):
            found.add(path)
    return sorted(found)


def library_family(path: str) -> str:
    base = os.path.basename(path)
    return "torch" if base.startswith(TORCH_LIBS) else "cuda" if base.startswith(CUDA_LIBS) else ""


def _under(path: str, folders: list[str]) -> bool:
    return any(path.startswith(folder.rstrip("/") + "/") for folder in folders)


def foreign_libraries(paths: list[str], torch_dirs: list[str], cuda_dirs: list[str], cuda_image: bool) -> list[str]:
    """The torch and CUDA libraries mapped from outside the wheels, each with why: torch's own must come from
    the torch package; CUDA's (cuDNN, NCCL, cuBLAS, ...) from the nvidia-* wheels' folders (or torch's), never
    from an LD_LIBRARY_PATH or LD_PRELOAD shadow or a system folder; a CPU image maps none at all."""
    out = []
    for path in paths:
        family = library_family(path)
        if family == "torch" and not _under(path, torch_dirs):
            out.append(f"{path} (torch's own library, from outside the torch package {', '.join(torch_dirs)})")
        elif family == "cuda" and not cuda_image:
            out.append(f"{path} (a CUDA library in a CPU image)")
        elif family == "cuda" and not _under(path, cuda_dirs):
            out.append(f"{path} (not from the wheels' folders {', '.join(cuda_dirs)})")
    return out


def library_path_verdict(paths: list[str], torch_dirs: list[str], cuda_dirs: list[str], cuda_image: bool) -> Record:
    checked = [p for p in paths if library_family(p)]
    foreign = foreign_libraries(paths, torch_dirs, cuda_dirs, cuda_image)
    if not any(library_family(p) == "torch" for p in paths):
        foreign.append("no libtorch/libc10 is mapped after import torch: nothing to check (is /proc mounted?)")
    return record("versions.library_path", "fail" if foreign else "pass", value=checked,
                  expected=f"torch's from {', '.join(torch_dirs)}"
                           + (f"; CUDA's from {', '.join(cuda_dirs)}" if cuda_image else "; no CUDA library"),
                  reason="libraries from the wrong place: " + "; ".join(foreign) if foreign else "",
                  foreign=foreign)


def missing_wheel_files(listing: dict[str, list[str]], exists: Callable[[str], bool]) -> list[str]:
    """The shared libraries that installed wheels list in their RECORD but that are gone: `dist: path`. Most
    of CUDA's are loaded only on first use (cuDNN's engines, ...): without this, one deleted by a later layer
    shows only when a user's job reaches it."""
    return [f"{dist}: {path}" for dist, paths in sorted(listing.items()) for path in paths if not exists(path)]


def cuda_libraries_verdict(paths: list[str], touch_error: str, missing_files: list[str]) -> Record:
    """A CUDA image maps cudart, cuBLAS, cuDNN and NCCL (from anywhere: where from is versions.library_path's
    question), every shared library its nvidia-* wheels (and torch) installed is still there, and using them
    (cuDNN's version; on a GPU a convolution and a matmul) raises nothing."""
    names = [os.path.basename(p) for p in paths]
    missing = [lib for lib in CUDA_LIBS_LOADED if not any(n.startswith(lib + ".so") for n in names)]
    gone = ", ".join(missing_files[:5]) + (f" and {len(missing_files) - 5} more" if len(missing_files) > 5 else "")
    reasons = ([f"not loaded after import torch: {', '.join(missing)}"] if missing else []) + \
        ([f"installed by the wheels but missing: {gone}"] if missing_files else []) + \
        ([f"using the CUDA libraries failed: {touch_error}"] if touch_error else [])
    return record("versions.cuda_libraries", "fail" if reasons else "pass",
                  value=[p for p in paths if library_family(p) == "cuda"], expected=list(CUDA_LIBS_LOADED),
                  reason="; ".join(reasons), missing_files=missing_files)


def _wheel_libraries() -> dict[str, list[str]]:
    """Every shared library the installed nvidia-* wheels and torch list in their RECORD: {dist: [paths]}."""
    import importlib.metadata as md

    out: dict[str, list[str]] = {}
    for dist in md.distributions():
        name = str(dist.metadata["Name"] or "").lower()
        if name.startswith("nvidia-") or name == "torch":
            files = record_paths(dist.read_text("RECORD"))
            if files is None:  # no RECORD, or one this user cannot read (importlib.metadata says nothing then)
                out.setdefault(name, []).append(str(dist.locate_file(UNREADABLE_RECORD)))
                continue
            out.setdefault(name, []).extend(str(dist.locate_file(f)) for f in files if ".so" in os.path.basename(f))
    return out


UNREADABLE_RECORD = "<its RECORD: missing or unreadable by this user, so its libraries cannot be checked>"


def record_paths(text: str | None) -> list[str] | None:
    """The paths a wheel's RECORD lists, read from the file itself: Python 3.12's `Distribution.files` leaves out
    the files that no longer exist, which is exactly what this check looks for (an H100 image on Python 3.12
    passed with cuDNN's engines deleted)."""
    if text is None:
        return None
    import csv

    return [row[0] for row in csv.reader(text.splitlines()) if row and row[0]]


def _wheel_dirs(torch: Any) -> tuple[list[str], list[str]]:
    """(torch's package folder, the folders CUDA libraries may come from: nvidia-* wheels, torch, triton)."""
    import importlib.util

    torch_dirs = [os.path.realpath(os.path.dirname(torch.__file__))]
    cuda_dirs = list(torch_dirs)
    for pkg in ("nvidia", "triton"):
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            spec = None
        cuda_dirs += [os.path.realpath(d) for d in (spec.submodule_search_locations or [])] if spec else []
    return torch_dirs, cuda_dirs


def _touch_cuda(torch: Any) -> str:
    """Load what CUDA work loads: cuDNN (its version), and on a GPU a cuDNN convolution and a cuBLAS matmul."""
    try:
        torch.backends.cudnn.version()
        if torch.cuda.is_available():
            x = torch.randn(2, 3, 16, 16, device="cuda")
            torch.nn.functional.conv2d(x, torch.randn(4, 3, 3, 3, device="cuda"))
            torch.mm(x.flatten(1), x.flatten(1).t())
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - a library that fails to load or run is the finding
        return _error_line()
    return ""


LOADER_DEFAULTS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu")


def loader_dirs(conf: str = "/etc/ld.so.conf") -> list[str]:
    """The folders the dynamic loader searches by name: LD_LIBRARY_PATH, ld.so.conf (with its includes) and
    the default folders."""
    import glob

    out = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]

    def read(path: str, depth: int = 0) -> None:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = [line.split("#", 1)[0].strip() for line in f]
        except OSError:
            return
        for line in lines:
            if line.startswith("include ") and depth < 4:
                pattern = line.split(None, 1)[1]
                for found in sorted(glob.glob(pattern if pattern.startswith("/") else
                                              os.path.join(os.path.dirname(path), pattern))):
                    read(found, depth + 1)
            elif line.startswith("/"):
                out.append(line)

    read(conf)
    return [*out, *LOADER_DEFAULTS]


def soname_key(name: str) -> str | None:
    """A torch or CUDA library file's name up to its major version (libcudnn.so.9.19.0 -> libcudnn.so.9), or
    None for any other file: a Python extension, a copy auditwheel made private to one wheel
    (libgomp-a34b3233.so.1: its name carries its content's hash, so two of them are one content), or a library of
    neither family (torch's wheel vendors libgomp.so.1 beside the compiler's, pyarrow ships its libraries
    under two names in one folder: each loads once by soname, and they are no CUDA library)."""
    import re

    match = re.fullmatch(r"(lib[^/]+?\.so)((?:\.\d+)?)(?:\.[0-9.]+)?", name)
    if match is None or re.search(r"\.(?:cpython|pypy)[^/]*\.so$|\.abi3\.so$", match.group(1)):
        return None  # a Python extension module
    if re.search(r"-[0-9a-f]{8}(?:-[0-9a-f]{8})?\.so$", match.group(1)):
        return None  # auditwheel's private copies carry their content's hash: one name, one content, never shared
    return match.group(1) + match.group(2)


def library_copies(loader: list[str], trees: list[str]) -> dict[str, list[str]]:
    """soname -> the folders that hold a torch or CUDA library of that name (symlinks followed), in the loader's
    folders and under the Python path's trees (site-packages, the shared CUDA prefix); only names found in more
    than one folder (a wheel has no symlinks, so one folder may hold one library under two names)."""
    seen: dict[str, set[str]] = {}

    def add(path: str) -> None:
        key = soname_key(os.path.basename(path))
        if key is not None and library_family(key) and os.path.isfile(path):
            seen.setdefault(key, set()).add(os.path.dirname(os.path.realpath(path)))

    for folder in dict.fromkeys(os.path.realpath(d) for d in loader):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            add(os.path.join(folder, name))
    for tree in dict.fromkeys(os.path.realpath(t) for t in trees):
        for root, _, files in os.walk(tree):
            for name in files:
                add(os.path.join(root, name))
    return {key: sorted(paths) for key, paths in sorted(seen.items()) if len(paths) > 1}


def single_copy_verdict(twice: dict[str, list[str]]) -> Record:
    said = "; ".join(f"{key}: {', '.join(paths)}" for key, paths in list(twice.items())[:5])
    more = f" and {len(twice) - 5} more" if len(twice) > 5 else ""
    return record("versions.single_copy", "fail" if twice else "pass", value=twice, expected={},
                  reason=f"libraries present twice (one soname, two folders): {said}{more}" if twice else "")


def check_single_copy() -> Record:
    """No torch or CUDA library is in the image twice: one soname in two folders, on the loader's paths or on
    Python's (a second copy of the CUDA libraries that a pip install put in the venv beside the shared CUDA
    node's, a second torch). Which one loads then depends on who asks first."""
    import site

    trees = [p for p in [*site.getsitepackages(), *sys.path] if os.path.isdir(p) and
             ("-packages" in p or p.startswith("/opt/imagebuilder/"))]
    return single_copy_verdict(library_copies(loader_dirs(), trees))


def check_libraries(expect: dict[str, Any]) -> list[Record]:
    """Where torch's and CUDA's shared libraries really come from, in the image's own environment (LD_PRELOAD,
    LD_LIBRARY_PATH as the image sets them: a user's process sees them too)."""
    acc = expect.get("accelerator")
    env = {"ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""), "ld_preload": os.environ.get("LD_PRELOAD", "")}
    try:
        import torch
    except Exception:  # noqa: BLE001
        why = f"import torch failed: {_error_line()}"
        names = ["versions.library_path"] + (["versions.cuda_libraries"] if acc and acc != "cpu" else [])
        return [*(record(n, "fail", reason=why, **env) for n in names), check_single_copy()]
    cuda_image = acc != "cpu" if acc else torch.version.cuda is not None
    touched = _touch_cuda(torch) if cuda_image else ""
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        paths = mapped_libraries(maps.readlines())
    torch_dirs, cuda_dirs = _wheel_dirs(torch)
    out = [library_path_verdict(paths, torch_dirs, cuda_dirs, cuda_image), check_single_copy()]
    if cuda_image:
        out.append(cuda_libraries_verdict(paths, touched, missing_wheel_files(_wheel_libraries(), os.path.exists)))
    for rec in out:
        rec.update(env)
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


def _spawn(target: Callable[..., None], world: int, args: tuple[Any, ...], timeout: float,
           raise_errors: bool = True) -> list[dict[str, Any]]:
    """Run `target(rank, world, port, queue, *args)` in `world` spawned processes; collect one dict per rank
    (a rank that did not report raises; one that reported an error raises it unless `raise_errors` is off)."""
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
    if errors and raise_errors:
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

    out: dict[str, Any] = {"rank": rank, "stage": "init"}  # the stage it is in: where it failed, if it did
    try:
        t0 = time.monotonic()
        dist = _init(rank, world, port, backend)
        out["init_s"] = round(time.monotonic() - t0, 3)
        dev = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        t = torch.full((4,), float(rank + 1), device=dev)
        out["stage"] = "all_reduce"
        dist.all_reduce(t)
        out["all_reduce"] = t.tolist()
        mine = torch.full((2,), float(rank), device=dev)
        gathered = torch.empty(2 * world, device=dev)
        out["stage"] = "all_gather"
        dist.all_gather_into_tensor(gathered, mine)
        out["all_gather"] = gathered.tolist()
        out["stage"] = "reduce_scatter"
        try:
            src = torch.arange(2 * world, dtype=torch.float32, device=dev) + rank
            dst = torch.empty(2, device=dev)
            dist.reduce_scatter_tensor(dst, src)
            out["reduce_scatter"] = dst.tolist()
        except (RuntimeError, NotImplementedError) as exc:
            out["reduce_scatter_unsupported"] = str(exc).splitlines()[0][:200]
        if backend == "nccl" and world > 1:
            try:
                out["busbw"] = _busbw(dist, world, dev)
            except Exception:  # noqa: BLE001 - a measurement: the stages above judge the collectives
                out["busbw_error"] = _error_line()
        out["stage"] = "barrier_destroy"
        dist.barrier()
        dist.destroy_process_group()
        out["stage"] = "done"
        out["ok"] = True
    except Exception:  # noqa: BLE001 - reported to the parent
        out["error"] = _error_line()
    results.put(out)


ALL_REDUCE_SIZES = (1 << 20, 1 << 25, 1 << 28)  # bytes of fp32 all-reduced: 1 MiB, 32 MiB, 256 MiB
ALL_REDUCE_REPS = (3, 10)  # warm-ups, timed repetitions per size
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")  # whose bus bandwidth is measured


def _collective(dist: Any, op: str, whole: Any, part: Any) -> None:
    if op == "all_reduce":
        dist.all_reduce(whole)
    elif op == "all_gather":
        dist.all_gather_into_tensor(whole, part)
    else:
        dist.reduce_scatter_tensor(part, whole)


def _busbw(dist: Any, world: int, dev: Any) -> dict[str, dict[str, list[float]]]:
    """Bus bandwidth in GB/s per collective (all_reduce, all_gather, reduce_scatter), size and repetition, as
    nccl-tests computes it: the bytes of the whole buffer over the time (the slowest rank's, through a max),
    times 2(n-1)/n for all_reduce and (n-1)/n for the other two."""
    import torch

    warmup, reps = ALL_REDUCE_REPS
    out: dict[str, dict[str, list[float]]] = {}
    for op in COLLECTIVES:
        factor = (2 if op == "all_reduce" else 1) * (world - 1) / world
        for size in ALL_REDUCE_SIZES:
            whole = torch.ones(size // 4, device=dev)
            part = torch.ones(size // 4 // world, device=dev)
            for _ in range(warmup):
                _collective(dist, op, whole, part)
            torch.cuda.synchronize(dev)
            rates = []
            for _ in range(reps):
                t0 = time.perf_counter()
                _collective(dist, op, whole, part)
                torch.cuda.synchronize(dev)
                took = torch.tensor([time.perf_counter() - t0], device=dev)
                dist.all_reduce(took, op=dist.ReduceOp.MAX)
                rates.append(size / float(took) / 1e9 * factor)
            out.setdefault(op, {})[f"{size >> 20}MiB"] = [round(r, 2) for r in rates]
            del whole, part
    return out


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


DIST_STAGES = ("init", "all_reduce", "all_gather", "reduce_scatter", "barrier_destroy")


def _stage_name(backend: str, stage: str) -> str:
    return f"distributed.{backend}_init" if stage == "init" else f"distributed.{stage}"


def _busbw_extra(stage: str, got: dict[str, Any]) -> dict[str, Any]:
    """The bus bandwidth metrics of a collective's record (measured by rank 0), or why there are none."""
    extra: dict[str, Any] = {}
    if (got.get("busbw") or {}).get(stage):
        extra["metrics"] = [metric(f"{stage}.busbw.{size}", "GB/s", reps) for size, reps in got["busbw"][stage].items()]
    if stage == "all_reduce" and got.get("busbw_error"):
        extra["busbw_error"] = got["busbw_error"]
    return extra


def _stage_record(stage: str, got: list[dict[str, Any]], backend: str, world: int) -> Record:
    """The record of a stage every rank got through, judged by the values the ranks report."""
    name, want = _stage_name(backend, stage), collectives_expected(world)
    if stage == "init":
        return record(name, "pass", value={"world_size": world, "init_s": max(g["init_s"] for g in got)},
                      expected={"world_size": world})
    if stage in ("all_reduce", "all_gather"):
        values = [g[stage] for g in got]
        ok = all(v == want[stage] for v in values)
        extra = _busbw_extra(stage, got[0])
        return record(name, "pass" if ok else "fail", value=values[0], expected=want[stage],
                      reason="" if ok else f"{stage} gave {values}", **extra)
    if stage == "reduce_scatter" and any("reduce_scatter_unsupported" in g for g in got):
        return record(name, "skip", reason=f"{backend} has no reduce_scatter_tensor: "
                                           f"{got[0].get('reduce_scatter_unsupported')}")
    if stage == "reduce_scatter":
        bad = [g["rank"] for g in got if g["reduce_scatter"] != want[f"reduce_scatter.{g['rank']}"]]
        return record(name, "fail" if bad else "pass", value=[g["reduce_scatter"] for g in got],
                      expected=[want[f"reduce_scatter.{r}"] for r in range(world)],
                      reason=f"wrong values on ranks {bad}" if bad else "", **_busbw_extra(stage, got[0]))
    return record(name, "pass", value=world, expected=world)  # barrier and destroy returned on every rank


def collectives_records(got: list[dict[str, Any]], backend: str, world: int) -> list[Record]:
    """A record per stage from the ranks' reports: the stages every rank got through are judged by their values;
    the first stage a rank failed in fails with its error, and the stages after it fail as not reached."""
    failed = sorted((DIST_STAGES.index(g["stage"]), int(g["rank"]), str(g["error"])) for g in got if g.get("error"))
    stop = failed[0][0] if failed else len(DIST_STAGES)
    out = []
    for i, stage in enumerate(DIST_STAGES):
        if i < stop:
            out.append(_stage_record(stage, got, backend, world))
        else:
            out.append(record(_stage_name(backend, stage), "fail", reason=f"rank {failed[0][1]}: {failed[0][2]}"
                              if i == stop else f"not reached: {DIST_STAGES[stop]} failed first"))
    return out


def check_distributed(backend: str, world: int) -> list[Record]:
    start = time.monotonic()
    try:
        got = _spawn(_collectives_worker, world, (backend,), timeout=180, raise_errors=False)
    except RuntimeError as exc:  # a rank never reported (hung or died)
        return [record(_stage_name(backend, stage), "fail", reason=f"not every rank got through: {exc}")
                for stage in DIST_STAGES]
    out = collectives_records(got, backend, world)
    out[0]["duration"] = round(time.monotonic() - start, 3)
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


# The training run the FSDP check judges (per device kind): a model of `blocks` residual MLP blocks of width
# `dim`, each compiled, then sharded; `batch` rows per rank drawn ONCE from a fixed seed and reused every step
# (each rank trains on its own slice; the reference on the whole batch, so only a correct, averaging
# reduce-scatter makes them equal); `steps` steps of SGD with momentum. SGD's update is linear in the
# gradient, so a zeroed or scaled gradient (of any part of the model) moves that parameter by as much less or
# more (Adam divides a scale out: with AdamW a halved gradient left the parameters as they were). Five steps:
# the first compiles and runs the compiled graphs, the later ones run them again from the sharded optimizer
# state (momentum), and the loss falls by far more than FSDP_MIN_LOSS_DROP; more steps would only add bf16
# noise on a GPU (and CPU time: all the steps cost ~0.1 s; compiling costs seconds).
FSDP_RUN = {
    "cpu": {"dim": 64, "blocks": 2, "batch": 16, "steps": 5, "lr": 0.2, "momentum": 0.9},
    "cuda": {"dim": 512, "blocks": 2, "batch": 32, "steps": 5, "lr": 0.5, "momentum": 0.9},
}
FSDP_SEED = 0
FSDP_MIN_LOSS_DROP = 0.2  # the loss after the steps must be at least 20 % below the first one
# The tolerance on the gap between a parameter (and its first gradient) under FSDP and in the unsharded
# reference: ||p_fsdp - p_ref|| / ||p_ref - p_initial|| per tensor, i.e. the error of the UPDATE, not of the
# weights (which hardly move in 5 steps). A zeroed gradient gives ~1.0 (100 %), a halved one ~0.5.
# Both are set by benchmarks/fsdp_noise.py's rule: the geometric mean of the clean runs' worst gap and the
# gradient mutants' smallest worst gap (equal margins on both sides), rounded down to one significant digit.
#   cpu (gloo x2, fp32; results/fsdp_noise_gloo_cpu.json): clean worst gap over 5 seeds 6.5e-7..4.5e-6
#   (the update of a LayerNorm weight; the median tensor 3e-7); mutants (weight-matrix gradients of the
#   sharded model): x0.5 -> 0.47 (parameters) and 0.50 (first gradients), x0 -> 1.0, x2 -> 0.83 / 1.0.
#   sqrt(4.5e-6 * 0.47) = 1.45e-3 -> 1e-3: 220x above the clean maximum, 470x below the halved gradient.
#   cuda (nccl, bf16 params, fp32 reduce): PROVISIONAL until fsdp_noise.py (the suite's own code) has run on
#   a GPU host. The same run on CPU (fsdp_noise.py --backend gloo --run-kind cuda: bf16 mixed precision, CPU
#   kernels; results/fsdp_noise_gloo_cuda.json): clean worst gap 0.67..0.68 % over 3 seeds (0.60..0.62 %
#   against an fp32 reference), mutants 0.5 (x0.5) and 1.0 (x0, x2); sqrt(0.0068 * 0.5) = 0.058 -> 0.05:
#   7x above, 10x below. On an H100 a standalone replica of this run (results/gpu_probes_h100.md) gave the
#   same: clean 0.68..0.70 % over 5 seeds, halved gradients 0.50. Confirm with `python
#   benchmarks/fsdp_noise.py --seeds 5` on a GPU host and set this from its rule.
#   The reference runs under bf16 autocast: like FSDP's MixedPrecisionPolicy it rounds the matmuls' inputs to
#   bf16 and keeps fp32 weights, gradients and reductions, so the gap measures what sharding, the collectives
#   and compile add rather than bf16's own rounding (a property of bf16, not of the image); fsdp_noise.py
#   measures the fp32-reference gap beside it (on CPU and on the H100 it was no larger: 0.62 %).
FSDP_TOL = {"cpu": 1e-3, "cuda": 0.05}
CPU_FSDP2_SINCE = (2, 7)  # torch before 2.7 runs FSDP2 on CUDA streams only
# The errors that say so (torch 2.4/2.5 refuse; 2.6's CPU Stream lacks record_event/wait_event); any other
# error of the CPU FSDP check fails it, whatever the torch version.
FSDP2_CPU_INCOMPATIBLE = ("FSDP requires CUDA for streams", "'Stream' object has no attribute '")


def _fsdp_data(cfg: dict[str, Any], world: int, seed: int, device: Any) -> tuple[Any, Any]:
    """The fixed global batch: inputs and a teacher's targets (a fixed random tanh layer) the model can fit."""
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    dim = cfg["dim"]
    x = torch.randn(world * cfg["batch"], dim, generator=gen)
    teacher = torch.randn(dim, dim, generator=gen) / dim**0.5
    return x.to(device), torch.tanh(torch.mm(x, teacher)).to(device)


def _train_step(net: Any, x: Any, y: Any, autocast: bool) -> Any:
    """Forward and backward on (x, y); the loss (mean squared error over the rows given), detached."""
    import torch

    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
        loss = torch.nn.functional.mse_loss(net(x).float(), y)
    loss.backward()
    return loss.detach()


def _full(t: Any) -> Any:
    """The whole tensor of a DTensor shard (a collective: every rank calls it), as float32."""
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().float()


def _norms(sharded: list[Any], ref: list[Any], base: list[Any] | None) -> list[tuple[float, float]]:
    """Per tensor (||full(s) - r||, ||r - base||), base None: (||full(s) - r||, ||r||)."""
    out = []
    for i, (s, r) in enumerate(zip(sharded, ref)):
        r = r.detach().float()
        full = _full(s).to(r.device)
        scale = r if base is None else r - base[i]
        out.append((float((full - r).norm()), float(scale.norm())))
    return out


def _compile_counters() -> dict[str, Any]:
    """What torch.compile did in this process: frames it converted (of those it tried), graphs it captured,
    graphs AOTAutograd compiled, graphs Inductor compiled or loaded from its cache (its FX graph cache's misses
    and hits: none when another backend ran the graphs), the backends Dynamo was given (by name), graph breaks
    and their reasons, recompilations."""
    from torch._dynamo.utils import counters

    breaks = counters["graph_break"]
    inductor = counters["inductor"]
    return {"frames": int(counters["frames"]["ok"]), "frames_tried": int(counters["frames"]["total"]),
            "graphs": int(counters["stats"]["unique_graphs"]), "aot_graphs": int(counters["aot_autograd"]["ok"]),
            "inductor_graphs": int(inductor["fxgraph_cache_miss"] + inductor["fxgraph_cache_hit"]),
            "inductor_cache_hits": int(inductor["fxgraph_cache_hit"]),
            "backends": _backend_names(),
            "graph_breaks": int(sum(breaks.values())), "break_reasons": [str(k)[:200] for k in list(breaks)[:5]],
            "recompiles": int(sum(counters["recompiles"].values()))}


def _backend_names() -> list[str]:
    """The names of the backends torch.compile was given in this process (`inductor`, `aot_eager`, ...), as
    Dynamo keeps them; empty where this torch keeps none."""
    try:
        from torch._dynamo import eval_frame

        found = getattr(eval_frame, "cached_backends", {}) or {}
        return sorted({str(getattr(b, "compiler_name", None) or getattr(b, "__name__", None) or type(b).__name__)
                       for b in found.values() if b is not None})
    except Exception:  # noqa: BLE001 - a name for the message only
        return []


INDUCTOR_CALL = "## Call CompiledFxGraph"  # the profiler's event around every call of a graph Inductor compiled


def _inductor_calls(step: Callable[[], Any]) -> int:
    """How many times a graph compiled by Inductor ran during `step`, counted by the profiler (the event Inductor
    records around each call of its compiled graph); -1 where the profiler could not run."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        return sum(1 for e in prof.events() if str(e.name).startswith(INDUCTOR_CALL))
    except Exception:  # noqa: BLE001 - said in the record: the counters still speak
        return -1


def _sharded_pair(cfg: dict[str, Any], mixed: bool, device: Any, mesh: Any, seed: int) -> tuple[Any, Any]:
    """The model, each block compiled and then sharded (bf16 params and fp32 reduce if `mixed`), and its
    unsharded, eager, fp32 twin with the same initial weights."""
    import copy

    import torch

    fully_shard, MixedPrecisionPolicy = _fully_shard()
    torch.manual_seed(seed)
    model = _model(cfg["dim"], cfg["blocks"]).to(device)
    reference = copy.deepcopy(model)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed else None
    kwargs = {"mesh": mesh, **({"mp_policy": mp} if mp is not None else {})}
    for block in model.blocks:
        block.compile()
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model, reference


def _train_side_by_side(model: Any, reference: Any, cfg: dict[str, Any], data: tuple[Any, Any], rank: int,
                        world: int, ref_bf16: bool) -> dict[str, Any]:
    """cfg["steps"] SGD steps of both on the fixed data (the sharded model on this rank's slice, the reference on
    the whole batch): both losses per step, and the first step's gradient norms."""
    import torch
    import torch.distributed as dist

    x, y = data
    mine = slice(rank * cfg["batch"], (rank + 1) * cfg["batch"])
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
    ref_opt = torch.optim.SGD(reference.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
    out: dict[str, Any] = {"losses": [], "ref_losses": []}
    for iteration in range(cfg["steps"]):
        t0 = time.perf_counter()
        loss = _train_step(model, x[mine], y[mine], autocast=False)  # FSDP's MixedPrecisionPolicy casts itself
        if iteration == 0:  # compiling the forward and backward graphs, and running them once
            _sync(x.device)
            out["first_step_s"] = round(time.perf_counter() - t0, 4)
        out["ref_losses"].append(float(_train_step(reference, x, y, autocast=ref_bf16)))
        dist.all_reduce(loss)  # the mean over the ranks' equal slices: the loss on the whole batch
        out["losses"].append(float(loss) / world)
        if iteration == 0:
            out["grad_norms"] = _norms([p.grad for p in model.parameters()],
                                       [p.grad for p in reference.parameters()], None)
        for optim in (opt, ref_opt):
            optim.step()
            optim.zero_grad()
    return out


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


# The speed of the compiled FSDP model, after the check above: warm-up steps, then timed steps of it alone (the
# reference does not run), each a forward, backward and optimizer step on this rank's slice, timed on the wall
# clock up to the device's synchronisation (the host's time between kernels counts: it is the step's).
FSDP_PERF = {"cpu": (2, 10), "cuda": (5, 30)}  # warm-up steps, timed steps


def _timed_steps(model: Any, cfg: dict[str, Any], data: tuple[Any, Any], rank: int, kind: str) -> dict[str, Any]:
    """Seconds per step of the compiled, sharded model (after its warm-up steps), and how many times a graph
    Inductor compiled ran in one profiled step."""
    import torch

    x, y = data
    mine = slice(rank * cfg["batch"], (rank + 1) * cfg["batch"])
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"] * 0.01)  # (small: the weights hardly move)

    def step() -> None:
        _train_step(model, x[mine], y[mine], autocast=False)
        opt.step()
        opt.zero_grad()

    warmup, reps = FSDP_PERF[kind]
    for _ in range(warmup):
        step()
    _sync(x.device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        _sync(x.device)
        times.append(round(time.perf_counter() - t0, 6))
    calls = _inductor_calls(step)
    return {"step_times_s": times, "warmup_steps": warmup, "inductor_calls": calls}


def _fsdp_worker(rank: int, world: int, port: int, results: Any, backend: str, seed: int = FSDP_SEED,
                 reference_autocast: bool | None = None, run_kind: str | None = None) -> None:
    """One rank of the FSDP check: the compiled, sharded model and (on every rank, for the same numbers) the
    unsharded reference train side by side; reports losses, the gaps' norms and torch.compile's counters.
    For benchmarks/fsdp_noise.py: `reference_autocast` runs the reference under bf16 autocast or not (default:
    with the GPU run); `run_kind` "cuda" runs the GPU run (FSDP_RUN["cuda"], bf16 mixed precision) on any
    backend (default: the backend's own)."""
    import torch

    out: dict[str, Any] = {"rank": rank}
    try:
        dist = _init(rank, world, port, backend)
        from torch.distributed.device_mesh import init_device_mesh

        kind = run_kind or ("cuda" if backend == "nccl" else "cpu")
        ref_bf16 = kind == "cuda" if reference_autocast is None else reference_autocast
        cfg = FSDP_RUN[kind]
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        model, reference = _sharded_pair(cfg, kind == "cuda", device, init_device_mesh(device.type, (world,)), seed)
        initial = [p.detach().clone() for p in reference.parameters()]
        data = _fsdp_data(cfg, world, seed, device)
        t0 = time.monotonic()
        out.update(_train_side_by_side(model, reference, cfg, data, rank, world, ref_bf16))
        out["step_s"] = round(time.monotonic() - t0, 3)
        out["param_norms"] = _norms(list(model.parameters()), list(reference.parameters()), initial)
        perf = _timed_steps(model, cfg, data, rank, kind)
        counters = {**_compile_counters(), "inductor_calls": perf.pop("inductor_calls")}
        out.update(names=[name for name, _ in reference.named_parameters()], compile=counters, perf=perf,
                   reference_autocast=ref_bf16, run_kind=kind, seed=seed)
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        out["error"] = _error_line()
    results.put(out)


def relative_gaps(names: list[str], norms: list[list[float]]) -> dict[str, float]:
    """Per tensor: ||fsdp - ref|| / ||ref update|| (0 where both are 0; inf where only the reference is 0)."""
    out = {}
    for name, (diff, scale) in zip(names, norms):
        out[name] = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
    return out


def gap_summary(gaps: dict[str, float], tol: float) -> dict[str, Any]:
    """The worst tensor, the median gap, how many exceed the tolerance, and every tensor's gap (3 digits)."""
    import statistics

    worst = max(gaps, key=lambda k: gaps[k]) if gaps else ""
    return {"worst": float(f"{gaps[worst]:.3g}") if gaps else None, "worst_tensor": worst,
            "median": float(f"{statistics.median(gaps.values()):.3g}") if gaps else None,
            "over_tolerance": sum(g > tol for g in gaps.values()), "tensors": len(gaps),
            "per_tensor": {k: float(f"{v:.3g}") for k, v in gaps.items()}}


def _worst(gaps: dict[str, float], tol: float, what: str) -> str:
    bad = sorted(((g, k) for k, g in gaps.items() if not g <= tol), reverse=True)
    if not bad:
        return ""
    named = ", ".join(f"{k} {g:.1%}" for g, k in bad[:4])
    return (f"{len(bad)} of {len(gaps)} {what} differ from the unsharded reference by more than {tol:.2g} "
            f"(||fsdp - ref|| / ||ref update||): {named}" + (", ..." if len(bad) > 4 else ""))


def fsdp_verdict(losses: list[float], ref_losses: list[float], grad_gaps: dict[str, float],
                 param_gaps: dict[str, float], ref_moves: dict[str, float], tol: float,
                 min_drop: float = FSDP_MIN_LOSS_DROP) -> tuple[str, str]:
    """Training under FSDP is judged by: finite losses that fall by `min_drop` of the first; every tensor the
    reference updates (else the comparison cannot see it); the first step's gradients and the parameters after
    the last step equal to the unsharded reference's within `tol` (relative to the reference's update)."""
    import math

    if not all(math.isfinite(v) for v in [*losses, *ref_losses]):
        return "fail", f"a loss is not finite: {losses} (reference {ref_losses})"
    reasons = []
    still = [k for k, v in ref_moves.items() if not v > 0]
    if still:
        reasons.append(f"the reference did not update {', '.join(still)}: the check cannot judge them")
    for run, values in (("FSDP", losses), ("the reference", ref_losses)):
        drop = (values[0] - values[-1]) / values[0] if values and values[0] > 0 else 0.0
        if not drop >= min_drop:
            reasons.append(f"the loss of {run} fell by {drop:.1%} over {len(values)} steps on fixed data "
                           f"({values[0]:.4g} -> {values[-1]:.4g}; at least {min_drop:.0%} expected)")
    reasons += [_worst(grad_gaps, tol, "first-step gradients"), _worst(param_gaps, tol, "parameter updates")]
    reasons = [r for r in reasons if r]
    return ("fail" if reasons else "pass"), "; ".join(reasons)


def _not_inductor(c: dict[str, Any]) -> str:
    """'' if Inductor compiled the graphs and its compiled code ran; else what ran instead."""
    calls, graphs = int(c.get("inductor_calls", -1)), int(c.get("inductor_graphs", 0))
    if calls > 0 or (calls < 0 and graphs > 0):  # (-1: no profiler here; Inductor's own counters speak)
        return ""
    others = [b for b in c.get("backends") or [] if b != "inductor"]
    backend = f"the backend was {', '.join(others)}" if others else "no Inductor graph ran"
    return (f"AOTAutograd compiled {c['aot_graphs']} graph(s) but Inductor compiled {graphs} and none of its code "
            f"ran in a profiled step: {backend} (a fallback, not Inductor)")


def compile_verdict(per_rank: list[dict[str, Any]]) -> tuple[str, str]:
    """torch.compile really compiled on every rank, through Inductor: at least one frame converted and one graph
    captured and compiled through AOTAutograd; no frame it tried fell back to eager (as it does, silently, with
    TORCHDYNAMO_DISABLE=1, a torch.compile that does nothing, or suppress_errors after a failed compile); and
    Inductor compiled the graphs (or loaded them from its cache) and its compiled code ran, counted by the
    profiler in one step after the warm-up (a backend such as `aot_eager` captures and runs the same graphs
    without generating a kernel: it fails, named)."""
    reasons = []
    for rank, c in enumerate(per_rank):
        if min(c["frames"], c["graphs"], c["aot_graphs"]) < 1:
            reasons.append(f"rank {rank}: torch.compile compiled nothing (frames {c['frames']} of "
                           f"{c['frames_tried']} tried, graphs {c['graphs']}, AOT graphs {c['aot_graphs']}): the "
                           "model ran eagerly")
        elif c["frames"] < c["frames_tried"]:
            reasons.append(f"rank {rank}: {c['frames_tried'] - c['frames']} of {c['frames_tried']} frames "
                           "failed to compile and ran eagerly")
        elif why := _not_inductor(c):
            reasons.append(f"rank {rank}: {why}")
    return ("fail" if reasons else "pass"), "; ".join(reasons)


def fsdp_perf(got: list[dict[str, Any]], batch: int) -> dict[str, Any]:
    """The compiled model's speed from the ranks' timings: each step as long as its slowest rank, the samples
    every step trains (all ranks'), and the first step's time (compiling and running it) on the slowest rank."""
    import statistics

    perfs = [g.get("perf") or {} for g in got]
    per_step = [max(times) for times in zip(*(p.get("step_times_s") or [] for p in perfs))]
    first = max((float(g.get("first_step_s") or 0.0) for g in got), default=0.0)
    out: dict[str, Any] = {"step_times_s": per_step, "samples_per_step": batch * len(got),
                           "warmup_steps": perfs[0].get("warmup_steps") if perfs else None, "first_step_s": first}
    if per_step:
        median = statistics.median(per_step)
        out.update(median_step_s=round(median, 6), samples_per_s=round(batch * len(got) / median, 1),
                   compile_s=round(max(first - median, 0.0), 3))
    return out


def fsdp_known_incompatibility(version: str, backend: str, error: str) -> bool:
    """Is this error of the CPU FSDP check torch's own lack of CPU support (torch < 2.7)? Only then a skip."""
    old = version_tuple(base_version(version) or "0")[:2] < CPU_FSDP2_SINCE
    return backend == "gloo" and old and any(m in error for m in FSDP2_CPU_INCOMPATIBLE)


def fsdp_records(got: list[dict[str, Any]], backend: str, world: int, duration: float) -> list[Record]:
    """The two FSDP records from the ranks' reports: the training step against the reference, and compile."""
    dev = "cuda" if backend == "nccl" else "cpu"
    g = got[0]
    kind = g.get("run_kind") or dev
    cfg, tol = FSDP_RUN[kind], FSDP_TOL[kind]
    grad_gaps = relative_gaps(g["names"], g["grad_norms"])
    param_gaps = relative_gaps(g["names"], g["param_norms"])
    moves = {n: float(scale) for n, (_diff, scale) in zip(g["names"], g["param_norms"])}
    status, reason = fsdp_verdict(g["losses"], g["ref_losses"], grad_gaps, param_gaps, moves, tol)
    losses, ref = g["losses"], g["ref_losses"]
    step = record(f"fsdp.compiled_step_{dev}", status, value=losses, expected=ref, reason=reason,
                  duration=duration, world_size=world, step_s=g["step_s"], tolerance=tol,
                  loss_drop=round((losses[0] - losses[-1]) / losses[0], 4) if losses and losses[0] else None,
                  min_loss_drop=FSDP_MIN_LOSS_DROP,
                  loss_gap=max((abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, ref)), default=None),
                  param_gap=gap_summary(param_gaps, tol), grad_gap=gap_summary(grad_gaps, tol),
                  run={**cfg, "seed": g.get("seed"), "optimizer": "SGD", "data": "one fixed batch, reused every step",
                       "reference": "unsharded, eager, fp32" + (" under bf16 autocast" if g["reference_autocast"]
                                                                else ""),
                       "mixed_precision": "bf16 params, fp32 reduce" if kind == "cuda" else None},
                  perf=(perf := fsdp_perf(got, cfg["batch"])),
                  metrics=[metric("fsdp.samples_per_s", "samples/s",
                                  [perf["samples_per_step"] / t for t in perf["step_times_s"] if t > 0]),
                           metric("fsdp.compile_s", "s", [perf.get("compile_s", 0.0)], better="lower")]
                  if perf.get("step_times_s") else [])
    counts = [r["compile"] for r in got]
    c_status, c_reason = compile_verdict(counts)
    total = {k: sum(int(c.get(k, 0)) for c in counts)
             for k in ("frames", "frames_tried", "graphs", "aot_graphs", "inductor_graphs", "inductor_cache_hits",
                       "inductor_calls", "graph_breaks", "recompiles")}
    compiled = record(f"fsdp.compiled_graphs_{dev}", c_status, value=total, reason=c_reason,
                      expected="every rank: >= 1 frame, graph and AOT graph compiled, by Inductor, whose code ran; "
                               "no frame fell back to eager", per_rank=counts, duration=0.0)
    return [step, compiled]


def check_fsdp(backend: str, world: int, seed: int = FSDP_SEED, reference_autocast: bool | None = None,
               run_kind: str | None = None) -> list[Record]:
    start = time.monotonic()  # torch is imported by the ranks only (here it would cost ~1.5 s before they start)
    dev = "cuda" if backend == "nccl" else "cpu"
    names = (f"fsdp.compiled_step_{dev}", f"fsdp.compiled_graphs_{dev}")
    try:
        got = _spawn(_fsdp_worker, world, (backend, seed, reference_autocast, run_kind), timeout=600)
    except RuntimeError as exc:
        import torch

        if fsdp_known_incompatibility(torch.__version__, backend, str(exc)):
            return [record(n, "skip", duration=time.monotonic() - start,
                           reason=f"FSDP2 does not run on CPU in torch {torch.__version__} ({exc})") for n in names]
        return [record(names[0], "fail", duration=time.monotonic() - start, reason=f"the FSDP run failed: {exc}"),
                record(names[1], "fail", reason="not measured: the FSDP run failed")]
    return fsdp_records(got, backend, world, time.monotonic() - start)


# --------------------------------------------------------------------------------------- throughput

CPU_MATMUL = (1024, 2, 10)  # n, warm-ups, timed repetitions: fp32 n^3 matmuls of 2.1 GFLOP each
# One thread: on a 2-core CI machine a busy neighbour halves a 2-thread matmul (the OpenMP threads wait for the
# one that shares its core: 190 -> 67..111 GFLOP/s measured) but leaves a 1-thread one nearly alone (94 -> 88),
# so the floor can sit far from both a loaded healthy machine and a 10x slower matmul. It measures the BLAS
# per core, which is what a broken or slowed matmul changes.
CPU_MATMUL_THREADS = 1
# The history's CPU matmul (no floor): 256^3 on one thread, best of 100. Its three matrices (768 KiB) stay in the
# core's own cache, so a busy neighbour hardly touches it: on the 2-core CI machine, with a memory-bound and a
# CPU-bound process beside it, the best of 1024^3 fell from ~97 to 44..48 GFLOP/s and this one stayed at 99..103
# (benchmarks/results/perf_noise_cpu.json measures its noise, from which its threshold comes).
CPU_MATMUL_SMALL = (256, 5, 100)
CPU_MATMUL_SMALL_PAUSE = 0.02  # seconds after every 10th repetition: the 100 spread over ~0.25 s, not one burst
# GPU speed is measured as a benchmark, not as a smoke test (issue 47; benchmarks/perf_precision.py measured the
# method on H200s: a minimum detectable regression of 0.4..1.7 % per metric, against 8..22 % timed call by call):
# after warm-up, BENCH_WINDOWS windows of K back-to-back calls between one pair of CUDA events (never a pair per
# call: launch gaps and the events' resolution would count), K sized so that a window is ~BENCH_WINDOW_S of GPU
# time; each window gives a rate, and the host takes their median (smoke/metrics.py). A metric measured so is
# named `bench.*`: a change of method is a new name, so a history never compares two methods.
BENCH_WINDOW_S = 0.02
BENCH_WINDOWS = 15
BENCH_WARMUP = 5
BENCH_CALIBRATION = (1, 2, 4)  # calls in each window that sizes K (`_windowed`)
GPU_MATMUL = 8192  # bf16 n^3 matmuls of 1.1 TFLOP each: the floor (throughput.cuda:N) and a metric
GPU_MATMUL_SMALL = 4096  # the second size (history only, no floor): 0.14 TFLOP, where launch and tiling show
GPU_COPY = 1 << 29  # bf16 elements copied device to device (1 GiB read + 1 GiB written): the memory bandwidth
# The training benchmark (throughput.train): a bf16 stack of `blocks` MLP blocks (width -> 4 width -> width),
# torch.compile'd (as a whole on one GPU; on two or more, each block compiled and then sharded by FSDP2's
# fully_shard over NCCL), AdamW, on a fixed batch of `batch` rows per GPU. Its blocks come from the GPU's memory
# (BENCH_TRAIN_BLOCK_BYTES each: weights, AdamW state and activations; as many as fit in BENCH_TRAIN_MEMORY of the
# device, at most `blocks`): 8 on an 80 GB or larger GPU, a step of ~0.17 s on an H200 that keeps it busy.
BENCH_TRAIN = {"width": 4096, "blocks": 8, "batch": 16384, "warmup": 3}
BENCH_TRAIN_BLOCK_BYTES = 1.7e9
BENCH_TRAIN_MEMORY = 0.4
BENCH_ALL_REDUCE = (1 << 20, 1 << 28)  # bytes all-reduced (bf16): latency-bound 1 MiB, bandwidth-bound 256 MiB
# The fp32 GFLOP/s (best repetition, one thread) a CPU image's matmul must reach: `smoke.cpu_gflops_floor`,
# whose default (matrix.SmokeSettings) is this number. Set by benchmarks/cpu_floor.py (results/cpu_floor.json:
# this check, 10 runs a condition, 3 sessions over an hour, on the 2-core AMD EPYC CI-class machine): healthy
# runs reached 55.6..100 GFLOP/s idle, 57.5..99.6 with the other core busy (62.7..97.3 with both busy); the
# slow_matmul mutant (every matmul 10x slower) 5.0..9.8. The floor is their geometric mean,
# sqrt(55.6 * 9.8) = 23.3, rounded to 25: 2.2x below the slowest healthy run, 2.55x above the fastest slowed
# one. (The old 5 GFLOP/s passed the slowed matmul: 6.7 GFLOP/s on two threads.)
CPU_GFLOPS_FLOOR = 25.0
MATMUL_ERROR_TOL = {"cpu": 1e-4, "cuda": 2e-2}  # fp32 on CPU; bf16 inputs and output (fp32 accumulation) on GPU
DATA_MIN_DISTINCT = 256  # distinct values in a sample of 2^16 inputs: bf16 normal samples have thousands


def data_problem(stats: dict[str, float]) -> str:
    """'' if the matmul's inputs look like standard normal samples, else what is wrong with them: zeros or
    ones make a matmul faster (about 13 % on an H200) and would inflate the number."""
    if not 0.9 <= stats["std"] <= 1.1 or abs(stats["mean"]) > 0.1:
        return f"the inputs are not standard normal (mean {stats['mean']:.3g}, std {stats['std']:.3g})"
    if stats["zero_fraction"] > 0.01 or stats["distinct"] < DATA_MIN_DISTINCT:
        return (f"the inputs are not random: {stats['zero_fraction']:.1%} zeros, {stats['distinct']:.0f} distinct "
                "values in a sample of 65536")
    return ""


def product_problem(error: float, device: str) -> str:
    tol = MATMUL_ERROR_TOL[device]
    return "" if error <= tol else f"the product is wrong: relative error {error:.3g} against float64 (> {tol:g})"


def rep_summary(times: list[float], flop: float, unit: float) -> dict[str, Any]:
    """Every timed repetition (seconds, and the rate it gives in the record's unit) and their spread."""
    import statistics

    return {"times_s": [round(t, 6) for t in times], "rate_per_rep": [round(flop / t / unit, 1) for t in times],
            "median_s": round(statistics.median(times), 6), "min_s": round(min(times), 6),
            "max_s": round(max(times), 6), "reps": len(times)}


def cpu_throughput_verdict(times: list[float], n: int, floor: float, problems: list[str]) -> Record:
    """fp32 GFLOP/s of the BEST repetition against the floor: a shared CI machine's neighbours only ever slow
    a repetition down, while an image whose matmul is slow is slow in every one (the median and every
    repetition are in the record). Inputs that are not random, or a wrong product, fail too (a fast wrong
    matmul is no throughput)."""
    import statistics

    best = 2 * n**3 / min(times) / 1e9
    reasons = [p for p in problems if p]
    if best < floor:
        reasons.append(f"fp32 matmul reached {best:.1f} GFLOP/s at best in {len(times)} repetitions, below the "
                       f"floor {floor:g}")
    return record("throughput.cpu", "fail" if reasons else "pass", value=round(best, 1),
                  expected=f">= {floor:g} (best repetition)", reason="; ".join(reasons), unit="GFLOP/s", size=n,
                  median_gflops=round(2 * n**3 / statistics.median(times) / 1e9, 1),
                  metrics=[metric(f"matmul.fp32.{n}", "GFLOP/s", [2 * n**3 / t / 1e9 for t in times], stat="max")],
                  **rep_summary(times, 2 * n**3, 1e9))


def _data_stats(t: Any) -> dict[str, float]:
    import torch

    sample = t.flatten()[: 1 << 16].float()
    return {"mean": round(float(sample.mean()), 4), "std": round(float(sample.std()), 4),
            "zero_fraction": float((sample == 0).float().mean()), "distinct": float(torch.unique(sample).numel())}


def _product_error(a: Any, b: Any, c: Any) -> float:
    """max |c - a@b| / max |a@b| over a 16x16 corner, against float64 (torch.mm: not the timed operator)."""
    import torch

    ref = torch.mm(a[:16].double(), b[:, :16].double())
    return float((c[:16, :16].double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def _matmul_inputs(n: int, **kwargs: Any) -> tuple[Any, Any, list[str]]:
    """Two n x n standard normal matrices (never zeros or ones: they run faster) and what is wrong with them."""
    import torch

    a, b = torch.randn(n, n, **kwargs), torch.randn(n, n, **kwargs)
    return a, b, [data_problem(_data_stats(a)), data_problem(_data_stats(b))]


def _cpu_matmul_times(n: int, warmup: int, reps: int, pause: float = 0.0) -> tuple[list[float], list[str]]:
    """Seconds per `a @ b` (timed repetitions, after warm-ups, a `pause` after every 10th) on one thread, and
    what is wrong with the inputs or the product."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(CPU_MATMUL_THREADS)
    try:
        a, b, problems = _matmul_inputs(n)
        for _ in range(warmup):
            a @ b
        times = []
        for i in range(reps):
            t0 = time.perf_counter()
            c = a @ b
            times.append(time.perf_counter() - t0)
            if pause and i % 10 == 9:
                time.sleep(pause)
    finally:
        torch.set_num_threads(threads)
    return times, [*problems, product_problem(_product_error(a, b, c), "cpu")]


def check_cpu_throughput(expect: dict[str, Any]) -> Record:
    times, problems = _cpu_matmul_times(*CPU_MATMUL)
    floor = float(expect.get("cpu_gflops_floor") or CPU_GFLOPS_FLOOR)
    rec = cpu_throughput_verdict(times, CPU_MATMUL[0], floor, problems)
    n = CPU_MATMUL_SMALL[0]
    small, small_problems = _cpu_matmul_times(*CPU_MATMUL_SMALL, pause=CPU_MATMUL_SMALL_PAUSE)
    if any(small_problems):
        rec.update(status="fail", reason="; ".join(p for p in [rec["reason"], *small_problems] if p))
    rec["threads"] = CPU_MATMUL_THREADS
    rec["metrics"].append(metric(f"matmul.fp32.{n}", "GFLOP/s", [2 * n**3 / t / 1e9 for t in small], stat="max"))
    return rec


def window_calls(per_call_s: float, window_s: float = BENCH_WINDOW_S) -> int:
    """How many back-to-back calls make a window of about `window_s` of GPU time (at least one)."""
    return max(1, int(window_s / max(per_call_s, 1e-7)))


def _windowed(fn: Callable[[], Any], work: float, *, warmup: int = BENCH_WARMUP, windows: int = BENCH_WINDOWS,
              agree: Callable[[Any], Any] | None = None) -> tuple[list[float], int]:
    """The rate (`work` per call, per second) of each of `windows` windows of K back-to-back calls of `fn`
    between one pair of CUDA events, after `warmup` calls, and K. K comes from the GPU's clock too: the fastest
    call of BENCH_CALIBRATION windows of one, two and four calls (host-timed calls once sized a run's windows at 3
    calls where every other run had 20, and that run alone read 3.8 % slow: the host's hiccup, not the GPU's).
    `agree` (distributed runs): every rank's K and window times made the same (a max over the ranks), so that
    collectives pair up and a window is as long as its slowest rank's."""
    import torch

    def timed(calls: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        took = start.elapsed_time(end) / 1000
        return float(agree(took)) if agree is not None else took

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    k = window_calls(min(timed(calls) / calls for calls in BENCH_CALIBRATION))
    if agree is not None:
        k = int(agree(float(k)))
    return [work * k / timed(k) for _ in range(windows)], k


def _gpu_history_metrics(index: int) -> list[Record]:
    """The bf16 matmul at the second size and the device memory bandwidth of one GPU (no floor: the history's)."""
    import torch

    n = GPU_MATMUL_SMALL
    with torch.cuda.device(index):
        a, b, _ = _matmul_inputs(n, device="cuda", dtype=torch.bfloat16)
        small, _k = _windowed(functools.partial(torch.matmul, a, b), 2 * n**3 / 1e12)
        del a, b
        src = torch.randn(GPU_COPY, device="cuda", dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        copy, _k = _windowed(functools.partial(dst.copy_, src), 2 * src.numel() * src.element_size() / 1e9)
        del src, dst
        torch.cuda.empty_cache()
    return [metric(f"bench.matmul.bf16.{n}", "TFLOP/s", small), metric("bench.memory.copy", "GB/s", copy)]


def check_gpu_throughput(expect: dict[str, Any], index: int) -> Record:
    """bf16 TFLOP/s of `a @ b` on one GPU: the median of windows of back-to-back calls timed by CUDA events
    (`_windowed`). The start event is enqueued before the Python calls, on an idle stream, so it fires at once;
    anything a call does on the host before launching its kernel (a wrapper, a sleep, a slow dispatch) leaves the
    stream idle and is counted in the window."""
    import statistics

    import torch

    n = GPU_MATMUL
    fraction = float(expect.get("throughput_floor") or 0.6)
    with torch.cuda.device(index):
        a, b, problems = _matmul_inputs(n, device="cuda", dtype=torch.bfloat16)
        rates, k = _windowed(functools.partial(torch.matmul, a, b), 2 * n**3 / 1e12)
        c = a @ b
        problems.append(product_problem(_product_error(a, b, c), "cuda"))
        tflops = statistics.median(rates)
        rec = throughput_verdict(torch.cuda.get_device_name(index), tflops, fraction, expect.get("gpu_floors"))
        del a, b, c
    bad = [p for p in problems if p]
    if bad:
        rec.update(status="fail", reason="; ".join([*bad, rec["reason"]]).strip("; "))
    rec.update(name=f"throughput.cuda:{index}", unit="TFLOP/s", size=n, calls_per_window=k,
               **rep_summary([2 * n**3 / 1e12 / r for r in rates], 2 * n**3, 1e12),
               metrics=[metric(f"bench.matmul.bf16.{n}", "TFLOP/s", rates), *_gpu_history_metrics(index)])
    return rec


def train_blocks(total_bytes: float, most: int = int(BENCH_TRAIN["blocks"])) -> int:
    """The training benchmark's depth on a GPU of `total_bytes`: as many blocks as fit in BENCH_TRAIN_MEMORY of
    it (at least one, at most `most`)."""
    return max(1, min(most, int(total_bytes * BENCH_TRAIN_MEMORY / BENCH_TRAIN_BLOCK_BYTES)))


def _bench_blocks(width: int, count: int) -> list[Any]:
    """The training benchmark's blocks: width -> 4 width (GELU) -> width, `count` instances of one class (as
    torchtitan's blocks: each compiled on its own, Dynamo compiles the class's code once). Its forward is this file's
    code: Dynamo does not start tracing in torch.nn's own modules, so a block compiled on its own
    (`Module.compile`, as FSDP2 wants it) must not be an nn.Sequential."""
    import torch

    class BenchBlock(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(width, 4 * width)
            self.down = torch.nn.Linear(4 * width, width)

        def forward(self, x: Any) -> Any:
            return self.down(torch.nn.functional.gelu(self.up(x)))

    return [BenchBlock() for _ in range(count)]


def _bench_worker(rank: int, world: int, port: int, results: Any) -> None:
    """One rank of the training benchmark: on two or more GPUs, NCCL's all_reduce at a latency-bound and a
    bandwidth-bound size first; then the compiled bf16 stack trained (FSDP2 over the ranks), windowed."""
    import torch

    out: dict[str, Any] = {"rank": rank}
    try:
        torch.cuda.set_device(rank)
        dist = _init(rank, world, port, "nccl") if world > 1 else None

        def agree(value: float) -> float:
            if dist is None:
                return value
            t = torch.tensor([value], device="cuda", dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return float(t.item())

        if dist is not None:
            for size in BENCH_ALL_REDUCE:
                t = torch.ones(size // 2, device="cuda", dtype=torch.bfloat16)
                rates, k = _windowed(functools.partial(dist.all_reduce, t), size * 2 * (world - 1) / world / 1e9,
                                     agree=agree)
                out[f"all_reduce.{size >> 20}MiB"] = rates
                out[f"all_reduce.{size >> 20}MiB.calls_per_window"] = k
                del t
        cfg = dict(BENCH_TRAIN)
        cfg["blocks"] = train_blocks(torch.cuda.get_device_properties(rank).total_memory)
        width, batch = int(cfg["width"]), int(cfg["batch"])
        torch.manual_seed(0)
        with torch.device("cuda"):  # (1.1 billion parameters initialised on the GPU, not on the host's CPU)
            model = torch.nn.Sequential(*_bench_blocks(width, int(cfg["blocks"])))
        model = model.to(dtype=torch.bfloat16)
        if dist is None:
            compiled = torch.compile(model)
        else:  # FSDP2's way, each block compiled and then sharded (a sharded model compiled whole, or blocks of
            # torch.nn's own classes, compiled nothing: seen on 2 H200s)
            fully_shard = _fully_shard()[0]
            for block in model:
                block.compile()
                fully_shard(block)
            fully_shard(model)
            compiled = model
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        x = torch.randn(batch, width, device="cuda", dtype=torch.bfloat16)

        def step() -> None:
            loss = compiled(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        out["compile_s"] = round(time.perf_counter() - t0, 3)
        rates, k = _windowed(step, batch * world, warmup=int(cfg["warmup"]), agree=agree)
        out.update(train=rates, steps_per_window=k, config=cfg, counters=_compile_counters())
        if dist is not None:
            dist.barrier()
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - reported to the parent
        out["error"] = _error_line()
    results.put(out)


def train_record(got: list[dict[str, Any]], world: int) -> Record:
    """throughput.train from the ranks' reports (rank 0 speaks for the windows: every rank's window time is
    already the slowest rank's): the training metric and, on two or more GPUs, the all_reduce bus bandwidths. A
    rank's error fails it (an image that cannot train the stack at speed is broken), and so does a model that
    torch.compile did not compile."""
    import statistics

    errors = [f"rank {g['rank']}: {g['error']}" for g in got if g.get("error")]
    if errors:
        return record("throughput.train", "fail", reason="; ".join(errors)[:600])
    first = got[0]
    counters = first.get("counters") or {}
    if min(int(counters.get("frames") or 0), int(counters.get("graphs") or 0)) < 1:
        return record("throughput.train", "fail", reason="torch.compile compiled nothing: the stack ran eagerly",
                      value=counters)
    measured = [size >> 20 for size in BENCH_ALL_REDUCE if f"all_reduce.{size >> 20}MiB" in first]  # (MiB)
    metrics = [metric("bench.train.samples_per_s", "samples/s", first["train"])]
    metrics += [metric(f"bench.all_reduce.busbw.{mib}MiB", "GB/s", first[f"all_reduce.{mib}MiB"]) for mib in measured]
    return record("throughput.train", "pass", value=round(statistics.median(first["train"]), 1), unit="samples/s",
                  gpus=world, config=first.get("config"), steps_per_window=first.get("steps_per_window"),
                  collective_calls_per_window={f"all_reduce.{mib}MiB": first.get(
                      f"all_reduce.{mib}MiB.calls_per_window") for mib in measured},
                  compile_s=max(float(g.get("compile_s") or 0.0) for g in got), metrics=metrics)


def check_train_benchmark(gpus: int) -> Record:
    start = time.monotonic()
    try:
        got = _spawn(_bench_worker, gpus, (), timeout=240, raise_errors=False)
    except RuntimeError as exc:  # a rank never reported (hung or died)
        return record("throughput.train", "fail", reason=f"not every rank got through: {exc}")
    rec = train_record(got, gpus)
    rec["duration"] = round(time.monotonic() - start, 3)
    return rec


def check_throughput(expect: dict[str, Any], gpus: int) -> list[Record]:
    if gpus == 0:
        return [check_cpu_throughput(expect)]
    return [*(check_gpu_throughput(expect, i) for i in range(gpus)), check_train_benchmark(gpus)]


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


CHILD_RECORD = {"libraries": "versions.library_path"}  # the record a child's crash or timeout is reported as


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
        return [record(CHILD_RECORD.get(kind, kind), "fail", reason=f"timed out after {timeout:.0f} s; killed")], logs
    try:
        with open(path, encoding="utf-8") as f:
            records = json.load(f)
    except (OSError, ValueError):
        tail = " | ".join(logs.strip().splitlines()[-3:])
        records = [record(CHILD_RECORD.get(kind, kind), "fail",
                          reason=f"the check crashed (exit {proc.returncode}): {tail}")]
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return records, logs


def _worker(kind: str, payload: dict[str, Any], out_path: str) -> int:
    expect = payload.get("expect", {})
    try:
        if kind == "versions":
            records = check_versions(expect)
        elif kind == "libraries":
            records = check_libraries(expect)
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
        records = [record(CHILD_RECORD.get(kind, kind), "fail",
                          reason=f"{type(exc).__name__}: {str(exc).strip()[:500]}")]
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
        if not any(r.get("duration") for r in records):  # the child timed none of them: they share its time
            for r in records:
                r["duration"] = round(elapsed / max(1, len(records)), 3)
        checks.extend(records)

    if want("versions"):
        env = dict(os.environ)
        cleaned, dropped = clean_library_path(env.get("LD_LIBRARY_PATH", ""), os.listdir)
        env["LD_LIBRARY_PATH"] = cleaned
        timed("versions", {}, 300, env)  # the versions of the wheels, whatever the image's LD_LIBRARY_PATH says
        timed("libraries", {}, 300)  # and where the libraries come from, in the environment users get
        for rec in checks:
            if rec["name"] == "versions.library_path":
                rec["dropped_for_version_checks"] = dropped
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
            checks.extend(record(name, "skip", reason=NO_GPU)
                          for name in ("fsdp.compiled_step_cuda", "fsdp.compiled_graphs_cuda"))
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


def drop_precompiled_headers(cache_dir: str) -> None:
    """The compile cache the host mounts (runner.compile_cache) keeps what a later run of this image loads (its
    compiled kernels and graphs, ~2 MB on CPU), not Inductor's precompiled headers (~150 MB), which only compiling
    needs and which a run that compiles makes again."""
    if cache_dir:
        import shutil

        shutil.rmtree(os.path.join(cache_dir, "precompiled_headers"), ignore_errors=True)


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
    drop_precompiled_headers(os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""))
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
