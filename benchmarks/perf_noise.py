"""Run-to-run noise of the suite's performance metrics: the same image measured R times, clean. The thresholds of
the regression gate come from it (`imagebuilder/evidence/regression.py`: each metric's minimum detectable
regression, MDR = max(2 x the worst shortfall of a clean run from the median of the others, 3 x the robust
spread), rounded up to 0.5 %, at least 2 %; above 40 % a metric is recorded, not gated).

    python benchmarks/perf_noise.py --image IMAGE --kind cpu|gpu --runs R [--write-data]
    python benchmarks/perf_noise.py --python PYTHON_WITH_TORCH --kind cpu --runs R [--write-data]

--image runs `imagebuilder smoke IMAGE --only throughput,fsdp` (the suite in a container of the image, as verify
runs it); --python runs the suite's file with that Python on this machine (no engine). Writes
benchmarks/results/perf_noise_<kind>.json (every run's metrics; each metric's values, median, worst shortfall and
threshold; and, run by run, whether the gate would flag a clean run against the median of the others), and with
--write-data puts the values into imagebuilder/data/perf_noise.json, which the gate reads."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagebuilder.evidence.history import Point, Runner  # noqa: E402
from imagebuilder.evidence.regression import (  # noqa: E402
    MIN_THRESHOLD,
    Thresholds,
    judge,
    robust_spread,
    worst_left_out,
    worst_shortfall,
)
from imagebuilder.smoke.metrics import Metric, metrics_of  # noqa: E402
from imagebuilder.smoke.runner import cpu_model  # noqa: E402

DATA = ROOT / "imagebuilder" / "data" / "perf_noise.json"
KINDS = "throughput,fsdp"


def one_run(image: str | None = None, python: str | None = None, gpus: str = "",
            expect: tuple[str, ...] = (), only: str = KINDS) -> dict[str, Any]:
    """One measurement: the suite's throughput and FSDP checks (`only`; "": the whole suite, as verify runs it),
    in a container of `image` (`expect`: KEY=VALUE for an image without imagebuilder's version labels) or with
    `python`."""
    kinds = ["--only", only] if only else []
    if image:
        cmd = [sys.executable, "-m", "imagebuilder", "--offline", "smoke", image, *kinds,
               *(["--gpus", gpus] if gpus else []), *(f"--expect={e}" for e in expect)]
    else:
        cmd = [str(python), str(ROOT / "imagebuilder" / "smoke" / "suite.py"), *kinds,
               "--expect", json.dumps({"accelerator": "cpu"})]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"})
    text = proc.stdout
    start = text.find("{")
    report = json.loads(text[start:]) if start >= 0 else {}
    checks = report.get("checks") or []
    return {"exit": proc.returncode, "checks": {c["name"]: c["status"] for c in checks},
            "metrics": {k: m.to_json() for k, m in metrics_of(checks).items()},
            "seconds": round(time.monotonic() - t0, 1), "stderr_tail": proc.stderr[-400:] if proc.returncode else ""}


HOGS = ("while True: pass",
        "a = bytearray(1 << 28)\nwhile True: a[: 1 << 27] = a[1 << 27 :]")


def neighbours() -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(max(1, (os.cpu_count() or 2) - 1))
            for code in HOGS]


def cpu_floor_runs() -> list[float]:
    """The best repetition of every healthy run in benchmarks/results/cpu_floor.json (no mutant)."""
    doc = json.loads((ROOT / "benchmarks" / "results" / "cpu_floor.json").read_text())
    return [float(v) for session in doc["sessions"] for name, c in session["conditions"].items()
            if not c.get("mutant") and "slow" not in name for v in c["best_rep_per_run"]]


def summarise(runs: list[dict[str, Any]], kind: str, command: str, *, image: str | None = None,
              extra: dict[str, list[float]] | None = None, runner: Runner | None = None) -> dict[str, Any]:
    """Each metric's values over the clean runs (plus `extra` values measured elsewhere), median, worst shortfall,
    robust spread, MDR and the threshold the gate's rule gives; and, run by run, whether the gate would flag a
    clean run against the median of the others (it must flag none). `runner`: where they ran (default: this
    machine's CPU, for kind cpu); its noise key names the data."""
    runner = runner or Runner(kind, (cpu_model(),), os.cpu_count() or 0)
    key = runner.noise_key()
    clean = [r for r in runs if r["metrics"]]  # (metrics come from passed checks only)
    names = sorted({k for r in clean for k in r["metrics"]})
    measured: dict[str, Any] = {}
    for name in names:
        docs = [r["metrics"][name] for r in clean if name in r["metrics"]]
        values = [d["value"] for d in docs] + list((extra or {}).get(name) or [])
        better = docs[0]["better"]
        measured[name] = {"unit": docs[0]["unit"], "better": better, "values": values,
                          "median": statistics.median(values),
                          "worst_shortfall": round(worst_shortfall(values, better), 4),
                          "worst_left_out": round(worst_left_out(values, better), 4),
                          "robust_spread": round(robust_spread(values), 4)}
    thresholds = Thresholds.from_noise({"kinds": {key: {"metrics": measured}}})
    for name, m in measured.items():
        limit = thresholds.limit(runner, name)
        m["mdr"] = limit.mdr if limit else None
        m["threshold"] = limit.threshold if limit else None
        m["gated"] = thresholds.of(runner, name) is not None
    flagged = []
    for i, run in enumerate(clean):
        others = [Point(f"run{j}", "", f"{j:04d}", "n", runner, {},
                        {k: m for k, m in ((k, Metric.from_json(d)) for k, d in r["metrics"].items()) if m}, "ok")
                  for j, r in enumerate(clean) if j != i]
        mine = {k: m for k, m in ((k, Metric.from_json(d)) for k, d in run["metrics"].items()) if m}
        finding = judge(mine, runner, others, {}, thresholds, window=len(others))
        flagged.append({"run": i + 1, "regressed": [r.metric for r in finding.rows if r.regressed]})
    return {"benchmark": "perf_noise", "command": command,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "cpu_model": cpu_model(), "platform": platform.platform()},
            "kind": key, "runner": runner.to_json(), "image": image, "runs": len(runs), "clean_runs": len(clean),
            "rule": "MDR = max(2 x the worst shortfall of a clean run from the median of the others, 3 x the robust "
                    f"spread); threshold = the MDR rounded up to 0.5 %, at least {MIN_THRESHOLD:.0%}; above 40 %: "
                    "recorded, not gated (imagebuilder/evidence/regression.py)",
            "metrics": measured, "leave_one_out": flagged,
            "clean_runs_flagged": sum(1 for f in flagged if f["regressed"]), "every_run": runs}


def write_data(doc: dict[str, Any], drop: tuple[str, ...] = ()) -> None:
    """The runs' values into imagebuilder/data/perf_noise.json, under their runner's noise key (the other keys
    stay, but those in `drop`)."""
    data = json.loads(DATA.read_text()) if DATA.exists() else {"kinds": {}}
    for key in drop:
        data["kinds"].pop(key, None)
    data["kinds"][doc["kind"]] = {"command": doc["command"], "date": doc["date"], "machine": doc["machine"],
                                  "metrics": {k: {"better": v["better"], "values": v["values"]}
                                              for k, v in doc["metrics"].items()}}
    DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--image")
    source.add_argument("--python")
    parser.add_argument("--kind", choices=("cpu", "gpu"), required=True)
    parser.add_argument("--runs", type=int, default=8, help="runs per condition")
    parser.add_argument("--busy", action="store_true", help="also measure with the other cores busy (a CI "
                        "neighbour: one memory-bound and one CPU-bound process per other core)")
    parser.add_argument("--gpus", default="")
    parser.add_argument("--expect", action="append", default=[], metavar="KEY=VALUE",
                        help="--image: what the image promises, when it has no imagebuilder version labels")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--write-data", action="store_true")
    parser.add_argument("--with-cpu-floor", action="store_true", help="cpu: add the healthy runs of "
                        "benchmarks/results/cpu_floor.json (the same fp32 1024^3 measurement, 3 sessions, idle and "
                        "with busy neighbours) to matmul.fp32.1024's values")
    args = parser.parse_args()
    runs = []
    for condition in ("idle", "busy") if args.busy else ("idle",):
        hogs = neighbours() if condition == "busy" else []
        try:
            for i in range(args.runs):
                runs.append({**one_run(args.image, args.python, args.gpus, tuple(args.expect)),
                             "condition": condition})
                print(f"{condition} run {i + 1}/{args.runs}: exit {runs[-1]['exit']}, "
                      + ", ".join(f"{k} {m['value']:.4g}" for k, m in runs[-1]["metrics"].items()), flush=True)
        finally:
            for hog in hogs:
                hog.kill()
    command = " ".join(["python", "benchmarks/perf_noise.py", *sys.argv[1:]])
    earlier = cpu_floor_runs() if args.with_cpu_floor and args.kind == "cpu" else []
    doc = summarise(runs, args.kind, command, image=args.image, extra={"matmul.fp32.1024": earlier})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"perf_noise_{args.kind}.json").write_text(json.dumps(doc, indent=1) + "\n")
    if args.write_data:
        write_data(doc)
    print(json.dumps({k: {x: v[x] for x in ("median", "worst_shortfall", "mdr", "threshold", "gated")}
                      for k, v in doc["metrics"].items()}, indent=1))
    print("clean runs flagged:", doc["clean_runs_flagged"])


if __name__ == "__main__":
    main()
