"""Stage: every node's image, built FROM its parent's image unless an image with its key exists (on the engine,
or under its key tag in the registry: then it is pulled only when a child builds on it or a suite runs in it).
A node whose content another node of the run has (one key) is that node's image, built once. Each built image
is scanned for secrets (`scan`) before anything uses it. `KeyTags` pushes each entry's images under their key
tags only: what a later verify or publish, on another machine, starts from. `Staged` is the stage that
`verify` and `publish` start from: nothing builds, every node is what its key tag names."""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from rich.markup import escape

from ..errors import EngineError, ImageBuilderError, InputError
from ..evidence.spec import CHECKS_LABEL, layer_checks
from ..ledger import BuildStatus, PublishStatus
from ..plan import keys
from ..plan.keys import cache_ref
from ..plan.plan import Node, Plan, State
from ..plan.render import FIND_LINKS_ARG, build_args, declared, with_labels
from ..ports.reference import parse
from ..ports.registry import Registries
from ..run.context import RunContext
from ..run.keytags import keep_published, push_key_tags, unvouched
from ..run.loopback import Served
from ..run.nodes import entry_nodes, mark_unbuilt, mark_unpublished, require_push, scan
from ..run.schedule import Task
from ..secrets import redact
from ..supply import torch_stack

CUDA_BUILD_SPACE = 20 * 2**30  # a CUDA base layer (~6 GB) plus its downloaded wheels and the commit's copy
CPU_BUILD_SPACE = 4 * 2**30
_NO_SPACE = re.compile(r"no space left on device|ENOSPC|disk quota exceeded", re.IGNORECASE)


def labels(node: Node, parent_id: str, checks: list[dict[str, str]] | None = None) -> dict[str, str]:
    """Everything the image carries: its content labels (part of the key), the key, the inputs the key
    was made of (so a later run can say what changed), the parent it was built on, and the layer checks it
    was built to pass (for `smoke IMAGE`; not part of the key: an image cached by key keeps the checks of
    the build that made it)."""
    out = keys.content_labels(node)
    out[keys.KEY_LABEL] = node.key
    out[keys.INPUTS_LABEL] = json.dumps(dict(node.inputs), sort_keys=True, separators=(",", ":"))
    if checks:
        out[CHECKS_LABEL] = json.dumps(checks, separators=(",", ":"))
    out["org.opencontainers.image.base.digest"] = parent_id
    if node.base_image:
        out["org.opencontainers.image.base.name"] = node.base_image
    return out


def node_build_args(node: Node, served: Served) -> dict[str, str]:
    """The build args a node's build is given: the served wheelhouse's URL and the loopback proxy of each index
    that needs credentials (the text's ARG defaults name the index itself), and with either the run's token, which
    both ask for (Docker's predefined `http_proxy`: in no history, no cache key, no image)."""
    names = declared(node.rendered.dockerfile)
    out = {name: served.urls[url] for name, url in build_args(node.entry).items()
           if name in names and url in served.urls}
    if FIND_LINKS_ARG in names and node.entry.build.wheelhouse:
        out[FIND_LINKS_ARG] = served.wheelhouses[node.entry.build.wheelhouse]
    if out:  # the run's token, which the proxies and the wheelhouse servers ask for
        out.update(served.build_args())
    return out


def record_bases(run: RunContext) -> None:
    """Supply chain: what each root image was built on, by image ID and registry digests: the base as the plan
    resolved it (`plan.bases`: the lock's, else the engine's image of its name)."""
    seen: dict[str, dict[str, Any]] = {}
    engine = run.images.worker()
    for node in run.plan.nodes:
        if node.base_image is None:
            continue
        if node.base_image not in seen:
            base = run.plan.base(node.base_image)
            info = engine.inspect(base.id) if base is not None and engine.image_id(base.id) else {}
            seen[node.base_image] = {"name": node.base_image, "id": info.get("Id"),
                                     "repo_digests": info.get("RepoDigests") or []}
        run.ledger.update(node.id, base=seen[node.base_image])


def found(run: RunContext, node: Node) -> bool | None:
    """The parts of staging that need no build: a node whose parent did not build is blocked; one whose
    content another node of the run has is that node's image; a cached one is what was found. None: it must
    be built."""
    record = run.ledger[node.id]
    if node.parent is not None and not run.ledger[node.parent].built:
        run.ledger.update(node.id, build=BuildStatus.BLOCKED, error=f"parent {node.parent} did not build")
        return False
    twin = node.decision.same_as
    if twin and node.decision.state == State.BUILD:  # one image for nodes of one content: the first built it
        built = run.ledger[twin]
        if not built.built or built.image is None:
            run.ledger.update(node.id, build=BuildStatus.BLOCKED, error=f"{twin}, the same image, did not build")
            return False
        run.ledger.update(node.id, image=built.image, build=BuildStatus.CACHED, cache="local",
                          secret_scan=built.secret_scan)
        run.logs.say(f"[cyan]● same image as {escape(twin)}[/] [dim]{escape(node.id)}: built once[/]")
        return True
    if node.decision.state == State.CACHED and node.decision.where is not None:
        run.ledger.update(node.id, build=BuildStatus.CACHED, cache=node.decision.where,
                          image=node.decision.image or record.image)
        run.logs.say(f"[cyan]● cached {escape(node.id)}[/] [dim]{escape(node.reason)}[/]")
        return True
    return None


@dataclass(frozen=True)
class Nodes:
    """What the two stages share: a `build:<node>` task per node after its parent's, the base images noted
    first, and what an interrupted or cut-short run left unbuilt said on each node."""

    def start(self, run: RunContext) -> None:
        record_bases(run)

    def tasks(self, run: RunContext) -> list[Task]:
        out = []
        for node in run.plan.nodes:
            deps = (f"build:{node.parent}",) if node.parent else ()
            if node.decision.same_as:  # after the node whose image it is
                deps = (*deps, f"build:{node.decision.same_as}")
            out.append(Task(f"build:{node.id}", functools.partial(self.node, run, node), deps))
        return out

    def interrupted(self, run: RunContext) -> None:
        mark_unbuilt(run, None)

    def cancelled(self, run: RunContext, task_ids: Collection[str]) -> None:
        mark_unbuilt(run, task_ids)

    def node(self, run: RunContext, node: Node) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class Stage(Nodes):
    """Build what is not cached; reuse what is. A node the plan decided cached (its key's image on this engine or
    under its key tag), or whose content another node of the run has, is reused (`found`); one whose parent did
    not build is blocked; any other is built FROM its parent's image and is `built` only once its secrets scan
    found nothing. Stage pushes nothing: `KeyTags` and `Publish` do."""

    no_cache: bool = False  # ignore the engine's build cache (a cold build)
    stacks: dict[str, tuple[torch_stack.Dist, ...]] = field(default_factory=dict, compare=False)  # by image ID

    def start(self, run: RunContext) -> None:
        super().start(run)
        self.check_disk(run)

    def node(self, run: RunContext, node: Node) -> bool:
        try:
            done = found(run, node)
            return self.build(run, node) if done is None else done
        finally:
            status = run.ledger[node.id].build
            run.logs.display.node_done({BuildStatus.BUILT: "built", BuildStatus.CACHED: "cached"}.get(
                status, "failed") if status else "failed")

    def build(self, run: RunContext, node: Node) -> bool:
        engine = run.images.worker()
        base = run.plan.base(node.base_image)
        if base is not None:  # FROM the base as the plan resolved it: the lock's, else the engine's image of its name
            parent_ref, parent_id, from_ref = f"{base.name}{' (locked)' if base.lock else ''}", base.id, base.reference
        elif node.base_image is not None:  # (a run resolves every base before it starts: `bases.resolve`)
            run.ledger.update(node.id, build=BuildStatus.FAILED, error=f"base image {node.base_image} was not "
                              "resolved (not on the engine)")
            return False
        else:
            assert node.parent is not None
            parent_ref = node.parent
            try:
                parent_id = from_ref = run.images.local(run.plan.node(node.parent))
            except ImageBuilderError as exc:
                run.ledger.update(node.id, build=BuildStatus.FAILED,
                                  error=f"cannot get the cached parent: {exc.message}")
                return False
        rendered = with_labels(node.rendered.for_parent(from_ref),  # rendered once
                               labels(node, parent_id, layer_checks(run.plan, node)))
        buildargs = node_build_args(node, run.served)
        leaked = redact.find_in_build_args(buildargs, run.logs.secrets, declared(rendered.dockerfile))
        if leaked:  # nothing here should ever carry one: a gate, so that no later change can slip one in
            run.ledger.update(node.id, build=BuildStatus.FAILED, error="not built: " + "; ".join(leaked))
            return False
        log_path = run.logs.path(node.id)
        run.ledger.update(node.id, log=str(log_path), parent_image=parent_id)
        tail: list[str] = []
        step = f"build {node.id}"
        start = time.monotonic()
        run.logs.display.start(step)
        run.logs.say(f"[bold]▶ build {escape(node.id)}[/] [dim]FROM {escape(parent_ref)} ({parent_id[:19]}) · "
                     f"{escape(node.reason)}[/]")
        try:
            with log_path.open("w", encoding="utf-8") as log:
                log.write(f"# {node.id} key {node.key}\n# why: {node.reason}\n")
                try:
                    image = engine.build(rendered.tar(), network=node.entry.build.network, buildargs=buildargs,
                                         sink=run.logs.sink(step, node.id, log, tail), nocache=self.no_cache)
                except ImageBuilderError as exc:
                    log.write(f"ERROR: {exc.message}\n")
                    run.ledger.update(node.id, build=BuildStatus.FAILED, log_tail="\n".join(tail[-25:]),
                                      error=self.explain(run, exc.message, tail))
                    run.logs.say(f"[bold red]✗ {escape(node.id)}: {escape(exc.message)}[/]")
                    run.logs.show(node.id, str(log_path))
                    return False
        finally:
            run.ledger.timed(node.id, "build", time.monotonic() - start)
            run.logs.display.stop(step)
        leaks = scan(run, node, image=image, parent=parent_id)
        if leaks:  # removed, so that no later run finds it by its key; nothing of its entry is published
            engine.remove_image(image)
            error = "a secret was baked into the image (it was removed): " + "; ".join(leaks)
            run.ledger.update(node.id, build=BuildStatus.FAILED, error=error)
            run.logs.say(f"[bold red]✗ {escape(node.id)}: {escape(error)}[/]")
            return False
        changed = self.stack_changes(run, node, parent_id, image)
        if changed:  # removed, so that no later run finds it by its key; nothing of its entry is published
            engine.remove_image(image)
            error = ("the torch stack changed above the torch node (the image was removed): " + "; ".join(changed)
                     + ". Keep torch, triton and nvidia-* as the torch node installed them: pin them to its versions "
                     "in the layer's requirements (or a constraints file), or install with --no-deps")
            run.ledger.update(node.id, build=BuildStatus.FAILED, error=error)
            run.logs.say(f"[bold red]✗ {escape(node.id)}: {escape(error)}[/]")
            return False
        run.ledger.update(node.id, image=image, build=BuildStatus.BUILT)
        took = run.ledger[node.id].durations["build"]
        run.logs.say(f"[green]✓ built {escape(node.id)}[/] [dim]{image[:19]} in {took:.1f}s[/]")
        try:
            keep_published(run, node)  # one key, one image: what is tested and published from here on
        except ImageBuilderError as exc:
            run.logs.say(f"[yellow]  {escape(node.id)}: its key tag could not be read ({escape(exc.message)})[/]")
        return True

    def stack_changes(self, run: RunContext, node: Node, parent: str, image: str) -> list[str]:
        """How this node's layer changed the torch stack of its parent's image (`supply.torch_stack`); none
        when the parent has no torch (the torch node, and the layers below it)."""
        engine = run.images.worker()
        for one in (parent, image):
            if one not in self.stacks:
                self.stacks[one] = torch_stack.probe(engine, one)
        return torch_stack.changes(self.stacks[parent], self.stacks[image], node.name,
                                   node.parent or node.base_image or parent)

    def check_disk(self, run: RunContext) -> None:
        """Warn before anything builds when the engine's storage is short for what must be built: a CUDA
        layer is several GB and is written twice while the builder commits it."""
        building = [n for n in run.plan.nodes if n.status != State.CACHED]
        if not building:
            return
        root, free = run.images.worker().storage()
        need = CUDA_BUILD_SPACE if any(n.entry.cuda for n in building) else CPU_BUILD_SPACE
        if free is not None and free < need:
            run.logs.say(f"[yellow]warning: only {free / 2**30:.1f} GiB free in {escape(root)}; building these "
                         f"images needs about {need / 2**30:.0f} GiB while they build, and a full disk fails the "
                         "build[/]")

    @staticmethod
    def explain(run: RunContext, message: str, tail: list[str]) -> str:
        """A build error as users can act on it: a full disk is said as such, with where and what to do."""
        if not any(_NO_SPACE.search(line) for line in [message, *tail]):
            return message
        root, free = run.images.worker().storage()
        where = f" ({root}, {free / 2**30:.1f} GiB free now)" if free is not None else (f" ({root})" if root else "")
        return (f"out of disk space: the engine's storage{where} filled up during this build; free space "
                "(docker image prune, docker builder prune) and run again: finished nodes are cached. "
                f"Engine said: {message}")


@dataclass(frozen=True)
class Staged(Nodes):
    """What `verify` and `publish` start from: every node as its key tag (or this engine) holds it; nothing
    builds. `require` is checked before the run starts: an unstaged node is an input error naming its key tag."""

    command: str  # for the message: the command that builds nothing

    def require(self, plan: Plan, registries: Registries) -> None:
        """Every node is staged: its key tag answered in the registry (or its image is on this engine). A
        registry that did not answer says nothing of what it holds: an outage, not an unstaged plan."""
        missing = [n for n in plan.nodes if n.status != State.CACHED]
        unknown = [cache_ref(n) for n in missing if not registries.answers(parse(cache_ref(n)).host)]
        if unknown:
            raise EngineError(f"registry {parse(unknown[0]).host} did not answer: whether {len(unknown)} node(s) of "
                              f"the plan are staged is unknown (first: {unknown[0]}); `imagebuilder {self.command}` "
                              "ran nothing")
        if missing:
            first = missing[0]
            there = [n for n in missing if n.reason.startswith("key tag ")]
            if there:  # a key tag is there, and no trusted build record vouches for it as this key's image
                raise InputError(f"not staged by a trusted build key: {len(missing)} node(s) of the plan are not "
                                 f"vouched for by a trusted build record (first: {there[0].id}: {there[0].reason}); "
                                 f"`imagebuilder {self.command}` tests and publishes nothing",
                                 hint="name the stage machine's public build key with --trust-build-key (or "
                                      "--trust-key build=FILE); `imagebuilder stage` rebuilds and re-pushes what no "
                                      "trusted key vouches for")
            raise InputError(f"not staged: {len(missing)} node(s) of the plan have no key tag in the registry "
                             f"(first: {cache_ref(first)}); `imagebuilder {self.command}` builds nothing",
                             hint="run `imagebuilder stage` for the same matrix first")

    def node(self, run: RunContext, node: Node) -> bool:
        done = found(run, node)
        if done is None:  # `require` refused this before the run: only a key tag removed since then gets here
            why = node.reason or "no key tag in the registry"
            run.ledger.update(node.id, build=BuildStatus.FAILED, error=f"not staged: {why} (run `imagebuilder stage`)")
            done = False
        if done:
            done = self.pin(run, node)
        run.logs.display.node_done("cached" if done else "failed")
        return done

    @staticmethod
    def pin(run: RunContext, node: Node) -> bool:
        """The node is exactly what its key tag names, and only when a build record signed by a key trusted for
        builds names that image as this key's, built on its parent's staged image (`keytags.unvouched`): a
        pusher's image under the key tag is never tested or published. An image on this engine with its key counts
        only when it is that very image (another build of the same key, on a machine that built the matrix before,
        is not what was staged); otherwise the staged digest is pulled when it is needed."""
        ref = cache_ref(node)
        host, repo, _ = run.key_tag(node)
        try:
            digest = run.registries.digest(ref)
        except ImageBuilderError as exc:
            run.ledger.update(node.id, build=BuildStatus.FAILED, error=f"its key tag cannot be read: {exc.message}")
            return False
        if digest is None:
            run.ledger.update(node.id, build=BuildStatus.FAILED, error=f"not staged: {ref} is not in the registry "
                              "(an image with this key on this engine is not what was staged; run `imagebuilder "
                              "stage`)")
            return False
        try:
            why = unvouched(run, node, digest)
        except ImageBuilderError as exc:
            why = f"its build record cannot be read ({exc.message})"
        if why is not None:  # a pusher's image under the key tag, or one another build key made: never tested
            run.ledger.update(node.id, build=BuildStatus.FAILED, digest=digest,
                              error=f"not staged by a trusted build key: {ref} names {digest}, and {why} (run "
                              "`imagebuilder stage` with the build key, or name its public half with "
                              "--trust-build-key)")
            return False
        local = run.ledger[node.id].image
        if local is not None:
            staged = run.passes(host).config_digest(repo, digest)
            if staged != local:
                run.logs.say(f"[yellow]  {escape(node.id)}: this engine's image {local[:19]} has the key, but "
                             f"{escape(ref)} names {digest} (image {str(staged)[:19]}): that one is used[/]")
                local = None
        run.ledger.update(node.id, image=local, digest=digest, cache="local" if local else "registry")
        return True


@dataclass(frozen=True)
class KeyTags:
    """`imagebuilder stage` and `node stage`: each entry whose every node built is pushed under its key tags only
    (never a public tag); an entry with a node that did not build is held, nothing of it pushed."""

    def start(self, run: RunContext) -> None:
        require_push(run, "stage")

    def tasks(self, run: RunContext) -> list[Task]:
        return [Task(f"stage:{entry}", functools.partial(self.entry, run, nodes),
                     tuple(f"build:{n.id}" for n in nodes)) for entry, nodes in entry_nodes(run.plan)]

    def entry(self, run: RunContext, nodes: list[Node]) -> bool:
        if not all(run.ledger[n.id].built for n in nodes):
            for n in nodes:
                if run.ledger[n.id].built:
                    run.ledger.update(n.id, publish=PublishStatus.HELD)
            run.logs.say(f"[yellow]{escape(nodes[0].entry.id)}: not every node passed; nothing of this entry is "
                         "tagged or pushed[/]")
            return False
        return push_key_tags(run, nodes, "staged: `imagebuilder stage` pushes key tags only")

    def interrupted(self, run: RunContext) -> None:
        mark_unpublished(run, "stage", None)

    def cancelled(self, run: RunContext, task_ids: Collection[str]) -> None:
        mark_unpublished(run, "stage", task_ids)
