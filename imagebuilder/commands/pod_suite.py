"""`node prepare-suite`: a verify pod's first step. The tool image writes a leaf's suite, what it is told and its
environment (`smoke.pod.files`) into the folder the pod's containers share, for the pod's container of the leaf
image to run. What the suite is told comes from the plan as on a runner (`evidence.spec.Specs`), so the pod's
judge holds the report against the same spec. Prints nothing."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..errors import InputError
from ..evidence.spec import Specs
from ..plan.plan import Plan
from ..smoke import pod


def prepare(plan: Plan, leaf: str, folder: Path, host_env: Mapping[str, str]) -> list[str]:
    """Write the pod's suite files for `leaf` into `folder` (readable by any user: the leaf image's may be any);
    the names written."""
    node = next((n for n in plan.nodes if n.id == leaf), None)
    if node is None or not node.leaf:
        raise InputError(f"{leaf!r} is not a leaf node of the plan", hint="node prepare-suite takes a leaf's id, "
                         "ENTRY/LAYER, as `plan --format graph` lists it")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in pod.files(Specs(plan).told(node), host_env, timeout=node.entry.smoke.timeout).items():
        path = folder / name
        path.write_bytes(data)
        os.chmod(path, 0o644)
        written.append(name)
    return written
