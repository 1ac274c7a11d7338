"""The interrupt tests, again and again, under load: while another build runs on the same engine (a
`--no-cache` build of the CPU base layer, restarted whenever it ends), run `pytest -m interrupt` N times
in a row and record every outcome in benchmarks/results/interrupts.json.

    python benchmarks/interrupts.py [--runs 20] [--out benchmarks/results/interrupts.json]

Needs what `make integration` needs (engine, registry, base image, wheelhouse). Exit 0 only if every
run passed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYTHON = str(ROOT / ".venv" / "bin" / "python")


def load_matrix(folder: Path) -> Path:
    path = folder / "load.yaml"
    path.write_text(textwrap.dedent(f"""
        version: 1
        base_image: debian:bookworm
        registry: 127.0.0.1:5000/bench
        repository: interrupt-load
        layers: [base]
        torch_extras: []
        build:
          wheelhouse: {ROOT / '.wheelhouse'}
          pip_index_url: {{cpu: "https://pypi.org/simple"}}
        matrix: {{torch: ["2.13.0"], accelerator: [cpu], python: ["3.11"]}}
        """).lstrip(), encoding="utf-8")
    return path


def keep_loading(matrix: Path, stop: threading.Event, builds: list[float]) -> None:
    """Cold builds of the base layer, one after another, until `stop`."""
    while not stop.is_set():
        start = time.monotonic()
        proc = subprocess.Popen([PYTHON, "-m", "imagebuilder", "build", "--matrix", str(matrix), "--no-cache",
                                 "--no-push", "--no-smoke", "--quiet", "--report", str(matrix.parent / "r")],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "IMAGEBUILDER_CACHE_DIR": str(matrix.parent / "cache")})
        while proc.poll() is None:
            if stop.wait(1):
                proc.terminate()
                proc.wait(60)
        builds.append(round(time.monotonic() - start, 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "interrupts.json")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="imagebuilder-interrupt-load-"))
    stop = threading.Event()
    builds: list[float] = []
    loader = threading.Thread(target=keep_loading, args=(load_matrix(folder), stop, builds), daemon=True)
    loader.start()
    runs: list[dict[str, Any]] = []

    def write(done: bool) -> dict[str, Any]:
        """The results so far (after every run, so that a run cut short still leaves its evidence)."""
        result = {
            "command": "python benchmarks/interrupts.py" + (f" --runs {args.runs}" if args.runs != 20 else ""),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                     text=True).stdout.strip(),
            "load": "imagebuilder build --no-cache of the CPU base layer, restarted whenever it ended",
            "load_builds_seconds": list(builds),
            "runs_asked": args.runs,
            "finished": done,
            "runs": runs,
            "all_green": bool(runs) and all(r["exit"] == 0 for r in runs),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        return result

    try:
        for i in range(args.runs):
            start = time.monotonic()
            proc = subprocess.run([PYTHON, "-m", "pytest", "tests", "-m", "interrupt", "-q", "-p", "no:cacheprovider"],
                                  cwd=ROOT, capture_output=True, text=True)
            tail = proc.stdout.strip().splitlines()[-1:] or [""]
            counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|error|errors)", tail[0])}
            runs.append({"run": i + 1, "exit": proc.returncode, "seconds": round(time.monotonic() - start, 1),
                         "summary": tail[0], **counts, "load_build_running": loader.is_alive()})
            print(json.dumps(runs[-1]), flush=True)
            if proc.returncode != 0:
                (folder / f"run{i + 1}.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
            write(done=False)
    finally:
        stop.set()
        loader.join(120)
    result = write(done=True)
    print(f"{sum(r['exit'] == 0 for r in runs)}/{len(runs)} runs green; logs of failures in {folder}")
    return 0 if result["all_green"] else 1


if __name__ == "__main__":
    sys.exit(main())
