"""Mutant `compile_aot_eager`: torch.compile (and so nn.Module.compile, which calls it) runs on the
`aot_eager` backend whatever it is asked: Dynamo captures the graphs and AOTAutograd compiles them, but
Inductor generates no kernel (the graphs run through eager ATen ops). Frames, graphs and AOT graphs are all
counted as before, so only a check that Inductor ran catches it: fsdp.compiled_graphs_cpu
(fsdp.compiled_graphs_cuda on GPUs), naming the backend. The training check still passes.

Installed as sitecustomize.py on the image's Python path (it runs in every Python process of the image);
the patch is applied as soon as `import torch` has finished."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any


def patch(torch: ModuleType) -> None:
    real = torch.compile

    def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 - replaces torch.compile
        kwargs["backend"] = "aot_eager"
        kwargs.pop("mode", None)  # (aot_eager takes no mode)
        return real(*args, **kwargs)

    torch.compile = compile  # type: ignore[attr-defined]


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
