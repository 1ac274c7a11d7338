"""The spec: what a pass is a pass of. Everything the smoke suite is told about a node's image (the entry's
versions and floors, the user, overrides, the GPU settings, every layer check inherited down the tree, the
allowed skips), hashed with the suite's source into the spec key (`passes.spec_key`). Never the image: a pass
is a spec *and* a digest. Pure; one `Specs` per run, so that the steps that test and the steps that publish
name the same spec for the same node."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..choices import FLOORS  # expectations that may be raised, never lowered
from ..errors import InputError, Where
from ..input.compat import CompatTable
from ..input.matrix import VERSION_FIELDS, Entry, SmokeSettings
from ..plan.keys import LABEL_PREFIX
from ..plan.plan import Node, Plan
from ..smoke.spec import Spec
from . import passes

CHECKS_LABEL = f"{LABEL_PREFIX}.checks"  # the layer checks an image inherits, as JSON (not part of the key)


def expectations(entry: Entry, extra: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
    """What the smoke suite checks in an entry's images: the resolved versions, floors, and overrides."""
    expect: dict[str, Any] = dict(entry.versions())
    user = entry.user.settings()
    expect["user"] = {"uid": user["uid"], "gid": user["gid"], "home": user["home"]}
    expect.update(driver_floor=entry.driver_floor, throughput_floor=entry.smoke.throughput_floor,
                  cpu_gflops_floor=entry.smoke.cpu_gflops_floor)
    if entry.smoke.gpu_floors:
        expect["gpu_floors"] = [[name, floor] for name, floor in entry.smoke.gpu_floors]
    if any(name.startswith("nvidia-cudnn") for name, _ in entry.overrides):
        expect["cudnn_override"] = True  # the loaded cuDNN is meant to differ from torch's build
    expect.update(dict(extra))
    return expect


def check_floors(given: Mapping[str, Any], floors: Mapping[str, Any], *, whose: str = "",
                 where: Where | None = None) -> None:
    """`--expect` may raise a floor, never lower it (a floor of 0 passes any image): an input error otherwise."""
    for key in FLOORS:
        if key not in given or floors.get(key) is None:
            continue
        try:
            wanted = float(given[key])
            lower = not wanted >= float(floors[key])  # (NaN compares false both ways: it would disable the floor)
        except (TypeError, ValueError):
            raise InputError(f"--expect {key}={given[key]!r} is not a number") from None
        if not math.isfinite(wanted):
            raise InputError(f"--expect {key}={given[key]!r} is not a finite number")
        if lower:
            raise InputError(f"--expect {key}={given[key]} would lower the floor{whose} ({float(floors[key]):g}); "
                             "floors can be raised, never lowered", where=where)


def layer_checks(plan: Plan, node: Node) -> list[dict[str, str]]:
    """The node's own layer checks and every ancestor's: tests are inherited down the tree."""
    chain = [*reversed(plan.ancestors(node)), node]
    return [{"name": f"layer.{n.name}.{i}", "run": cmd} for n in chain for i, cmd in enumerate(n.layer.smoke)]


@dataclass
class Specs:
    """The spec of each node of one run's plan (computed once per node). `--expect` may only raise floors: the
    suite is told the raised floors (`told`), but the spec a pass is recorded under is the matrix's (`of`,
    `key`), since a pass against a higher floor is a pass against the matrix's; so every step, and every
    machine, names one spec for one node, whatever flags it was given."""

    plan: Plan
    expect: tuple[tuple[str, str], ...] = ()
    _keys: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for key, value in self.expect:
            if key not in FLOORS:
                raise InputError(f"--expect {key}={value}: only floors may be given ({', '.join(FLOORS)}); what an "
                                 "image must contain comes from the matrix", hint="change the matrix, or test an "
                                 "image as it is with `imagebuilder smoke IMAGE --expect ...` (which records no pass)")
        for entry in self.plan.entries():
            check_floors(dict(self.expect), expectations(entry), whose=f" of {entry.id}", where=entry.where)

    def of(self, node: Node) -> Spec:
        """What a pass of this node is a pass of."""
        s = node.entry.smoke
        return Spec(expectations(node.entry), s.gpus, s.driver_dir, s.shm_size, s.env,
                    tuple(layer_checks(self.plan, node)), s.allow_skip)

    def told(self, node: Node) -> Spec:
        """What the suite is told for this node: its spec, with the floors `--expect` raised."""
        return self.of(node).raised({k: float(v) for k, v in self.expect})

    def key(self, node: Node) -> str:
        """What a pass of this node is a pass of (suite, judging rules, expectations, settings, layer checks)."""
        with self._lock:
            if node.id not in self._keys:
                self._keys[node.id] = passes.spec_key(self.of(node).to_json())
            return self._keys[node.id]


def image_expectations(labels: Mapping[str, str], table: CompatTable) -> dict[str, Any] | None:
    """What the suite checks in an image built by imagebuilder, read from its own labels: the resolved
    versions (a version it has no label for is expected absent), the user, overrides, the driver floor of
    its CUDA, and the default floors. None when the image carries no imagebuilder version labels."""
    prefix = f"{LABEL_PREFIX}.version."
    if f"{prefix}torch" not in labels:
        return None
    expect: dict[str, Any] = {key: labels.get(prefix + key) for key in VERSION_FIELDS}
    uid, _, rest = labels.get(f"{LABEL_PREFIX}.user", "").partition(":")
    gid, _, home = rest.partition(":")
    if uid.isdigit() and gid.isdigit():
        expect["user"] = {"uid": int(uid), "gid": int(gid), "home": home}
    cuda = expect.get("cuda")
    expect.update(driver_floor=table.min_driver(cuda) if cuda else None,
                  throughput_floor=SmokeSettings.throughput_floor, cpu_gflops_floor=SmokeSettings.cpu_gflops_floor)
    if "nvidia-cudnn" in labels.get(f"{LABEL_PREFIX}.overrides", ""):
        expect["cudnn_override"] = True
    return expect


def image_checks(labels: Mapping[str, str]) -> list[dict[str, str]]:
    """The layer checks an image was built to pass (its label), for `smoke IMAGE`."""
    try:
        checks = json.loads(labels.get(CHECKS_LABEL) or "[]")
    except ValueError:
        return []
    return [c for c in checks if isinstance(c, dict) and all(isinstance(c.get(k), str) for k in ("name", "run"))]
