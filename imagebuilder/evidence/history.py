"""The performance history of an image lineage, read from the pass records in the registry (so every machine
with registry access sees the same history; nothing is kept anywhere else).

A **lineage** is what makes two measurements comparable: a stable **cell** of the matrix (the layer node with
its flavor and accelerator family, e.g. `cuda-runtime/task`; or the entry's own `name:` where the user gives one)
and the **runner** it was measured on: the GPU model(s), their count, the driver and the interconnect as the host
names them, or, for a run without GPUs, the CPU model and count. The versions are **pins** that change along it
(torch, CUDA, cuDNN, NCCL, Python, the base image): that is what the history is for, and the gate names them.

A cell holds one **line** per version (torch, CUDA, Python), so that a matrix holding 2.9, 2.10 and 2.11 side by
side judges each against its own past. An image of a version the cell has no pass of yet continues the line of
the newest older version (`line`): an upgrade is judged against the images before it, and two versions that are
both current never stand in for each other.

A **point** is one image of a lineage: its digests, date, pins, metrics and what the gate said of it, from a
signed record that counts (`passes.RegistryPasses.read`). An image has one point per runner: its per-GPU-model
verdict and its pass say the same run twice, and the newest counts. Records without metrics (older ones,
ancestors' `via` records) are no points."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from packaging.version import InvalidVersion, Version

from ..smoke.judge import VERSION_CHECKS
from ..smoke.metrics import Metric
from ..smoke.runner import Runner
from .passes import Signed, is_record_tag

if TYPE_CHECKING:
    from ..plan.plan import Node

LINE = ("torch", "cuda", "python")  # the versions a cell keeps one line each of


def cell_of(node: Node) -> str:
    """The node's stable cell: its entry's name where the user gave one, else its flavor and accelerator family
    (`cuda-runtime`, `cpu-devel`, and the base image where the matrix names one), and its layer."""
    entry = node.entry
    default = f"{entry.torch}-{entry.accelerator}-py{entry.python}-{entry.flavor}"
    family = re.sub(r"[0-9.]+$", "", entry.accelerator).replace("cu", "cuda", 1) if entry.accelerator != "cpu" \
        else "cpu"
    named = entry.id if not entry.id.startswith(default) else f"{family}-{entry.flavor}{entry.id[len(default):]}"
    return f"{named}/{node.name}"


def _version(value: str | None) -> Version:
    try:
        return Version(value or "0")
    except InvalidVersion:
        return Version("0")


def line_key(pins: Mapping[str, str]) -> tuple[Version, ...]:
    """The line of a cell an image belongs to: its torch, CUDA and Python versions, in that order."""
    return tuple(_version(pins.get(name)) for name in LINE)


def line_text(pins: Mapping[str, str]) -> str:
    return " ".join(f"{name} {pins[name]}" for name in LINE if pins.get(name))


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
    cell: str = ""  # the lineage's cell (older records: their node)

    @property
    def baseline(self) -> bool:
        """Whether it may stand in a baseline: a pass the gate let through (an accepted regression is the new
        normal), never a regressed one."""
        return self.verdict in ("first", "ok", "accepted")

    def to_json(self) -> dict[str, Any]:
        return {"manifest": self.manifest, "config": self.config, "date": self.date, "node": self.node,
                "runner": self.runner.to_json(), "pins": dict(self.pins), "verdict": self.verdict,
                "signer": self.signer, "cell": self.cell, "metrics": {k: m.to_json() for k, m in self.metrics.items()}}


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
                 str(perf.get("verdict") or "ok"), found.signer(), str(perf.get("cell") or record.node))


def series(found: Iterable[Signed], cell: str, runner: Runner, *, image: str | None = None) -> list[Point]:
    """The lineage of `cell` on `runner` (every line), oldest first, one point per image (its newest record);
    without the image `image` (by image ID: the one being judged, whose predecessors these are)."""
    newest: dict[str, Point] = {}
    for signed in found:
        point = point_of(signed)
        if point is None or point.cell != cell or point.runner != runner or point.config == image:
            continue
        if point.manifest not in newest or point.date > newest[point.manifest].date:
            newest[point.manifest] = point
    return sorted(newest.values(), key=lambda p: (p.date, p.manifest))


def line(points: Sequence[Point], pins: Mapping[str, str]) -> list[Point]:
    """The points an image of these `pins` is judged against: its own line's, when it has a pass the gate let
    through; else the line of the newest older version that has one (an upgrade continues it); else none (the
    first of its line: the floors judge it). Never a newer version's line: versions side by side keep theirs."""
    own = line_key(pins)
    if any(p.baseline and line_key(p.pins) == own for p in points):
        return [p for p in points if line_key(p.pins) == own]
    older = [line_key(p.pins) for p in points if p.baseline and line_key(p.pins) < own]
    return [p for p in points if line_key(p.pins) == max(older)] if older else []


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

    def lineage(self, repo: str, cell: str, runner: Runner, *, image: str | None = None) -> list[Point]:
        return series(self.records(repo), cell, runner, image=image)
