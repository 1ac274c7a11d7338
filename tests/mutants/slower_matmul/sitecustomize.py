"""Mutant `slower_matmul`: every 2-D matmul (`torch.matmul`, `a @ b`) does more work: after the real product,
the first IB_MUTANT_MATMUL_EXTRA of `a`'s rows (default 0.25) are multiplied by `b` again, and thrown away. The
extra work is real compute on the same device, so it shows in CUDA events and in host timers alike: 0.25 makes a
large matmul about 20 % slower (above the absolute floor on an H100: caught by the history, not the floor), 1.0
about half as fast. Must be caught by the performance history (`matmul.*` metrics), never by a floor.

Installed as sitecustomize.py on the image's Python path (it runs in every Python process of the image);
the patch is applied as soon as `import torch` has finished."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

EXTRA = float(os.environ.get("IB_MUTANT_MATMUL_EXTRA", "0.25"))


def _more_work(fn: Any) -> Any:
    def slower(a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
        out = fn(a, b, *args, **kwargs)
        rows = int(EXTRA * a.shape[0]) if getattr(a, "dim", lambda: 0)() == 2 else 0
        if rows > 0 and getattr(b, "dim", lambda: 0)() == 2:
            fn(a[:rows], b)
        return out

    slower.__wrapped__ = fn  # type: ignore[attr-defined]
    return slower


def patch(torch: ModuleType) -> None:
    torch.matmul = _more_work(torch.matmul)  # type: ignore[attr-defined]
    torch.Tensor.__matmul__ = _more_work(torch.Tensor.__matmul__)  # type: ignore[attr-defined]


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
