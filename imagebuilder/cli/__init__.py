"""The command line: each command parses its flags, calls one function (a run of steps, `steps.run`, or a flow of
`commands`) and prints what it returns. Errors become exit codes in one place (`main.main`).

The modules, by audience: `root` (the group and its global options), `planning` and `compat` (read the matrix,
build nothing), `running` and `nodes` (run steps), `evidence` and `keys` (what a registry holds), `smoke` (one
image). `context` is what an invocation shares; `options`, the flags declared once."""

from __future__ import annotations

from . import compat, evidence, keys, locking, nodes, planning, running, smoke  # noqa: F401 - each adds its commands to `cli`
from .context import Context, decide, default_cache_dir, load_plan
from .main import main
from .root import cli

__all__ = ["Context", "cli", "decide", "default_cache_dir", "load_plan", "main"]
