"""The performance history of an image lineage, read from the pass records in the registry (so every machine
with registry access sees the same history; nothing is kept anywhere else).

A **lineage** is what makes two measurements comparable: the node (its entry and layer, one cell of the matrix,
in one repository) and the **runner** it was measured on: the GPU model(s), their count and the driver, or, for a
run without GPUs, the CPU model and count. Everything else may change between an image and its predecessors
(the pins: torch, CUDA, cuDNN, NCCL, the base image): that is what the history is for, and the gate names it.

A **point** is one image of a lineage: its digests, date, pins, metrics and what the gate said of it, from a
signed record that counts (`passes.RegistryPasses.read`). An image has one point per runner: its per-GPU-model
verdict and its pass say the same run twice, and the newest counts. Records without metrics (older ones,
ancestors' `via` records) are no points."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..smoke.judge import VERSION_CHECKS
from .metrics import Metric
from .passes import Signed, is_record_tag


@dataclass(frozen=True)
class Runner:
    """Where a suite ran, as far as its speed goes."""

    kind: str  # gpu | cpu
    models: tuple[str, ...] = ()  # GPU models (sorted), or the CPU model
    count: int = 0  # GPUs, or CPUs
    driver: str | None = None

    def label(self) -> str:
        what = " + ".join(self.models) or "unknown"
        if self.kind == "gpu":
            return f"{self.count}x {what}, driver {self.driver or 'unknown'}"
        return f"CPU {what} x{self.count}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "models": list(self.models), "count": self.count, "driver": self.driver}

    @classmethod
    def from_json(cls, doc: Any) -> Runner | None:
        try:
            return cls(str(doc["kind"]), tuple(str(m) for m in doc.get("models") or ()), int(doc.get("count") or 0),
                       str(doc["driver"]) if doc.get("driver") else None)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def pins_of(expect: Mapping[str, Any]) -> dict[str, str]:
    """The versions a record's image was built with (its expectations), by name; absent ones left out."""
    return {k: str(expect[k]) for k in VERSION_CHECKS if expect.get(k) is not None}


@dataclass(frozen=True)
class Point:
    """One image of a lineage."""

    manifest: str
    config: str
    date: str
    node: str
    runner: Runner
    pins: Mapping[str, str]
    metrics: Mapping[str, Metric]
    verdict: str  # what the gate said when it was verified: first | ok | accepted | regressed
    signer: str = ""

    @property
    def baseline(self) -> bool:
        """Whether it may stand in a baseline: a pass the gate let through (an accepted regression is the new
        normal), never a regressed one."""
        return self.verdict in ("first", "ok", "accepted")

    def to_json(self) -> dict[str, Any]:
        return {"manifest": self.manifest, "config": self.config, "date": self.date, "node": self.node,
                "runner": self.runner.to_json(), "pins": dict(self.pins), "verdict": self.verdict,
                "signer": self.signer, "metrics": {k: m.to_json() for k, m in self.metrics.items()}}


def point_of(found: Signed) -> Point | None:
    """The point a counted record makes, or None (no performance in it, or not about a stored digest)."""
    record = found.record
    perf = record.performance
    if not isinstance(perf, Mapping) or record.manifest is None or not record.passed:
        return None
    runner = Runner.from_json(perf.get("runner"))
    metrics = {m.name: m for m in (Metric.from_json(doc) for doc in perf.get("metrics") or []) if m is not None}
    if runner is None or not metrics:
        return None
    return Point(record.manifest, record.config, record.date, record.node, runner, pins_of(record.expect), metrics,
                 str(perf.get("verdict") or "ok"), found.signer())


def series(found: Iterable[Signed], node: str, runner: Runner, *, image: str | None = None) -> list[Point]:
    """The lineage of `node` on `runner`, oldest first, one point per image (its newest record); without the
    image `image` (by image ID: the one being judged, whose predecessors these are)."""
    newest: dict[str, Point] = {}
    for signed in found:
        point = point_of(signed)
        if point is None or point.node != node or point.runner != runner or point.config == image:
            continue
        if point.manifest not in newest or point.date > newest[point.manifest].date:
            newest[point.manifest] = point
    return sorted(newest.values(), key=lambda p: (p.date, p.manifest))


class RecordReader(Protocol):
    """What the history needs of a registry's pass records (`passes.RegistryPasses`)."""

    def tags_of(self, repo: str) -> list[str]: ...

    def read_found(self, repo: str, tag: str) -> Signed | None: ...


@dataclass
class History:
    """Every counted record of a repository, read once per run."""

    reader: RecordReader
    _found: dict[str, dict[str, Signed]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def records(self, repo: str) -> list[Signed]:
        with self._lock:
            if repo not in self._found:
                read = {tag: self.reader.read_found(repo, tag) for tag in self.reader.tags_of(repo)
                        if is_record_tag(tag)}
                self._found[repo] = {tag: f for tag, f in read.items() if f is not None}
            return list(self._found[repo].values())

    def lineage(self, repo: str, node: str, runner: Runner, *, image: str | None = None) -> list[Point]:
        return series(self.records(repo), node, runner, image=image)
