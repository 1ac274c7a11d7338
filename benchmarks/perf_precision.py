"""How precisely can each gated GPU metric be measured? Issue 47's first step: candidate workloads and statistics
for the suite's performance metrics, each measured R times in fresh processes on one GPU host, with the
run-to-run spread and the minimum detectable regression (MDR) that follows from it.

    python3 benchmarks/perf_precision.py --runs 10 --out $OUT/perf_precision_<kind>.json   # on the GPU host

Each run is a fresh `python3 benchmarks/perf_precision.py --one` process (what a verify of a no-op rebuild is:
a new process in a new container). In it, every metric is timed as a benchmark, not a smoke test: warm-up first,
then W windows of K back-to-back calls between two CUDA events (one pair per window, never per call), and the
median window is the run's value. K is sized so that a window lasts about 20 ms of GPU time, so launch overhead
and host jitter are amortised. Metrics:

- matmul.bf16.4096, matmul.bf16.8192: TFLOP/s of `a @ b`;
- memory.copy: GB/s of a 1 GiB device-to-device copy (read + write);
- train.samples_per_s: a bf16 transformer-style MLP stack (sized from the GPU's memory, torch.compile'd, AdamW)
  trained on every GPU, FSDP2 (`fully_shard`) over NCCL when there are two or more;
- all_reduce.busbw.1MiB (latency-bound) and all_reduce.busbw.256MiB (bandwidth-bound): NCCL bus bandwidth,
  2(n-1)/n x bytes / time, with two or more GPUs.

Also noted per run: the SM and memory clocks, temperature and power before and after (nvidia-smi), and the other
processes on the GPUs. The summary gives per metric: the median of the runs, the robust spread (1.4826 x MAD,
as a fraction of the median), the worst shortfall of a clean run from the median of the others, and
mdr = max(2 x worst shortfall, 3 x robust spread): the smallest slowdown a single run can be told apart from
clean runs by (the gate's threshold rule, `evidence/regression.py`, is twice the worst shortfall)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WINDOW_S = 0.02  # GPU time per window: long against a launch (~5 us) and the event's resolution (~0.5 us)
WINDOWS = 15


def _windowed(fn: Any, work: float, warmup: int = 5) -> float:
    """Work per second of `fn` (work units per call), the median of WINDOWS windows of K calls each."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    per_call = max((time.perf_counter() - t0) / 3, 1e-6)
    k = max(1, int(WINDOW_S / per_call))
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():  # every rank makes the same number of calls (collectives)
        agreed = torch.tensor([k], device="cuda")
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
        k = int(agreed.item())
    rates = []
    for _ in range(WINDOWS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(k):
            fn()
        end.record()
        end.synchronize()
        rates.append(work * k / (start.elapsed_time(end) / 1000))
    return statistics.median(rates)


def single_gpu() -> dict[str, float]:
    import torch

    out = {}
    for n in (4096, 8192):
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        out[f"matmul.bf16.{n}"] = _windowed(lambda a=a, b=b: torch.matmul(a, b), 2 * n**3) / 1e12
        del a, b
    src = torch.empty(512 * 2**20, device="cuda", dtype=torch.bfloat16)  # 1 GiB
    dst = torch.empty_like(src)
    moved = 2 * src.numel() * src.element_size()
    out["memory.copy"] = _windowed(lambda src=src, dst=dst: dst.copy_(src), moved) / 1e9
    del src, dst
    torch.cuda.empty_cache()
    return out


def _train(rank: int, world: int, port: int, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    out: dict[str, float] = {}
    if world > 1:
        for size in (2**20, 256 * 2**20):
            t = torch.ones(size // 2, device="cuda", dtype=torch.bfloat16)
            rate = _windowed(lambda t=t: dist.all_reduce(t), size * 2 * (world - 1) / world)
            out[f"all_reduce.busbw.{size // 2**20}MiB"] = rate / 1e9
            del t
    width, depth = 4096, 8  # ~1.6 GB of bf16 weights, ~13 GB of AdamW state and activations at batch 16384 tokens
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)]
    model = torch.nn.Sequential(*layers).to(device="cuda", dtype=torch.bfloat16)
    if world > 1:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    batch = 16384
    x = torch.randn(batch, width, device="cuda", dtype=torch.bfloat16)
    step_model = torch.compile(model)

    def step() -> None:
        loss = step_model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    out["train.compile_s"] = time.perf_counter() - t0
    out["train.samples_per_s"] = _windowed(step, batch * world, warmup=3)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    queue.put((rank, out))


def one() -> dict[str, Any]:
    import torch
    import torch.multiprocessing as mp

    world = torch.cuda.device_count()
    result: dict[str, Any] = {"gpus": world, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                              "clocks_before": smi(), "metrics": single_gpu()}
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=_train, args=(r, world, port, queue)) for r in range(world)]
    for p in procs:
        p.start()
    got: dict[int, dict[str, float]] = {}
    deadline = time.monotonic() + 600
    while len(got) < world:
        try:
            rank, values = queue.get(timeout=5)
            got[rank] = values
        except Exception:  # noqa: BLE001 - queue.Empty: see whether a rank died
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                raise RuntimeError(f"a training rank ended with {dead} (or timed out)") from None
    for p in procs:
        p.join(timeout=60)
    result["metrics"].update(got[0])
    result["clocks_after"] = smi()
    return result


def smi() -> list[str]:
    query = "clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu"
    try:
        text = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return [f"nvidia-smi: {exc}"]
    return [*text.strip().splitlines(), *(f"app {line}" for line in apps.strip().splitlines())]


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    names = sorted({k for r in runs for k in r["metrics"]})
    out = {}
    for name in names:
        values = [r["metrics"][name] for r in runs if name in r["metrics"]]
        lower_better = name.endswith("_s")
        med = statistics.median(values)
        spread = 1.4826 * statistics.median(abs(v - med) for v in values) / med if med else 0.0
        worst = 0.0
        for i, v in enumerate(values):  # each clean run against the median of the others
            rest = statistics.median(values[:i] + values[i + 1:]) if len(values) > 1 else v
            short = (v - rest) / rest if lower_better else (rest - v) / rest
            worst = max(worst, short)
        out[name] = {"values": [round(v, 4) for v in values], "median": round(med, 4),
                     "robust_spread": round(spread, 4), "worst_shortfall": round(worst, 4),
                     "mdr": round(max(2 * worst, 3 * spread), 4), "better": "lower" if lower_better else "higher"}
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--one", action="store_true", help="one run, its JSON on stdout")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one()))
        return 0
    runs = []
    for i in range(args.runs):
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, __file__, "--one"], capture_output=True, text=True, timeout=900)
        if proc.returncode:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        run = json.loads(proc.stdout.strip().splitlines()[-1])
        run["seconds"] = round(time.monotonic() - t0, 1)
        runs.append(run)
        print(f"run {i + 1}: {run['seconds']} s " + " ".join(f"{k}={v:.4g}" for k, v in sorted(run["metrics"].items())),
              flush=True)
        if args.out:
            doc = {"command": f"python3 benchmarks/perf_precision.py --runs {args.runs}",
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "runs": runs, "summary": summary(runs)}
            args.out.write_text(json.dumps(doc, indent=1))
    for name, s in summary(runs).items():
        print(f"{name:28s} median {s['median']:>10.4g}  spread {100 * s['robust_spread']:5.2f} %  worst "
              f"{100 * s['worst_shortfall']:5.2f} %  mdr {100 * s['mdr']:5.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
