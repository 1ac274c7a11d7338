"""What the steps of one run share: the plan, the ledger and the ports (`RunContext`), and the protocol a step
implements (`Step`). A step makes its own tasks from these; steps never call each other or the run: what one
step learns, the next reads from the ledger."""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rich.markup import escape

from ..evidence.ecosystem import Ecosystem
from ..evidence.history import History
from ..evidence.passes import LocalPasses, RegistryPasses
from ..evidence.signing import Keys
from ..evidence.sigstore import Layouts
from ..evidence.spec import Specs
from ..ledger import Ledger
from ..plan.keys import cache_ref, cache_tag
from ..plan.plan import Node, Plan
from ..ports import Engine
from ..ports.reference import parse
from ..ports.registry import Registries
from ..secrets.scan import Scanner
from .logs import Logs
from .loopback import Served
from .schedule import Task


@dataclass
class Images:
    """This engine's copy of each node's image: one engine connection per worker thread, and a node's image
    pulled, once, by the digest its key tag names when it is only in the registry."""

    engine: Engine
    ledger: Ledger
    registries: Registries
    logs: Logs
    _local: threading.local = field(default_factory=threading.local)
    _locks: dict[str, threading.Lock] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def worker(self) -> Engine:
        """This thread's own connection to the engine."""
        engine: Engine | None = getattr(self._local, "engine", None)
        if engine is None:
            engine = self._local.engine = self.engine.clone()
        return engine

    def local(self, node: Node) -> str:
        """The node's image on this engine, pulled from the registry by digest when it is only there: exactly
        the manifest the ledger knows for its key tag, else what the key tag names now."""
        with self._lock:
            lock = self._locks.setdefault(node.id, threading.Lock())
        with lock:
            record = self.ledger[node.id]
            if record.image is not None:
                return record.image
            ref = cache_ref(node)
            digest = record.digest or self.registries.digest(ref)
            by_digest = parse(ref).at(digest) if digest else ref
            self.logs.say(f"[dim]pulling {escape(by_digest)} (cached {escape(node.id)})[/]")
            image = self.worker().pull(by_digest, auth=self.registries.auth(ref))
            self.ledger.update(node.id, image=image, digest=digest)
            return image


@dataclass(frozen=True)
class RunContext:
    """What every step of one run reads and writes: the decided plan, the ledger (the only place a step leaves
    what it learned for the next), the ports, the specs and the keys. Made once per run by `steps.run.execute`
    and handed to each step; frozen: a step changes what the ledger, the images and the stores hold, never which
    ones the run has. The stores it opens (`passes`, `mirror`, `history`) read with this run's trust and write
    with its signer."""

    plan: Plan
    ledger: Ledger
    images: Images
    registries: Registries
    logs: Logs
    specs: Specs
    scanner: Scanner
    keys: Keys  # who signs this run's records, whose records count
    cache_dir: Path  # the local mirror of pass records
    served: Served = field(default_factory=Served)  # what the run serves its builds on loopback (`loopback`)
    layouts: Layouts = field(default_factory=Layouts)  # where the ecosystem's copies of evidence go (`sigstore`)
    stopping: threading.Event = field(default_factory=threading.Event)  # set once the run ends or is interrupted
    _histories: dict[str, History] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def passes(self, host: str) -> RegistryPasses:
        """The pass records of one registry, read with this run's trust and written with its signer."""
        return RegistryPasses(self.registries(host), self.keys.trust, self.keys.signer, self.ecosystem())

    def ecosystem(self) -> Ecosystem | None:
        """What writes the ecosystem's copies of this run's evidence (signed by its signer); None when this run has
        no signing key whose signatures count (it writes no evidence)."""
        return Ecosystem(self.layouts, self.keys.signer) if self.keys.signer is not None else None

    def history(self, host: str) -> History:
        """The performance history in one registry (its records read once per repository and run)."""
        with self._lock:
            if host not in self._histories:
                self._histories[host] = History(self.passes(host))
            return self._histories[host]

    def mirror(self) -> LocalPasses:
        """The local mirror of pass records in the cache folder, read with this run's trust (the folder is no
        source of trust) and written with its signer (none without one)."""
        return LocalPasses(self.cache_dir, self.keys.trust, self.keys.signer)

    def key_tag(self, node: Node) -> tuple[str, str, str]:
        """(host, repository, tag) of the node's key tag."""
        return node.entry.target.host, node.entry.target.repository, cache_tag(node.key)


class Step(Protocol):
    """One step of a run: the tasks it adds to the run's graph. A task of a later step on the same node or
    entry waits for an earlier step's (`build:<node>` → `verify:<node>` → `publish:<entry>`)."""

    def start(self, run: RunContext) -> None:
        """Before any task: checks and notes that concern the whole step."""

    def tasks(self, run: RunContext) -> list[Task]: ...

    def interrupted(self, run: RunContext) -> None:
        """The run was stopped (Ctrl-C, SIGTERM): mark what this step had not finished."""

    def cancelled(self, run: RunContext, task_ids: Collection[str]) -> None:
        """--fail-fast left these tasks unstarted: mark this step's."""


class Gate(Protocol):
    """A gate publish runs on each entry before anything of it is tagged (the supply gate, `SupplyChain`). The
    command composes it into publish, as it composes the steps: no step imports another."""

    def start(self, run: RunContext) -> None:
        """Before any task: what the gate reads once per run (its data, each entry's policy)."""

    def check(self, run: RunContext, nodes: Sequence[Node], digests: Mapping[str, str], *,
              dry_run: bool = False) -> tuple[dict[str, str], dict[str, str]]:
        """(the nodes it blocks and why, the nodes it could not check and why)."""
        ...
