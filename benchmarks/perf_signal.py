"""Issue 47's evidence: is each gated GPU metric precise enough that a 5 % regression fails and a clean run never
does? The suite's own throughput checks (`imagebuilder/smoke/suite.py --only throughput`: bench.matmul.bf16.8192
and .4096, bench.memory.copy, bench.train.samples_per_s and, on two or more GPUs, bench.all_reduce.busbw.1MiB and
.256MiB) run in fresh processes on a GPU host, with the host's Python and torch (no engine):

    python3 benchmarks/perf_signal.py run --phase clean --runs 10 --out $OUT    # on the GPU host: the noise
    python3 benchmarks/perf_signal.py run --phase noop --runs 10 --out $OUT     # clean again: judged as no-ops
    python3 benchmarks/perf_signal.py run --phase mutants --out $OUT            # the injected slowdowns
    python3 benchmarks/perf_signal.py run --phase suite --runs 1 --out $OUT     # the whole suite's time
    python3 benchmarks/perf_signal.py judge --write-data                        # here: the verdicts

Each phase appends its runs to benchmarks/results/perf_signal_<kind>.json (copied back from $OUT: a later call
carries the earlier runs). `judge` does what verify's gate does, with its code (`evidence/regression.py`): the
thresholds and MDRs from the clean runs (the noise, `Thresholds.from_noise` on the runner's noise key); each
no-op run judged against the median of the clean runs before it (its lineage, `smoke.history_window` of them);
each mutant run (the `slowdown` mutant of tests/mutants: named GPU work takes 5 % or 10 % longer, on the GPU's own
stream) judged the same way. It writes the verdicts into the results file, and with --write-data puts the clean
runs' values into imagebuilder/data/perf_noise.json under the runner's key (the GPU gate's thresholds).

What this does not do: build images and run `imagebuilder verify` for each run (the runs are processes of the
suite's file on the host's own torch, as `imagebuilder smoke` runs it in a container); benchmarks/gpu_perf.py
showed the gate refusing through verify on a GPU host."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MUTANT = ROOT / "tests" / "mutants" / "slowdown" / "sitecustomize.py"
# (name, fraction, targets, by): each slowdown the gate must refuse, naming the metrics the targets feed; `by`: what
# the added GPU time is (the mutant's docstring): a spin (under-delivers where the GPU is power-bound: the clock
# rises around an idle spin) or bf16 matmuls (compute, as the work)
EVERY = ("matmul", "copy", "train", "all_reduce")
MUTANTS = (("slow5_all", 0.05, EVERY, "spin"), ("slow10_all", 0.10, EVERY, "spin"),
           ("slow5_matmul", 0.05, ("matmul",), "spin"), ("slow5_copy", 0.05, ("copy",), "spin"),
           ("slow5_train", 0.05, ("train",), "spin"), ("slow5_all_reduce", 0.05, ("all_reduce",), "spin"),
           ("fill5_all", 0.05, EVERY, "matmul"), ("fill5_matmul", 0.05, ("matmul",), "matmul"),
           ("fill5_train", 0.05, ("train",), "matmul"), ("fill3_all", 0.03, EVERY, "matmul"),
           ("fill5_copy", 0.05, ("copy",), "matmul"), ("fill5_all_reduce", 0.05, ("all_reduce",), "matmul"),
           ("fill10_all", 0.10, EVERY, "matmul"))
FEEDS = {"matmul": ("bench.matmul.bf16.",), "copy": ("bench.memory.copy",), "train": ("bench.train.samples_per_s",),
         "all_reduce": ("bench.all_reduce.",)}
EXPECT = {"accelerator": "cu130", "throughput_floor": 0.6}


def smi() -> dict[str, Any]:
    query = "name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw"
    try:
        rows = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip().splitlines()
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": str(exc)}
    return {"gpus": rows, "other_processes": apps}


def one(mutant: tuple[str, float, tuple[str, ...], str] | None, whole: bool = False) -> dict[str, Any]:
    """One run of the suite's throughput checks in a fresh process (with the mutant first on its path); `whole`:
    the whole suite (its time per leaf)."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as folder:
        if mutant is not None:
            shutil.copy(MUTANT, Path(folder) / "sitecustomize.py")
            (Path(folder) / "slowdown.json").write_text(json.dumps({"fraction": mutant[1], "targets": mutant[2],
                                                                    "by": mutant[3]}))
            env["PYTHONPATH"] = folder
        report = Path(folder) / "report.json"
        before = smi()
        t0 = time.monotonic()
        only = [] if whole else ["--only", "throughput"]
        proc = subprocess.run([sys.executable, str(ROOT / "imagebuilder" / "smoke" / "suite.py"), *only,
                               "--expect", json.dumps(EXPECT), "--report", str(report)],
                              capture_output=True, text=True, env=env, timeout=400)
        doc = json.loads(report.read_text()) if report.exists() else {}
    return {"mutant": None if mutant is None else {"name": mutant[0], "fraction": mutant[1],
                                                   "targets": list(mutant[2]), "by": mutant[3]},
            "exit": proc.returncode, "seconds": round(time.monotonic() - t0, 1), "smi_before": before,
            "checks": doc.get("checks") or [], "stderr_tail": proc.stderr[-600:]}


def results_path(kind: str) -> Path:
    return ROOT / "benchmarks" / "results" / f"perf_signal_{kind}.json"


def run(args: argparse.Namespace) -> None:
    path = results_path(args.kind)
    doc = json.loads(path.read_text()) if path.exists() else {"benchmark": "perf_signal", "kind": args.kind,
                                                              "runs": []}
    wanted = [None] * args.runs if args.phase in ("clean", "noop", "suite") else \
        [m for m in MUTANTS if not args.only or m[0] in args.only.split(",")]
    t0 = time.monotonic()
    for mutant in wanted:
        if time.monotonic() - t0 > args.deadline:
            print(f"deadline: {len(wanted)} wanted, stopped", flush=True)
            break
        got = one(mutant, whole=args.phase == "suite")
        got.update(phase=args.phase, date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   command=f"python3 benchmarks/perf_signal.py run --kind {args.kind} --phase {args.phase}")
        doc["runs"].append(got)
        shown = {m["name"].removeprefix("bench."): round(statistics.median(m.get("reps") or [0]), 1)
                 for c in got["checks"] for m in c.get("metrics") or [] if m["name"].startswith("bench.")}
        failed = [c["name"] for c in got["checks"] if c.get("status") == "fail"]
        print(f"{args.phase} {(mutant or ['clean'])[0]}: exit {got['exit']} {got['seconds']} s {shown} "
              f"failed {failed} {got['stderr_tail'][-300:] if got['exit'] else ''}", flush=True)
        for where in (path, args.out / path.name):  # (the next phase of this call reads it; $OUT brings it back)
            where.write_text(json.dumps(doc, indent=1) + "\n")
        if args.phase in ("clean", "noop") and got["exit"] != 0:
            sys.exit(f"{args.phase}: a clean run failed, stopped (a failed run measures nothing)")


def judge(args: argparse.Namespace) -> None:
    from imagebuilder.evidence.history import Point, Runner
    from imagebuilder.evidence.regression import WINDOW, Thresholds
    from imagebuilder.evidence.regression import judge as gate
    from imagebuilder.smoke.metrics import metrics_of

    path = results_path(args.kind)
    doc = json.loads(path.read_text())
    runs = doc["runs"]
    names = sorted({line.split(",")[0].strip() for r in runs for line in r["smi_before"].get("gpus") or []})
    count = len(runs[0]["smi_before"].get("gpus") or [])
    driver = (runs[0]["smi_before"].get("gpus") or ["?,?"])[0].split(",")[1].strip()
    runner = Runner("gpu", tuple(names), count, driver, "single" if count == 1 else "nvlink")
    key = runner.noise_key()
    clean = [r for r in runs if r["phase"] == "clean" and r["exit"] == 0]  # (a failed run measured nothing)
    measured: dict[str, dict[str, Any]] = {}
    for r in clean:
        for name, m in metrics_of(r["checks"]).items():
            if name.startswith("bench."):
                measured.setdefault(name, {"better": m.better, "values": []})["values"].append(round(m.value, 4))
    thresholds = Thresholds.from_noise({"kinds": {key: {"metrics": measured}}}, "perf_signal clean runs")
    points = [Point(f"clean{i}", "", f"2026-01-01T00:{i:02d}", "n", runner, {},
                    {k: m for k, m in metrics_of(r["checks"]).items() if k.startswith("bench.")}, "ok")
              for i, r in enumerate(clean)]
    summary: dict[str, Any] = {"runner": runner.to_json(), "noise_key": key, "clean_runs": len(clean), "metrics": {}}
    for name, m in measured.items():
        limit = thresholds.limit(runner, name)
        values = m["values"]
        summary["metrics"][name] = {"values": values, "median": round(statistics.median(values), 4),
                                    "mdr": limit.mdr if limit else None,
                                    "threshold": limit.threshold if limit else None,
                                    "gated": thresholds.of(runner, name) is not None}
    verdicts = []
    for i, r in enumerate(x for x in runs if x["phase"] in ("noop", "mutants")):
        mine = {k: m for k, m in metrics_of(r["checks"]).items() if k.startswith("bench.")}
        finding = gate(mine, runner, points[-WINDOW:], {}, thresholds)
        regressed = sorted(row.metric for row in finding.rows if row.regressed)
        mutant = r.get("mutant")
        fed = sorted(n for n in mine if mutant and any(n.startswith(p) for t in mutant["targets"]
                                                          for p in FEEDS[t]))
        expected = [n for n in fed if thresholds.of(runner, n) is not None] if mutant else []  # (gated ones)
        failed = [c["name"] for c in r["checks"] if c["status"] == "fail"]
        verdicts.append({"run": i + 1, "phase": r["phase"], "mutant": mutant, "exit": r["exit"],
                         "failed_checks": failed, "verdict": finding.verdict, "regressed": regressed,
                         "should_regress": expected,
                         "as_expected": r["exit"] == 0 and regressed == expected,
                         "changes": {row.metric: row.change for row in finding.rows},
                         "why": finding.why()})
    noops = [v for v in verdicts if v["phase"] == "noop"]
    mutants = [v for v in verdicts if v["phase"] == "mutants"]
    summary.update(noop_runs=len(noops), noop_false_alarms=sum(1 for v in noops if v["regressed"]),
                   mutant_runs=len(mutants), mutants_refused_as_expected=sum(1 for v in mutants if v["as_expected"]),
                   suite_throughput_seconds=[r["seconds"] for r in runs if r["phase"] != "suite"],
                   whole_suite_seconds=[r["seconds"] for r in runs if r["phase"] == "suite"])
    doc.update(summary=summary, verdicts=verdicts,
               judge_command=f"python3 benchmarks/perf_signal.py judge --kind {args.kind}"
                             + (" --write-data" if args.write_data else ""))
    path.write_text(json.dumps(doc, indent=1) + "\n")
    if args.write_data:
        data_path = ROOT / "imagebuilder" / "data" / "perf_noise.json"
        data = json.loads(data_path.read_text())
        data["kinds"].pop("gpu", None)  # (timed call by call before issue 47: superseded)
        data["kinds"][key] = {"command": f"python3 benchmarks/perf_signal.py run --kind {args.kind} --phase clean "
                                         f"--runs {len(clean)} (results/{path.name})",
                              "date": clean[-1]["date"], "machine": {"gpus": runs[0]["smi_before"].get("gpus")},
                              "metrics": measured}
        data_path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    for name, m in summary["metrics"].items():
        print(f"{name:32s} median {m['median']:>10.4g}  MDR {m['mdr']:.2%}  threshold {m['threshold']:.1%}")
    for v in verdicts:
        print(f"{v['phase']:8s} {(v['mutant'] or {}).get('name', 'clean'):18s} exit {v['exit']} {v['verdict']:9s} "
              f"regressed {v['regressed']}  {'ok' if v['as_expected'] else 'NOT AS EXPECTED'}")


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--phase", choices=("clean", "noop", "mutants", "suite"), required=True,
                   help="suite: the whole suite (its time per leaf), not judged")
    r.add_argument("--runs", type=int, default=10)
    r.add_argument("--only", default="", help="mutants: their names, comma-separated")
    r.add_argument("--deadline", type=float, default=520, help="start no run after this many seconds")
    r.add_argument("--out", type=Path, required=True)
    for p in (r, sub.add_parser("judge")):
        p.add_argument("--kind", default="1xh200")
    sub.choices["judge"].add_argument("--write-data", action="store_true")
    args = parser.parse_args()
    run(args) if args.command == "run" else judge(args)


if __name__ == "__main__":
    main()
