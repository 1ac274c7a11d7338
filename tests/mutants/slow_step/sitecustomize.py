"""Mutant `slow_step`: every backward pass waits, once it has finished (the device synchronised), half of
the time since the previous one ended (IB_MUTANT_STEP_SLOWDOWN, default 0.5): a training step about 50 % longer,
the compiled FSDP model's samples/s about a third lower, every check still passing. Must be caught by the
performance history (`fsdp.samples_per_s`), not by a floor. Says so on stderr once per process.

Installed as sitecustomize.py on the image's Python path (it runs in every Python process of the image, the
suite's spawned ranks included); the patch is applied as soon as `import torch` has finished."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
from types import ModuleType
from typing import Any

SLOWDOWN = float(os.environ.get("IB_MUTANT_STEP_SLOWDOWN", "0.5"))


def patch(torch: ModuleType) -> None:
    real = torch.Tensor.backward
    last: list[float] = []

    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(self, *args, **kwargs)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        now = time.perf_counter()
        if last:
            time.sleep(SLOWDOWN * (now - last[-1]))
        else:
            print(f"MUTANT slow_step: every backward waits {SLOWDOWN:g} of a step", file=sys.stderr, flush=True)
        last[:] = [time.perf_counter()]
        return out

    torch.Tensor.backward = backward  # type: ignore[method-assign]


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


sys.meta_path.insert(0, _AfterImport())
