"""Does a host-side sleep inside `a @ b` show in the GPU throughput check's CUDA-event timing? The suite's
timing (8192^3 bf16, 5 warm-ups, median of 20, events recorded around the call), once clean and once with
Tensor.__matmul__ wrapped as tests/mutants/slow_matmul wraps it (sleep max(9x the call, 20 ms))."""

import statistics as st
import time

import torch

n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)


def tflops() -> float:
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return round(2 * n**3 / st.median(times) / 1e12, 1)


print("clean TFLOP/s", tflops())
real = torch.Tensor.__matmul__


def slow(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    t0 = time.perf_counter()
    out = real(x, y)
    time.sleep(max(9 * (time.perf_counter() - t0), 0.02))
    return out


torch.Tensor.__matmul__ = slow  # type: ignore[method-assign]
print("host sleep 20 ms in __matmul__ TFLOP/s", tflops())
