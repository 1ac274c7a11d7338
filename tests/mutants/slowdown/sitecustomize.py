"""Mutant `slowdown`: named GPU work takes a given fraction longer, and nothing else changes (issue 47's injected
regressions). `slowdown.json` beside this file says how much and of what:

    {"fraction": 0.05, "targets": ["matmul", "copy", "train", "all_reduce"], "by": "matmul"}

- `matmul`: every CUDA `torch.matmul` / `a @ b`;  `copy`: every CUDA-to-CUDA `Tensor.copy_` of 1 MiB or more;
- `all_reduce`: every `torch.distributed.all_reduce` of CUDA tensors;
- `train`: every optimizer step (a global step hook): the whole training step, forward and backward included.

After each such call the same CUDA stream does `fraction` of the call's own GPU time of other work, so the slowdown
is real device time on the stream the work ran on: CUDA events, host timers and the suite's windows all see it.
`by` says what that work is: `spin` (the default) spins (`torch.cuda._sleep`, its clock rate measured against
CUDA events and kept up to date); `matmul` runs bf16 2048^3 matmuls (`torch.mm` into a buffer, timed against
CUDA events and kept up to date; a fraction of one is carried to the next call), which draw power as the work
does, so the GPU's clock does not rise around them. Each call's GPU time is
measured once per shape (a matmul, a copy, an all_reduce: on its first call, synchronised) or, for a training
step, as the median of the first steps after the first one (synchronised; later steps run without one).

Measured on an H200 (benchmarks/results/perf_signal_1xh200.json): a spin shows in full where the work is bound by
memory bandwidth (copy: 5 % gave a 4.8..4.9 % lower rate), not where it is bound by the GPU's power cap: an idle
spin lowers the power drawn, the clock rises for the work around it, and 5 % gave a 1..3 % slower matmul and a
3..4 % slower training step (10 %: 6 %). The slowdown this mutant makes is what the metric shows, not `fraction`:
hence `by: matmul`, compute-bound work in place of the spin.

Installed as sitecustomize.py on the image's Python path (it runs in every Python process of the image, the
suite's spawned ranks included); the patch is applied as soon as `import torch` has finished. Says what it does on
stderr once per process."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import itertools
import json
import os
import statistics
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

CONFIG = json.loads((Path(__file__).resolve().parent / "slowdown.json").read_text())
FRACTION = float(CONFIG["fraction"])
TARGETS = frozenset(CONFIG["targets"])
BY = str(CONFIG.get("by") or "spin")
FILLER_N = 2048  # the filler matmul: bf16 2048^3 (17 GFLOP, ~25 us on an H200): several per 5 % of an 8192^3
CALIBRATION_STEPS = 4  # optimizer steps timed (synchronised) after the first, before the slowdown starts
MIN_COPY_BYTES = 1 << 20


class _Spin:
    """GPU time on the current stream, in seconds, by `torch.cuda._sleep` (which spins for clock cycles). The
    cycles a second are measured against CUDA events around the spins themselves and kept up to date (the SM clock
    moves with load and temperature): each spin is timed, and the finished ones correct the rate."""

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.cycles_per_s = 0.0
        self.pending: list[tuple[Any, Any, int]] = []

    def __call__(self, seconds: float) -> None:
        if seconds <= 0:
            return
        torch = self.torch
        if not self.cycles_per_s:
            self.calibrate()
        self._update()
        cycles = max(1, int(seconds * self.cycles_per_s))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        self.pending.append((start, end, cycles))

    def _update(self) -> None:
        done = [p for p in self.pending if p[1].query()]
        self.pending = [p for p in self.pending if not p[1].query()]
        for start, end, cycles in done:
            took = start.elapsed_time(end) / 1000
            if took > 0:
                self.cycles_per_s = 0.7 * self.cycles_per_s + 0.3 * cycles / took

    def calibrate(self) -> None:
        """The rate now, from three spins of about a millisecond (synchronised)."""
        torch = self.torch
        torch.cuda._sleep(1000)
        cycles, took = 2_000_000, []
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            took.append(start.elapsed_time(end) / 1000)
        self.cycles_per_s = cycles / statistics.median(took)


class _Filler:
    """GPU time on the current stream, in seconds, by bf16 FILLER_N^3 matmuls (`torch.mm`, never patched, into a
    buffer per device). One filler's time is measured against CUDA events (`calibrate`, after each new shape is
    timed) and the finished batches correct it; what is left of a filler is owed to the next call."""

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.seconds_per_fill = 0.0
        self.owed = 0.0
        self.buffers: dict[int, tuple[Any, Any, Any]] = {}
        self.pending: list[tuple[Any, Any, int]] = []

    def _fill(self, count: int) -> None:
        torch = self.torch
        device = torch.cuda.current_device()
        if device not in self.buffers:
            a = torch.randn(FILLER_N, FILLER_N, device=device, dtype=torch.bfloat16)
            self.buffers[device] = (a, a.clone(), torch.empty_like(a))
        a, b, c = self.buffers[device]
        for _ in range(count):
            torch.mm(a, b, out=c)

    def __call__(self, seconds: float) -> None:
        if seconds <= 0:
            return
        torch = self.torch
        if not self.seconds_per_fill:
            self.calibrate()
        self._update()
        self.owed += seconds
        count = int(self.owed / self.seconds_per_fill)
        if count < 1:
            return
        self.owed -= count * self.seconds_per_fill
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self._fill(count)
        end.record()
        self.pending.append((start, end, count))

    def _update(self) -> None:
        done = [p for p in self.pending if p[1].query()]
        self.pending = [p for p in self.pending if not p[1].query()]
        for start, end, count in done:
            took = start.elapsed_time(end) / 1000 / count
            if took > 0:
                self.seconds_per_fill = 0.7 * self.seconds_per_fill + 0.3 * took

    def calibrate(self) -> None:
        """One filler's time now: the median of three batches of ten (synchronised), after one to warm up."""
        torch = self.torch
        self._fill(1)
        took = []
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self._fill(10)
            end.record()
            end.synchronize()
            took.append(start.elapsed_time(end) / 1000 / 10)
        self.seconds_per_fill = statistics.median(took)


def _gpu_seconds(torch: ModuleType, call: Any, calls: int = 5) -> float:
    """The GPU time of one `call()` on the current stream: one call to warm up, then `calls` back to back between
    two CUDA events (synchronised), as the suite's windows time them."""
    call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / 1000 / calls


def _compiling(torch: ModuleType) -> bool:
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and getattr(compiler, "is_compiling", lambda: False)())


def _slowed(torch: ModuleType, spin: _Spin | _Filler, fn: Any, key: Any, wanted: Any) -> Any:
    """`fn`, followed on the stream by FRACTION of its own GPU time (measured once per `key(*args)`) whenever
    `wanted(*args)` holds."""
    seen: dict[Any, float] = {}

    def slower(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if _compiling(torch) or not wanted(*args):
            return out
        k = key(*args)
        if k not in seen:
            seen[k] = _gpu_seconds(torch, lambda: fn(*args, **kwargs))
            spin.calibrate()
        spin(FRACTION * seen[k])
        return out

    slower.__wrapped__ = fn  # type: ignore[attr-defined]
    return slower


def _cuda(*tensors: Any) -> bool:
    return all(getattr(t, "is_cuda", False) for t in tensors)


def patch(torch: ModuleType) -> None:
    spin = _Filler(torch) if BY == "matmul" else _Spin(torch)
    print(f"MUTANT slowdown: {sorted(TARGETS)} take {FRACTION:.1%} longer on the GPU (by {BY})", file=sys.stderr,
          flush=True)
    if "matmul" in TARGETS:
        def shape(a: Any, b: Any, *_: Any) -> Any:
            return (tuple(a.shape), tuple(b.shape), a.dtype)

        torch.matmul = _slowed(torch, spin, torch.matmul, shape,  # type: ignore[attr-defined]
                               lambda a, b, *_: _cuda(a, b))
        torch.Tensor.__matmul__ = _slowed(torch, spin, torch.Tensor.__matmul__, shape,  # type: ignore[method-assign]
                                          lambda a, b, *_: _cuda(a, b))
    if "copy" in TARGETS:
        torch.Tensor.copy_ = _slowed(  # type: ignore[method-assign]
            torch, spin, torch.Tensor.copy_, lambda dst, src, *_: (dst.numel(), dst.dtype),
            lambda dst, src, *_: _cuda(dst, src) and dst.numel() * dst.element_size() >= MIN_COPY_BYTES)
    if "all_reduce" in TARGETS:
        import torch.distributed as dist

        dist.all_reduce = _slowed(torch, spin, dist.all_reduce,  # type: ignore[attr-defined]
                                  lambda t, *_: (t.numel(), t.dtype), lambda t, *_: _cuda(t) and t.numel() > 64)
    if "train" in TARGETS:
        _slow_steps(torch, spin)


def _slow_steps(torch: ModuleType, spin: _Spin | _Filler) -> None:
    """Every optimizer step, once CALIBRATION_STEPS steps after the first two have been timed on the GPU (CUDA
    events at the ends of consecutive steps, the GPU time between them, as the suite's windows see it), is
    followed by FRACTION of their median."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    state: dict[str, Any] = {"ends": [], "step": None, "steps": 0}

    def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return
        state["steps"] += 1
        if state["step"] is None:
            if state["steps"] <= 2:  # (the first step compiles)
                return
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            state["ends"].append(end)
            if len(state["ends"]) > CALIBRATION_STEPS:
                end.synchronize()
                ends = state["ends"]
                state["step"] = statistics.median(a.elapsed_time(b) / 1000 for a, b in itertools.pairwise(ends))
                spin.calibrate()
            return
        spin(FRACTION * state["step"])

    register_optimizer_step_post_hook(hook)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `patch` on torch once `import torch` has finished executing torch/__init__.py."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            real_exec(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("IB_MUTANT_OFF") != "1":
    sys.meta_path.insert(0, _AfterImport())
