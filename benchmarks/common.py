"""Shared helpers for the benchmark scripts: machine facts, medians, result files."""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
# Debian's chromium for the report benchmarks (as tests/conftest.py launches it): headless, no background traffic
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def machine() -> dict[str, Any]:
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    docker = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                            text=True).stdout.strip()
    return {"cpus": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1), "platform": platform.platform(),
            "python": platform.python_version(), "docker": docker}


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def save(name: str, payload: dict[str, Any], command: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}.json"
    doc = {"benchmark": name, "command": command, "machine": machine(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **payload}
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return out


def run_build(matrix: str | Path, report: Path, *flags: str) -> dict[str, Any]:
    """`python -m imagebuilder build --matrix MATRIX --report REPORT --quiet FLAGS...` from the repo root, timed.

    Exits (status 1, with the tail of the output) when the command fails or any node's build failed or was
    blocked. Returns the wall time, the command, and per node its layer, build status and durations, with
    counts of build statuses overall and per layer.
    """
    cmd = [sys.executable, "-m", "imagebuilder", "build", "--matrix", str(matrix), "--report", str(report),
           "--quiet", *flags]
    shutil.rmtree(report, ignore_errors=True)  # never read a previous run's report.json
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    report_file = report / "report.json"
    nodes = json.loads(report_file.read_text())["nodes"] if report_file.is_file() else []
    bad = [n for n in nodes if n.get("build") in ("failed", "blocked")]
    if proc.returncode != 0 or bad or not nodes:
        why = [f"exit status {proc.returncode}"] if proc.returncode != 0 else []
        why += [f"{n['node']}: build {n['build']}: {n.get('error')}" for n in bad]
        why += [] if nodes else [f"no nodes in {report_file}"]
        sys.exit(f"build failed ({'; '.join(why)}): {' '.join(cmd)}\n--- stdout (tail)\n{proc.stdout[-3000:]}\n"
                 f"--- stderr (tail)\n{proc.stderr[-3000:]}")
    by_layer: dict[str, Counter[str]] = {}
    for n in nodes:
        by_layer.setdefault(n["layer"], Counter())[str(n["build"])] += 1
    return {
        "command": " ".join(["python", *cmd[1:]]),
        "wall_s": round(wall, 3),
        "builds": dict(Counter(str(n["build"]) for n in nodes)),
        "builds_by_layer": {layer: dict(c) for layer, c in by_layer.items()},
        "nodes": [{"node": n["node"], "layer": n["layer"], "build": n["build"], "status": n["status"],
                   "durations": n["durations"]} for n in nodes],
    }


@contextlib.contextmanager
def matrix_copy(matrix: Path, name: str, edit: Callable[[dict[str, Any]], None]) -> Iterator[Path]:
    """A changed copy of a matrix file, written next to it (so its relative paths mean the same) as
    `.NAME.yaml`, and deleted when the block ends, however it ends."""
    import yaml

    from imagebuilder.input import source  # keeps "3.10" a string, the way imagebuilder reads the file

    doc = copy.deepcopy(source.load(matrix).value)
    edit(doc)
    out = matrix.parent / f".{name}.yaml"
    out.write_text(f"# Written by benchmarks/ from {matrix.name}; deleted when the benchmark ends.\n"
                   + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    try:
        yield out
    finally:
        out.unlink(missing_ok=True)


def remove_rules(root: Path, mutants: list[tuple[str, str, str, str, str]], width: int = 24) -> None:
    """Each rule removed in turn ((name, file, the rule's text, the text without it, the test that must fail)): the
    file edited, the test run, the file restored; prints CAUGHT or MISSED per rule."""
    for name, path, old, new, test in mutants:
        p = root / path
        text = p.read_text()
        assert old in text, (name, old)
        p.write_text(text.replace(old, new, 1))
        try:
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test], cwd=root,
                               capture_output=True, text=True)
            print(f"{name:{width}} {'CAUGHT' if r.returncode != 0 else 'MISSED'}  ({test.split('::')[-1]})", flush=True)
        finally:
            p.write_text(text)
