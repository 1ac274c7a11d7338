"""What a node command of an engine's graph (`imagebuilder node stage|verify`) checks before it runs anything:
whether its work is done already (every node of it under its key tag: nothing to do), which node or entry its
argument names, and whether the digest an earlier job handed over is still what the key tag names. Nodes hand
off by registry digest: a verify job tests exactly what its stage job staged."""

from __future__ import annotations

import glob
from dataclasses import dataclass, field

from ..errors import InputError
from ..plan.keys import cache_ref
from ..plan.plan import Plan, State
from ..ports.registry import Registries


def selector(name: str) -> str:
    """The --only glob of a node command's argument: one node (`ENTRY/LAYER`), or every node of one entry."""
    return glob.escape(name) if "/" in name else glob.escape(name) + "/*"


@dataclass
class Handoff:
    """One node command's view of the registry: the digest each node's key tag names, read once."""

    name: str  # the node or entry the command was given
    digests: dict[str, str | None] = field(default_factory=dict)
    node: str = ""  # the node whose digest the command hands on: the named node, or the entry's last leaf
    done: bool = False  # `staged` found the work done already (nothing to do)

    def staged(self, plan: Plan, registries: Registries) -> str | None:
        """`node stage`: "nothing to do" when every node of the selection is under its key tag in the registry and a
        trusted build record vouches for it there (the plan decided it so: the job that staged it first, here or on
        another machine, won); None when something must be staged, a pusher's image under a key tag included
        (stage builds and pushes over it)."""
        self.node = self.name if "/" in self.name else [n.id for n in plan.nodes if n.leaf][-1]
        self.digests = {n.id: registries.digest(cache_ref(n)) if n.key else None for n in plan.nodes}
        if any(digest is None for digest in self.digests.values()) or \
                any(n.status != State.CACHED or n.decision.ref is None for n in plan.nodes):
            return None
        self.done = True
        return (f"nothing to do: {self.name} is staged ({len(self.digests)} node(s) under their key tags; "
                f"{self.node} is {self.digests[self.node]})")

    def digest(self, digests: dict[str, str]) -> str | None:
        """The handed-on node's digest: what this run staged, else what its key tag named."""
        return digests.get(self.node) or self.digests.get(self.node)

    def handed(self, plan: Plan, registries: Registries, digest: str | None) -> None:
        """`node verify`: the named node is a leaf of the plan, and its key tag still names the digest the stage
        job handed over (an input error naming both when another push moved it since)."""
        node = plan.node(self.name) if "/" in self.name else None
        if node is None or node.name not in {spec.name for spec in node.entry.leaves()}:
            raise InputError(f"{self.name!r} is not a leaf node of the plan", hint="node verify takes a leaf's id, "
                             "ENTRY/LAYER, as `plan --format graph` lists it")
        now = registries.digest(cache_ref(node))
        self.digests[node.id] = now
        if digest is not None and now != digest:
            raise InputError(f"{self.name}: its key tag {cache_ref(node)} names {now}, not {digest}, the digest its "
                             "stage job handed over; nothing was tested", hint="run the stage job again, then this one")


def staged_digests(plan: Plan, registries: Registries) -> dict[str, str]:
    """leaf id -> the digest its key tag names (what a Kubernetes Job pins); an input error naming the first leaf
    that is not staged."""
    out: dict[str, str] = {}
    for node in (n for n in plan.nodes if n.leaf):
        digest = registries.digest(cache_ref(node)) if node.key else None
        if digest is None:
            raise InputError(f"{node.id} is not staged: no {cache_ref(node) if node.key else 'key tag'} in the "
                             "registry; its Job would have no digest to pin", hint="run the stage jobs first "
                             "(`imagebuilder stage`, or the graph's stage jobs)")
        out[node.id] = digest
    return out
