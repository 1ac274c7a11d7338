"""The measurements behind the FSDP check's tolerance (suite.FSDP_TOL): how far a CLEAN run of the check's
training is from its unsharded reference, over several seeds, and how far the gradient mutants are.

Runs the suite's own check (`suite.check_fsdp`: the same model, data, steps, optimizer and gap metric,
||p_fsdp - p_ref|| / ||p_ref - p_initial|| per tensor, and the same for the first step's gradients) in this
process's Python, with torch from that Python:

- clean, for --seeds seeds (against the default reference: bf16 autocast on GPUs, fp32 on CPU), and on a GPU
  also against a plain fp32 reference (--fp32-reference, for the record: how much of the gap is bf16 itself);
- each gradient mutant of tests/mutants/grad_scale (weight-matrix gradients of the sharded model x0, x0.5, x2
  before the reduce-scatter), put on the spawned ranks' Python path with IB_MUTANT_GRAD_SCALE.

Prints and writes JSON (default results/fsdp_noise_<backend>_<run kind>.json): per run the worst and median gap of
parameters and gradients, the worst tensor, the losses, wall time; a summary (clean maximum, mutants'
minimum) and the tolerance the rule gives: the geometric mean of the clean maximum and the smallest mutant
gap, rounded down to one significant digit (equal margins on both sides; each must be at least 3x). On a GPU
host:

    python benchmarks/fsdp_noise.py --seeds 5            # NCCL over all GPUs (world = GPU count, as the suite)
    python benchmarks/fsdp_noise.py --backend gloo --world 2 --seeds 5   # the CPU numbers
    python benchmarks/fsdp_noise.py --backend gloo --world 2 --run-kind cuda --seeds 3   # the GPU run's
        # configuration (bf16 mixed precision) on CPU: an estimate of bf16 noise until a GPU has measured it
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "imagebuilder" / "smoke"))
import suite  # noqa: E402 - the suite is a standalone script, not a package module here

MUTANT = ROOT / "tests" / "mutants" / "grad_scale"
SCALES = {"grad_zero": "0", "grad_half": "0.5", "grad_double": "2"}


def one(backend: str, world: int, seed: int, reference_autocast: bool | None, scale: str | None,
        run_kind: str) -> dict[str, Any]:
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "IB_MUTANT_GRAD_SCALE")}
    if scale is not None:  # the spawned ranks start Python afresh: sitecustomize.py from MUTANT patches FSDP2
        os.environ["PYTHONPATH"] = os.pathsep.join([str(MUTANT), *filter(None, [saved["PYTHONPATH"]])])
        os.environ["IB_MUTANT_GRAD_SCALE"] = scale
    t0 = time.monotonic()
    try:
        step, compiled = suite.check_fsdp(backend, world, seed, reference_autocast, run_kind)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    keep = ("worst", "worst_tensor", "median", "over_tolerance")
    return {"seed": seed, "scale": scale, "status": step["status"], "reason": step["reason"][:300],
            "reference": (step.get("run") or {}).get("reference"),
            "param_gap": {k: (step.get("param_gap") or {}).get(k) for k in keep},
            "grad_gap": {k: (step.get("grad_gap") or {}).get(k) for k in keep},
            "per_tensor_param_gap": (step.get("param_gap") or {}).get("per_tensor"),
            "loss_drop": step.get("loss_drop"), "losses": step.get("value"), "ref_losses": step.get("expected"),
            "compiled": compiled["status"], "compile_counts": compiled.get("value"),
            "wall_s": round(time.monotonic() - t0, 2)}


def worst(run: dict[str, Any]) -> float:
    values = [run["param_gap"]["worst"], run["grad_gap"]["worst"]]
    return max(v if v is not None else math.inf for v in values)


def round_down(value: float) -> float:
    """Down to one significant digit: 0.00145 -> 0.001, 0.067 -> 0.06."""
    if not value > 0 or math.isinf(value):
        return value
    exp = math.floor(math.log10(value))
    return float(f"{math.floor(value / 10**exp) * 10**exp:.1g}")


def main() -> None:
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="nccl" if gpus else "gloo")
    parser.add_argument("--world", type=int, default=gpus or 2)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--run-kind", choices=("cpu", "cuda"), default=None,
                        help="which of the suite's runs (FSDP_RUN): default the backend's; `--backend gloo --run-kind "
                             "cuda` runs the GPU run (bf16 mixed precision, dim 512) on CPU, an estimate of bf16 noise")
    parser.add_argument("--no-fp32-reference", action="store_true", help="skip the fp32-reference runs (bf16 runs)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    dev = args.run_kind or ("cuda" if args.backend == "nccl" else "cpu")
    out = args.out or ROOT / "benchmarks" / "results" / f"fsdp_noise_{args.backend}_{dev}.json"
    runs: dict[str, list[dict[str, Any]]] = {"clean": []}
    for seed in range(args.seeds):
        runs["clean"].append(one(args.backend, args.world, seed, None, None, dev))
        print("clean", json.dumps(runs["clean"][-1]["param_gap"]), flush=True)
    if dev == "cuda" and not args.no_fp32_reference:
        runs["clean_fp32_reference"] = [one(args.backend, args.world, s, False, None, dev) for s in range(args.seeds)]
    for name, scale in SCALES.items():
        runs[name] = [one(args.backend, args.world, s, None, scale, dev) for s in range(min(args.seeds, 2))]
        print(name, json.dumps(runs[name][-1]["param_gap"]), flush=True)
    clean_max = max(worst(r) for r in runs["clean"])
    mutant_min = min(worst(r) for name in SCALES for r in runs[name])
    tol = round_down(math.sqrt(clean_max * mutant_min))
    doc = {
        "benchmark": "fsdp_noise",
        "command": "python benchmarks/fsdp_noise.py " + " ".join(sys.argv[1:]),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
                    "gpus": [torch.cuda.get_device_name(i) for i in range(gpus)], "cpus": os.cpu_count()},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "backend": args.backend, "world": args.world, "run_kind": dev, "run": suite.FSDP_RUN[dev],
        "tolerance_in_suite": suite.FSDP_TOL[dev],
        "summary": {
            "clean_worst_gap_max": clean_max,
            "clean_worst_gap_per_seed": [worst(r) for r in runs["clean"]],
            "clean_fp32_reference_worst_gap_per_seed": [worst(r) for r in runs.get("clean_fp32_reference", [])],
            "mutant_worst_gap_min": mutant_min,
            "mutant_worst_gap": {name: [worst(r) for r in runs[name]] for name in SCALES},
            "mutants_failed": {name: [r["status"] for r in runs[name]] for name in SCALES},
            "clean_passed": [r["status"] for r in runs["clean"]],
            "tolerance_rule": "the geometric mean of the clean maximum and the smallest mutant gap (equal margins "
                              "on both sides), rounded down to one significant digit; both margins must be >= 3",
            "tolerance_from_rule": tol,
            "margins": {"tolerance_over_clean_max": round(tol / clean_max, 1) if clean_max else None,
                        "mutant_min_over_tolerance": round(mutant_min / tol, 1) if tol else None},
            "rule_holds": 3 * clean_max <= tol <= mutant_min / 3,
        },
        "runs": runs,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(doc["summary"], indent=2))


if __name__ == "__main__":
    main()
