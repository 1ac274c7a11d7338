"""all_reduce bus bandwidth between the GPUs of one host, measured the way nccl-tests' all_reduce_perf
measures it, plus a per-repetition bf16 matmul on every GPU. Standard library and torch only: it is
copied into an image and run there as well as on the host (benchmarks/gpu_multi.py does both).

    python allreduce_busbw.py --out FILE [--min-bytes 8] [--max-bytes 1073741824] [--factor 2]
                              [--warmup 5] [--iters 20] [--reps 3]

One process per GPU (world size = the visible GPUs), NCCL, float32 sum, in place (torch has no
out-of-place all_reduce). Per size, as all_reduce_perf does: `warmup` untimed ops, then `iters` ops
back to back timed on the wall clock between two stream synchronisations; time = that span / iters,
averaged over the ranks; algbw = bytes / time; busbw = algbw * 2 (n - 1) / n (GB/s = 1e9 B/s; with
2 ranks busbw equals algbw). That timed loop is repeated `reps` times; every repetition is kept and
the median is the reported figure. Before timing, every size is checked once with exact values
(rank r contributes r + 1 everywhere; the sum must be n (n + 1) / 2 in every element).

NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1): set here before torch is imported unless the caller set them.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from typing import Any

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
for _k, _v in SAFE_ENV.items():
    os.environ.setdefault(_k, _v)


def sizes(lo: int, hi: int, factor: int) -> list[int]:
    out, n = [], lo
    while n <= hi:
        out.append(n)
        n *= factor
    return out


def bus_factor(world: int) -> float:
    return 2 * (world - 1) / world  # nccl-tests' all_reduce busbw factor


def matmul_reps(torch: Any, device: Any, n: int = 8192, warmup: int = 5, reps: int = 20) -> dict[str, Any]:
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(warmup):
        a @ b
    torch.cuda.synchronize(device)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    tflops = [2 * n**3 / t / 1e12 for t in times]
    del a, b
    return {"size": n, "dtype": "bfloat16", "data": "randn", "warmup": warmup, "reps": reps,
            "times_ms": [round(t * 1000, 4) for t in times], "tflops": [round(x, 1) for x in tflops],
            "median_tflops": round(2 * n**3 / statistics.median(times) / 1e12, 1)}


def worker(rank: int, world: int, port: int, args: argparse.Namespace, results: Any) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    out: dict[str, Any] = {"rank": rank}
    gpu = args.backend == "nccl"
    try:
        if gpu:
            torch.cuda.set_device(rank)
            dev = torch.device("cuda", rank)
            out["device"] = torch.cuda.get_device_name(rank)
            out["matmul"] = matmul_reps(torch, dev)  # each rank on its own GPU, before any NCCL traffic
        else:  # --backend gloo: a dry run of this script on a machine without GPUs
            dev = torch.device("cpu")
            out["device"], out["matmul"] = "cpu", None
        sync = (lambda: torch.cuda.synchronize(dev)) if gpu else (lambda: None)
        barrier = {"device_ids": [rank]} if gpu else {}
        t0 = time.monotonic()
        dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120), **({"device_id": dev} if gpu else {}))
        out["init_s"] = round(time.monotonic() - t0, 3)
        want = float(world * (world + 1) // 2)
        rows = []
        for nbytes in sizes(args.min_bytes, args.max_bytes, args.factor):
            count = max(1, nbytes // 4)
            buf = torch.full((count,), float(rank + 1), device=dev, dtype=torch.float32)
            dist.all_reduce(buf)
            wrong = int((buf != want).sum().item())
            buf.normal_()
            for _ in range(args.warmup):
                dist.all_reduce(buf)
            reps = []
            for _ in range(args.reps):
                dist.barrier(**barrier)
                sync()
                t = time.perf_counter()
                for _ in range(args.iters):
                    dist.all_reduce(buf)
                sync()
                reps.append((time.perf_counter() - t) / args.iters)
            rows.append({"bytes": count * 4, "count": count, "wrong": wrong, "time_s": reps})
            del buf
        out["rows"] = rows
        dist.barrier(**barrier)
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:400] if str(exc).strip() else ''}"
    results.put(out)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--min-bytes", type=int, default=8)
    parser.add_argument("--max-bytes", type=int, default=1 << 30)
    parser.add_argument("--factor", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl",
                        help="gloo: a dry run on CPU processes (--world of them), to try the script without GPUs")
    parser.add_argument("--world", type=int, default=0, help="processes (default: one per visible GPU)")
    args = parser.parse_args()

    import multiprocessing as mp
    import queue as queue_mod

    import torch

    world = args.world or (torch.cuda.device_count() if args.backend == "nccl" else 2)
    doc: dict[str, Any] = {
        "what": "all_reduce busbw as nccl-tests measures it (float32 sum, in place), and bf16 matmul per GPU",
        "hostname": socket.gethostname(), "python": sys.version.split()[0], "torch": torch.__version__,
        "cuda": torch.version.cuda, "backend": args.backend,
        "nccl_compiled": ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None,
        "uid": os.getuid(), "world_size": world,
        "env": {k: os.environ.get(k)
                for k in (*SAFE_ENV, "NCCL_SOCKET_IFNAME", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE")},
        "method": {"warmup": args.warmup, "iters": args.iters, "reps": args.reps, "factor": args.factor,
                   "time": "wall clock over `iters` back-to-back ops between stream syncs, / iters, mean over ranks",
                   "busbw": f"algbw * 2(n-1)/n = algbw * {bus_factor(max(world, 1)):.3f}"},
    }
    if world < 2:
        doc["error"] = f"{world} GPU(s) visible: all_reduce between GPUs needs at least 2"
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(r, world, port, args, results)) for r in range(world)]
        t0 = time.monotonic()
        for p in procs:
            p.start()
        got: list[dict[str, Any]] = []
        while len(got) < world and time.monotonic() - t0 < 600:
            try:
                got.append(results.get(timeout=1.0))
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs):
                    break
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        doc["wall_s"] = round(time.monotonic() - t0, 1)
        got.sort(key=lambda g: int(g["rank"]))
        errors = [g["error"] for g in got if g.get("error")]
        if errors or len(got) < world:
            doc["error"] = errors[0] if errors else f"only {len(got)} of {world} ranks reported"
        else:
            doc["devices"] = [g["device"] for g in got]
            doc["init_s"] = max(g["init_s"] for g in got)
            doc["matmul"] = {f"cuda:{g['rank']}": g["matmul"] for g in got if g["matmul"]}
            rows = []
            factor = bus_factor(world)
            for i, first in enumerate(got[0]["rows"]):
                per_rep = [statistics.mean(g["rows"][i]["time_s"][k] for g in got) for k in range(args.reps)]
                algbw = [first["bytes"] / t / 1e9 for t in per_rep]
                t_med = statistics.median(per_rep)
                rows.append({
                    "bytes": first["bytes"], "count": first["count"], "type": "float", "redop": "sum",
                    "wrong": sum(g["rows"][i]["wrong"] for g in got),
                    "time_us": round(t_med * 1e6, 2),
                    "algbw_gbps": round(first["bytes"] / t_med / 1e9, 2),
                    "busbw_gbps": round(first["bytes"] / t_med / 1e9 * factor, 2),
                    "reps_time_us": [round(t * 1e6, 2) for t in per_rep],
                    "reps_busbw_gbps": [round(a * factor, 2) for a in algbw],
                    "ranks_time_us": [[round(t * 1e6, 2) for t in g["rows"][i]["time_s"]] for g in got],
                })
            doc["rows"] = rows
            big = [r for r in rows if r["bytes"] >= 1 << 26]
            doc["wrong_total"] = sum(r["wrong"] for r in rows)
            doc["max_busbw_gbps"] = max(r["busbw_gbps"] for r in rows)
            doc["busbw_at_max_bytes_gbps"] = rows[-1]["busbw_gbps"]
            # nccl-tests prints "Avg bus bandwidth" over every size it ran; the big sizes say more of the link
            doc["avg_busbw_gbps"] = round(statistics.mean(r["busbw_gbps"] for r in rows), 2)
            doc["avg_busbw_64MiB_up_gbps"] = round(statistics.mean(r["busbw_gbps"] for r in big), 2) if big else None
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    summary = {k: doc.get(k) for k in ("world_size", "devices", "init_s", "max_busbw_gbps", "busbw_at_max_bytes_gbps",
                                       "wrong_total", "error")}
    print(json.dumps(summary))
    for r in doc.get("rows", []):
        print(f"{r['bytes']:>12} {r['time_us']:>10.1f} us  algbw {r['algbw_gbps']:>7.2f}  busbw {r['busbw_gbps']:>7.2f}"
              f"  wrong {r['wrong']}")
    return 0 if "error" not in doc and doc.get("wrong_total") == 0 else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
