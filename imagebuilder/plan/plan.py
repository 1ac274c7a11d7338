"""Entries x layer trees -> build nodes with parent, tags and status, in build order.

Planning renders every node once (with the parent's tag standing in for its image ID), so a
template error stops the run before anything slow starts.
"""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import functools
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ..errors import InputError, Where
from ..input.layers import Layer, LayerCatalog
from ..input.matrix import VERSION_FIELDS, Entry, Matrix
from . import tags as tagging
from .render import RenderedNode, Renderer


class State(str, Enum):
    """What the plan decided for a node."""

    BUILD = "build"  # no image has its key (or --no-cache, or its parent builds)
    CACHED = "cached"  # an image with its key is on the engine or in the registry
    UNKNOWN = "unknown"  # no key yet: its base image is not on the engine (a build pulls it)


@dataclass(frozen=True)
class Decision:
    """A node's plan state and why; where its image is, when it is cached. One type for all of it."""

    state: State = State.BUILD
    reason: str = ""
    image: str | None = None  # cached on this engine: the image ID
    ref: str | None = None  # cached in the registry: its key tag (pulled when needed, unless `image` is set)
    config: str | None = None  # the image ID the key tag names (its config digest), when it was read
    same_as: str | None = None  # an earlier node of this plan with the same key: one image serves both

    @property
    def where(self) -> str | None:
        return "local" if self.image else "registry" if self.ref else None


@dataclass(frozen=True)
class Base:
    """A base image as the plan's roots build on it (`plan/bases.py` resolves it, once per command): the name as
    the matrix writes it, its image ID (the roots' keys start from it), and, from a lock, the lock file and the
    registry manifest digest (`repo@sha256:…`) it pins. `from_ref` is what a root's FROM names, once the engine was
    found to hold the locked image under it ("": the image ID)."""

    name: str
    id: str
    digest: str | None = None  # the locked manifest digest, when the lock has one
    lock: Where | None = None  # where the lock file pins it; None: as this engine (or --base-image-id) resolved it
    from_ref: str = ""

    @property
    def reference(self) -> str:
        """What a root's FROM names: the locked manifest digest when the engine holds the locked image under it,
        else the image ID (the legacy builder takes `FROM sha256:<id>` for an image on the engine)."""
        return self.from_ref or self.id


@dataclass(frozen=True)
class Node:
    id: str
    name: str
    layer: Layer
    entry: Entry
    parent: str | None
    base_image: str | None
    tags: tuple[str, ...]  # immutable: once pushed, never pointed elsewhere
    leaf: bool
    rendered: RenderedNode
    key: str = ""  # content address (keys.assign); "" until the base image is resolved
    inputs: tuple[tuple[str, str], ...] = ()  # what the key is made of, for saying why a node rebuilds
    decision: Decision = Decision()  # cache.decide
    aliases: tuple[str, ...] = ()  # floating: moved once every node they cover passed
    # the entry's fields this node's chain depends on (scope): the versions its labels state; None: all of them
    # and the entry's own identity (a leaf, or a template that reads the entry as a whole)
    scope: tuple[str, ...] | None = None

    @property
    def status(self) -> State:
        return self.decision.state

    @property
    def reason(self) -> str:
        return self.decision.reason

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "layer": self.layer.name,
            "name": self.name,
            "parent": self.parent,
            "base_image": self.base_image,
            "entry": {"id": self.entry.id, **self.entry.versions()},
            "tags": list(self.tags),
            "aliases": list(self.aliases),
            "leaf": self.leaf,
            "scope": None if self.scope is None else list(self.scope),
            "key": self.key or None,
            "status": self.status.value,
            "reason": self.reason,
            "same_as": self.decision.same_as,
        }


@dataclass(frozen=True)
class PinnedWheelhouse:
    """A wheelhouse folder as the lock pins it (`plan/wheels.py` checked its files against the lock when the plan
    was loaded): each file it may serve by name, with the sha256 of its bytes (`sha256:<hex>`), and where the lock
    pins it. Keys name these hashes; the run serves these files only, each with its hash for pip to check."""

    folder: Path
    name: str  # as the lock names it (`wheelhouses.<name>`)
    files: tuple[tuple[str, str], ...]
    lock: Where


@dataclass(frozen=True)
class Plan:
    nodes: tuple[Node, ...]
    # alias reference -> every node of the whole matrix it names, in plan order (the last one is its target);
    # kept whole by `only`, so an alias is not moved by a run that did not build everything it covers
    alias_cover: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # the base images its roots build on, resolved (`plan/bases.py`): from the lock beside the matrix when there is
    # one (pinned when the plan is loaded), else as the engine names them (when it is decided)
    bases: tuple[Base, ...] = ()
    # the wheelhouses its builds take wheels from, as the lock beside the matrix pins them (none without a lock)
    wheelhouses: tuple[PinnedWheelhouse, ...] = ()

    @functools.cached_property
    def _index(self) -> dict[str, Node]:
        return {n.id: n for n in self.nodes}

    def node(self, node_id: str) -> Node:
        return self._index[node_id]

    def base(self, name: str | None) -> Base | None:
        """The resolved base image of that name (None: not resolved, or no such base)."""
        return next((b for b in self.bases if b.name == name), None)

    @property
    def locked(self) -> str | None:
        """The lock file the plan's bases are pinned by; None for a matrix without one."""
        return next((b.lock.file for b in self.bases if b.lock), None)

    def base_names(self) -> list[str]:
        """The base images its roots name, sorted."""
        return sorted({n.base_image for n in self.nodes if n.base_image})

    def children(self, node_id: str) -> list[Node]:
        return [n for n in self.nodes if n.parent == node_id]

    def ancestors(self, node: Node) -> list[Node]:
        out = []
        while node.parent is not None:
            node = self.node(node.parent)
            out.append(node)
        return out

    def entries(self) -> list[Entry]:
        seen: dict[str, Entry] = {}
        for n in self.nodes:
            seen.setdefault(n.entry.id, n.entry)
        return list(seen.values())

    def only(self, pattern: str | None) -> Plan:
        """Nodes whose id matches the glob (or one of the comma-separated globs: a node id has no comma; a comma
        inside `[...]` is the glob's own), plus the ancestors they build on."""
        if not pattern:
            return self
        chosen: set[str] = set()
        for part in (p.strip() for p in re.split(r",(?![^\[]*\])", pattern)):  # (not a comma inside [...])
            matched = {n.id for n in self.nodes if part and fnmatch.fnmatchcase(n.id, part)}
            if not matched:
                sample = ", ".join(n.id for n in self.nodes[:3])
                raise InputError(f"--only {pattern!r} selects no node" + (f" with {part!r}" if part != pattern
                                                                          else ""),
                                 hint=f"node ids look like: {sample}")
            chosen |= matched
        for n in list(self.nodes):
            if n.id in chosen:
                chosen.update(a.id for a in self.ancestors(n))
        kept = [n for n in self.nodes if n.id in chosen]
        parents = {n.parent for n in kept}
        return self.with_nodes([
            n if (n.id not in parents) == n.leaf else _with_leaf(n, n.id not in parents) for n in kept])

    def with_nodes(self, nodes: list[Node]) -> Plan:
        return dataclasses.replace(self, nodes=tuple(nodes))

    def pinned(self, folder: Path | None) -> PinnedWheelhouse | None:
        """The lock's pins of a wheelhouse folder; None: not pinned (no lock, or no such folder)."""
        return next((w for w in self.wheelhouses if folder is not None and w.folder == folder), None)

    def with_wheelhouses(self, wheelhouses: tuple[PinnedWheelhouse, ...]) -> Plan:
        return dataclasses.replace(self, wheelhouses=wheelhouses)

    def with_bases(self, bases: tuple[Base, ...]) -> Plan:
        return dataclasses.replace(self, bases=tuple(sorted(bases, key=lambda b: b.name)))


def _with_leaf(node: Node, leaf: bool) -> Node:
    return dataclasses.replace(node, leaf=leaf)


def make(matrix: Matrix, renderer: Renderer, today: str | None = None) -> Plan:
    """`today` (yyyymmdd, UTC) fills `{date}` in tag templates; default: now."""
    today = today or datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d")
    nodes: list[Node] = []
    owners: dict[str, str] = {}
    cover: dict[str, list[str]] = {}
    catalogs: dict[tuple[Any, ...], LayerCatalog] = {}
    for entry in matrix.entries:
        if entry.layers_path not in catalogs:
            catalogs[entry.layers_path] = LayerCatalog.for_paths(entry.layers_path)
        catalog = catalogs[entry.layers_path]
        leaves = {spec.name for spec in entry.leaves()}
        refs: dict[str, str] = {}
        scopes: dict[str, tuple[str, ...] | None] = {}
        for spec in entry.layers:
            layer = catalog.find(spec.layer, where=entry.where)
            node_id = f"{entry.id}/{spec.name}"
            values = tagging.fields(entry.versions(), entry=entry.id, layer=spec.name, node=node_id, date=today)
            refs_for_node = []
            for template in entry.tags:
                tag = tagging.render(template, values, where=entry.where)
                ref = tagging.reference(entry.target, tag)
                if ref in owners:
                    raise InputError(
                        f"nodes {owners[ref]!r} and {node_id!r} would both be tagged {ref!r}",
                        where=entry.where, hint="add fields to the tag templates that tell them apart")
                owners[ref] = node_id
                refs_for_node.append(ref)
            aliases = []
            for template in entry.aliases:
                ref = tagging.reference(entry.target,
                                        tagging.render(template, values, where=entry.where))
                if ref not in aliases:
                    aliases.append(ref)
                    cover.setdefault(ref, []).append(node_id)
            refs[spec.name] = aliases[0] if aliases else refs_for_node[0]  # what children's FROM shows
            parent_image = entry.base_image if spec.parent is None else refs[spec.parent]
            rendered = renderer.render(entry, layer, node_id, parent_image, root=spec.parent is None,
                                       parent=None if spec.parent is None else f"{entry.id}/{spec.parent}")
            below = () if spec.parent is None else scopes[spec.parent]
            own = scope_of(renderer.reads(layer))
            scopes[spec.name] = None if below is None or own is None else tuple(sorted({*below, *own}))
            nodes.append(Node(
                id=node_id,
                name=spec.name,
                layer=layer,
                entry=entry,
                parent=None if spec.parent is None else f"{entry.id}/{spec.parent}",
                base_image=entry.base_image if spec.parent is None else None,
                tags=tuple(refs_for_node),
                leaf=spec.name in leaves,
                rendered=rendered,
                aliases=tuple(aliases),
                scope=scopes[spec.name],
            ))
    for ref, covered in cover.items():
        if ref in owners:
            node = next(n for n in nodes if n.id == covered[0])
            raise InputError(f"alias {ref!r} of {covered[0]!r} is also the immutable tag of {owners[ref]!r}",
                             where=node.entry.where, hint="aliases float and tags never move: keep them apart")
    return Plan(tuple(nodes), tuple((ref, tuple(ids)) for ref, ids in cover.items()))


# What a template name makes a node depend on, among the entry's versions (Entry.versions()); a name not
# listed here and not a version field (build, layer, parent_image, user) depends on no version.
READS = {
    "torch": ("torch", "accelerator", "triton"),  # a torch release's wheel is one per accelerator, with its triton
    "cuda_libs": ("accelerator", "cuda", "cudnn", "nccl"),
    "overrides": ("cudnn", "nccl"),
    "toolkit": ("cuda", "flavor"),
}
ENTRY_WIDE = ("entry", "node", "vars")  # the entry as a whole, or its identity


def scope_of(reads: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The version fields a template depends on (see READS), or None when it depends on the entry itself."""
    if reads is None or any(name in ENTRY_WIDE for name in reads):
        return None
    out: set[str] = set()
    for name in reads:
        out.update(READS.get(name, (name,) if name in VERSION_FIELDS else ()))
    return tuple(sorted(out))
