"""Cold and warm build times of a matrix on the real engine and registry.

Cold: `--no-cache` (every step runs: apt, pip downloads from the index, commits, pushes).
Warm: the same build again with the engine's cache (repeated; the median is reported).
Wall time of the whole `imagebuilder build` (render, build, smoke, tag, push), plus per-stage sums
from its report.

    python benchmarks/build_times.py [--matrix examples/demo.yaml] [--warm-runs 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, median, save


def build(matrix: str, report: Path, cold: bool) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "imagebuilder", "build", "--matrix", matrix, "--report", str(report), "--quiet"]
    if cold:
        cmd.append("--no-cache")
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"build failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    nodes = json.loads((report / "report.json").read_text())["nodes"]
    stages: dict[str, float] = {}
    for n in nodes:
        for k, v in n["durations"].items():
            stages[k] = round(stages.get(k, 0.0) + v, 3)
    return {"wall_s": round(wall, 3), "stages_s": stages, "nodes": len(nodes)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--matrix", default="examples/demo.yaml")
    parser.add_argument("--warm-runs", type=int, default=3)
    parser.add_argument("--name", default="build_times")
    args = parser.parse_args()
    tmp = ROOT / "reports" / "bench"
    cold = build(args.matrix, tmp / "cold", cold=True)
    print(f"cold: {cold['wall_s']:.1f} s  {cold['stages_s']}")
    warm = [build(args.matrix, tmp / f"warm{i}", cold=False) for i in range(args.warm_runs)]
    for w in warm:
        print(f"warm: {w['wall_s']:.1f} s  {w['stages_s']}")
    payload = {"matrix": args.matrix, "cold": cold, "warm_runs": warm,
               "warm_median_s": median([w["wall_s"] for w in warm])}
    print(f"warm median: {payload['warm_median_s']:.1f} s")
    out = save(args.name, payload, f"python benchmarks/build_times.py --matrix {args.matrix} "
               f"--warm-runs {args.warm_runs}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
