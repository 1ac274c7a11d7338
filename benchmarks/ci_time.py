"""Where CI's time goes: runs what `bash .ci/run` runs (`make test`: set-up, lint, every test once), timing
each phase, and writes benchmarks/results/ci_time.json.

    python benchmarks/ci_time.py [--out benchmarks/results/ci_time.json] [--label NAME] [--append]

Phases: `setup` (engine, registry, base image, wheelhouse, venv: `make env`), `lint` (`make lint`), and
the single pytest run, split by the tests' own durations into `unit` (everything not marked
integration), `integration` (integration, not cuda) and `cuda`. Also recorded: the 20 slowest tests, the
number of tests collected, passed, failed and skipped, and the whole wall time. `--append` adds this run
to the file's `runs` (e.g. three runs in a row from fresh clones); without it the file holds this run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def timed(command: list[str], log: Path) -> tuple[float, int]:
    start = time.monotonic()
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        code = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
    return time.monotonic() - start, code


def phase_of(classname: str) -> str:
    if classname.startswith("tests.integration.test_cuda_image"):
        return "cuda"
    if classname.startswith("tests.integration"):
        return "integration"
    return "unit"


def junit_summary(path: Path) -> dict[str, Any]:
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        name = f"{case.get('classname')}::{case.get('name')}"
        cases.append({"test": name, "phase": phase_of(case.get("classname", "")),
                      "seconds": round(float(case.get("time") or 0), 2), "outcome": outcome})
    phases: dict[str, float] = {}
    for case in cases:
        phases[case["phase"]] = round(phases.get(case["phase"], 0.0) + case["seconds"], 1)
    counts = {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failed", "skipped")}
    slowest = sorted(cases, key=lambda c: -c["seconds"])[:20]
    return {"tests": {"collected": len(cases), **counts}, "phases": phases, "slowest": slowest}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "ci_time.json")
    parser.add_argument("--label", default="", help="what this run was, e.g. 'fresh machine, run 1 of 3'")
    parser.add_argument("--append", action="store_true", help="add this run to the file's runs")
    args = parser.parse_args()

    log = ROOT / "reports" / "ci_time.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("", encoding="utf-8")
    junit = ROOT / "reports" / "ci_time.junit.xml"
    start = time.monotonic()
    setup, code = timed(["make", "env"], log)
    lint, lint_code = timed(["make", "lint"], log) if code == 0 else (0.0, code)
    pytest = [str(ROOT / ".venv" / "bin" / "python"), "-m", "pytest", "tests", "-q", f"--junitxml={junit}"]
    tests, test_code = timed(pytest, log) if lint_code == 0 else (0.0, lint_code)
    total = time.monotonic() - start
    summary = junit_summary(junit) if junit.is_file() else {"tests": {}, "phases": {}, "slowest": []}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    run = {
        "label": args.label,
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "ci": bool(os.environ.get("CI"))},
        "ok": code == lint_code == test_code == 0,
        "wall_seconds": round(total, 1),
        "phases_wall_seconds": {"setup": round(setup, 1), "lint": round(lint, 1), "pytest": round(tests, 1)},
        "pytest_phases_seconds": summary["phases"],
        "tests": summary["tests"],
        "slowest": summary["slowest"],
    }
    data: dict[str, Any] = {}
    if args.append and args.out.is_file():
        data = json.loads(args.out.read_text(encoding="utf-8"))
    data["command"] = "python benchmarks/ci_time.py" + (" --append" if args.append else "")
    data.setdefault("runs", []).append(run)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: run[k] for k in ("wall_seconds", "phases_wall_seconds", "pytest_phases_seconds", "tests")},
                     indent=2))
    return 0 if run["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
