"""Mutant `grad_zero` / `grad_half` / `grad_double`: FSDP2 loses or scales the gradients of every weight
matrix (parameters with 2 or more dimensions) of the SHARDED model; biases and norms are untouched, and so is
any model that is not sharded (the suite's unsharded reference stays right). Must be caught by
fsdp.compiled_step_cpu (fsdp.compiled_step_cuda on GPUs).

Installed as sitecustomize.py on the image's Python path (it runs in every Python process, the suite's spawned
ranks included). The scale comes from IB_MUTANT_GRAD_SCALE: 0 (grad_zero, the default), 0.5 (grad_half),
2 (grad_double). When FSDP2's parameter-group module is imported, its `foreach_reduce` (the reduce-scatter
of a group's unsharded gradients into the sharded ones) is wrapped: the unsharded gradients of 2-D+ parameters
are multiplied in place on the current stream, before the reduce-scatter reads them."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

SCALE = float(os.environ.get("IB_MUTANT_GRAD_SCALE", "0"))
TARGETS = ("torch.distributed.fsdp._fully_shard._fsdp_param_group",  # torch >= 2.6
           "torch.distributed._composable.fsdp._fsdp_param_group")  # torch 2.4, 2.5


def patch(module: ModuleType) -> None:
    real = module.foreach_reduce
    said = []

    def foreach_reduce(fsdp_params: Any, unsharded_grads: Any, *args: Any, **kwargs: Any) -> Any:
        hit = [g for g in unsharded_grads if g.ndim >= 2]
        for g in hit:
            g.mul_(SCALE)
        if not said:
            said.append(True)
            print(f"MUTANT grad_scale: {len(hit)} of {len(unsharded_grads)} gradients x{SCALE:g} before the "
                  "reduce-scatter", file=sys.stderr, flush=True)
        return real(fsdp_params, unsharded_grads, *args, **kwargs)

    module.foreach_reduce = foreach_reduce


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `patch` on a TARGETS module once its code has run."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in TARGETS:
            return None
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
