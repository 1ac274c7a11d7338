"""Planning cost of large matrices: load + expand + resolve + render every node + assign cache keys.

Synthetic matrices of 10, 100 and 1000 entries x 3 layers (base, business, task), written into a
temporary folder. The 100- and 1000-entry matrices cross torch 2.11.0 x {cpu, cu130} x 5 Pythons x
{runtime, devel} with N/20 (fake) base images; the 10-entry one is {cpu, cu130} x 5 Pythons, runtime
only. `base_python` is stubbed, so no engine, registry or network is touched. The measured step,
in-process and after the imports:

    table = compat.CompatTable.load(None)
    m = matrix.load(path, table, base_python=lambda image: None)
    p = plan.make(m, Renderer())
    p = keys.assign(p, {base image: "sha256:0..." for each base image of the plan})

(`keys.assign` is skipped, and `"keys": false` recorded, when `imagebuilder.keys` is not importable.)
Each measurement runs in a fresh interpreter, twice per repetition: once for wall time
(`time.perf_counter`) and the child's peak RSS (`ru_maxrss`, interpreter and imports included), and
once under `tracemalloc` for the peak of what the step itself allocates (tracemalloc slows the step
down, so that run is not timed). The median of R repetitions is reported, with time per entry and the
growth ratios t(100)/t(10) and t(1000)/t(100) (10 each if planning were purely linear; less while the
fixed cost, the compatibility table and template compilation, still dominates), and the marginal cost
per entry between sizes. Target: 1000 entries in at most 1.0 s.

    python benchmarks/plan_render.py [--sizes 10 100 1000] [--repeat 5] [--name plan_render]
    python benchmarks/plan_render.py --one 1000 [--trace]   # one measurement, JSON on stdout
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, median, save

LAYERS = ("base", "business", "task")
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
TARGET_S = 1.0


def matrix_yaml(n: int) -> str:
    """A matrix of exactly `n` entries (n = 10, or a multiple of 20)."""
    lines = [
        "version: 1",
        "base_image: debian:bookworm",
        "registry: 127.0.0.1:5000/bench",
        "repository: pytorch",
        f"layers: [{', '.join(LAYERS)}]",
        "matrix:",
        '  torch: ["2.11.0"]',
        "  accelerator: [cpu, cu130]",
        "  python: [" + ", ".join(f'"{p}"' for p in PYTHONS) + "]",
    ]
    if n == 10:
        lines.append("  flavor: [runtime]")
    elif n % 20 == 0:
        lines.append("  flavor: [runtime, devel]")
        lines.append("  base_image: [" + ", ".join(f"example.com/os{i}:1" for i in range(n // 20)) + "]")
    else:
        raise SystemExit(f"size {n}: use 10 or a multiple of 20")
    return "\n".join(lines) + "\n"


def one(n: int, trace: bool) -> dict[str, Any]:
    """One measurement in this (fresh) interpreter."""
    sys.path.insert(0, str(ROOT))  # the working tree's imagebuilder
    t0 = time.perf_counter()
    from imagebuilder.input import compat
    from imagebuilder.input import matrix as matrix_mod
    from imagebuilder.plan import plan as plan_mod
    from imagebuilder.plan.render import Renderer
    try:
        from imagebuilder.plan import keys
    except ImportError:
        keys = None  # type: ignore[assignment]
    import_s = time.perf_counter() - t0
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        path = Path(tmp) / "matrix.yaml"
        path.write_text(matrix_yaml(n), encoding="utf-8")
        if trace:
            tracemalloc.start()
        start = time.perf_counter()
        table = compat.CompatTable.load(None)
        m = matrix_mod.load(path, table, base_python=lambda image: None)
        p = plan_mod.make(m, Renderer())
        if keys is not None:
            p = keys.assign(p, dict.fromkeys({x.base_image for x in p.nodes if x.base_image}, "sha256:" + "0" * 64))
        wall = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] if trace else None
        if trace:
            tracemalloc.stop()
    entries = len(m.entries)
    assert entries == n, f"expected {n} entries, the matrix has {entries}"
    assert len(p.nodes) == n * len(LAYERS), f"expected {n * len(LAYERS)} nodes, the plan has {len(p.nodes)}"
    if keys is not None:
        assert all(getattr(x, "key", None) for x in p.nodes), "keys.assign left a node without a key"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"entries": entries, "nodes": len(p.nodes), "keys": keys is not None, "wall_s": wall,
            "import_s": round(import_s, 4), "tracemalloc_peak_mib": None if peak is None else peak / 2**20,
            "maxrss_mib": rss / 1024, "maxrss_before_mib": rss_before / 1024}


def child(n: int, trace: bool) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", str(n), *(["--trace"] if trace else [])]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--name", default="plan_render")
    parser.add_argument("--one", type=int, metavar="N", help="Measure N entries once in this process; print JSON.")
    parser.add_argument("--trace", action="store_true", help="With --one: run under tracemalloc (not timed).")
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.trace)))
        return

    rows = []
    for n in args.sizes:
        timed = [child(n, trace=False) for _ in range(args.repeat)]
        traced = [child(n, trace=True) for _ in range(args.repeat)]
        wall = statistics.median(t["wall_s"] for t in timed)
        rows.append({
            "entries": n, "nodes": timed[0]["nodes"], "keys": timed[0]["keys"],
            "wall_s": [round(t["wall_s"], 4) for t in timed], "median_s": round(wall, 4),
            "ms_per_entry": round(1000 * wall / n, 3),
            "tracemalloc_peak_mib": round(statistics.median(t["tracemalloc_peak_mib"] for t in traced), 2),
            "maxrss_mib": round(statistics.median(t["maxrss_mib"] for t in timed), 1),
            "maxrss_before_step_mib": round(statistics.median(t["maxrss_before_mib"] for t in timed), 1),
            "import_s": median([t["import_s"] for t in timed]),
        })

    print(f"{'entries':>7} {'nodes':>5} {'median s':>9} {'ms/entry':>8} {'tracemalloc MiB':>15} "
          f"{'maxrss MiB':>10} {'before step':>11}")
    for r in rows:
        print(f"{r['entries']:>7} {r['nodes']:>5} {r['median_s']:>9.3f} {r['ms_per_entry']:>8.3f} "
              f"{r['tracemalloc_peak_mib']:>15.2f} {r['maxrss_mib']:>10.1f} {r['maxrss_before_step_mib']:>11.1f}")
    by_size = {r["entries"]: r["median_s"] for r in rows}
    growth = {f"t({b})/t({a})": round(by_size[b] / by_size[a], 2)
              for a, b in itertools.pairwise(args.sizes) if by_size[a] > 0}
    # Cost of each entry beyond the smaller size: the slope, without the fixed cost (compat table, templates).
    marginal = {f"{a}->{b}": round(1000 * (by_size[b] - by_size[a]) / (b - a), 3)
                for a, b in itertools.pairwise(args.sizes) if b != a}
    for (label, ratio), (span, ms) in zip(growth.items(), marginal.items(), strict=False):
        print(f"growth {label}: {ratio}  (marginal {ms} ms/entry over {span})")
    payload: dict[str, Any] = {"keys": all(r["keys"] for r in rows), "repeat": args.repeat, "sizes": rows,
                               "growth": growth, "marginal_ms_per_entry": marginal, "target_s": TARGET_S}
    if 1000 in by_size:
        payload["target_met"] = by_size[1000] <= TARGET_S
        verdict = "<= target, met" if payload["target_met"] else "> target, NOT met"
        print(f"1000 entries: {by_size[1000]:.3f} s ({verdict}: {TARGET_S} s)")
    if not payload["keys"]:
        print("imagebuilder.keys is not importable: keys.assign was skipped (\"keys\": false)")
    out = save(args.name, payload, f"python benchmarks/plan_render.py --sizes {' '.join(map(str, args.sizes))} "
               f"--repeat {args.repeat} --name {args.name}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
