"""imagebuilder's smoke suite. Runs INSIDE an image, with the image's own Python.

Standard library and torch only; imports nothing from the host package. Usage:

    python suite.py --expect '{"torch": "2.6.0", "cuda": "12.4", ...}' --report /tmp/report.json

Writes a JSON report (one record per check: name, status pass/fail/skip, reason, value, expected,
duration) and exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

Record = dict[str, Any]


def record(name: str, status: str, *, value: Any = None, expected: Any = None, reason: str = "",
           duration: float = 0.0) -> Record:
    return {"name": name, "status": status, "value": value, "expected": expected, "reason": reason,
            "duration": round(duration, 3)}


def base_version(text: str | None) -> str | None:
    """'2.6.0+cu124' -> '2.6.0'."""
    return None if text is None else text.split("+", 1)[0]


def compare(name: str, value: Any, expected: Any, *, what: str = "") -> Record:
    ok = value == expected
    reason = "" if ok else f"{what or name}: got {value!r}, expected {expected!r}"
    return record(name, "pass" if ok else "fail", value=value, expected=expected, reason=reason)


def check_versions(expect: dict[str, Any]) -> list[Record]:
    out: list[Record] = []
    import importlib.metadata as md

    import torch

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
            got = None if cuda is None else "cu" + cuda.replace(".", "")
            out.append(compare("versions.accelerator", got, acc))
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
    return out


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


def _cudnn_str(v: Any) -> str:
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v)
    v = int(v)
    if v >= 90000:  # cuDNN 9: major*10000 + minor*100 + patch
        return f"{v // 10000}.{(v // 100) % 100}.{v % 100}"
    return f"{v // 1000}.{(v // 100) % 10}.{v % 100}"  # cuDNN 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gloo_worker(rank: int, world: int, port: int, results: Any) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t)
        dist.barrier()
        dist.destroy_process_group()
        results.put((rank, float(t.item()), ""))
    except Exception:  # noqa: BLE001
        results.put((rank, None, traceback.format_exc(limit=3)))


def check_gloo(world: int = 2, timeout: float = 120.0) -> list[Record]:
    start = time.monotonic()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_gloo_worker, args=(r, world, port, results)) for r in range(world)]
    for p in procs:
        p.start()
    got: list[tuple[int, float | None, str]] = []
    deadline = start + timeout
    while len(got) < world and time.monotonic() < deadline:
        try:
            got.append(results.get(timeout=1.0))
        except Exception:  # noqa: BLE001 - queue.Empty
            if not any(p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    expected = float(sum(range(1, world + 1)))
    duration = time.monotonic() - start
    if len(got) < world:
        return [record("distributed.gloo_all_reduce", "fail", expected=expected, duration=duration,
                       reason=f"only {len(got)} of {world} ranks reported within {timeout:.0f} s")]
    errors = [e for _, _, e in got if e]
    values = sorted({v for _, v, _ in got if v is not None})
    if errors:
        return [record("distributed.gloo_all_reduce", "fail", expected=expected, duration=duration,
                       reason=errors[0].strip().splitlines()[-1])]
    ok = values == [expected]
    return [record("distributed.gloo_all_reduce", "pass" if ok else "fail", value=values, expected=expected,
                   duration=duration, reason="" if ok else "all_reduce gave a wrong sum")]


def check_commands(commands: list[dict[str, str]], timeout: float = 300.0) -> list[Record]:
    """Checks that layers contribute (layer.yaml `smoke:`), inherited down the tree: each must exit 0."""
    import subprocess

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


def run(expect: dict[str, Any], commands: list[dict[str, str]] | None = None) -> dict[str, Any]:
    checks: list[Record] = []
    started = time.monotonic()
    steps: list[tuple[str, Callable[[], list[Record]]]] = [
        ("versions", lambda: check_versions(expect)),
        ("distributed", check_gloo),
        ("layers", lambda: check_commands(commands or [])),
    ]
    for name, step in steps:
        t0 = time.monotonic()
        try:
            recs = step()
        except Exception as exc:  # noqa: BLE001 - a crash in a check is that check failing
            recs = [record(name, "fail", reason=f"{type(exc).__name__}: {exc}")]
        elapsed = time.monotonic() - t0
        for rec in recs:
            if not rec["duration"]:
                rec["duration"] = round(elapsed / max(1, len(recs)), 3)
        checks.extend(recs)
    return {
        "suite": "imagebuilder-smoke",
        "version": 1,
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "expect": expect,
        "checks": checks,
        "passed": all(c["status"] != "fail" for c in checks),
        "duration": round(time.monotonic() - started, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="imagebuilder-smoke")
    parser.add_argument("--expect", default="{}", help="JSON object of expected versions")
    parser.add_argument("--commands", default="[]", help="JSON list of {name, run} shell checks from the layers")
    parser.add_argument("--report", default="", help="also write the JSON report here")
    args = parser.parse_args(argv)
    report = run(json.loads(args.expect), json.loads(args.commands))
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
