"""matrix.yaml -> frozen `Entry` objects, in two parts (as cibuildwheel reads its options apart from resolving them).

The reader (`input/reader.py`, with `input/combos.py`) reads the file and locates its values: axes are crossed,
`exclude:` and `include:` applied the way GitHub Actions does, top-level keys cascaded into entries (an entry key
overrides the top-level key of the same name), every value checked against the strict grammar of its kind, and
every error names the file, key path and line it was written at. The resolver (`input/resolver.py`, with
`input/settings.py`) resolves each combination against the compatibility table into an `Entry`
(`input/entry.py`), every default and bound the schema's (`declarations/schema.py`). Nothing here touches the
engine or the network.

This module is the loader's public face: `load()`, and the types it returns, which the rest of the package
imports from here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..declarations import schema
from . import lookups, source
from .compat import CompatTable
from .entry import (
    SHOWN_VERSIONS,
    VERSION_FIELDS,
    BuildSettings,
    Entry,
    LayerSpec,
    Matrix,
    RunnerSettings,
    SmokeSettings,
    UserSpec,
    VulnerabilitySettings,
    cuda_toolkit,
    for_entry,
    versions_line,
)
from .reader import AXES, SMOKE_KEYS, TOP_KEYS, Reader
from .resolver import Resolver

__all__ = [
    "AXES",
    "SHOWN_VERSIONS",
    "SMOKE_KEYS",
    "TOP_KEYS",
    "VERSION_FIELDS",
    "BuildSettings",
    "Entry",
    "LayerSpec",
    "Matrix",
    "RunnerSettings",
    "SmokeSettings",
    "UserSpec",
    "VulnerabilitySettings",
    "cuda_toolkit",
    "for_entry",
    "load",
    "versions_line",
]


def load(
    path: Path,
    compat: CompatTable,
    *,
    env: Mapping[str, str] | None = None,
    registry: str | None = None,
    strict: bool = False,
    max_entries: int = schema.MAX_ENTRIES,
    facts: lookups.Facts | None = None,
) -> Matrix:
    """Read, expand, validate and resolve a matrix file; nothing here touches the engine or the network.
    Without `facts`, what the file needs from outside (a base image's Python, an index's versions) is
    collected on `Matrix.questions` and the entries that need it are left out: answer them
    (`lookups.answer`) and load again with the facts. A matrix whose axes would make more than
    `max_entries` entries is refused before any is made."""
    read = Reader(source.load(path), path.resolve().parent)
    resolver = Resolver(read, compat, dict(env if env is not None else os.environ), registry, strict, max_entries,
                        facts)
    return resolver.matrix()
