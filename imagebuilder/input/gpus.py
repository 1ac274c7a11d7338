"""The GPU peak table as the matrix loader reads it: the packaged data file (`imagebuilder/data/gpu_peaks.json`) the
smoke suite reads inside images, so a `smoke.gpu_floors` pattern is bounded by the peaks the suite judges by. A
GPU's peak is that of the table's first row all of whose words are in its name (any case), the suite's own rule
(`smoke/suite.py`'s `gpu_peak`, which runs inside images and cannot import this; a test holds the two equal)."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any


@functools.cache
def _table() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((resources.files("imagebuilder") / "data" / "gpu_peaks.json").read_text("utf-8"))
    return doc


def names() -> tuple[str, ...]:
    """GPU names as drivers report them, one or more per model of the table: what a `smoke.gpu_floors` pattern (a
    substring of the device name) is checked against when the matrix is read."""
    return tuple(str(name) for name in _table()["names"])


def peak(name: str) -> float | None:
    """The dense bf16 peak (TFLOP/s) of a GPU of this name, or None for a model the table does not know."""
    upper = name.upper()
    for row in _table()["peaks"]:
        if all(str(w).upper() in upper for w in row["words"]):
            return float(row["tflops"])
    return None


def gpus_matching(pattern: str) -> list[tuple[str, float]]:
    """(name, dense bf16 peak) of every GPU of `names()` whose name holds `pattern` (case-insensitive), as the
    suite matches a `smoke.gpu_floors` key; and the pattern itself where it names a model of the peak table."""
    found = [(name, peak(name)) for name in names() if pattern.strip().upper() in name.upper()]
    found += [(pattern, peak(pattern))] if peak(pattern) is not None else []
    return [(name, value) for name, value in found if value is not None]
