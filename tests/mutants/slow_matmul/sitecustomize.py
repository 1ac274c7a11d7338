"""Mutant `slow_matmul`: every matmul is about 10x slower (must be caught by throughput.cpu, or
throughput.cuda:N on a GPU). Installed as sitecustomize.py on the image's Python path, so it runs in every
Python process of the image, the suite's children included.

After `import torch` finishes, torch.matmul and Tensor.__matmul__ (`a @ b`) are wrapped: each call runs the
real matmul, then sleeps 9x the time the call took on the host, and at least IB_MUTANT_MATMUL_SLEEP_S
(default 0.02 s). On CPU the call's own time is the matmul's (x10 in all); on a GPU the call only launches
the kernel, so the fixed sleep is what shows (0.02 s against ~1.4 ms for an 8192^3 bf16 matmul on an H100)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
from types import ModuleType
from typing import Any

FACTOR = 9.0
MIN_SLEEP = float(os.environ.get("IB_MUTANT_MATMUL_SLEEP_S", "0.02"))


def _slowed(fn: Any) -> Any:
    def slow(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        time.sleep(max(FACTOR * (time.perf_counter() - t0), MIN_SLEEP))
        return out

    slow.__wrapped__ = fn  # type: ignore[attr-defined]
    return slow


def patch(torch: ModuleType) -> None:
    torch.matmul = _slowed(torch.matmul)  # type: ignore[attr-defined]
    torch.Tensor.__matmul__ = _slowed(torch.Tensor.__matmul__)  # type: ignore[attr-defined]


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `patch` on torch once `import torch` has finished executing torch/__init__.py."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        real_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            real_exec(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _AfterImport())
