"""What a suite's report measured, for the performance history. The suite reports every repetition of each
measurement (`suite.metric`); what a metric means (its unit, which way is better, the statistic that stands for a
run) is the host's (`SEMANTICS`), never the report's: a metric the table does not name is not recorded. The
value is computed here, on the host, from the repetitions. Across GPUs a metric's value is the median of the
GPUs' values: a regression of the image slows every GPU, one slow GPU is the host's. Repetitions that are not
finite positive numbers make no metric (a report cannot feed the history nonsense). Pure.

A metric's name says how it is measured (`matmul.bf16.8192`, `fsdp.samples_per_s`): a change of method is a
new name, so a history never compares two methods."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

STATS = ("median", "max", "min")
BETTER = ("higher", "lower")
# What each metric the suite measures means, by name or by a prefix ending in ".": (unit, better, statistic).
SEMANTICS: tuple[tuple[str, str, str, str], ...] = (
    # Measured as benchmarks (suite.py's `_windowed`: the rate of each window of back-to-back calls; the median
    # window stands for the run). The gate judges these on GPUs (issue 47).
    ("bench.matmul.bf16.", "TFLOP/s", "higher", "median"),
    ("bench.memory.copy", "GB/s", "higher", "median"),
    ("bench.train.samples_per_s", "samples/s", "higher", "median"),
    ("bench.all_reduce.busbw.", "GB/s", "higher", "median"),
    # Timed call by call (GPU metrics of suites before issue 47: still read from older records), or on CPUs.
    ("matmul.bf16.", "TFLOP/s", "higher", "median"),
    ("matmul.fp32.", "GFLOP/s", "higher", "max"),
    ("memory.copy", "GB/s", "higher", "median"),
    ("fsdp.samples_per_s", "samples/s", "higher", "median"),
    ("fsdp.compile_s", "s", "lower", "median"),
    ("all_reduce.busbw.", "GB/s", "higher", "median"),
    ("all_gather.busbw.", "GB/s", "higher", "median"),
    ("reduce_scatter.busbw.", "GB/s", "higher", "median"),
)


def semantics(name: str) -> tuple[str, str, str] | None:
    """(unit, better, statistic) of a metric by its name, from the host's table; None: not a metric of the suite."""
    return next(((unit, better, stat) for key, unit, better, stat in SEMANTICS
                 if name == key or (key.endswith(".") and name.startswith(key))), None)


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: str  # higher | lower
    value: float  # the run's value: the statistic of the repetitions (the median over GPUs)
    reps: tuple[float, ...]  # every repetition (all GPUs')
    spread: float  # (max - min) / value over the repetitions of one GPU, the largest: how noisy the run was

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit, "better": self.better, "value": round(self.value, 4),
                "spread": round(self.spread, 4), "reps": [round(r, 4) for r in self.reps]}

    @classmethod
    def from_json(cls, doc: Any) -> Metric | None:
        """A metric read back from a record; None for anything malformed."""
        try:
            metric = cls(str(doc["name"]), str(doc["unit"]), str(doc["better"]), float(doc["value"]),
                         tuple(float(r) for r in doc.get("reps") or ()), float(doc.get("spread") or 0.0))
        except (KeyError, TypeError, ValueError):
            return None
        return metric if metric.better in BETTER and _usable(metric.value) else None

    def worse(self, than: float) -> float:
        """How much worse this value is than `than`, as a fraction of `than` (negative: better)."""
        change = (than - self.value) / than
        return change if self.better == "higher" else -change


def _usable(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _stat(reps: list[float], stat: str) -> float:
    return max(reps) if stat == "max" else min(reps) if stat == "min" else statistics.median(reps)


def _one(doc: Any) -> tuple[str, str, str, str, list[float]] | None:
    if not isinstance(doc, Mapping):
        return None
    reps = doc.get("reps")
    if not isinstance(reps, list) or not reps or not all(isinstance(r, (int, float)) for r in reps):
        return None
    values = [float(r) for r in reps]
    if not all(_usable(v) for v in values):
        return None
    meaning = semantics(doc["name"]) if isinstance(doc.get("name"), str) else None
    if meaning is None:  # (what the report says a metric means counts for nothing)
        return None
    unit, better, stat = meaning
    return str(doc["name"]), unit, better, stat, values


def metrics_of(checks: Iterable[Any]) -> dict[str, Metric]:
    """Every metric in a report's checks (records of passed checks only: a failed check's numbers are not a
    measurement of a working image), by name."""
    found: dict[str, list[tuple[str, str, str, list[float]]]] = {}
    for check in checks:
        if not isinstance(check, Mapping) or check.get("status") != "pass":
            continue
        for doc in check.get("metrics") or []:
            one = _one(doc)
            if one is not None:
                found.setdefault(one[0], []).append(one[1:])
    out = {}
    for name, runs in sorted(found.items()):
        unit, better, stat, _ = runs[0]
        runs = [r for r in runs if r[:3] == (unit, better, stat)]
        values = [_stat(reps, stat) for *_, reps in runs]
        spread = max((max(reps) - min(reps)) / _stat(reps, stat) for *_, reps in runs)
        out[name] = Metric(name, unit, better, statistics.median(values),
                           tuple(r for *_, reps in runs for r in reps), spread)
    return out
