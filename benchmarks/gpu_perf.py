"""The performance history on a GPU host (issue 29's GPU evidence), through the real steps: stage -> verify with
signed pass records carrying metrics, one lineage (tests/gpu/matrix_perf.yaml's leaf) on one GPU model.

    PYTHONPATH=$PWD:$PYTHONPATH python3 benchmarks/gpu_perf.py --out DIR [--runs 5] [--deadline SECONDS]
(on the GPU host, with the engine and registry of ../shared/gpu-host/start-engine.sh running and the gpu-task
layer's usr/ holding the host's headers: benchmarks/gpu_host_perf.sh prepares both).

The steps, in order; each call does those not done yet (their results kept in .gpu-perf-work/, which a warm host
keeps between calls) and starts none that might not finish before --deadline:
1. the clean leaf staged and verified: the first of its lineage (only the floors judge it);
2. `--runs` more runs of the whole suite in that image (`imagebuilder smoke IMAGE`, benchmarks/perf_noise.py's run),
   with its verify run as many clean runs again: their spread is the noise, from which the gate's GPU thresholds
   come (perf_noise.py's summary and rule, written to imagebuilder/data/perf_noise.json, which every later step
   reads, and to DIR);
3. a second clean image of the lineage, staged and verified: the gate must say `ok`;
4. `slower_matmul` (~20 % slower matmuls) and `slow_step` (~20 % fewer FSDP samples/s), each staged and verified:
   each must fail on the history, its throughput floor passing;
5. `compile_aot_eager`, staged and smoke-tested (`--only fsdp`): fsdp.compiled_graphs_cuda must fail, naming the
   backend.
Writes DIR/gpu_perf_1gpu.json (and DIR/perf_noise_gpu.json, DIR/perf_noise.json)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import perf_noise  # noqa: E402

MATRIX = "tests/gpu/matrix_perf.yaml"
LEAF = ROOT / "tests/gpu/layers/gpu-perf/mutant"
WORK = ROOT / ".gpu-perf-work"
# What the leaf promises (its base is the host's own install, which carries no imagebuilder version labels)
EXPECT = ("accelerator=cu130", "torch=2.11.0", "python=3.12")
STEP_SECONDS = {"clean": 330, "noise": 100, "clean2": 130, "slower_matmul": 130, "slow_step": 130,
                "compile_aot_eager": 90}  # the longest each may take (the first pushes the 9.7 GB base)
PROBE = ("import torch; print('torch.matmul:', getattr(torch.matmul, '__qualname__', torch.matmul)); "
         "print('Tensor.backward:', torch.Tensor.backward.__qualname__)")


def probe(image: str) -> str:
    """What the image's Python sees of the functions the mutants patch (patched: a wrapper's name)."""
    import docker

    client = docker.from_env()
    try:
        out = client.containers.run(image, ["python", "-c", PROBE], remove=True, network_mode="host")
    except Exception as exc:  # noqa: BLE001 - a diagnostic
        return f"probe failed: {exc}"[:300]
    return out.decode(errors="replace").strip()[-300:]


def imagebuilder(*args: str, signed: bool = True) -> dict[str, Any]:
    """A command as the verifier's machine runs it: its key signs, and records it signed count."""
    t0 = time.monotonic()
    keys = WORK / "keys"
    trust = ["--trust-key", str(keys / "signing.pub")] if signed else []
    env = {"IMAGEBUILDER_SIGNING_KEY": str(keys / "signing.pem")} if signed else {}
    proc = subprocess.run([sys.executable, "-m", "imagebuilder", "--offline", "--cache-dir", str(WORK / "cache"),
                           *trust, *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", **env})
    return {"command": "imagebuilder " + " ".join(args), "exit": proc.returncode,
            "seconds": round(time.monotonic() - t0, 1), "out_tail": proc.stdout[-2500:], "err_tail": proc.stderr[-800:]}


def variant(name: str) -> None:
    """The leaf's mutant/ folder: a note naming the variant, and the mutant's sitecustomize.py."""
    for path in LEAF.iterdir():
        if path.name != ".keep":
            path.unlink()
    (LEAF / "variant.txt").write_text(name + "\n")
    seed = ROOT / "tests" / "mutants" / name / "sitecustomize.py"
    if seed.exists():
        shutil.copy(seed, LEAF / "sitecustomize.py")


def leaf_of(report: Path) -> dict[str, Any]:
    return next(n for n in json.loads((report / "report.json").read_text())["nodes"] if n["layer"] == "gpu-perf")


def checks_of(report: dict[str, Any]) -> dict[str, Any]:
    checks = report.get("checks") or []
    return {"checks": {c["name"]: c["status"] for c in checks},
            "compiled": next((c.get("value") for c in checks if c["name"].startswith("fsdp.compiled_graphs")), None),
            "compile_reason": next((c.get("reason") for c in checks if c["name"].startswith("fsdp.compiled_graphs")),
                                   None),
            "floor": next(({k: c.get(k) for k in ("value", "expected", "status")} for c in checks
                           if c["name"] == "throughput.cuda:0"), None)}


def staged(name: str) -> dict[str, Any]:
    variant(name)
    return {"stage": imagebuilder("stage", "--matrix", MATRIX, "--report", str(WORK / f"stage-{name}"))}


def verified(name: str) -> dict[str, Any]:
    out = staged(name)
    out["verify"] = imagebuilder("verify", "--matrix", MATRIX, "--report", str(WORK / f"verify-{name}"))
    if not (WORK / f"verify-{name}" / "report.json").exists():
        return {**out, "smoke": None, "error": "no report", "checks": {}}
    leaf = leaf_of(WORK / f"verify-{name}")
    out.update(image=leaf.get("image"), digest=leaf.get("digest"), smoke=leaf.get("smoke"), error=leaf.get("error"),
               pass_record=leaf.get("pass_record"), performance=leaf.get("performance"),
               probe=probe(str(leaf.get("image"))), **checks_of(leaf.get("smoke_report") or {}))
    return out


def judged(name: str, got: dict[str, Any]) -> dict[str, Any]:
    perf = got.get("performance") or {}
    regressed = [r["metric"] for r in perf.get("rows") or [] if r.get("regressed")]
    catcher = {"slower_matmul": "matmul.bf16", "slow_step": "fsdp.samples_per_s"}.get(name)
    if name.startswith("clean"):
        ok = got["verify"]["exit"] == 0 and perf.get("verdict") == ("first" if name == "clean" else "ok")
    elif catcher:
        ok = got["verify"]["exit"] == 1 and perf.get("verdict") == "regressed" and \
            any(m.startswith(catcher) for m in regressed) and (got.get("floor") or {}).get("status") == "pass"
    else:
        ok = got["smoke"]["exit"] == 1 and got["checks"].get("fsdp.compiled_graphs_cuda") == "fail" and \
            "aot_eager" in str(got.get("compile_reason"))
    return {**got, "regressed": regressed, "as_expected": ok}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--deadline", type=float, default=540, help="seconds this call may take")
    args = parser.parse_args()
    t0 = time.monotonic()
    WORK.mkdir(exist_ok=True)
    state = WORK / "gpu_perf_1gpu.json"
    doc: dict[str, Any] = json.loads(state.read_text()) if state.exists() else {
        "benchmark": "gpu_perf", "matrix": MATRIX, "command": "bash benchmarks/gpu_host_perf.sh (until done)",
        "steps": {}, "noise_runs": [], "calls": 0}
    doc["calls"] += 1
    steps = doc["steps"]

    def save() -> None:
        state.write_text(json.dumps(doc, indent=1) + "\n")
        shutil.copy(state, args.out / "gpu_perf_1gpu.json")

    def may(step: str) -> bool:
        left = args.deadline - (time.monotonic() - t0)
        if left < STEP_SECONDS[step]:
            print(f"not starting {step}: {left:.0f} s left", flush=True)
            return False
        return True

    todo: list[tuple[str, Callable[[], None]]] = []

    def clean() -> None:
        shutil.rmtree(WORK / "keys", ignore_errors=True)
        doc["keys"] = imagebuilder("keys", "new", str(WORK / "keys"), signed=False)
        steps["clean"] = judged("clean", verified("clean"))

    def noise() -> None:
        doc["noise_runs"].append(perf_noise.one_run(image=str(steps["clean"]["image"]), expect=EXPECT, only=""))
        if len(doc["noise_runs"]) >= args.runs:  # and the clean image's own verify run: as many clean runs again
            verify_run = {"exit": 0, "source": "the clean image's verify run",
                          "metrics": {m["name"]: m for m in (steps["clean"].get("performance") or {}).get("metrics")
                                      or []}}
            summary = perf_noise.summarise([verify_run, *doc["noise_runs"]], "gpu",
                                           "python benchmarks/gpu_perf.py (step 2)", image=str(steps["clean"]["image"]))
            perf_noise.write_data(summary)
            (args.out / "perf_noise_gpu.json").write_text(json.dumps(summary, indent=1) + "\n")
            shutil.copy(perf_noise.DATA, WORK / "perf_noise.json")
            steps["noise"] = {k: {x: v[x] for x in ("median", "worst_shortfall", "threshold", "gated")}
                              for k, v in summary["metrics"].items()}
            steps["noise"]["clean_runs_flagged"] = summary["clean_runs_flagged"]

    def aot_eager() -> None:
        got = staged("compile_aot_eager")
        image = leaf_of(WORK / "stage-compile_aot_eager").get("image")
        proc = subprocess.run([sys.executable, "-m", "imagebuilder", "--offline", "smoke", str(image), "--only",
                               "fsdp", *(f"--expect={e}" for e in EXPECT)], cwd=ROOT, capture_output=True, text=True)
        start = proc.stdout.find("{")
        report = json.loads(proc.stdout[start:]) if start >= 0 else {}
        got.update(image=image, smoke={"exit": proc.returncode, "err_tail": proc.stderr[-600:]}, **checks_of(report))
        steps["compile_aot_eager"] = judged("compile_aot_eager", got)

    if "clean" not in steps:
        todo.append(("clean", clean))
    todo += [("noise", noise)] * max(0, args.runs - len(doc["noise_runs"]))
    if (WORK / "perf_noise.json").exists():  # a later call: the thresholds measured by an earlier one
        shutil.copy(WORK / "perf_noise.json", perf_noise.DATA)
        shutil.copy(perf_noise.DATA, args.out / "perf_noise.json")
    for name in ("clean2", "slower_matmul", "slow_step"):
        if name not in steps:
            todo.append((name, lambda name=name: steps.__setitem__(name, judged(name, verified(name)))))
    if "compile_aot_eager" not in steps:
        todo.append(("compile_aot_eager", aot_eager))
    for step, run in todo:
        if not may(step):
            break
        print(f"[{time.monotonic() - t0:.0f} s] {step}", flush=True)
        run()
        save()
    done = all(k in steps for k in ("clean", "noise", "clean2", "slower_matmul", "slow_step", "compile_aot_eager"))
    doc["done"] = done
    doc["ok"] = done and all(steps[k].get("as_expected") for k in steps if k != "noise")
    save()
    print(json.dumps({"done": done, "ok": doc["ok"], **{k: v.get("as_expected") for k, v in steps.items()
                                                         if isinstance(v, dict) and "as_expected" in v}}, indent=1))


if __name__ == "__main__":
    main()
