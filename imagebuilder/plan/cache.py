"""Where a node's key already has an image, and so what the plan must do.

A node is `cached` when an image carrying its key is on the engine (found by its
`io.imagebuilder.key` label) or in the registry under `<repo>:cache-<key12>` (a manifest HEAD; the
image is pulled later, and only if a child must build on it or its smoke suite must run). A node
whose parent builds builds too. Passes are not found by key but by image digest (`passes`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import EngineError
from ..ports import Engine
from ..ports.reference import parse
from ..ports.registry import Registries
from . import keys
from .keys import cache_ref
from .lineage import rooted
from .plan import Decision, Node, Plan, State


class Vouch(Protocol):
    """Whether a trusted build key vouches for the image `repo@digest` (config digest `config`) as the image of
    `key` built on `parent` (an image ID; None: not asked): None when it does, else why not. The evidence
    (`provenance.BuildTrust`) implements it; the plan only asks."""

    def __call__(self, registry: Any, repo: str, digest: str, *, key: str, config: str,
                 parent: str | None) -> str | None: ...


@dataclass
class Cache:
    """Looks keys up on the engine and in the registries the plan names."""

    engine: Engine
    registries: Registries
    vouch: Vouch | None = None  # whether a key tag's image may be built on (its build record); None: not asked
    staged: bool = False  # verify, publish: the registry's vouched key tag decides, whatever this engine holds
    _local: dict[str, tuple[str, dict[str, str]]] | None = None  # key -> (image id, labels), newest
    _by_node: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # lineage -> newest labels
    warnings: list[str] = field(default_factory=list)

    def local(self) -> dict[str, tuple[str, dict[str, str]]]:
        if self._local is None:
            found: dict[str, tuple[str, dict[str, str]]] = {}
            for image in sorted(node_images(self.engine.images_with_label(keys.KEY_LABEL, every=True)),
                                key=lambda i: i.get("Created", 0)):
                labels = {str(k): str(v) for k, v in (image.get("Labels") or {}).items()}
                found[labels[keys.KEY_LABEL]] = (str(image["Id"]), labels)
                self._by_node[_lineage(keys.lineage_name(labels), _inputs(labels))] = \
                    {**labels, keys.PREVIOUS_FROM: f"image {str(image['Id'])[7:19]} on this engine"}
            self._local = found
        return self._local

    def forget_local(self) -> None:
        self._local = None

    def lookup(self, node: Node, parent: Node | None = None) -> Decision | None:
        """`cached` with where the image is, `build` saying why a key's image is not reused, or None when no
        image has the node's key. With `trust` (a run that builds): one key, one image per run. The image the
        registry's key tag names counts first, and only with a build record signed by a trusted build key that
        says it is this key's image, built on the image this run uses for `parent` (a pusher can move a key
        tag; only a build key vouches for what is under it); else the newest image of the key on this engine, if
        its layers start with the parent's (`lineage.rooted`); else it is built again."""
        if not node.key:
            return None
        below = (parent.decision.image or parent.decision.config) if parent is not None else None
        found, why = self.registry_image(node, below) if self.vouch is not None else (None, "")
        if found is not None:
            return found
        if self.staged:  # (an image of this key on this engine is not what was staged: only the registry's counts)
            return Decision(State.BUILD, why or f"no key tag {cache_ref(node)} in the registry")
        if why:
            why += "; built again"
        local = self.local().get(node.key)
        if local is not None and (below is None or self.built_on(local[0], below)):
            return Decision(State.CACHED, f"image {local[0][7:19]} has this key", image=local[0])
        if local is not None:
            why = why or f"image {local[0][7:19]} has this key but was not built on {below}"
            return Decision(State.BUILD, why)
        if why:
            return Decision(State.BUILD, why)
        if self.vouch is not None:
            return None
        ref = cache_ref(node)
        digest = self._digest(ref)
        return Decision(State.CACHED, f"key tag {ref} is in the registry", ref=ref) if digest else None

    def _digest(self, ref: str) -> str | None:
        host = parse(ref).host
        if not self.registries.answers(host):
            return None
        try:
            return self.registries.digest(ref)
        except EngineError as exc:
            self.registries.down(host)
            self.warnings.append(f"cache lookup failed: {exc.message}; its key tags count as absent in this run")
            return None

    def registry_image(self, node: Node, below: str | None) -> tuple[Decision | None, str]:
        """The key tag's image when its build record vouches for it (`provenance`), or None and why it does not
        count ("" when there is no key tag)."""
        assert self.vouch is not None
        ref = cache_ref(node)
        digest = self._digest(ref)
        if digest is None:
            return None, ""
        parsed = parse(ref)
        client = self.registries(parsed.host)
        try:
            body, _ = client.manifest(parsed.repository, digest)
            config = str(json.loads(body)["config"]["digest"])
        except (EngineError, ValueError, KeyError, TypeError):
            return None, f"key tag {ref} names {digest}, which is not an image manifest: built again"
        why = self.vouch(client, parsed.repository, digest, key=node.key, config=config, parent=below)
        if why is not None:
            return None, f"key tag {ref} names {digest[:19]}, not reused: {why}"
        image = config if self.engine.image_id(config) is not None else None
        reason = f"image {config[7:19]} has this key" if image else f"key tag {ref} is in the registry"
        return Decision(State.CACHED, reason, image=image, ref=ref, config=config), ""

    def built_on(self, image: str, parent: str) -> bool:
        """Whether the engine's `image` was built on its `parent` image (its layers start with the parent's; an
        image whose layers the engine does not list is taken at its key)."""
        try:
            below = (self.engine.inspect(parent).get("RootFS") or {}).get("Layers") or []
            above = (self.engine.inspect(image).get("RootFS") or {}).get("Layers") or []
        except (EngineError, AssertionError):
            return False
        return not below or rooted(below, above)

    def previous_inputs(self, node: Node) -> dict[str, str] | None:
        """The inputs of the image this node had last: the newest local image of the node, else the
        image its first tag names in the registry (its labels carry them)."""
        self.local()
        labels = self._by_node.get(_lineage(keys.lineage_name(keys.content_labels(node)), dict(node.inputs)))
        ref = parse(node.aliases[0] if node.aliases else node.tags[0])  # the newest
        if labels is None and self.registries.answers(ref.host):
            try:
                labels = self.registries(ref.host).labels(ref.repository, ref.reference)
                labels = {**labels, keys.PREVIOUS_FROM: f"{ref}"} if labels else labels
            except EngineError:
                self.registries.down(ref.host)
                labels = None
        if not labels or keys.INPUTS_LABEL not in labels:
            return None
        inputs = _inputs(labels)
        return {**inputs, keys.PREVIOUS_FROM: labels[keys.PREVIOUS_FROM]} if inputs else None


    def registry_asked(self, node: Node) -> bool:
        """Whether `previous_inputs` could ask the registry of the node's newest tag (it answers)."""
        return self.registries.answers(parse(node.aliases[0] if node.aliases else node.tags[0]).host)


def node_images(images: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The images that are a node's image, out of every local image carrying a key label. A node's image
    ends with the LABEL step that sets its key; the steps of a child built on it inherit that label until
    the child's own LABEL step, so they carry the parent's key too: an image is a node's image when its
    parent's key is another (or it has no parent here, as a pulled image). Untagged images that have
    children count too: `docker images` hides them, and a node's image is still there to reuse."""
    key_of = {str(i["Id"]): (i.get("Labels") or {}).get(keys.KEY_LABEL) for i in images}
    return [i for i in images if key_of.get(str(i.get("ParentId") or "")) != key_of[str(i["Id"])]]


def _inputs(labels: Mapping[str, str]) -> dict[str, str]:
    try:
        inputs = json.loads(labels.get(keys.INPUTS_LABEL, "{}"))
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in inputs.items()} if isinstance(inputs, dict) else {}


def _lineage(name: str, inputs: Mapping[str, str]) -> tuple[str, str]:
    """Earlier images of a node: the same name (`keys.lineage_name`: its id, or its layer and scope), built from
    the same layer folder (the path of its own template), wherever they were pushed (keys and labels name no
    repository)."""
    own = sorted(key for key in inputs if key.startswith("template:") and key.endswith("/Dockerfile.j2"))
    return name, own[0] if own else ""


def decide(plan: Plan, cache: Cache, *, rebuild: bool = False) -> Plan:
    """Each node's decision (`build`, `cached` with where, or `unknown` without a key) and why, in plan order."""
    decided: dict[str, Node] = {}
    first = keys.first_of(keys.identities(plan))
    for node in plan.nodes:
        parent = decided.get(node.parent) if node.parent else None
        if first[node.id] != node.id:  # nodes of several entries with one content: built (or pulled) once, by the first
            twin = decided[first[node.id]]
            said = "one build for both" if twin.status == State.BUILD else twin.reason
            decision = dataclasses.replace(twin.decision, same_as=twin.id, reason=f"the same image as {twin.id} "
                                           f"({said})")
            decided[node.id] = dataclasses.replace(node, decision=decision)
            continue
        if not node.key:
            why = f"base image {node.base_image or '?'} is not on the engine (a build pulls it)"
            decision = Decision(State.UNKNOWN, "parent's key is unknown" if parent is not None else why)
        elif rebuild:
            decision = Decision(State.BUILD, "--no-cache: everything builds")
        elif parent is not None and parent.status != State.CACHED:
            decision = Decision(State.BUILD, keys.reason(node, cache.previous_inputs(node), parent.status,
                                                         asked=cache.registry_asked(node)))
        else:
            decision = cache.lookup(node, parent) or Decision(State.BUILD, keys.reason(
                node, cache.previous_inputs(node), None, asked=cache.registry_asked(node)))
        decided[node.id] = dataclasses.replace(node, decision=decision)
    return plan.with_nodes([decided[n.id] for n in plan.nodes])
