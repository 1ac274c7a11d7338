"""The GPU proof, run ON a GPU host (see tests/gpu/matrix.yaml and DEVELOPERS' gpu-host kit):

1. `imagebuilder build` of a thin layer on `gpuhost/pytorch:local`, the full smoke suite in the
   container with raw device passthrough, no push;
2. the same suite directly on the host, outside any container, with the same expectations;
3. one JSON result: devices, driver, versions, both reports, suite times, and the in-container vs
   host throughput ratio.

    python3 benchmarks/gpu_smoke.py --out DIR [--name gpu_smoke_1gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sh(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def copy_host_cuda(dest: Path) -> None:
    """What torch.utils.cpp_extension needs of the host's CUDA toolkit: the compiler driver and its tools,
    NVVM, the headers and the CUDA runtime library (links followed, so the copy stands on its own)."""
    found = shutil.which("nvcc")  # may be a wrapper script in /usr/local/bin: prefer the toolkit's own folder
    homes = [Path("/usr/local/cuda").resolve(), *([Path(found).resolve().parent.parent] if found else [])]
    home = next(h for h in homes if (h / "bin" / "nvcc").is_file() and (h / "nvvm").is_dir())
    tools = ("nvcc", "nvcc.profile", "ptxas", "fatbinary", "nvlink", "cudafe++", "bin2c", "crt")
    for tool in tools:
        src = home / "bin" / tool
        if src.is_dir():
            shutil.copytree(src, dest / "bin" / tool, dirs_exist_ok=True)
        elif src.exists():
            (dest / "bin").mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / "bin" / tool)
    for part in ("nvvm", "include"):
        shutil.copytree(home / part, dest / part, dirs_exist_ok=True)
    lib = next(p for p in (home / "lib64", home / "targets/x86_64-linux/lib") if p.is_dir())
    (dest / "lib64").mkdir(parents=True, exist_ok=True)
    for so in [*lib.glob("libcudart*"), *lib.glob("libcudadevrt*")]:
        shutil.copy2(so, dest / "lib64" / so.name)
    # targets/<arch>/{include,lib}, where nvcc.profile looks, are links: the gpu-task layer makes them.


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--name", default="gpu_smoke")
    parser.add_argument("--matrix", default="tests/gpu/matrix.yaml")
    parser.add_argument("--host-headers", action="store_true",
                        help="copy the host's /usr/include and /usr/libexec/gcc into the gpu-task layer "
                             "(the kit's base image has a gcc without them)")
    parser.add_argument("--host-cuda", action="store_true",
                        help="copy the host's CUDA toolkit (nvcc, NVVM, headers, libcudart) into the gpu-task layer "
                             "as /usr/local/cuda, for the devel flavor's CUDA extension check (the host has no "
                             "network, so NVIDIA's wheels cannot be installed there)")
    parser.add_argument("--no-host", action="store_true", help="skip the suite on the host (the container only)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}", "COLUMNS": "160"}

    from imagebuilder.evidence.spec import expectations
    from imagebuilder.input import matrix as matrix_mod
    from imagebuilder.input.compat import CompatTable

    toolchain = ROOT / "tests/gpu/layers/gpu-task/usr"
    if args.host_headers:
        for part in ("include", "libexec/gcc"):
            if Path("/usr", part).is_dir():
                shutil.copytree(Path("/usr", part), toolchain / part, dirs_exist_ok=True, symlinks=True)

    if args.host_cuda:
        copy_host_cuda(toolchain / "local" / "cuda")

    (entry,) = matrix_mod.load(ROOT / args.matrix, CompatTable.load()).entries
    # The base is the host's own torch install: a companion it carries that the table knows no release of (torch
    # 2.11.0's torchaudio) is expected as the host has it, not absent.
    import importlib.metadata as md

    extra = []
    for pkg in ("torchvision", "torchaudio"):
        try:
            have = md.version(pkg).split("+")[0]
        except md.PackageNotFoundError:
            continue
        if entry.versions().get(pkg) is None:
            extra.append((pkg, have))
    expect = expectations(entry, tuple(extra))

    build_cmd = [sys.executable, "-m", "imagebuilder", "--offline", "build", "--matrix", args.matrix, "--no-push",
                 "--report", str(args.out / "container"), *[f"--expect={k}={v}" for k, v in extra]]
    t0 = time.monotonic()
    build = sh(build_cmd, cwd=ROOT, env=env)
    build_s = time.monotonic() - t0
    (args.out / "build.log").write_text(build.stdout + build.stderr)
    container = json.loads((args.out / "container" / "report.json").read_text())

    host_expect = {k: v for k, v in expect.items() if k != "user"}  # the host runs it as its own user (root)
    host_cmd = [sys.executable, str(ROOT / "imagebuilder/smoke/suite.py"), "--expect", json.dumps(host_expect),
                "--report", str(args.out / "host.json")]
    t0 = time.monotonic()
    host = sh(["true"] if args.no_host else host_cmd, cwd=ROOT)
    host_s = time.monotonic() - t0
    host_report = json.loads((args.out / "host.json").read_text()) if (args.out / "host.json").is_file() else {}

    leaf = next(n for n in container["nodes"] if n["leaf"])
    smoke = leaf["smoke_report"] or {}

    def tput(checks: list[dict[str, Any]]) -> dict[str, float]:
        return {c["name"]: c["value"] for c in checks if c["name"].startswith("throughput.cuda:") and c["value"]}

    inside, outside = tput(smoke.get("checks", [])), tput(host_report.get("checks", []))
    ratio = {k: round(inside[k] / outside[k], 4) for k in inside if outside.get(k)}
    smi = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    result = {
        "benchmark": args.name,
        "command": f"python3 benchmarks/gpu_smoke.py --out $OUT --name {args.name}"
                   + (f" --matrix {args.matrix}" if args.matrix != "tests/gpu/matrix.yaml" else "")
                   + (" --host-headers" if args.host_headers else "") + (" --host-cuda" if args.host_cuda else ""),
        "build_command": " ".join(build_cmd),
        "host_suite_command": "python3 imagebuilder/smoke/suite.py --expect <the entry's expectations> --report ...",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "devices": [line.strip() for line in smi.stdout.strip().splitlines()],
        "expect": expect,
        "build_exit": build.returncode,
        "build_wall_s": round(build_s, 1),
        "container": {"passed": smoke.get("passed"), "gpu_mode": smoke.get("gpu_mode"), "gpus": smoke.get("gpus"),
                      "gpu_verified": smoke.get("gpu_verified"), "suite_s": smoke.get("duration"),
                      "checks": smoke.get("checks")},
        "host": {"exit": host.returncode, "passed": host_report.get("passed"), "suite_s": host_report.get("duration"),
                 "wall_s": round(host_s, 1), "checks": host_report.get("checks")},
        "throughput_tflops": {"container": inside, "host": outside, "container_over_host": ratio},
    }
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("devices", "build_exit", "build_wall_s", "throughput_tflops")}, indent=2))
    print("container passed:", smoke.get("passed"), "suite", smoke.get("duration"), "s")
    for c in smoke.get("checks", []):
        print(f"  {c['status']:5} {c['name']:32} {str(c.get('value'))[:50]:50} {c.get('reason', '')[:150]}")
    print("host passed:", host_report.get("passed"), "suite", host_report.get("duration"), "s")
    for c in host_report.get("checks", []):
        if c["status"] != "pass":
            print(f"  {c['status']:5} {c['name']:32} {c.get('reason', '')[:150]}")
    if build.returncode != 0:
        print(build.stdout[-4000:], build.stderr[-2000:])


if __name__ == "__main__":
    main()
