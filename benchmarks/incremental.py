"""Incremental builds on the real engine and registry: cold, no-op, and one layer template changed.

Every step is `python -m imagebuilder build --matrix MATRIX --report DIR --quiet [--no-cache]`, run
from the repo root and timed from outside (wall time of the whole command); each node's `build`
status ("built", "cached", "failed", "blocked") is read from DIR/report.json.

a. cold: `--no-cache` (ignores both the engine's cache and the content-addressed key cache), so every
   node builds.
b. no-op: the same build again without flags, R times: wall time and how many nodes were built
   (expected: 0) and cached. Target: the median no-op wall time is at most 3% of the cold one.
c. one template changed: the layer folder of `--layer` (default `task`) is copied into
   reports/bench-incremental/layers/ and a line `RUN echo "bench change <unique>" > /etc/imagebuilder-bench`
   is appended to its Dockerfile.j2 (a different line each run, so each run is a real change). A copy of
   the matrix, written next to it as `.bench-incremental.yaml` (so its relative paths still resolve) and
   deleted at the end, puts that folder first in `layers_path`. Built R times: wall time and build
   statuses per layer (expected: only that layer's nodes and their descendants built, the rest cached).

Any failed command, or a node whose build failed or was blocked, stops the benchmark with exit status 1
and the tail of the output. Note that step c tags (and, unless `--no-push` is in `--flags`, pushes) the
changed images under the matrix's own tags; a normal build of the matrix afterwards puts its own
images back.

    python benchmarks/incremental.py [--matrix examples/demo.yaml] [--runs 3] [--layer task] [--flags='--no-push']
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, matrix_copy, median, run_build, save

WORK = ROOT / "reports" / "bench-incremental"
TARGET_RATIO = 0.03


def layer_folder(matrix: Path, layer: str) -> Path:
    """Where imagebuilder finds LAYER for this matrix: its `layers_path` folders first, then layers/."""
    from imagebuilder.input import source

    doc = source.load(matrix).value
    extra = doc.get("layers_path") or []
    for folder in [*(matrix.parent / p for p in extra), ROOT / "layers"]:
        if (folder / layer / "Dockerfile.j2").is_file():
            return folder / layer
    sys.exit(f"layer {layer!r} not found in {matrix}'s layers_path nor in {ROOT / 'layers'}")


def affected(matrix: Path, layer: str) -> set[str]:
    """Layer folders that a change to LAYER rebuilds: LAYER and every layer below it in the top-level tree."""
    from imagebuilder.input import source

    specs: list[tuple[str, str, str | None]] = []  # (name, folder, parent name)
    previous = None
    for item in source.load(matrix).value.get("layers") or []:
        if isinstance(item, str):
            specs.append((item, item, previous))
        else:
            specs.append((item.get("name", item["layer"]), item["layer"], item.get("parent", previous)))
        previous = specs[-1][0]
    hit = {name for name, folder, _ in specs if folder == layer}
    grew = True
    while grew:
        below = {name for name, _, parent in specs if parent in hit}
        grew = not below <= hit
        hit |= below
    return {layer} | {folder for name, folder, _ in specs if name in hit}


def summary(run: dict[str, Any]) -> str:
    layers = ", ".join(f"{layer} {dict(sorted(c.items()))}" for layer, c in run["builds_by_layer"].items())
    return f"{run['wall_s']:.2f} s  built {run['builds'].get('built', 0)}, cached {run['builds'].get('cached', 0)}" \
        f"  [{layers}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--matrix", default="examples/demo.yaml")
    parser.add_argument("--runs", type=int, default=3, help="No-op runs, and template-change runs (default 3).")
    parser.add_argument("--layer", default="task", help="The layer whose template is changed (default task).")
    parser.add_argument("--flags", default="", help="Extra flags for every build, e.g. '--no-smoke --no-push'.")
    parser.add_argument("--name", default="incremental")
    args = parser.parse_args()
    matrix = Path(args.matrix) if Path(args.matrix).is_absolute() else ROOT / args.matrix
    flags = shlex.split(args.flags)

    cold = run_build(matrix, WORK / "cold", "--no-cache", *flags)
    print(f"cold:    {summary(cold)}")

    noop = []
    for i in range(args.runs):
        noop.append(run_build(matrix, WORK / f"noop{i}", *flags))
        print(f"no-op:   {summary(noop[-1])}")

    original = layer_folder(matrix, args.layer)
    layers_dir = WORK / "layers"
    shutil.rmtree(layers_dir, ignore_errors=True)
    shutil.copytree(original, layers_dir / args.layer)
    template = layers_dir / args.layer / "Dockerfile.j2"
    text = template.read_text(encoding="utf-8").rstrip("\n") + "\n"

    def first_in_path(doc: dict[str, Any]) -> None:
        doc["layers_path"] = [str(layers_dir), *(doc.get("layers_path") or [])]

    changed = []
    with matrix_copy(matrix, "bench-incremental", first_in_path) as copy:
        for i in range(args.runs):
            mark = f"bench change {time.time_ns()}-{i}"
            template.write_text(f'{text}RUN echo "{mark}" > /etc/imagebuilder-bench\n', encoding="utf-8")
            run = run_build(copy, WORK / f"changed{i}", *flags)
            run["change"] = mark
            changed.append(run)
            print(f"changed: {summary(run)}")

    noop_median = median([r["wall_s"] for r in noop])
    ratio = round(noop_median / cold["wall_s"], 4) if cold["wall_s"] else None
    changed_median = median([r["wall_s"] for r in changed])
    expected = affected(matrix, args.layer)
    unexpected = sorted({n["layer"] for r in changed for n in r["nodes"] if n["build"] == "built"} - expected)
    payload = {
        "matrix": args.matrix, "layer": args.layer, "flags": args.flags, "runs": args.runs,
        "cold": cold, "noop_runs": noop, "changed_runs": changed,
        "cold_s": cold["wall_s"], "noop_median_s": noop_median, "noop_over_cold": ratio,
        "noop_built": [r["builds"].get("built", 0) for r in noop],
        "noop_cached": [r["builds"].get("cached", 0) for r in noop],
        "changed_median_s": changed_median, "changed_over_cold": round(changed_median / cold["wall_s"], 4),
        "changed_built": [r["builds"].get("built", 0) for r in changed],
        "changed_builds_by_layer": [r["builds_by_layer"] for r in changed],
        "target_noop_over_cold": TARGET_RATIO, "target_met": ratio is not None and ratio <= TARGET_RATIO,
        "expected_rebuilt_layers": sorted(expected), "rebuilt_unexpectedly": unexpected,
    }
    print(f"cold {cold['wall_s']:.1f} s, {cold['builds'].get('built', 0)} nodes built")
    print(f"no-op median {noop_median:.2f} s = {ratio} x cold (target <= {TARGET_RATIO}: "
          f"{'met' if payload['target_met'] else 'NOT met'}); built per run {payload['noop_built']}, "
          f"cached {payload['noop_cached']}")
    print(f"{args.layer} changed: median {changed_median:.2f} s = {payload['changed_over_cold']} x cold; "
          f"built per run {payload['changed_built']}")
    if unexpected:
        print(f"WARNING: a template change in {args.layer!r} rebuilt nodes of {', '.join(unexpected)} "
              f"(expected only {', '.join(sorted(expected))})")
    if any(payload["noop_built"]):
        print("WARNING: a no-op build built nodes")
    command = f"python benchmarks/incremental.py --matrix {args.matrix} --runs {args.runs} --layer {args.layer}"
    if args.flags:
        command += f" --flags {shlex.quote(args.flags)}"
    out = save(args.name, payload, command + f" --name {args.name}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
