"""Mutant `compile_noop`: torch.compile and nn.Module.compile silently do nothing (the model runs eagerly,
without a word). Must be caught by fsdp.compiled_graphs_cpu (fsdp.compiled_graphs_cuda on GPUs); the
training check itself still passes (eager FSDP is right, just not compiled).

Installed as sitecustomize.py on the image's Python path (it runs in every Python process of the image);
the patch is applied as soon as `import torch` has finished."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any


def patch(torch: ModuleType) -> None:
    def compile(model: Any = None, **_kwargs: Any) -> Any:  # noqa: A001 - replaces torch.compile
        return model if model is not None else (lambda fn: fn)

    def module_compile(self: Any, *_args: Any, **_kwargs: Any) -> None:
        return None

    torch.compile = compile  # type: ignore[attr-defined]
    torch.nn.Module.compile = module_compile  # type: ignore[attr-defined]


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
