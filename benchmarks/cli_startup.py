"""What the front door costs: the wall time of `imagebuilder --help` and `imagebuilder plan --help`, each in a
fresh process (what every CI job and every shell completion pays before any command runs; issue 52).

Runs the installed console script beside this interpreter (`.venv/bin/imagebuilder`, `[project.scripts]`), N times
per command, interleaved (so a busy moment of the machine falls on every command alike), and, as the floor,
the bare interpreter (`python -c pass`, the same interpreter with its site packages). Per command: the median,
the fastest and slowest run and every run, and the modules of interest that the command leaves loaded (read in
one more process, `imagebuilder.cli.main` with the same arguments and its output discarded).
**Target: each `--help` under 0.3 s** (a 2-core machine); `tests/unit/test_cli_startup.py` guards the imports
without timing.

    .venv/bin/python benchmarks/cli_startup.py [--runs 20]

Writes benchmarks/results/cli_startup.json, with the command, the date, the machine and the git commit."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, median, save

COMMANDS = (("--help",), ("plan", "--help"))
TARGET_S = 0.3
HEAVY = ("docker", "paramiko", "requests", "jinja2", "yaml", "cryptography", "rich", "imagebuilder.steps",
         "imagebuilder.run", "imagebuilder.commands")
LOADED = """import contextlib, io, json, sys
from imagebuilder.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps([m for m in json.loads(%r) if any(k == m or k.startswith(m + ".") for k in sys.modules)]))"""


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return took


def loaded(args: tuple[str, ...]) -> list[str]:
    """The modules of `HEAVY` that the command leaves in sys.modules."""
    out = subprocess.run([sys.executable, "-c", LOADED % json.dumps(HEAVY), *args], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return list(json.loads(out))


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="fresh processes per command (at least 10)")
    args = parser.parse_args()
    if args.runs < 10:
        parser.error("--runs: at least 10")
    script = Path(sys.executable).with_name("imagebuilder")
    if not script.is_file():
        sys.exit(f"{script} is not there: install the project into this interpreter's environment (make env)")
    floor: list[float] = []
    runs: dict[tuple[str, ...], list[float]] = {c: [] for c in COMMANDS}
    for _ in range(args.runs):
        floor.append(timed([sys.executable, "-c", "pass"]))
        for command in COMMANDS:
            runs[command].append(timed([str(script), *command]))
    results: list[dict[str, Any]] = []
    for command, times in runs.items():
        ordered, median_s = sorted(times), median(times)
        results.append({"command": " ".join(["imagebuilder", *command]), "median_s": median_s,
                        "min_s": round(ordered[0], 3), "max_s": round(ordered[-1], 3),
                        "under_target": median_s < TARGET_S, "loaded": loaded(command),
                        "runs_s": [round(t, 4) for t in times]})
        print(f"{results[-1]['command']}: median {median_s:.3f} s (min {ordered[0]:.3f}, max {ordered[-1]:.3f}), "
              f"loaded: {', '.join(results[-1]['loaded']) or 'none of ' + ', '.join(HEAVY)}")
    floor_median = median(floor)
    print(f"python -c pass: median {floor_median:.3f} s")
    script_text = Path(__file__).resolve().relative_to(ROOT)
    out = save("cli_startup", {"runs": args.runs, "target_s": TARGET_S, "script": str(script),
                               "commit": git("rev-parse", "HEAD"),
                               "changed": git("status", "--porcelain", "--untracked-files=no").splitlines(),
                               "interpreter_floor": {"median_s": floor_median,
                                                     "runs_s": [round(t, 4) for t in floor]},
                               "commands": results},
               f".venv/bin/python {script_text} --runs {args.runs}")
    print(f"wrote {out}")
    return 0 if all(r["under_target"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
