"""Where CI's time goes: runs `bash .ci/run` (what CI runs: `make test`, i.e. set-up, lint, every test
once), timing each phase, and writes benchmarks/results/ci_time.json.

    python3 benchmarks/ci_time.py [--out benchmarks/results/ci_time.json] [--label TEXT] [--append]

Phases, from the run's own output as it streams: `setup` (CUDA wheels started in the background, venv,
engine, registry, wheelhouse, base image), `lint` (ruff, mypy), `pytest` (the one test run); the pytest
run is split by the tests' own durations (JUnit XML) into `unit` (everything not marked integration),
`integration` (integration, not cuda) and `cuda`. Also recorded: the 20 slowest tests, the number of
tests collected, passed, failed and skipped, and the whole wall time. `--append` adds this run to the
file's `runs` (three runs in a row from fresh clones, say); without it the file holds this run alone.
`--cpu` also samples every process of the machine twice a second (/proc) and records the CPU-seconds the run
spent, by what spent them (`CpuSampler.kind`: each `imagebuilder` subcommand, the suite and the Python of the
images under test, compilers, pip, pytest, the engine, the registry, ...): where a 2-core machine's time goes
when it is CPU-bound. A process that lived under half a second may be missed, so the figures are a lower bound.
Needs nothing but python3: on a fresh machine, .ci/run installs the rest.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_ci(log: Path, junit: Path) -> tuple[int, dict[str, float]]:
    """`bash .ci/run`, its output into `log`; the exit code and the wall time of each phase, split where
    the output shows lint and then pytest starting."""
    env = {**os.environ, "PYTEST_ARGS": f"--junitxml={junit}"}
    marks = {"setup": time.monotonic()}
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(["bash", ".ci/run"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            out.flush()
            if "lint" not in marks and "ruff check" in line:
                marks["lint"] = time.monotonic()
            elif "pytest" not in marks and " -m pytest tests" in line:
                marks["pytest"] = time.monotonic()
        code = proc.wait()
    marks["end"] = time.monotonic()
    order = [k for k in ("setup", "lint", "pytest", "end") if k in marks]
    return code, {a: round(marks[b] - marks[a], 1) for a, b in itertools.pairwise(order)}


class CpuSampler:
    """CPU-seconds by kind of process, from /proc, while the run lasts (what ran before it is not counted)."""

    COMPILERS = frozenset({"cc1plus", "cc1", "g++", "c++", "gcc", "as", "ld", "collect2", "nvcc", "cicc", "ptxas",
                           "cudafe++", "fatbinary", "nvlink"})

    def __init__(self) -> None:
        self.hz = os.sysconf("SC_CLK_TCK")
        self.seen: dict[tuple[int, int], list[Any]] = {}  # (pid, start) -> [kind, ticks counted so far]
        self.ticks: dict[str, int] = {}
        self.stop = threading.Event()
        self.scan(first=True)  # what already runs counts from here
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    @classmethod
    def kind(cls, comm: str, argv: list[str]) -> str:
        line = " ".join(argv)
        module = argv[1:3] == ["-m", "imagebuilder"]
        if module or (argv[:1] and argv[0].endswith("/imagebuilder")):
            rest = argv[3:] if module else argv[1:]
            options_with_values = {"--cache-dir", "--trust-key", "--trust-build-key", "--registry"}
            skip = False
            for arg in rest:
                if skip:
                    skip = False
                elif arg in options_with_values:
                    skip = True
                elif not arg.startswith("-"):
                    return f"imagebuilder {arg}"
            return "imagebuilder"
        if "suite.py" in line or "imagebuilder-smoke" in line:
            return "smoke suite (its own process)"
        if comm in cls.COMPILERS:
            return "compilers (g++ of torch.compile, extensions, nvcc)"
        if comm.startswith("python") and ("/opt/venv" in line or "multiprocessing" in line):
            return "python in the images under test (checks, ranks, builds)"
        if "pytest" in line or "execnet" in line or "xdist" in line:
            return "pytest"
        if comm in ("pip", "pip3") or " -m pip" in line or "/pip " in line:
            return "pip"
        return comm

    def scan(self, first: bool = False) -> None:
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
                fields = stat[stat.rfind(")") + 2:].split()
                ticks, started = int(fields[11]) + int(fields[12]), int(fields[19])
                key = (int(name), started)
                if key not in self.seen:
                    comm = Path(f"/proc/{name}/comm").read_text().strip()
                    argv = [a.decode(errors="replace") for a in Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
                            if a]
                    self.seen[key] = [self.kind(comm, argv), ticks if first else 0]
            except (OSError, ValueError, IndexError):
                continue
            entry = self.seen[key]
            self.ticks[entry[0]] = self.ticks.get(entry[0], 0) + ticks - entry[1]
            entry[1] = ticks

    def loop(self) -> None:
        while not self.stop.wait(0.5):
            self.scan()

    def result(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        ranked = sorted(self.ticks.items(), key=lambda kv: -kv[1])
        return {kind: round(t / self.hz, 1) for kind, t in ranked if t / self.hz >= 1.0}


def phase_of(classname: str) -> str:
    if classname.startswith("tests.integration.test_cuda_image"):
        return "cuda"
    if classname.startswith("tests.integration"):
        return "integration"
    return "unit"


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo says ('' where it does not)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "")


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
    parser.add_argument("--cpu", action="store_true", help="record the CPU-seconds by kind of process (/proc)")
    args = parser.parse_args()

    log = ROOT / "reports" / "ci_time.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    junit = (ROOT / "reports" / "ci_time.junit.xml").resolve()
    junit.unlink(missing_ok=True)
    start = time.monotonic()
    sampler = CpuSampler() if args.cpu else None
    code, phases = run_ci(log, junit)
    total = time.monotonic() - start
    cpu = sampler.result() if sampler else None
    summary = junit_summary(junit) if junit.is_file() else {"tests": {}, "phases": {}, "slowest": []}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    run = {
        "label": args.label,
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version(),
                 "ci": bool(os.environ.get("CI"))},  # (runs compare on one CPU model: an Intel Xeon ran ~20 % slower)
        "command": "bash .ci/run",
        "exit": code,
        "wall_seconds": round(total, 1),
        "phases_wall_seconds": phases,
        "pytest_phases_seconds": summary["phases"],
        "tests": summary["tests"],
        "slowest": summary["slowest"],
        **({"cpu_seconds": {"capacity": round(total * (os.cpu_count() or 1), 1), "spent": round(sum(cpu.values()), 1),
                            "by_kind": cpu}} if cpu is not None else {}),
    }
    data: dict[str, Any] = {}
    if args.append and args.out.is_file():
        data = json.loads(args.out.read_text(encoding="utf-8"))
    data["command"] = "python3 benchmarks/ci_time.py --append --label ..." if args.append else \
        "python3 benchmarks/ci_time.py"
    data.setdefault("runs", []).append(run)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: run[k] for k in ("exit", "wall_seconds", "phases_wall_seconds", "pytest_phases_seconds",
                                          "tests")}, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main())
