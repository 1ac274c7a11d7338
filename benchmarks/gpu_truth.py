"""Issue 42's GPU evidence on a multi-GPU host, through the real steps (stage -> verify with signed pass records):
the runner as the host names it, the collectives' floors and noise, and images made to break each rule.

    PYTHONPATH=$PWD:$PYTHONPATH python3 benchmarks/gpu_truth.py --phase noise|break --out DIR [--deadline S]
(on the GPU host, with the engine and registry of ../shared/gpu-host/start-engine.sh running and the gpu-task
layer's usr/ holding the host's headers: benchmarks/gpu_host_truth.sh prepares both).

--phase noise: the clean leaf of tests/gpu/matrix_perf.yaml staged and verified on every GPU of the host, then
  whole-suite runs of that image (`imagebuilder smoke IMAGE`) until the deadline: each collective's bus bandwidth
  over the clean runs (the verify run counted) is written to DIR/busbw_floors.json (the runner as nvidia-smi
  names it: models, count, interconnect) and DIR/perf_noise.json (the gate's GPU noise, busbw metrics added),
  the files imagebuilder/data/ ships.
--phase break: the clean leaf staged and verified again (its busbw now gated by those floors), then
  1. `hidden`: the clean image with CUDA_VISIBLE_DEVICES=0 in its environment: the suite sees 1 of 2 GPUs;
  2. `slow_collectives`: the clean image with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 in its environment;
  3. `slower_matmul`: the clean image's pass re-recorded as torch 2.10.0 (signed by the same key: no 2.10 build
     exists on this offline host, so the earlier version of the line is the clean image's own measurement), then
     the leaf with tests/mutants/slower_matmul (~20 % slower matmuls) staged and verified: torch 2.11.0 continues
     the 2.10.0 line, and the gate must name the pin change and the metric.
Writes DIR/gpu_truth_<phase>.json."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import gpu_perf  # noqa: E402
import perf_noise  # noqa: E402

from imagebuilder.smoke.floors import COLLECTIVE_PREFIXES  # noqa: E402
from imagebuilder.smoke.runner import GpuHost  # noqa: E402

MATRIX = gpu_perf.MATRIX
WORK = gpu_perf.WORK
EXPECT = gpu_perf.EXPECT


def smoke(image: str) -> dict[str, Any]:
    """A whole-suite run of `imagebuilder smoke IMAGE`: its exit, the host's verdict and notes, checks, metrics."""
    t0 = time.monotonic()
    # (--allow-skip versions.driver: `smoke IMAGE` on this base reads no CUDA version from its labels, so it knows
    # no driver floor; verify, which knows the entry, checks it)
    proc = subprocess.run([sys.executable, "-m", "imagebuilder", "--offline", "smoke", image, "--allow-skip",
                           "versions.driver", *(f"--expect={e}" for e in EXPECT)], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "200"})
    start = proc.stdout.find("{")
    report = json.loads(proc.stdout[start:]) if start >= 0 else {}
    from imagebuilder.smoke.metrics import metrics_of

    return {"exit": proc.returncode, "seconds": round(time.monotonic() - t0, 1), "gpus": report.get("gpus"),
            "host_verdict": report.get("host_verdict"), "host_notes": report.get("host_notes"),
            "gpu_verified": report.get("gpu_verified"),
            "checks": {c["name"]: c["status"] for c in report.get("checks") or []},
            "metrics": {k: m.to_json() for k, m in metrics_of(report.get("checks") or []).items()},
            "err_tail": proc.stderr[-1200:]}


def derived(base: str, env: dict[str, str], name: str) -> str:
    """An image FROM `base` with `env` set: what a layer that sets these variables makes."""
    import docker

    client = docker.from_env()
    dockerfile = f"FROM {base}\nENV " + " ".join(f"{k}={v}" for k, v in env.items()) + "\n"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile.encode()))
    context.seek(0)
    image, _ = client.images.build(fileobj=context, custom_context=True, tag=f"ib-truth/{name}:latest",
                                   network_mode="host", rm=True)
    return str(image.id)


def busbw(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: m["value"] for k, m in metrics.items() if k.startswith(COLLECTIVE_PREFIXES)}


def write_floors(host: GpuHost, runs: list[dict[str, Any]], out: Path, command: str) -> dict[str, Any]:
    """The clean runs' bus bandwidths as the floors file's entry for this runner, and the gate's noise data."""
    names = sorted({k for r in runs for k in busbw(r["metrics"])})
    values = {k: [busbw(r["metrics"])[k] for r in runs if k in busbw(r["metrics"])] for k in names}
    entry = {"models": list(host.models), "count": host.gpus, "interconnect": host.interconnect,
             "driver": host.driver, "command": command, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "source": "benchmarks/results/gpu_truth_noise_2gpu.json", "metrics": values}
    floors_path = ROOT / "imagebuilder" / "data" / "busbw_floors.json"
    floors = json.loads(floors_path.read_text())
    floors["runners"] = [r for r in floors["runners"] if (r["models"], r["count"], r["interconnect"])
                         != (entry["models"], entry["count"], entry["interconnect"])] + [entry]
    floors_path.write_text(json.dumps(floors, indent=1) + "\n")
    shutil.copy(floors_path, out / "busbw_floors.json")
    noise_path = perf_noise.DATA
    noise = json.loads(noise_path.read_text())
    gpu = noise["kinds"].setdefault("gpu", {"metrics": {}})
    for name, vals in values.items():  # the gate's noise for the busbw metrics (other GPU metrics: as measured)
        gpu["metrics"][name] = {"better": "higher", "values": vals, "runner": entry["count"],
                                "command": command}
    noise_path.write_text(json.dumps(noise, indent=1, sort_keys=True) + "\n")
    shutil.copy(noise_path, out / "perf_noise.json")
    from imagebuilder.evidence.regression import threshold_from, worst_shortfall

    return {k: {"values": v, "median": statistics.median(v), "min": min(v),
                "worst_shortfall": round(worst_shortfall(v, "higher"), 4), "threshold": threshold_from(v, "higher"),
                "floor": round(0.5 * min(v), 2)} for k, v in values.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase", choices=("noise", "break"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--deadline", type=float, default=540)
    args = parser.parse_args()
    t0 = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir()
    host = GpuHost.probe()
    doc: dict[str, Any] = {"benchmark": f"gpu_truth_{args.phase}", "matrix": MATRIX,
                           "command": f"bash benchmarks/gpu_host_truth.sh {args.phase}",
                           "host": {**host.facts(), "cpu": host.cpu}, "steps": {}}
    steps = doc["steps"]
    name = f"gpu_truth_{args.phase}_{host.gpus}gpu.json"

    def save() -> None:
        (args.out / name).write_text(json.dumps(doc, indent=1) + "\n")

    def left() -> float:
        return float(args.deadline) - (time.monotonic() - t0)

    save()
    doc["keys"] = gpu_perf.imagebuilder("keys", "new", str(WORK / "keys"), signed=False)
    clean = gpu_perf.verified("clean")
    leaf = gpu_perf.leaf_of(WORK / "verify-clean") if (WORK / "verify-clean" / "report.json").exists() else {}
    report = leaf.get("smoke_report") or {}
    clean.update(host_notes=report.get("host_notes"), gpus=report.get("gpus"),
                 busbw=busbw({m["name"]: m for m in (clean.get("performance") or {}).get("metrics") or []}),
                 runner=(clean.get("performance") or {}).get("runner"))
    steps["clean"] = clean
    save()
    print(f"[{time.monotonic() - t0:.0f} s] clean: verify exit {clean['verify']['exit']}", flush=True)
    if clean["verify"]["exit"] != 0 or not clean.get("image"):
        doc["ok"] = False
        save()
        sys.exit(f"the clean leaf did not verify: {clean.get('error')}")
    image = str(clean["image"])
    if args.phase == "noise":
        runs = [{"source": "the clean image's verify run",
                 "metrics": {m["name"]: m for m in (clean.get("performance") or {}).get("metrics") or []}}]
        doc["noise_runs"] = []
        while left() > 75:
            got = smoke(image)
            doc["noise_runs"].append(got)
            if got["exit"] == 0:
                runs.append(got)
            save()
            print(f"[{time.monotonic() - t0:.0f} s] noise run {len(doc['noise_runs'])}: exit {got['exit']} "
                  f"{got['seconds']} s busbw {busbw(got['metrics'])}", flush=True)
        doc["clean_runs"] = len(runs)
        doc["busbw"] = write_floors(host, runs, args.out, doc["command"])
        doc["ok"] = len(runs) >= 5
        save()
        return
    # break: each image made to break one rule must fail with a message a user can act on
    hidden = smoke(derived(image, {"CUDA_VISIBLE_DEVICES": "0"}, "hidden"))
    hidden["as_expected"] = hidden["exit"] == 1 and "the suite saw 1" in str(hidden["host_verdict"])
    steps["hidden"] = hidden
    save()
    print(f"[{time.monotonic() - t0:.0f} s] hidden: {hidden['host_verdict']}", flush=True)
    slow = smoke(derived(image, {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}, "slow-collectives"))
    slow["as_expected"] = slow["exit"] == 1 and "is below its floor" in str(slow["host_verdict"])
    steps["slow_collectives"] = slow
    save()
    print(f"[{time.monotonic() - t0:.0f} s] slow collectives: {slow['host_verdict']}", flush=True)
    from imagebuilder.evidence import passes
    from imagebuilder.evidence.passes import RegistryPasses
    from imagebuilder.evidence.signing import Keys, Signer
    from imagebuilder.ports.registry import Registry

    keys = WORK / "keys"
    where = str(clean.get("pass_record") or "")  # registry HOST/REPO:TAG
    ref = where.split(" ")[1]
    repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
    store = RegistryPasses(Registry.for_host("127.0.0.1:5000"),
                           Keys.load(WORK / "cache" / "keys", {}, [keys / "signing.pub"]).trust,
                           Signer.load(keys / "signing.pem"))
    record = store.read(repo, tag).record
    assert record is not None and record.manifest is not None
    older = dataclasses.replace(record, expect={**record.expect, "torch": "2.10.0"}, date=passes.now())
    store.write(repo, older.at(record.manifest, f"127.0.0.1:5000/{repo}"))
    steps["rerecorded"] = {"tag": tag, "as": "torch 2.10.0"}
    save()
    slower = gpu_perf.judged("slower_matmul", gpu_perf.verified("slower_matmul"))
    summary = str((slower.get("performance") or {}).get("summary"))
    slower["summary"] = summary
    slower["as_expected"] = bool(slower["as_expected"]) and summary.startswith("torch 2.10.0 \u2192 2.11.0")
    steps["slower_matmul"] = slower
    doc["ok"] = all(steps[k].get("as_expected") for k in ("hidden", "slow_collectives", "slower_matmul")) and \
        not steps["clean"].get("host_notes")
    save()
    print(f"[{time.monotonic() - t0:.0f} s] slower_matmul: {slower.get('error')}", flush=True)
    doc["noise_runs"] = []  # more clean whole-suite runs for the noise, while time is left
    while left() > 80:
        doc["noise_runs"].append(smoke(image))
        save()


if __name__ == "__main__":
    main()
