"""`history`: the performance history of each leaf of the matrix, read from the signed pass records beside its
images: one lineage per leaf and runner, oldest first, each point judged as the gate would judge it today."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..evidence.history import History, Point, cell_of, point_of, series
from ..evidence.passes import RegistryPasses
from ..evidence.regression import Limit, Performance, Thresholds, replay
from ..evidence.signing import Trust
from ..plan.plan import Node, Plan
from ..ports.reference import Reference
from ..ports.registry import Registry
from ..smoke.runner import Runner


@dataclass(frozen=True)
class Lineage:
    """One leaf's passes on one runner, oldest first, each with the gate's finding (`judged`, point by point)."""

    node: Node
    ref: Reference  # the leaf's repository
    runner: Runner
    points: list[Point]
    judged: list[Performance]
    limits: dict[str, Limit | None]  # per metric of the lineage: its threshold and MDR on this runner (None: none)
    gated: frozenset[str] = frozenset()  # the metrics the gate judges on this runner

    @property
    def cell(self) -> str:
        return cell_of(self.node)

    def limits_text(self) -> list[str]:
        """`metric 3 % (MDR 1.2 %)` per metric; `not gated` where no noise was measured or it is too noisy."""
        out = []
        for name, limit in sorted(self.limits.items()):
            if limit is None or name not in self.gated:
                out.append(f"{name} not gated" + (f" (MDR {limit.mdr:.1%})" if limit is not None else ""))
            else:
                where = f", measured on {limit.measured_on}" if limit.measured_on != self.runner.noise_key() else ""
                out.append(f"{name} {limit.threshold:.1%} (MDR {limit.mdr:.1%}{where})")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node.id, "repository": f"{self.ref.host}/{self.ref.repository}",
                "runner": self.runner.to_json(),
                "limits": {name: None if limit is None else {"threshold": limit.threshold, "mdr": limit.mdr,
                                                             "measured_on": limit.measured_on,
                                                             "gated": name in self.gated}
                           for name, limit in sorted(self.limits.items())},
                "points": [{**p.to_json(), "judged": j.to_json()}
                           for p, j in zip(self.points, self.judged, strict=True)]}


def lineages(plan: Plan, registry_of: Callable[[str], Registry], trust: Trust,
             thresholds: Thresholds) -> list[Lineage]:
    """Every lineage of the plan's leaves: the records of each leaf's repository (read once per registry, and
    only those signed by `trust`), one lineage per runner that has a point of the leaf's cell. A lineage two
    leaves share is listed once."""
    stores: dict[str, History] = {}
    out: list[Lineage] = []
    shown: set[tuple[str, str, str, Runner]] = set()
    for node in (n for n in plan.nodes if n.leaf):
        ref = node.entry.target
        if ref.host not in stores:
            stores[ref.host] = History(RegistryPasses(registry_of(ref.host), trust))
        found = stores[ref.host].records(ref.repository)
        cell = cell_of(node)
        runners = sorted({p.runner for p in (point_of(f) for f in found) if p is not None and p.cell == cell},
                         key=lambda r: r.label())
        for runner in (r for r in runners if (ref.host, ref.repository, cell, r) not in shown):
            shown.add((ref.host, ref.repository, cell, runner))
            points = series(found, cell, runner)
            names = sorted({name for p in points for name in p.metrics})
            out.append(Lineage(node, ref, runner, points, replay(points, thresholds, node.entry.smoke.history_window),
                               {name: thresholds.limit(runner, name) for name in names},
                               frozenset(name for name in names if thresholds.of(runner, name) is not None)))
    return out
