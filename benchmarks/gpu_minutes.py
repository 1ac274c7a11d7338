"""GPU-runner minutes per entry (issue 17), on a GPU host, side by side in one run for the same entry
(tests/gpu/matrix.yaml's thin layer on the host's own torch):

- build + smoke: what a GPU runner does when it builds the entry itself (`imagebuilder build --no-push
  --no-cache`: the thin layer built cold, then the whole suite);
- verify: what it does when the entry was staged elsewhere: the suite in the staged image (`imagebuilder smoke
  IMAGE`, expectations from its labels) plus pulling the leaf's own layers. The pull is not timed here (this host
  cannot push its 9.7 GB base to a registry); the leaf's own layers and their size are recorded, and the pull of a
  real CUDA entry is measured on the CPU machine (benchmarks/results/gpu_minutes.json, `cpu_side`).

    python3 benchmarks/gpu_minutes.py --out $OUT/gpu_minutes.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str]) -> tuple[int, float, str]:
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"})
    return proc.returncode, time.monotonic() - started, proc.stdout + proc.stderr


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--matrix", default="tests/gpu/matrix.yaml")
    parser.add_argument("--report", type=Path, default=Path("/tmp/ib-gpu-minutes"))
    args = parser.parse_args()
    # the devel flavor's toolchain from the host, as benchmarks/gpu_smoke.py --host-headers --host-cuda does
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import shutil

    from gpu_smoke import copy_host_cuda

    toolchain = ROOT / "tests/gpu/layers/gpu-task/usr"
    for part in ("include", "libexec/gcc"):
        if Path("/usr", part).is_dir():
            shutil.copytree(Path("/usr", part), toolchain / part, dirs_exist_ok=True, symlinks=True)
    copy_host_cuda(toolchain / "local" / "cuda")
    doc: dict[str, object] = {"benchmark": "gpu_minutes", "command": "python3 benchmarks/gpu_minutes.py " +
                              " ".join(sys.argv[1:]), "matrix": args.matrix,
                              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    code, build_s, _ = timed([sys.executable, "-m", "imagebuilder", "--offline", "build", "--matrix", args.matrix,
                                 "--no-push", "--no-cache", "--resmoke", "--report", str(args.report)])
    nodes = json.loads((args.report / "report.json").read_text())["nodes"] if (args.report / "report.json").is_file() \
        else []
    leaf = next((n for n in nodes if n["leaf"]), {})
    doc["build_and_smoke"] = {"exit": code, "wall_s": round(build_s, 1),
                              "build_s": round((leaf.get("durations") or {}).get("build", 0), 1),
                              "smoke_s": round((leaf.get("durations") or {}).get("smoke", 0), 1)}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    if leaf.get("image"):
        code, smoke_s, _ = timed([sys.executable, "-m", "imagebuilder", "smoke", leaf["image"]])
        history = subprocess.run(["docker", "history", "--format", "{{.Size}}", leaf["image"]], capture_output=True,
                                 text=True).stdout.split()
        doc["verify"] = {"exit": code, "smoke_wall_s": round(smoke_s, 1), "leaf_layer_sizes": history[:8],
                         "pull_s": "not timed here (see cpu_side)"}
        doc["gpu_runner_seconds_saved_per_entry"] = round(build_s - smoke_s, 1)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
