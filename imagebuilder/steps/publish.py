"""Publishing: the rule that a public tag names only a digest with a pass record of this suite beside it,
applied per entry after its builds and smoke suites. Staging (key tags only) for what is untested; the key
tag compared by digest with the image this run holds; each node's pass bound to its digest in the
registry before any tag moves; aliases after every entry. It talks to the run it belongs to through
`Run`, and to registries and the engine through their small protocols, so the rules are unit-tested
with fakes (tests/unit/test_publish.py) as well as on the real engine and registry."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rich.markup import escape

from ..errors import EngineError, ImageBuilderError
from ..evidence import passes
from ..evidence.passes import PassRecord, RecordRegistry, RegistryPasses
from ..input.matrix import Entry
from ..plan import tags as tagging
from ..plan.cache import cache_ref
from ..plan.plan import Node, Plan
from ..ports.engine import LineSink
from ..ports.registry import split_reference
from ..report import Result, Status


class Registry(RecordRegistry, Protocol):
    """What publishing needs of a registry, beyond pass records: pointing a tag at a manifest."""

    def copy(self, source_repo: str, digest: str, target_repo: str, tag: str) -> str: ...


class Engine(Protocol):
    """What publishing needs of the engine: local tags and pushes."""

    def tag(self, image: str, ref: str) -> None: ...

    def push(self, ref: str, *, sink: LineSink | None = None, auth: tuple[str, str] | None = None) -> str: ...


class Run(Protocol):
    """What publishing needs of the run it is part of (the `Builder`, or a fake in unit tests)."""

    plan: Plan
    results: dict[str, Result]
    images: dict[str, str]  # node id -> image ID on this engine
    passes: dict[str, PassRecord]  # leaf id -> its pass (run now or found), not yet bound to a digest
    tested_manifests: dict[str, str]  # node id -> the manifest its pass was found beside
    stopping: threading.Event

    def say(self, text: str) -> None: ...

    def worker_engine(self) -> Engine: ...

    def local_image(self, node: Node) -> str: ...

    def spec_key(self, node: Node) -> str: ...

    def smoke_spec(self, node: Node) -> dict[str, Any]: ...

    def sign(self, node: Node, ref: str) -> None: ...

    def auth(self, ref: str) -> tuple[str, str] | None: ...

    def registry(self, host: str) -> Registry: ...

    def leaks(self, node: Node) -> list[str]: ...


@dataclass
class Publisher:
    run: Run
    push: bool = True
    allow_untested: bool = False  # publish what has no pass (loud; an `untested` record beside each digest)
    allow_untested_gpu: bool = False  # publish CUDA images tested without a GPU
    step: str = "build"  # stage: key tags only; verify: the leaves' pass records only; publish/build: the rule
    dry_run: bool = False  # publish: say what would be written and moved; write and move nothing

    def run_publish(self, entry: Entry, nodes: list[Node]) -> bool:
        """The publishing rule: an entry's public tags are applied only when every node built and every leaf
        has a pass (run now, or found by its image's digest). Untested entries (--no-smoke and no pass found)
        are staged: pushed under their key tags only, unless --allow-untested says otherwise, loudly."""
        results = [self.run.results[n.id] for n in nodes]
        entry_ok = all(r.build in (Status.BUILT, Status.CACHED) for r in results) and all(
            r.smoke in (Status.PASSED, Status.SKIPPED, Status.CACHED) for r in results if r.leaf)
        if not entry_ok:
            for r in results:
                if r.build in (Status.BUILT, Status.CACHED):
                    r.publish = Status.HELD
            self.run.say(f"[yellow]{escape(entry.id)}: not every node passed; nothing of this entry is tagged or "
                         "pushed[/]")
            return False
        if self.step == "stage":
            return self.stage(nodes, "staged: `imagebuilder stage` pushes key tags only")
        if self.step == "verify":
            return self.record(nodes)
        leaked = {n.id: found for n in nodes if self.run.results[n.id].build == Status.CACHED
                  and (found := self.run.leaks(n))}
        if leaked:  # a cached image was built before this run's secrets were known to it: scanned again here
            for r in results:
                r.publish = Status.HELD
                r.error = (f"a secret is in this cached image: {'; '.join(leaked[r.node])}" if r.node in leaked
                           else r.error or f"not published: a secret is in {', '.join(leaked)}")
            self.run.say(f"[bold red]✗ {escape(entry.id)}: a secret is in a cached image "
                         f"({escape('; '.join(f for found in leaked.values() for f in found))}); nothing of this "
                         "entry is tagged or pushed[/]")
            return False
        untested = [r.node for r in results if r.leaf and r.smoke == Status.SKIPPED]
        if untested and self.step == "publish" and not self.allow_untested:
            for r in results:
                r.publish = Status.HELD
                r.error = r.error or (f"no pass record of this suite beside {r.node}'s staged digest (run "
                                      "`imagebuilder verify`)" if r.node in untested else
                                      f"not published: {untested[0]} has no pass record")
            self.run.say(f"[yellow]{escape(entry.id)}: {escape(untested[0])} has no pass record of this suite; "
                         "nothing of this entry is tagged[/]")
            return False
        if untested and not self.allow_untested:
            return self.stage(nodes, f"untested: {untested[0]} has no pass (--no-smoke), so no public tag "
                                     "(--allow-untested publishes anyway)")
        if untested:
            self.run.say(f"[bold yellow]! {escape(entry.id)}: publishing UNTESTED images (--allow-untested): "
                     f"{escape(', '.join(untested))}; recorded in report.json and beside each digest[/]")
        unverified = [r for r in results if r.gpu_verified is False]
        if unverified and self.push and not self.allow_untested_gpu:
            for r in results:
                r.publish = Status.HELD
                r.error = "not GPU-verified: no GPU on this host (--allow-untested-gpu pushes anyway)"
            self.run.say(f"[yellow]{escape(entry.id)}: CUDA images not GPU-verified are not pushed; "
                     "pass --allow-untested-gpu to push them anyway[/]")
            return False
        if not self.push:
            tagged = [self.tag_locally(node) for node in nodes]  # every node, even after one fails
            return all(tagged)
        return self.publish_entry(nodes, untested=bool(untested))

    def stage(self, nodes: list[Node], why: str) -> bool:
        """Push each node under its key tag only (no public tag): what a later verify or publish step, or
        another machine, starts from. Without --push nothing leaves the engine and nothing is tagged."""
        for i, node in enumerate(nodes):
            result = self.run.results[node.id]
            start = time.monotonic()
            try:
                if self.push:
                    result.digest = self.push_key_tag(node, self.run.worker_engine())
                    self.run.say(f"[cyan]● staged {escape(cache_ref(node))}@{result.digest}[/] [dim]({escape(why)})[/]")
                result.publish = Status.STAGED
                result.error = result.error or why
            except ImageBuilderError as exc:
                result.publish = Status.FAILED
                result.error = exc.message
                for rest in nodes[i + 1:]:
                    self.run.results[rest.id].publish = Status.HELD
                    self.run.results[rest.id].error = f"not staged: {node.id} could not be pushed"
                self.run.say(f"[bold red]✗ stage {escape(node.id)}: {escape(exc.message)}[/]")
                self.run.say(f"[yellow]{escape(node.entry.id)}: no tag of this entry was applied[/]")
                return False
            finally:
                result.durations["publish"] = time.monotonic() - start
        return True

    def record(self, nodes: list[Node]) -> bool:
        """`imagebuilder verify`: each leaf that passed here (or was found to have passed) gets its pass record
        beside the digest its key tag names, once the image tested is shown to be that digest's. No tag moves;
        ancestors get theirs `via` the leaf at publish time."""
        ok = True
        for node in nodes:
            result = self.run.results[node.id]
            if not node.leaf:
                result.publish = Status.STAGED
                continue
            start = time.monotonic()
            try:
                digest = self.run.tested_manifests.get(node.id) or self.registry_digest(cache_ref(node))
                if digest is None:
                    raise EngineError(f"{cache_ref(node)} is not in the registry")
                result.digest = digest
                self.bind_pass(node, nodes, {node.id: digest}, untested=False)
                result.publish = Status.STAGED
                self.run.say(f"[green]✓ verified {escape(node.id)}@{digest}[/] "
                             f"[dim]{escape(result.pass_record or '')}[/]")
            except ImageBuilderError as exc:
                ok = False
                result.publish = Status.FAILED
                result.error = exc.message
                self.run.say(f"[bold red]✗ verify {escape(node.id)}: {escape(exc.message)}[/]")
            finally:
                result.durations["publish"] = time.monotonic() - start
        return ok

    def tag_locally(self, node: Node) -> bool:
        result = self.run.results[node.id]
        try:
            image = self.run.local_image(node)
            for ref in node.tags:
                self.run.worker_engine().tag(image, ref)
        except ImageBuilderError as exc:
            result.publish = Status.FAILED
            result.error = exc.message
            return False
        result.tags = list(node.tags)
        result.publish = Status.TAGGED
        return True

    def publish_entry(self, nodes: list[Node], *, untested: bool = False) -> bool:
        """All or nothing per entry. First every image goes to the registry under its key tag (the image this
        run tested, compared by digest), every node's pass record is bound to that digest in the registry
        (written beside it when this run holds the pass) and every immutable tag is checked: one that already
        names another digest is never overwritten. Only when all of that held are the tags pointed at the
        digests (manifest copies inside the registry; a tag already there is left alone); local tags follow."""
        engine = self.run.worker_engine()
        starts = {n.id: time.monotonic() for n in nodes}
        digests: dict[str, str] = {}
        failure: tuple[Node, str] | None = None
        for node in nodes:
            try:
                digests[node.id] = self.push_key_tag(node, engine)
            except ImageBuilderError as exc:
                failure = (node, exc.message)
                break
        for node in nodes if failure is None else []:
            try:
                self.bind_pass(node, nodes, digests, untested=untested)
                for ref in node.tags:
                    held = self.registry_digest(ref)
                    if held is not None and held != digests[node.id]:
                        raise EngineError(f"immutable tag {ref} already names {held}; this build is "
                                          f"{digests[node.id]}: not overwritten (use {{key12}} or {{date}} in "
                                          "`tags:`, and `aliases:` for names that move)")
            except ImageBuilderError as exc:
                failure = (node, exc.message)
                break
        if failure is not None:
            bad, message = failure
            for node in nodes:
                result = self.run.results[node.id]
                result.durations["publish"] = time.monotonic() - starts[node.id]
                result.publish = Status.FAILED if node is bad else Status.HELD
                if node is bad:
                    result.error = message
                elif result.error is None:
                    result.error = f"not tagged: {bad.id} could not be published"
            self.run.say(f"[bold red]✗ publish {escape(bad.id)}: {escape(message)}[/]")
            self.run.say(f"[yellow]{escape(bad.entry.id)}: no tag of this entry was applied[/]")
            return False
        ok = True
        for node in nodes:
            result = self.run.results[node.id]
            try:
                moved = sum(self.point_tag(node, ref, digests[node.id]) for ref in node.tags)
                if node.id in self.run.images and not self.dry_run:
                    for ref in node.tags:
                        engine.tag(self.run.images[node.id], ref)
                result.tags = list(node.tags)
                result.digest = digests[node.id]
                result.publish = Status.PUSHED if moved else Status.CURRENT
                repo = tagging.repository_ref(node.entry.registry, node.entry.repository)
                if not self.dry_run:
                    self.run.sign(node, f"{repo}@{digests[node.id]}")
                done = ("would push" if self.dry_run else "pushed") if moved else "up to date"
                self.run.say(f"[green]✓ {done} {escape(node.tags[0])}@{result.digest}[/]")
            except ImageBuilderError as exc:
                ok = False
                result.publish = Status.FAILED
                result.error = exc.message
                self.run.say(f"[bold red]✗ publish {escape(node.id)}: {escape(exc.message)}[/]")
            finally:
                result.durations["publish"] = time.monotonic() - starts[node.id]
        return ok

    def bind_pass(self, node: Node, nodes: list[Node], digests: Mapping[str, str], *, untested: bool) -> None:
        """The gate before any public tag: the node's digest must have a pass record for this suite and these
        expectations in the registry. One already there is used; else this run's pass is written beside the
        digest when the digest's image is the one that passed (leaves), or that a passing leaf was built on
        (ancestors). With --allow-untested an `untested` record is written instead. Otherwise: refused."""
        result = self.run.results[node.id]
        key = self.run.spec_key(node)
        store, host, repo = self.passes_of(node)
        digest = digests[node.id]
        config = store.config_digest(repo, digest)
        if config is None:
            raise EngineError(f"{host}/{repo}@{digest} is not a single-platform image manifest; nothing to bind a "
                              "pass to")
        found = store.find(repo, digest, key, config)
        record = self.pass_for(node, nodes, digests, config)
        if found is not None and (found.gpu_verified or record is None or not record.gpu_verified):
            result.pass_record = f"registry {host}/{repo}:{passes.record_tag(digest, key)}"
            return  # (a pass on GPUs replaces one without: the same image, now verified)
        if record is None and untested and self.allow_untested:
            spec = self.run.smoke_spec(node)
            tag = store.put(repo, PassRecord(passes.UNTESTED, config=config, spec=key, node=node.id,
                                             entry=node.entry.id, expect=spec["expect"], date=passes.now(),
                                             suite=passes.suite_hash(), allowed_by="--allow-untested")
                            .at(digest, f"{host}/{repo}"))
            result.pass_record = f"UNTESTED, published by --allow-untested: registry {host}/{repo}:{tag}"
            result.untested = True
            return
        if record is not None and self.dry_run:
            result.pass_record = f"would write registry {host}/{repo}:{passes.record_tag(digest, key)} (--dry-run)"
            return
        if record is None:
            tested = self.run.passes.get(node.id)
            why = (f"this run tested image {tested.config}, and the registry's {digest} is image {config}"
                   if tested is not None else "and this run holds no pass for it")
            raise EngineError(f"{host}/{repo}@{digest} has no pass record for this suite and these expectations "
                              f"({why}): no public tag is pointed at it")
        tag = store.put(repo, record.at(digest, f"{host}/{repo}"))
        if store.find(repo, digest, key, config) is None:
            raise EngineError(f"the pass record {host}/{repo}:{tag} did not read back: not published")
        result.pass_record = f"registry {host}/{repo}:{tag} (written by this run)"

    def pass_for(self, node: Node, nodes: list[Node], digests: Mapping[str, str], config: str) -> PassRecord | None:
        """The pass this run holds for the image `config`: the leaf's own, or for an ancestor, one `via` a
        leaf whose passing image was built on this very image in this run."""
        own = self.run.passes.get(node.id)
        if node.leaf:
            return own if own is not None and own.config == config else None
        if self.run.images.get(node.id) not in (None, config):
            return None
        for leaf in nodes:
            record = self.run.passes.get(leaf.id)
            if not leaf.leaf or record is None or node not in self.run.plan.ancestors(leaf):
                continue
            spec = self.run.smoke_spec(node)
            return PassRecord(passes.PASSED, config=config, spec=self.run.spec_key(node), node=node.id,
                              entry=node.entry.id, expect=spec["expect"], gpu=record.gpu, date=passes.now(),
                              suite=passes.suite_hash(),
                              via={"node": leaf.id, "manifest": digests[leaf.id], "config": record.config,
                                   "record": passes.record_tag(digests[leaf.id], record.spec)})
        return None

    def move_aliases(self) -> bool:
        """After every entry: each alias moves to the last node it covers (in matrix order), and only when
        every node it covers in the whole matrix passed in this run."""
        ok_states = (Status.PUSHED, Status.CURRENT, Status.TAGGED)
        ok = True
        for ref, covered in self.run.plan.alias_cover:
            missing = [n for n in covered if n not in self.run.results]
            failed = [n for n in covered if n in self.run.results and self.run.results[n].publish not in ok_states]
            target = covered[-1]
            if missing or failed:
                why = (f"{failed[0]} did not pass" if failed else f"{missing[0]} is not part of this run (--only)")
                for node_id in covered:
                    if node_id in self.run.results:
                        self.run.results[node_id].aliases_held.append(ref)
                self.run.say(f"[yellow]alias {escape(ref)} not moved: {escape(why)}[/]")
                continue
            result = self.run.results[target]
            node = self.run.plan.node(target)
            try:
                if self.push:
                    assert result.digest is not None
                    self.point_tag(node, ref, result.digest)
                if node.id in self.run.images or not self.push:
                    self.run.worker_engine().tag(self.run.local_image(node), ref)
                result.aliases.append(ref)
            except ImageBuilderError as exc:
                ok = False
                result.aliases_held.append(ref)
                self.run.say(f"[bold red]✗ alias {escape(ref)}: {escape(exc.message)}[/]")
        return ok

    def registry_digest(self, ref: str) -> str | None:
        """The manifest digest a reference names in its registry (a manifest HEAD); None when there is none."""
        host, repo, tag = split_reference(ref)
        return self.run.registry(host).manifest_digest(repo, tag)

    def passes_of(self, node: Node) -> tuple[RegistryPasses, str, str]:
        """The pass records of the node's repository: (store, host, repository path)."""
        host, repo, _ = split_reference(cache_ref(node))
        return RegistryPasses(self.run.registry(host)), host, repo

    def push_key_tag(self, node: Node, engine: Engine) -> str:
        """The node's manifest digest under its key tag, for the image this run holds: pushed when the key tag
        is missing or names another image (keys do not name content: the key tag moves to the image that was
        tested, and both digests are said). A node this run never pulled is what its key tag named when it
        was looked up (the manifest its pass was found beside, if any)."""
        ref = cache_ref(node)
        image = self.run.images.get(node.id)
        held = self.registry_digest(ref)
        if image is None:
            known = self.run.tested_manifests.get(node.id) or held
            if known is None:
                raise EngineError(f"{ref} is gone from the registry and {node.id} is not on this engine")
            return known
        store, _, repo = self.passes_of(node)
        if held is not None:
            config = store.config_digest(repo, held)
            if config == image:
                return held
            self.run.say(f"[yellow]  {escape(ref)} names {held} (image {config}), not the image this run holds "
                     f"({image}): pushing this run's image over it[/]")
        engine.tag(image, ref)
        self.run.say(f"[bold]▶ push {escape(ref)}[/]")
        digest = engine.push(ref, sink=lambda line: self.run.say(f"[yellow]  {escape(line)}[/]"),
                             auth=self.run.auth(ref))
        held = self.registry_digest(ref)
        if held != digest:
            raise EngineError(f"push {ref}: the registry holds {held}, not the pushed {digest}")
        config = store.config_digest(repo, digest)
        if config != image:
            raise EngineError(f"push {ref}: {digest} is image {config}, not this run's {image}")
        return digest

    def point_tag(self, node: Node, ref: str, digest: str) -> int:
        """Make `ref` name `digest` in the registry, copying the manifest from the node's key tag; 1 if it
        moved, 0 if it already did."""
        if self.run.stopping.is_set():
            raise EngineError(f"tag {ref}: not moved, the run was interrupted")
        if self.registry_digest(ref) == digest:
            return 0
        if self.dry_run:
            self.run.say(f"[dim]  would point {escape(ref)} at {digest} (--dry-run)[/]")
            return 1
        host, repo, tag = split_reference(ref)
        self.run.registry(host).copy(split_reference(cache_ref(node))[1], digest, repo, tag)
        held = self.registry_digest(ref)
        if held != digest:
            raise EngineError(f"tag {ref}: the registry holds {held}, not {digest}")
        return 1
