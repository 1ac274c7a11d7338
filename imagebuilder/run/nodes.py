"""What several steps do to a run's nodes alike: list an entry's nodes, scan an image for secrets, check push
rights before anything moves, and mark what an interrupted or failed-fast run left undone."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..errors import EngineError, ImageBuilderError, RegistryAccess
from ..ledger import BuildStatus, NodeRecord, PublishStatus
from ..plan.keys import cache_ref
from ..plan.plan import Node, Plan
from ..secrets.scan import Findings
from .context import RunContext


def scan(run: RunContext, node: Node, *, image: str | None = None, parent: str | None = None) -> list[str]:
    """What the secret scan finds in a node's image: the one on this engine, else its configuration in the
    registry. What it covered goes to the node's record."""
    record = run.ledger[node.id]
    image = image or record.image
    try:
        if image is not None:
            findings = run.scanner.image(run.images.worker(), image, parent)
        elif record.digest is not None or node.decision.ref is not None:  # exactly what was staged, if pinned
            client, ref = run.registries.at(cache_ref(node))
            config = client.config(ref.repository, record.digest or ref.reference)
            findings = run.scanner.config(config) if config is not None else Findings((), "not found")
        else:
            return []
    except (ImageBuilderError, ValueError) as exc:  # an image that cannot be scanned is not published
        message = exc.message if isinstance(exc, ImageBuilderError) else f"its configuration is unreadable ({exc})"
        return [f"it could not be scanned: {message}"]
    run.ledger.update(node.id, secret_scan=findings.covered)
    return list(findings.found)


def require_push(run: RunContext, what: str) -> None:
    """Before anything builds or moves: the credentials may push to every repository the plan's nodes go to (an
    upload started and cancelled, once per repository). `RegistryAccess` naming the first that refuses and why;
    a registry that does not answer is an outage (`EngineError`): nothing of the run would reach it."""
    for host, repo in sorted({run.key_tag(node)[:2] for node in run.plan.nodes}):
        try:
            why = run.registries(host).can_push(repo)
        except EngineError as exc:
            raise EngineError(f"{what} needs push to {host}/{repo}: {exc.message}; nothing was built or pushed") \
                from None
        if why is not None:
            raise RegistryAccess(f"{what} needs push to {host}/{repo}: {why}; nothing was built or pushed",
                                 hint=f"give it credentials that may push to {host}/{repo} (docs/guide/credentials.md: "
                                 "the scopes each step needs)")


def entry_nodes(plan: Plan) -> list[tuple[str, list[Node]]]:
    """(entry id, its nodes in plan order), in plan order."""
    return [(e.id, [n for n in plan.nodes if n.entry.id == e.id]) for e in plan.entries()]


def mark_unpublished(run: RunContext, kind: str, task_ids: Collection[str] | None) -> None:
    """Interrupted (None), or not started under --fail-fast (the `<kind>:<entry>` task ids): what was built but
    not published (or staged) says so, and is held."""
    left = [(r, f"{kind}:{r.entry}") for r in run.ledger.records() if r.publish is None and r.built]
    _mark_left(run, left, task_ids, {"publish": PublishStatus.HELD}, {"publish": PublishStatus.HELD})


def mark_unbuilt(run: RunContext, task_ids: Collection[str] | None) -> None:
    """Interrupted (None) or not started under --fail-fast (those task ids): what was not built says so."""
    left = [(r, f"build:{r.node}") for r in run.ledger.records() if r.build is None]
    _mark_left(run, left, task_ids, {"build": BuildStatus.INTERRUPTED}, {"build": BuildStatus.CANCELLED})


def _mark_left(run: RunContext, left: list[tuple[NodeRecord, str]], task_ids: Collection[str] | None,
               interrupted: Mapping[str, Any], cancelled: Mapping[str, Any]) -> None:
    """Each node a step left (with the task that would have done it) says why: the run was interrupted
    (`task_ids` None), or --fail-fast did not start its task."""
    for record, task in left:
        if task_ids is None:
            run.ledger.fail(record.node, "the run was interrupted before this entry was published; nothing of it "
                            "was tagged", **interrupted)
        elif task in task_ids:
            run.ledger.fail(record.node, "not started: --fail-fast stopped the run after a failure", **cancelled)
