"""Collective bandwidth floors: what the suite's bus bandwidth (all_reduce, all_gather, reduce_scatter at its
sizes) must reach on a runner, per GPU model x GPU count x interconnect. They come from measured data only:
`data/busbw_floors.json` keeps, per runner, the values of clean whole-suite runs and the command that measured
them (`benchmarks/gpu_host_truth.sh`); a metric's floor is `FLOOR_FRACTION` of the lowest clean run. A runner the
file does not name has no floor: the judge says so ("not gated"), it never passes it silently as gated. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .metrics import Metric

FLOOR_FRACTION = 0.5  # of the lowest clean run: an order-of-magnitude loss (P2P/SHM off, a bad algorithm) fails
COLLECTIVE_PREFIXES = ("all_reduce.busbw.", "all_gather.busbw.", "reduce_scatter.busbw.")


def runner_key(models: tuple[str, ...], count: int, interconnect: str) -> str:
    """How the floors file names a runner: `2x NVIDIA H100 80GB HBM3 (nvlink)`."""
    return f"{count}x {' + '.join(sorted(models)) or 'unknown'} ({interconnect or 'unknown interconnect'})"


@dataclass(frozen=True)
class Floor:
    metric: str
    value: float  # GB/s
    lowest: float  # the lowest clean run it is a fraction of
    runs: int


@dataclass(frozen=True)
class Floors:
    """Per runner key, per metric: the floor; `source`: the file, `commands`: the command that measured each."""

    table: Mapping[str, Mapping[str, Floor]]
    commands: Mapping[str, str]
    source: str = ""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], source: str = "") -> Floors:
        table: dict[str, dict[str, Floor]] = {}
        commands: dict[str, str] = {}
        for runner in doc.get("runners") or []:
            key = runner_key(tuple(runner.get("models") or ()), int(runner.get("count") or 0),
                             str(runner.get("interconnect") or ""))
            commands[key] = str(runner.get("command") or "")
            for name, values in (runner.get("metrics") or {}).items():
                clean = [float(v) for v in values if float(v) > 0]
                if len(clean) >= 3:
                    table.setdefault(key, {})[name] = Floor(name, FLOOR_FRACTION * min(clean), min(clean), len(clean))
        return cls(table, commands, source)

    @classmethod
    def measured(cls) -> Floors:
        """The floors measured on the lent GPU hosts, shipped with the package."""
        path = resources.files("imagebuilder") / "data" / "busbw_floors.json"
        return cls.from_doc(json.loads(path.read_text(encoding="utf-8")), "imagebuilder/data/busbw_floors.json")

    def judge(self, metrics: Mapping[str, Metric], models: tuple[str, ...], count: int,
              interconnect: str) -> tuple[list[str], list[str]]:
        """(failures, notes) for a run on this runner: each collective metric below its floor, or missing where a
        floor exists, fails; a runner with no floors is said in a note (not gated)."""
        if count < 2:
            return [], []
        key = runner_key(models, count, interconnect)
        floors = self.table.get(key)
        if not floors:
            return [], [f"collective bandwidth not gated: no floor measured for {key} in {self.source or 'the floors'}"
                        f" (recorded, and judged by the regression gate within its lineage)"]
        failures = []
        for name, floor in sorted(floors.items(), key=lambda item: (-_size(item[0]), item[0])):
            metric = metrics.get(name)
            if metric is None:
                failures.append(f"{name} not measured (floor {floor.value:.4g})")
            elif metric.value < floor.value:
                failures.append(f"{name} {metric.value:.4g} GB/s (floor {floor.value:.4g})")
        return failures, []

    def why(self, failures: list[str], models: tuple[str, ...], count: int, interconnect: str, cause: str) -> str:
        """One message for the collectives below their floors: the runner, the likely cause, each metric (the
        largest sizes first), and where the floors come from."""
        key = runner_key(models, count, interconnect)
        runs = min((f.runs for f in (self.table.get(key) or {}).values()), default=0)
        return (f"collective bus bandwidth below its floor on {key}; likely cause: {cause}: " + ", ".join(failures)
                + f" (each floor {FLOOR_FRACTION:g} x the lowest of {runs} clean runs, {self.source})")


def _size(name: str) -> int:
    """The size a metric's name ends in, in MiB (`all_reduce.busbw.256MiB`: 256); 0 when it names none."""
    tail = name.rsplit(".", 1)[-1]
    return int(tail[:-3]) if tail.endswith("MiB") and tail[:-3].isdigit() else 0
