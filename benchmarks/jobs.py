"""`build --jobs 1` versus `--jobs 2` on two independent entries (no node in common), on the real engine.

The matrix is a copy of MATRIX (default examples/demo.yaml), written next to it as `.bench-jobs.yaml` (so
its relative paths still resolve) and deleted at the end, with three changes:

- `matrix.flavor: [runtime, devel]`: two entries. The devel flavor adds build tools to the base layer,
  so the two base nodes render differently and share nothing: two independent chains.
- `layers: [base, business]`: a shorter tree (4 nodes in all).
- `tags: ["bench-jobs-{entry}-{layer}"]`: its images do not take over the matrix's own local tags.

Before measuring, `imagebuilder plan` checks the copy has exactly 2 entries whose nodes share no parent.
Each jobs value is then built `build --no-cache --no-push --no-smoke --jobs N --quiet` R times
(interleaved: 1, 2, 1, 2, ...), so every node builds every time. Reported: wall times, their median per
jobs value, the speedup median(jobs 1) / median(jobs N), and the sum of the nodes' build durations
(what a perfectly parallel run would divide).

    python benchmarks/jobs.py [--matrix examples/demo.yaml] [--jobs 1 2] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, matrix_copy, median, run_build, save

WORK = ROOT / "reports" / "bench-jobs"
FLAGS = ("--no-cache", "--no-push", "--no-smoke")


def two_chains(doc: dict[str, Any]) -> None:
    doc["matrix"]["flavor"] = ["runtime", "devel"]
    doc["layers"] = ["base", "business"]
    doc["tags"] = ["bench-jobs-{entry}-{layer}"]


def check_plan(matrix: Path) -> list[dict[str, Any]]:
    """The copy must plan to 2 entries of base -> business with no node shared between them."""
    cmd = [sys.executable, "-m", "imagebuilder", "plan", "--matrix", str(matrix), "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the two-entry matrix does not validate: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n"
                 f"{proc.stderr[-3000:]}")
    nodes: list[dict[str, Any]] = json.loads(proc.stdout)
    entries = {n["entry"]["id"] for n in nodes}
    roots = [n for n in nodes if n["parent"] is None]
    if len(entries) != 2 or len(roots) != 2 or len(nodes) != 4:
        sys.exit(f"expected 2 independent entries of 2 nodes each, got entries {sorted(entries)} and nodes "
                 f"{[n['id'] for n in nodes]}")
    return nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--matrix", default="examples/demo.yaml")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="Jobs values to compare (default 1 2).")
    parser.add_argument("--runs", type=int, default=2, help="Builds per jobs value (default 2).")
    parser.add_argument("--name", default="jobs")
    args = parser.parse_args()
    matrix = Path(args.matrix) if Path(args.matrix).is_absolute() else ROOT / args.matrix

    helptext = subprocess.run([sys.executable, "-m", "imagebuilder", "build", "--help"], cwd=ROOT,
                              capture_output=True, text=True).stdout
    if "--jobs" not in helptext:
        sys.exit("`imagebuilder build` has no --jobs option yet")

    runs: dict[int, list[dict[str, Any]]] = {j: [] for j in args.jobs}
    with matrix_copy(matrix, "bench-jobs", two_chains) as copy:
        nodes = check_plan(copy)
        print(f"nodes: {', '.join(n['id'] for n in nodes)}")
        for i in range(args.runs):
            for j in args.jobs:
                run = run_build(copy, WORK / f"jobs{j}-{i}", *FLAGS, "--jobs", str(j))
                run["build_sum_s"] = round(sum(n["durations"].get("build", 0.0) for n in run["nodes"]), 3)
                runs[j].append(run)
                print(f"--jobs {j}: {run['wall_s']:.1f} s (sum of node builds {run['build_sum_s']:.1f} s), "
                      f"built {run['builds'].get('built', 0)}")

    medians = {j: median([r["wall_s"] for r in rs]) for j, rs in runs.items()}
    base = args.jobs[0]
    speedup = {str(j): round(medians[base] / medians[j], 3) for j in args.jobs if medians[j] > 0}
    for j in args.jobs:
        print(f"--jobs {j}: median {medians[j]:.1f} s, speedup over --jobs {base}: {speedup.get(str(j))}")
    payload = {
        "matrix": args.matrix, "flags": [*FLAGS], "runs": args.runs,
        "entries": sorted({n["entry"]["id"] for n in nodes}), "nodes": [n["id"] for n in nodes],
        "jobs": {str(j): rs for j, rs in runs.items()},
        "median_s": {str(j): m for j, m in medians.items()}, "speedup_over": base, "speedup": speedup,
    }
    out = save(args.name, payload, f"python benchmarks/jobs.py --matrix {args.matrix} "
               f"--jobs {' '.join(map(str, args.jobs))} --runs {args.runs} --name {args.name}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
