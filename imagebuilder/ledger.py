"""The run ledger: one record per node of a run (its image, the image it was built on, the digest its key tag
names, the pass the run holds for it and where that is recorded, each step's outcome, durations), the one place
a run keeps what it learns. Records are frozen; the ledger replaces a record whole under its lock, so the
scheduler's threads never see half an update. The reports (`report`) are a view of it.

Each step has its own status vocabulary: `BuildStatus` (stage), `VerifyStatus` (verify), `PublishStatus`
(publish and the key tags a stage pushes)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .evidence.passes import PassRecord
from .plan.plan import Node, Plan


class BuildStatus(str, Enum):
    BUILT = "built"  # built in this run
    CACHED = "cached"  # an image with its key was found (engine or registry), or another node of the run built it
    FAILED = "failed"  # its build failed (the error and the log's tail say why)
    BLOCKED = "blocked"  # its parent (or the node whose image it is) did not build
    CANCELLED = "cancelled"  # not started: --fail-fast stopped the run
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM stopped the run first


class VerifyStatus(str, Enum):
    PASSED = "passed"  # the suite ran in this image here and passed
    FOUND = "cached"  # a pass of this very image (by ID or digest) was found: the suite did not run
    SKIPPED = "skipped"  # no pass, and the suite was not run (--no-smoke; `publish` runs none)
    FAILED = "failed"  # the suite ran and the host's verdict was not a pass
    CANCELLED = "cancelled"  # not started: --fail-fast stopped the run
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM stopped the run first


class PublishStatus(str, Enum):
    PUSHED = "pushed"  # its tags were pointed at its digest
    CURRENT = "current"  # every tag already named its digest
    TAGGED = "tagged"  # tagged on this engine only (--no-push)
    STAGED = "staged"  # pushed under its key tag only (or kept local): no public tag
    HELD = "held"  # not published: something of its entry did not pass
    FAILED = "failed"  # a push or a tag failed (nothing of its entry stays tagged)


OK_BUILDS = (BuildStatus.BUILT, BuildStatus.CACHED)
OK_VERIFIES = (None, VerifyStatus.PASSED, VerifyStatus.FOUND, VerifyStatus.SKIPPED)


@dataclass(frozen=True)
class NodeRecord:
    """What a run knows of one node."""

    node: str  # its id, `<entry id>/<layer node>`
    entry: str  # the entry's id, `{torch}-{accelerator}-py{python}-{flavor}` or its `name`
    layer: str  # the layer node's name in the tree
    leaf: bool  # a leaf of the tree: its smoke suite runs
    key: str | None = None  # its content address (null when its base image was not on the engine)
    reason: str = ""  # why it was built (or is cached)
    same_as: str | None = None  # an earlier node of the run that is the same image (built once, shown once)
    versions: Mapping[str, str | None] = field(default_factory=dict)  # its entry's resolved versions
    repository: str | None = None  # registry/repository its images go to
    build: BuildStatus | None = None  # the stage step's status (`BuildStatus`, below)
    verify: VerifyStatus | None = None  # the verify step's status (`VerifyStatus`; `smoke` in report.json)
    publish: PublishStatus | None = None  # the publish step's status (`PublishStatus`, below)
    image: str | None = None  # its image ID on this engine (built, found or pulled)
    parent_image: str | None = None  # the image it was built on (this run's builds)
    digest: str | None = None  # the manifest digest its key tag names (found, pulled by, or pushed)
    cache: str | None = None  # where a cached image was found: local | registry
    spec: str | None = None  # the spec key its pass is (to be) a pass of
    record: PassRecord | None = None  # the pass this run holds for its image (run here, or found), not yet bound
    pass_record: str | None = None  # where its pass is recorded (registry tag, local mirror, this run)
    signer: str | None = None  # the key that signed that pass (its id and where it is trusted from)
    tags: tuple[str, ...] = ()  # its immutable tags, full references
    aliases: tuple[str, ...] = ()  # aliases moved to its image
    aliases_held: tuple[str, ...] = ()  # aliases not moved (something they cover failed)
    error: str | None = None  # why it did not go well (the first cause)
    log: str | None = None  # its log file, `logs/<node>.log` in the report folder
    log_tail: str = ""  # the end of its log, when it failed
    durations: Mapping[str, float] = field(default_factory=dict)  # seconds per step (build, smoke, push, ...)
    smoke_report: Mapping[str, Any] | None = None  # the suite's report: one record per check
    performance: Mapping[str, Any] | None = None  # the regression gate's finding (`evidence.regression`)
    gpu_verified: bool | None = None  # False: a CUDA image smoke-tested without a GPU
    base: Mapping[str, Any] | None = None  # root nodes: the base image's name, image ID and registry digests
    signed: str | None = None  # the signature's outcome (cosign), when signing was on
    secret_scan: str | None = None  # what the secret scan of its image covered (files, bytes)
    untested: bool = False  # published without a pass, by --allow-untested
    allowed_skips: tuple[str, ...] = ()  # skips of a GPU run that smoke.allow_skip accepted
    sbom: Mapping[str, Any] | None = None  # its SBOM: where it is, who signed it, what it counts (`steps.supply`)
    vulnerabilities: Mapping[str, Any] | None = None  # the vulnerability gate's verdict on it (`supply.policy`)

    @classmethod
    def of(cls, node: Node) -> NodeRecord:
        return cls(node.id, node.entry.id, node.layer.name, node.leaf, key=node.key or None, reason=node.reason,
                   same_as=node.decision.same_as, versions=node.entry.versions(),
                   repository=node.entry.target.name)

    @property
    def built(self) -> bool:
        return self.build in OK_BUILDS

    @property
    def ok(self) -> bool:
        return self.built and self.verify in OK_VERIFIES \
            and self.publish not in (PublishStatus.FAILED, PublishStatus.HELD)

    def outcome(self) -> str:
        """One word for the report: the first step that did not go well, else the last one that ran."""
        if self.build in (BuildStatus.FAILED, BuildStatus.BLOCKED, BuildStatus.CANCELLED, BuildStatus.INTERRUPTED):
            return str(self.build.value)
        if self.verify in (VerifyStatus.FAILED, VerifyStatus.INTERRUPTED):
            return f"smoke {self.verify.value}"
        if self.publish is not None:
            return str(self.publish.value)
        return str(self.build.value) if self.build else "pending"


@dataclass
class Ledger:
    """The records of one run's nodes, in plan order."""

    _records: dict[str, NodeRecord]
    _lock: threading.RLock = field(default_factory=threading.RLock)

    @classmethod
    def of(cls, plan: Plan) -> Ledger:
        return cls({n.id: NodeRecord.of(n) for n in plan.nodes})

    def __getitem__(self, node_id: str) -> NodeRecord:
        with self._lock:
            return self._records[node_id]

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._records

    def records(self) -> list[NodeRecord]:
        with self._lock:
            return list(self._records.values())

    def update(self, node_id: str, **changes: Any) -> NodeRecord:
        """Set fields of one record (a field that does not exist is a bug: TypeError)."""
        return self.change(node_id, lambda record: dataclasses.replace(record, **changes))

    def change(self, node_id: str, edit: Callable[[NodeRecord], NodeRecord]) -> NodeRecord:
        """Replace one record by `edit(record)`, atomically (for updates that read the record first)."""
        with self._lock:
            self._records[node_id] = edit(self._records[node_id])
            return self._records[node_id]

    def timed(self, node_id: str, step: str, seconds: float) -> None:
        self.change(node_id, lambda r: dataclasses.replace(r, durations={**r.durations, step: seconds}))

    def alias(self, node_id: str, ref: str, *, moved: bool) -> None:
        """An alias moved to this node's image, or held (something it covers did not pass)."""
        self.change(node_id, lambda r: dataclasses.replace(r, aliases=(*r.aliases, ref)) if moved
                    else dataclasses.replace(r, aliases_held=(*r.aliases_held, ref)))

    def fail(self, node_id: str, error: str, **changes: Any) -> None:
        """Say why a node did not go well, keeping an earlier reason (the first cause is the one to read)."""
        self.change(node_id, lambda r: dataclasses.replace(r, error=r.error or error, **changes))

    def masked(self, mask: Callable[[str], str]) -> None:
        """Every record with known secret values masked in what it says (errors, log tails, suite reports)."""
        def edit(r: NodeRecord) -> NodeRecord:
            report = r.smoke_report
            if report is not None:
                report = _masked_json(report, mask)
            return dataclasses.replace(r, error=mask(r.error) if r.error else r.error,
                                       log_tail=mask(r.log_tail) if r.log_tail else r.log_tail, smoke_report=report)
        with self._lock:
            for node_id in self._records:
                self.change(node_id, edit)


def _masked_json(value: Any, mask: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, Mapping):
        return {k: _masked_json(v, mask) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked_json(v, mask) for v in value]
    return value
