"""Publish: the rule that a public tag names only a digest with a pass record of this suite beside it, applied
per entry once its nodes are staged and verified. The key tag is compared by digest with the image this run
holds; each node's pass is bound to its digest in the registry before any tag moves (a leaf's own, an
ancestor's `via` the leaf built on it); tags are pointed only when all of that held; aliases after every
entry, only when everything they cover passed. An entry that was not tested is staged (`build`: key tags
only) or held (`publish`). It reads what earlier steps learned from the ledger and talks to registries and
the engine through the ports, so the rules are unit-tested with fakes as well as on the real engine."""

from __future__ import annotations

import functools
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from rich.markup import escape

from ..errors import EngineError, ImageBuilderError, Refused
from ..evidence import beside, passes
from ..evidence.passes import PassRecord
from ..evidence.ruling import Ask, judge, vsa_result
from ..ledger import BuildStatus, PublishStatus, VerifyStatus
from ..plan.plan import Node
from ..run.ancestors import via
from ..run.context import Gate, RunContext
from ..run.cosign import Cosign
from ..run.keytags import push_key_tag, push_key_tags
from ..run.nodes import entry_nodes, mark_unpublished, require_push, scan
from ..run.schedule import Task

PUBLISHED = (PublishStatus.PUSHED, PublishStatus.CURRENT, PublishStatus.TAGGED)


@dataclass(frozen=True)
class Publish:
    """The publish step: a `publish:<entry>` task per entry after every build and verify of its nodes, and an
    `aliases` task after every entry. An entry is tagged only when every node built and every leaf passed (here
    or found by its image), or with `allow_untested`; otherwise it is held (untested under `build`: staged, key
    tags only). Pushed, it is all or nothing (`publish_entry`): each node's pass is bound beside its digest and
    the supply gate passes before any tag moves. `supply` is required: no publish is composed without the gate."""

    push: bool = True  # False (--no-push): tag on this engine only
    allow_untested: bool = False  # publish what has no pass (loud; an `untested` record beside each digest)
    allow_untested_gpu: bool = False  # publish CUDA images tested without a GPU
    dry_run: bool = False  # say what would be written and moved; write and move nothing
    stage_untested: bool = True  # build: an untested entry is staged (key tags only); publish: it is held
    signing: Cosign = field(default_factory=lambda: Cosign("skipped"))
    # each image's SBOM and the vulnerability gate (`steps.supply.SupplyChain`), composed in by the command: required,
    # so that no publish runs without it
    supply: Gate = field(kw_only=True)

    def start(self, run: RunContext) -> None:
        if self.push and not self.dry_run:
            require_push(run, "publishing")
        if self.push:
            self.supply.start(run)

    def tasks(self, run: RunContext) -> list[Task]:
        """publish:<entry> after every step of its nodes; aliases after every entry."""
        out = [Task(f"publish:{entry}", functools.partial(self.entry, run, nodes),
                    tuple(f"{kind}:{n.id}" for n in nodes for kind in ("build", "verify")))
               for entry, nodes in entry_nodes(run.plan)]
        if run.plan.alias_cover:
            out.append(Task("aliases", functools.partial(self.aliases, run), tuple(t.id for t in out)))
        return out

    def interrupted(self, run: RunContext) -> None:
        mark_unpublished(run, "publish", None)

    def cancelled(self, run: RunContext, task_ids: Collection[str]) -> None:
        mark_unpublished(run, "publish", task_ids)

    def entry(self, run: RunContext, nodes: list[Node]) -> bool:
        """An entry's public tags are applied only when every node built and every leaf has a pass (run now,
        or found by its image's digest)."""
        entry = nodes[0].entry.id
        records = [run.ledger[n.id] for n in nodes]
        if not all(r.built for r in records) or not all(
                r.verify in (VerifyStatus.PASSED, VerifyStatus.SKIPPED, VerifyStatus.FOUND) for r in records if r.leaf):
            for r in records:
                if r.built:
                    run.ledger.update(r.node, publish=PublishStatus.HELD)
            run.logs.say(f"[yellow]{escape(entry)}: not every node passed; nothing of this entry is tagged or "
                         "pushed[/]")
            return False
        leaked = {n.id: found for n in nodes if run.ledger[n.id].build == BuildStatus.CACHED
                  and (found := scan(run, n))}
        if leaked:  # a cached image was built before this run's secrets were known to it: scanned again here
            said = "; ".join(f for found in leaked.values() for f in found)
            return self.hold(run, nodes, {n: f"a secret is in this cached image: {'; '.join(f)}" for n, f in
                                          leaked.items()}, f"not published: a secret is in {', '.join(leaked)}",
                             f"[bold red]✗ {escape(entry)}: a secret is in a cached image ({escape(said)}); "
                             "nothing of this entry is tagged or pushed[/]", replace=True)
        untested = [r.node for r in records if r.leaf and r.verify == VerifyStatus.SKIPPED]
        if untested and not self.stage_untested and not self.allow_untested:
            return self.hold(run, nodes, {n: f"no pass record of this suite beside {n}'s staged digest (run "
                                          "`imagebuilder verify`)" for n in untested},
                             f"not published: {untested[0]} has no pass record",
                             f"[yellow]{escape(entry)}: {escape(untested[0])} has no pass record of this suite; "
                             "nothing of this entry is tagged[/]")
        if untested and not self.allow_untested:
            return push_key_tags(run, nodes, f"untested: {untested[0]} has no pass (--no-smoke), so no public tag "
                                 "(--allow-untested publishes anyway)", push=self.push)
        if untested:
            run.logs.say(f"[bold yellow]! {escape(entry)}: publishing UNTESTED images (--allow-untested): "
                         f"{escape(', '.join(untested))}; recorded in report.json and beside each digest[/]")
        if any(r.gpu_verified is False for r in records) and self.push and not self.allow_untested_gpu:
            why = "not GPU-verified: no GPU on this host (--allow-untested-gpu pushes anyway)"
            return self.hold(run, nodes, {n.id: why for n in nodes}, why,
                             f"[yellow]{escape(entry)}: CUDA images not GPU-verified are not pushed; pass "
                             "--allow-untested-gpu to push them anyway[/]", replace=True)
        if not self.push:
            tagged = [self.tag_locally(run, node) for node in nodes]  # every node, even after one fails
            return all(tagged)
        return self.publish_entry(run, nodes, untested=bool(untested))

    @staticmethod
    def hold(run: RunContext, nodes: list[Node], own: Mapping[str, str], others: str, said: str, *,
             replace: bool = False) -> bool:
        """Hold every node of an entry: `own` says why for the nodes it names (over an earlier reason with
        `replace`), `others` for the rest (behind an earlier reason)."""
        for node in nodes:
            if replace and node.id in own:
                run.ledger.update(node.id, publish=PublishStatus.HELD, error=own[node.id])
            else:
                run.ledger.fail(node.id, own.get(node.id, others), publish=PublishStatus.HELD)
        run.logs.say(said)
        return False

    def tag_locally(self, run: RunContext, node: Node) -> bool:
        try:
            image = run.images.local(node)
            for ref in node.tags:
                run.images.worker().tag(image, ref)
        except ImageBuilderError as exc:
            run.ledger.update(node.id, publish=PublishStatus.FAILED, error=exc.message)
            return False
        run.ledger.update(node.id, tags=node.tags, publish=PublishStatus.TAGGED)
        return True

    def publish_entry(self, run: RunContext, nodes: list[Node], *, untested: bool = False) -> bool:
        """All or nothing per entry. First every image goes to the registry under its key tag (the image this
        run tested, compared by digest), every node's pass record is bound to that digest in the registry
        (written beside it when this run holds the pass) and every immutable tag is checked: one that already
        names another digest is never overwritten. Only when all of that held are the tags pointed at the
        digests (manifest copies inside the registry; a tag already there is left alone); local tags follow."""
        engine = run.images.worker()
        starts = {n.id: time.monotonic() for n in nodes}
        digests: dict[str, str] = {}
        failure: tuple[Node, str] | None = None
        for node in nodes:
            try:  # (--dry-run: the digest the node was pinned to; nothing is pushed)
                pinned = run.ledger[node.id].digest
                digests[node.id] = pinned if self.dry_run and pinned else push_key_tag(run, node)
            except ImageBuilderError as exc:
                failure = (node, exc.message)
                break
        for node in sorted(nodes, key=lambda n: not n.leaf) if failure is None else []:  # leaves first: the cause
            try:
                self.bind(run, node, nodes, digests, untested=untested)
                for ref in node.tags:
                    held = run.registries.digest(ref)
                    if held is not None and held != digests[node.id]:
                        raise Refused(f"immutable tag {ref} already names {held}; this build is {digests[node.id]}: "
                                      "not overwritten (use {key12} or {date} in `tags:`, and `aliases:` for names "
                                      "that move)")
            except ImageBuilderError as exc:
                failure = (node, exc.message)
                break
        if failure is None:  # what is in each image, and whether a known vulnerability keeps it from a tag (its
            # pass records are bound already: they say what was tested, and a later exception needs no new test)
            blocked, unmade = self.supply.check(run, nodes, digests, dry_run=self.dry_run)
            bad = next((n for n in nodes if n.id in unmade or n.id in blocked), None)
            if bad is not None:
                failure = (bad, f"not published: its SBOM could not be made ({unmade[bad.id]})" if bad.id in unmade
                           else f"{'would be ' if self.dry_run else ''}blocked by the vulnerability gate: "
                                f"{blocked[bad.id]}")
        if failure is not None:
            bad, message = failure
            return self.fail_entry(run, nodes, starts, bad, message, "no tag of this entry was applied", message)
        pointed: dict[str, str] = {}  # the tags this entry pointed (all new) and their digests: removed on a failure
        moved: dict[str, int] = {}
        current = nodes[0]
        try:
            for current in nodes:
                moved[current.id] = sum(self.point_tag(run, current, ref, digests[current.id], pointed)
                                        for ref in current.tags)
        except ImageBuilderError as exc:  # all or nothing: what this entry pointed is pointed back
            undone = self.point_back(run, pointed) or "every tag of the entry is as it was"
            return self.fail_entry(run, nodes, starts, current, exc.message, undone, f"{exc.message}; {undone}")
        for node in nodes:
            image = run.ledger[node.id].image
            if image is not None and not self.dry_run:
                for ref in node.tags:
                    try:
                        engine.tag(image, ref)
                    except ImageBuilderError as exc:  # the registry is published; a local tag is a convenience
                        run.logs.say(f"[yellow]  local tag {escape(ref)}: {escape(exc.message)}[/]")
            run.ledger.update(node.id, tags=node.tags, digest=digests[node.id],
                              publish=PublishStatus.PUSHED if moved[node.id] else PublishStatus.CURRENT)
            if not self.dry_run:
                self.summarise(run, node, digests[node.id])
                repository = node.entry.target.name
                signed = self.signing.sign(f"{repository}@{digests[node.id]}")
                if signed is not None:
                    run.ledger.update(node.id, signed=signed)
            done = ("would push" if self.dry_run else "pushed") if moved[node.id] else "up to date"
            run.logs.say(f"[green]✓ {done} {escape(node.tags[0])}@{digests[node.id]}[/]")
            run.ledger.timed(node.id, "publish", time.monotonic() - starts[node.id])
        return True

    @staticmethod
    def summarise(run: RunContext, node: Node, digest: str) -> None:
        """The published digest's SLSA VSA, in the run's layouts: PASSED exactly when the judge admits the digest
        (`ruling.vsa_result`, the rule this step published it by), with the levels of the passes it counted (a copy
        for other tools: one that cannot be written is said, and publishes nothing less)."""
        ecosystem = run.ecosystem()
        if run.layouts.kinds == "off" or ecosystem is None:
            return
        host, repo, _ = run.key_tag(node)
        registry = run.registries(host)
        try:
            found = beside.read(registry, repo, digest, run.keys.trust.plus(run.keys.build_trust))
            ruled = vsa_result(found, run.specs.key(node), node.key)
            counted = [(tag, registry.manifest_digest(repo, tag) or "", signed.record) for tag, signed in ruled.passes]
            verdict = ecosystem.vsa(registry, repo, f"{host}/{repo}", digest, run.specs.key(node), counted,
                                    admitted=ruled.admitted)
        except ImageBuilderError as exc:
            run.logs.say(f"[yellow]  {escape(node.id)}: no VSA beside {digest[:19]}: {escape(exc.message)}[/]")
            return
        run.logs.say(f"[dim]  {escape(node.id)}: VSA {verdict['verificationResult']} "
                     f"({escape(', '.join(verdict['verifiedLevels']) or 'no level')}) beside {digest[:19]}[/]")

    @staticmethod
    def fail_entry(run: RunContext, nodes: list[Node], starts: Mapping[str, float], bad: Node, message: str,
                   outcome: str, error: str) -> bool:
        """The entry is not published: `bad` failed (`message`; its record says `error`), the others are held
        because of it; `outcome` says what became of the entry's tags."""
        for node in nodes:
            run.ledger.timed(node.id, "publish", time.monotonic() - starts[node.id])
            if node is bad:
                run.ledger.update(node.id, publish=PublishStatus.FAILED, error=error)
            else:
                run.ledger.fail(node.id, f"not tagged: {bad.id} could not be published", publish=PublishStatus.HELD)
        run.logs.say(f"[bold red]✗ publish {escape(bad.id)}: {escape(message)}[/]")
        run.logs.say(f"[yellow]{escape(bad.entry.id)}: {escape(outcome)}[/]")
        return False

    @staticmethod
    def point_back(run: RunContext, pointed: Mapping[str, str]) -> str:
        """Undo a half-tagged entry: each tag it pointed (`pointed`: tag → digest; always a new tag, as one naming
        another digest is refused before it moves) is removed again, if it still names that digest
        (`Registry.untag`: one tag and nothing else, on Distribution 2.x as on OCI 1.1 registries). What could
        not be undone is said (those tags name digests that passed); empty when all was."""
        left = []
        for ref, digest in reversed(list(pointed.items())):
            client, target = run.registries.at(ref)
            try:
                if client.manifest_digest(target.repository, target.reference) != digest:
                    continue  # (the one that failed before it was written, or a tag someone else has pointed since)
                if not client.untag(target.repository, target.reference):
                    left.append(f"{ref} (this registry deletes no manifest)")
            except ImageBuilderError as exc:
                left.append(f"{ref} ({exc.message})")
        return f"removed the tags it pointed, except: {', '.join(left)}" if left else ""

    def bind(self, run: RunContext, node: Node, nodes: list[Node], digests: Mapping[str, str], *,
             untested: bool) -> None:
        """The gate before any public tag: the node's digest must have a pass record for this suite and these
        expectations in the registry. One already there is used; else this run's pass is written beside the
        digest when the digest's image is the one that passed (leaves), or that a passing leaf was built on
        (ancestors). With --allow-untested an `untested` record is written instead. Otherwise: refused."""
        key = run.specs.key(node)
        host, repo, _ = run.key_tag(node)
        store = run.passes(host)
        digest = digests[node.id]
        found_beside = beside.read(store.registry, repo, digest, run.keys.trust.plus(run.keys.build_trust))
        config = found_beside.config
        if config is None:
            raise EngineError(f"{host}/{repo}@{digest} is not a single-platform image manifest; nothing to bind a "
                              "pass to")
        parent = None if node.parent is None else store.config_digest(repo, digests[node.parent]) \
            if node.parent in digests else run.ledger[node.parent].image
        if node.parent is not None and parent is None:  # (never "not asked" for a node with a parent)
            raise Refused(f"{host}/{repo}@{digest}: the image of its parent {node.parent} could not be read, so what "
                          "it was built on is unknown: not published")
        ruled = judge(found_beside, Ask(spec=key, key=node.key, parent=parent, passed=False))
        if not ruled.admitted:  # no trusted build record names this image, or a GPU model's failed (or unreadable)
            # verdict of this spec stands against it: whatever passed elsewhere, it waits
            raise Refused(f"{host}/{repo}@{digest}: {ruled.first()}: not published")
        found = next((s.record for t, s in ruled.passes if ".pass-" in t), None)
        if found is not None and found.gpu_verified:
            run.ledger.update(node.id, pass_record=f"registry {host}/{repo}:{passes.record_tag(digest, key)}")
            return
        try:
            record = self.pass_for(run, node, nodes, digests, config)
        except Refused:
            if found is None:
                raise
            record = None  # (the record already there stands; this run's leaf vouches for nothing here)
        if passes.stands(found, record):
            run.ledger.update(node.id, pass_record=f"registry {host}/{repo}:{passes.record_tag(digest, key)}")
            return
        if record is None and untested and self.allow_untested and not self.dry_run:
            tag = store.put(repo, PassRecord(passes.UNTESTED, config=config, spec=key, node=node.id,
                                             entry=node.entry.id, expect=dict(run.specs.of(node).expect),
                                             date=passes.now(), suite=passes.suite_hash(),
                                             allowed_by="--allow-untested").at(digest, f"{host}/{repo}"))
            run.ledger.update(node.id, untested=True,
                              pass_record=f"UNTESTED, published by --allow-untested: registry {host}/{repo}:{tag}")
            return
        if record is not None and self.dry_run:
            run.ledger.update(node.id, pass_record=f"would write registry {host}/{repo}:"
                                                   f"{passes.record_tag(digest, key)} (--dry-run)")
            return
        if record is None:
            tested = run.ledger[node.id].record
            why = (f"this run tested image {tested.config}, and the registry's {digest} is image {config}"
                   if tested is not None else "and this run holds no pass for it")
            raise Refused(f"{host}/{repo}@{digest} has no pass record for this suite and these expectations "
                          f"({why}): no public tag is pointed at it")
        tag = store.write(repo, record.at(digest, f"{host}/{repo}"))
        run.ledger.update(node.id, pass_record=f"registry {host}/{repo}:{tag} (written by this run)")

    @staticmethod
    def pass_for(run: RunContext, node: Node, nodes: list[Node], digests: Mapping[str, str],
                 config: str) -> PassRecord | None:
        """The pass this run holds for the image `config`: the leaf's own, or for an ancestor, one `via` a leaf
        that passed on an image built on exactly this one (`ancestors.via`: refused, naming both, when not)."""
        own = run.ledger[node.id].record
        if node.leaf:
            return own if own is not None and own.config == config else None
        refused: Refused | None = None
        for leaf in nodes:  # any leaf that passed on an image built on this one vouches for it
            record = run.ledger[leaf.id].record
            if leaf.leaf and record is not None and node in run.plan.ancestors(leaf):
                try:
                    return via(run, node, leaf, record, digests[leaf.id], digests[node.id], config)
                except Refused as exc:
                    refused = refused or exc
        if refused is not None:
            raise refused
        return None

    def aliases(self, run: RunContext) -> bool:
        """After every entry: each alias moves to the last node it covers (in matrix order), and only when
        every node it covers in the whole matrix passed in this run."""
        ok = True
        for ref, covered in run.plan.alias_cover:
            missing = [n for n in covered if n not in run.ledger]
            failed = [n for n in covered if n in run.ledger and run.ledger[n].publish not in PUBLISHED]
            if missing or failed:
                why = f"{failed[0]} did not pass" if failed else f"{missing[0]} is not part of this run (--only)"
                for node_id in covered:
                    if node_id in run.ledger:
                        run.ledger.alias(node_id, ref, moved=False)
                run.logs.say(f"[yellow]alias {escape(ref)} not moved: {escape(why)}[/]")
                continue
            node = run.plan.node(covered[-1])
            record = run.ledger[node.id]
            try:
                if self.push:
                    assert record.digest is not None
                    self.point_tag(run, node, ref, record.digest)
                if (record.image is not None or not self.push) and not self.dry_run:
                    run.images.worker().tag(run.images.local(node), ref)
                run.ledger.alias(node.id, ref, moved=True)
            except ImageBuilderError as exc:
                ok = False
                run.ledger.alias(node.id, ref, moved=False)
                run.logs.say(f"[bold red]✗ alias {escape(ref)}: {escape(exc.message)}[/]")
        return ok

    def point_tag(self, run: RunContext, node: Node, ref: str, digest: str,
                  pointed: dict[str, str] | None = None) -> int:
        """Make `ref` name `digest` in the registry, copying the manifest from the node's key tag; 1 if it
        moved, 0 if it already did. An immutable tag (`pointed` is given) is checked again right here: one that
        names another digest now is never overwritten; one this call writes goes to `pointed`."""
        if run.stopping.is_set():
            raise EngineError(f"tag {ref}: not moved, the run was interrupted")
        held = run.registries.digest(ref)
        if held == digest:
            return 0
        if pointed is not None and held is not None:
            raise Refused(f"immutable tag {ref} names {held} now (since it was checked); this build is {digest}: "
                          "not overwritten")
        if self.dry_run:
            run.logs.say(f"[dim]  would point {escape(ref)} at {digest} (--dry-run)[/]")
            return 1
        client, target = run.registries.at(ref)
        if pointed is not None:
            pointed[ref] = digest
        client.copy(run.key_tag(node)[1], digest, target.repository, target.reference)
        now = run.registries.digest(ref)
        if now != digest:
            raise EngineError(f"tag {ref}: the registry holds {now}, not {digest}")
        return 1

