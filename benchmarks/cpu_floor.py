"""The measurements behind the CPU throughput floor (`smoke.cpu_gflops_floor`, suite.CPU_GFLOPS_FLOOR).

Runs the suite's own check (`suite.py --only throughput` on a CPU expectation, floor set to ~0 so that only the
numbers count) RUNS times in each condition, each in a fresh process, with torch from --python:

- idle: nothing else running;
- one_core_busy: one busy-loop process beside it (a CI neighbour on a 2-core machine);
- all_cores_busy: one busy loop per core (informational, not in the rule: worse than a CI run of the smoke
  step, which runs one suite at a time);
- slow_matmul, slow_matmul_one_core_busy: the mutant tests/mutants/slow_matmul (each matmul ~10x slower) on
  the suite's Python path, idle and with one busy core.

Writes results/cpu_floor.json: per condition every run's best repetition (what the check judges) and median,
every repetition's rate, with min/median/max; and the floor rule: the geometric mean of the slowest healthy
run (idle or one core busy) and the fastest slowed run, rounded to 5 GFLOP/s. No Docker engine is used.

    python benchmarks/cpu_floor.py --python /tmp/torchvenv/bin/python [--runs 10] [--append]

--append adds the session to those already in the file (the machine's speed changes by 3x over an afternoon:
the rule is applied to every session's runs).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "imagebuilder" / "smoke" / "suite.py"
MUTANT = ROOT / "tests" / "mutants" / "slow_matmul"
EXPECT = {"accelerator": "cpu", "cpu_gflops_floor": 1e-9}
BUSY = "while True: pass"


def machine() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    return {"cpus": os.cpu_count(), "cpu_model": model, "platform": platform.platform(),
            "python": platform.python_version()}


def one_run(python: str, mutant: bool) -> dict[str, Any]:
    env = dict(os.environ)
    if mutant:
        env["PYTHONPATH"] = os.pathsep.join([str(MUTANT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([python, str(SUITE), "--only", "throughput", "--expect", json.dumps(EXPECT)],
                          capture_output=True, text=True, env=env, timeout=600)
    rec = json.loads(proc.stdout)["checks"][0]
    if rec["name"] != "throughput.cpu" or "rate_per_rep" not in rec:
        sys.exit(f"unexpected record: {rec}")
    return {"best": rec["value"], "median": rec["median_gflops"], "rate_per_rep": rec["rate_per_rep"],
            "threads": rec.get("threads"), "status": rec["status"]}


def condition(python: str, runs: int, busy: int, mutant: bool) -> dict[str, Any]:
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(busy)]
    try:
        got = [one_run(python, mutant) for _ in range(runs)]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    best = [g["best"] for g in got]
    medians = [g["median"] for g in got]
    reps = [r for g in got for r in g["rate_per_rep"]]
    return {"busy_processes": busy, "mutant": "slow_matmul" if mutant else None, "runs": runs,
            "threads": got[0]["threads"], "best_rep_per_run": best, "median_per_run": medians,
            "best_rep": spread(best), "run_median": spread(medians), "repetitions": {**spread(reps), "all": reps}}


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def rule(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """The floor from every session's runs: the geometric mean of the slowest healthy run and the fastest slowed
    run (best repetitions), rounded to 5 GFLOP/s, and the margins it leaves on both sides."""
    def over(keys: tuple[str, ...], pick: str) -> list[float]:
        return [s["conditions"][k]["best_rep"][pick] for s in sessions for k in keys]

    healthy = min(over(("idle", "one_core_busy"), "min"))
    slowed = max(over(("slow_matmul", "slow_matmul_one_core_busy"), "max"))
    floor = 5 * round(math.sqrt(healthy * slowed) / 5)
    return {
        "sessions": len(sessions),
        "slowest_healthy_gflops": healthy,
        "fastest_slowed_gflops": slowed,
        "slowest_all_cores_busy_gflops": min(over(("all_cores_busy",), "min")),
        "floor_rule": "the geometric mean of the slowest healthy run's best repetition (idle, or one core busy: "
                      "a CI neighbour) and the fastest slowed run's best repetition, over every session, rounded "
                      "to 5 GFLOP/s: equal margins on both sides",
        "floor_from_rule": floor,
        "margin_healthy_over_floor": round(healthy / floor, 2),
        "margin_floor_over_slowed": round(floor / slowed, 2),
        "all_cores_busy_over_floor": round(min(over(("all_cores_busy",), "min")) / floor, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", default=sys.executable, help="an interpreter with torch")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--append", action="store_true", help="add this session to those already in --out")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cpu_floor.json")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    plan = {"idle": (0, False), "one_core_busy": (1, False), "all_cores_busy": (cores, False),
            "slow_matmul": (0, True), "slow_matmul_one_core_busy": (1, True)}
    results = {}
    for name, (busy, mutant) in plan.items():
        results[name] = condition(args.python, args.runs, busy, mutant)
        print(name, "best repetition per run:", json.dumps(results[name]["best_rep"]), flush=True)
    session = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "command": " ".join(["python", "benchmarks/cpu_floor.py", "--python", args.python, "--runs",
                                    str(args.runs), *(["--append"] if args.append else [])]),
               "conditions": results}
    before = json.loads(args.out.read_text())["sessions"] if args.append and args.out.is_file() else []
    sessions = [*before, session]
    doc = {
        "benchmark": "cpu_floor",
        "command": "python benchmarks/cpu_floor.py --python PYTHON_WITH_TORCH --runs N [--append]",
        "machine": machine(),
        "check": "suite.py --only throughput: fp32 1024^3 matmul on one thread, 2 warm-ups, 10 timed repetitions, "
                 "judged on the best one",
        **rule(sessions),
        "sessions": sessions,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in doc.items() if k not in ("sessions", "machine", "floor_rule")}, indent=2))


if __name__ == "__main__":
    main()
