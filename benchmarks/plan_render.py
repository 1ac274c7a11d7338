"""Planning cost of large matrices: load + expand + resolve + render every node + assign cache keys.

Synthetic matrices of 10, 100, 1000 (and 10 000) entries, written into a temporary folder, with one of
two layer trees (`--tree`):

- `default`: 3 layers (base, business, task). The 10-entry matrix is torch 2.11.0 x {cpu, cu130} x
  5 Pythons, runtime only; every other size (a multiple of 20) crosses torch 2.11.0 x {cpu, cu130} x
  5 Pythons x {runtime, devel} with N/20 (fake) base images (a `base_image` axis).
- `project`: the project's own tree, as matrix.yaml writes it: os -> {cuda when accelerator cu*} -> torch
  -> {devel when flavor devel} -> business -> task, with jupyter and ssh on task (6 nodes per entry, 7 for
  a CUDA or a devel entry, 8 for a CUDA devel one). The 10-entry matrix is the same as the default tree's;
  a multiple of 100 crosses 5 torch releases that publish cpu and cu130 for the 5 Pythons (2.11.0, 2.12.0,
  2.12.1, 2.13.0, 2.14.0) x {cpu, cu130} x 5 Pythons x {runtime, devel} with N/100 fake base images (1000
  entries: 10 base images, 10 000: 100); any other multiple of 20 uses torch 2.11.0 and N/20 base images.

Every matrix names its Python, so the loader asks nothing of an engine, registry or network. The measured
step, in-process and after the imports:

    table = compat.CompatTable.load(None)
    m = matrix.load(path, table)   # + max_entries=BIG where load has it
    p = plan.make(m, Renderer())
    p = keys.assign(p, {base image: "sha256:0..." for each base image of the plan})

(`keys.assign` is skipped, and `"keys": false` recorded, when `imagebuilder.keys` is not importable.)
Each measurement runs in a fresh interpreter, twice per repetition: once for wall time
(`time.perf_counter`) and the child's peak RSS (`ru_maxrss`, interpreter and imports included; the peak
before the step is recorded too, and the difference is what the step added), and once under
`tracemalloc` for the peak of what the step itself allocates (tracemalloc slows the step down, so that
run is not timed). The median of R repetitions is reported (`--repeat-for SIZE=R` sets R for one size),
with time per entry, memory per entry (tracemalloc peak / entries, and the step's RSS growth / entries),
the growth ratios t(100)/t(10), t(1000)/t(100), ... (10 each if planning were purely linear; less while
the fixed cost, the compatibility table and template compilation, still dominates), the ratios of time
and memory *per entry* between consecutive sizes (1.0: flat, linear planning) and the marginal cost per
entry between sizes. Target (set for the default tree): 1000 entries in at most 1.0 s.

    python benchmarks/plan_render.py [--tree default|project] [--sizes 10 100 1000] [--repeat 5]
                                     [--repeat-for 10000=1] [--name NAME | --out NAME]
    python benchmarks/plan_render.py --one 1000 [--tree project] [--trace | --profile]
        # one measurement, JSON on stdout (--profile: cProfile's top 15 by cumulative time on stderr)

Results go to benchmarks/results/NAME.json (NAME: plan_render for the default tree, plan_scale for the
project tree), with the exact command, the git commit and the files of the working tree that differ from it.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import os
import resource
import shlex
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
# The project's own layer tree, item for item as matrix.yaml (and docs/guide/layers.md, "Layer trees") writes it.
PROJECT_LAYERS = (
    "os",
    '{layer: cuda, when: {accelerator: "cu*"}}',
    "torch",
    "{layer: devel, when: {flavor: devel}}",
    "business",
    "task",
    "{layer: jupyter, parent: task}",
    "{layer: ssh, parent: task}",
)
TREES = {"default": LAYERS, "project": PROJECT_LAYERS}
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
ACCELERATORS = ("cpu", "cu130")
# Releases of the compatibility table that publish cpu and cu130 wheels for all of PYTHONS.
TORCHES = ("2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0")
TARGET_S = 1.0
FLAT = 1.25  # a per-entry ratio between consecutive sizes above this is reported as growing
BIG = 10**9  # max_entries passed to matrix.load where it has that keyword: no cap for the benchmark


def axes(n: int, tree: str = "default") -> dict[str, list[str]]:
    """The matrix axes that give exactly `n` entries."""
    if n == 10:
        return {"torch": ["2.11.0"], "accelerator": list(ACCELERATORS), "python": list(PYTHONS),
                "flavor": ["runtime"]}
    if tree == "project" and n % 100 == 0:
        torches, bases = list(TORCHES), n // 100
    elif n % 20 == 0:
        torches, bases = ["2.11.0"], n // 20
    else:
        raise SystemExit(f"size {n}: use 10 or a multiple of 20" + (" (or 100)" if tree == "project" else ""))
    return {"torch": torches, "accelerator": list(ACCELERATORS), "python": list(PYTHONS),
            "flavor": ["runtime", "devel"], "base_image": [f"example.com/os{i}:1" for i in range(bases)]}


def matrix_yaml(n: int, tree: str = "default") -> str:
    """A matrix of exactly `n` entries (n = 10, or a multiple of 20) with the layer tree `tree`."""
    layers = TREES[tree]
    lines = ["version: 1", "base_image: debian:bookworm", "registry: 127.0.0.1:5000/bench", "repository: pytorch"]
    if tree == "default":
        lines.append(f"layers: [{', '.join(layers)}]")
    else:
        lines += ["layers:", *(f"  - {item}" for item in layers)]
    lines.append("matrix:")
    for axis, values in axes(n, tree).items():
        quote = axis in ("torch", "python")  # versions stay strings
        lines.append(f"  {axis}: [" + ", ".join(f'"{v}"' if quote else v for v in values) + "]")
    return "\n".join(lines) + "\n"


def expected_nodes(n: int, tree: str) -> int:
    """Nodes the plan must have: one per layer and entry, less the `when:` layers an entry does not match."""
    if tree == "default":
        return n * len(LAYERS)
    ax = axes(n, tree)
    combos = itertools.product(ax["accelerator"], ax["flavor"])
    per_group = sum(6 + acc.startswith("cu") + (flavor == "devel") for acc, flavor in combos)
    return n // (len(ax["accelerator"]) * len(ax["flavor"])) * per_group


def one(n: int, trace: bool, tree: str = "default", profile: bool = False) -> dict[str, Any]:
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
    # A loader that caps the number of entries by default is asked not to cap this one.
    load_kwargs: dict[str, Any] = {}
    if "max_entries" in inspect.signature(matrix_mod.load).parameters:
        load_kwargs["max_entries"] = BIG
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    profiler = None
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        path = Path(tmp) / "matrix.yaml"
        path.write_text(matrix_yaml(n, tree), encoding="utf-8")
        if trace:
            tracemalloc.start()
        if profile:
            import cProfile
            profiler = cProfile.Profile()
            profiler.enable()
        start = time.perf_counter()
        table = compat.CompatTable.load(None)
        m = matrix_mod.load(path, table, **load_kwargs)
        p = plan_mod.make(m, Renderer())
        if keys is not None:
            p = keys.assign(p, dict.fromkeys({x.base_image for x in p.nodes if x.base_image}, "sha256:" + "0" * 64))
        wall = time.perf_counter() - start
        if profiler is not None:
            profiler.disable()
        peak = tracemalloc.get_traced_memory()[1] if trace else None
        if trace:
            tracemalloc.stop()
    if profiler is not None:
        import pstats
        print(f"cProfile, {n} entries, tree {tree}: top 15 by cumulative time", file=sys.stderr)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(15)
    entries = len(m.entries)
    assert entries == n, f"expected {n} entries, the matrix has {entries}"
    want = expected_nodes(n, tree)
    assert len(p.nodes) == want, f"expected {want} nodes, the plan has {len(p.nodes)}"
    if keys is not None:
        assert all(getattr(x, "key", None) for x in p.nodes), "keys.assign left a node without a key"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"entries": entries, "nodes": len(p.nodes), "keys": keys is not None, "wall_s": wall,
            "import_s": round(import_s, 4), "tracemalloc_peak_mib": None if peak is None else peak / 2**20,
            "maxrss_mib": rss / 1024, "maxrss_before_mib": rss_before / 1024,
            "max_entries": load_kwargs.get("max_entries"), "profiled": profile}


def child(n: int, trace: bool, tree: str = "default") -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", str(n), "--tree", tree,
           *(["--trace"] if trace else [])]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["child_s"] = time.perf_counter() - start
    print(f"  {n} entries{' (tracemalloc)' if trace else ''}: step {result['wall_s']:.3f} s, "
          f"child {result['child_s']:.1f} s", file=sys.stderr, flush=True)
    return result


def git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else f"(git {' '.join(args)} failed: {proc.stderr.strip()})"


def command_line() -> str:
    """This run's command, as typed from the repository root (the interpreter relative to it where it lies in it)."""
    exe = Path(sys.executable)
    try:
        exe_text = str(exe.relative_to(ROOT))
    except ValueError:
        exe_text = "python"
    script = os.path.relpath(Path(__file__).resolve(), ROOT)
    return shlex.join([exe_text, script, *sys.argv[1:]])


def tree_matches_matrix_yaml() -> bool | None:
    """Whether PROJECT_LAYERS is still the tree of the project's matrix.yaml (None: not readable)."""
    try:
        import yaml
        project = yaml.safe_load((ROOT / "matrix.yaml").read_text(encoding="utf-8"))["layers"]
        ours = yaml.safe_load("[" + ", ".join(PROJECT_LAYERS) + "]")
    except Exception:  # noqa: BLE001 - a record, never a reason to stop
        return None
    return bool(project == ours)


def ratio(b: float, a: float) -> float | None:
    return round(b / a, 3) if a > 0 else None


def parse_repeat_for(items: list[str]) -> dict[int, int]:
    out = {}
    for item in items:
        size, sep, count = item.partition("=")
        if not sep or not size.isdigit() or not count.isdigit() or int(count) < 1:
            raise SystemExit(f"--repeat-for {item!r}: expected SIZE=R, e.g. 10000=1")
        out[int(size)] = int(count)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--repeat-for", action="append", default=[], metavar="SIZE=R",
                        help="Repetitions for one size instead of --repeat (e.g. 10000=1); may be repeated.")
    parser.add_argument("--tree", choices=sorted(TREES), default="default",
                        help="default: base -> business -> task; project: the project's own layer tree.")
    parser.add_argument("--name", "--out", dest="name", default=None,
                        help="Results file benchmarks/results/NAME.json (default: plan_render, or plan_scale "
                             "with --tree project).")
    parser.add_argument("--one", type=int, metavar="N", help="Measure N entries once in this process; print JSON.")
    parser.add_argument("--trace", action="store_true", help="With --one: run under tracemalloc (not timed).")
    parser.add_argument("--profile", action="store_true",
                        help="With --one: run under cProfile; top 15 functions by cumulative time on stderr.")
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.trace, args.tree, args.profile)))
        return
    name = args.name or ("plan_scale" if args.tree == "project" else "plan_render")
    repeat_for = parse_repeat_for(args.repeat_for)
    for n in args.sizes:
        axes(n, args.tree)  # a size this tree cannot make stops here, before any measurement

    rows = []
    for n in args.sizes:
        r = repeat_for.get(n, args.repeat)
        timed = [child(n, False, args.tree) for _ in range(r)]
        traced = [child(n, True, args.tree) for _ in range(r)]
        wall = statistics.median(t["wall_s"] for t in timed)
        peak = statistics.median(t["tracemalloc_peak_mib"] for t in traced)
        rss = statistics.median(t["maxrss_mib"] for t in timed)
        rss_before = statistics.median(t["maxrss_before_mib"] for t in timed)
        ax = axes(n, args.tree)
        rows.append({
            "entries": n, "nodes": timed[0]["nodes"], "keys": timed[0]["keys"], "repeat": r,
            "axes": {k: (len(v) if k == "base_image" else v) for k, v in ax.items()},
            "wall_s": [round(t["wall_s"], 4) for t in timed], "median_s": round(wall, 4),
            "s_per_entry": round(wall / n, 7), "ms_per_entry": round(1000 * wall / n, 3),
            "tracemalloc_peak_mib": round(peak, 2), "tracemalloc_kib_per_entry": round(1024 * peak / n, 2),
            "maxrss_mib": round(rss, 1), "maxrss_before_step_mib": round(rss_before, 1),
            "rss_step_mib": round(rss - rss_before, 1),
            "rss_step_kib_per_entry": round(1024 * (rss - rss_before) / n, 2),
            "import_s": median([t["import_s"] for t in timed]),
            "max_entries_passed": timed[0].get("max_entries"),
            "child_s_max": round(max(t["child_s"] for t in timed + traced), 1),
        })

    print(f"{'entries':>7} {'nodes':>6} {'median s':>9} {'ms/entry':>8} {'maxrss MiB':>10} {'step RSS MiB':>12} "
          f"{'tracemalloc MiB':>15} {'KiB/entry':>9} {'R':>2}")
    for r in rows:
        print(f"{r['entries']:>7} {r['nodes']:>6} {r['median_s']:>9.3f} {r['ms_per_entry']:>8.3f} "
              f"{r['maxrss_mib']:>10.1f} {r['rss_step_mib']:>12.1f} {r['tracemalloc_peak_mib']:>15.2f} "
              f"{r['tracemalloc_kib_per_entry']:>9.2f} {r['repeat']:>2}")
    by_n = {r["entries"]: r for r in rows}
    by_size = {n: r["median_s"] for n, r in by_n.items()}
    pairs = list(itertools.pairwise(args.sizes))
    growth = {f"t({b})/t({a})": round(by_size[b] / by_size[a], 2) for a, b in pairs if by_size[a] > 0}
    # Cost of each entry beyond the smaller size: the slope, without the fixed cost (compat table, templates).
    marginal = {f"{a}->{b}": round(1000 * (by_size[b] - by_size[a]) / (b - a), 3) for a, b in pairs if b != a}
    # Per entry between consecutive sizes: 1.0 is flat (linear); above FLAT it grows faster than the entries.
    scaling: dict[str, dict[str, Any]] = {}
    for a, b in pairs:
        ra, rb = by_n[a], by_n[b]
        s = {"entries": ratio(b, a), "time": ratio(rb["median_s"], ra["median_s"]),
             "time_per_entry": ratio(rb["s_per_entry"], ra["s_per_entry"]),
             "tracemalloc": ratio(rb["tracemalloc_peak_mib"], ra["tracemalloc_peak_mib"]),
             "tracemalloc_per_entry": ratio(rb["tracemalloc_kib_per_entry"], ra["tracemalloc_kib_per_entry"]),
             "rss_step": ratio(rb["rss_step_mib"], ra["rss_step_mib"]),
             "rss_step_per_entry": ratio(rb["rss_step_kib_per_entry"], ra["rss_step_kib_per_entry"])}
        s["time_per_entry_flat"] = s["time_per_entry"] is not None and s["time_per_entry"] <= FLAT
        s["tracemalloc_per_entry_flat"] = (s["tracemalloc_per_entry"] is not None
                                           and s["tracemalloc_per_entry"] <= FLAT)
        scaling[f"{a}->{b}"] = s
    for (span, ms), (label, g), s in zip(marginal.items(), growth.items(), scaling.values(), strict=False):
        print(f"{span}: entries x{s['entries']:g}, time x{g} ({label}), per entry: time x{s['time_per_entry']}, "
              f"tracemalloc x{s['tracemalloc_per_entry']}, step RSS x{s['rss_step_per_entry']}; "
              f"marginal {ms} ms/entry")
    payload: dict[str, Any] = {
        "tree": args.tree, "layers": list(TREES[args.tree]), "git_commit": git("rev-parse", "--short", "HEAD"),
        "working_tree_changes": [line for line in git("status", "--porcelain", "--", "imagebuilder", "layers")
                                 .splitlines() if line.strip()],
        "keys": all(r["keys"] for r in rows), "repeat": args.repeat, "repeat_for": repeat_for, "sizes": rows,
        "growth": growth, "marginal_ms_per_entry": marginal, "scaling": scaling, "flat_threshold": FLAT,
        "target_s": TARGET_S,
    }
    if args.tree == "project":
        payload["tree_matches_matrix_yaml"] = tree_matches_matrix_yaml()
        if payload["tree_matches_matrix_yaml"] is False:
            print("warning: PROJECT_LAYERS is no longer the tree of matrix.yaml")
    if repeat_for:
        payload["repeat_note"] = ", ".join(f"{n} entries: {r} repetition(s) instead of {args.repeat}"
                                           for n, r in repeat_for.items())
    if 1000 in by_size:
        payload["target_met"] = by_size[1000] <= TARGET_S
        verdict = "<= target, met" if payload["target_met"] else "> target, NOT met"
        print(f"1000 entries: {by_size[1000]:.3f} s ({verdict}: {TARGET_S} s, set for the default tree)")
    if not payload["keys"]:
        print("imagebuilder.keys is not importable: keys.assign was skipped (\"keys\": false)")
    out = save(name, payload, command_line())
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
