"""Content addresses for nodes, computed before anything builds.

A node's key is the sha256 of everything its image is made of: the rendered Dockerfile (with the
parent's reference written as `<parent>`), the content and mode of every file in its build context,
the settings that change the image (network, the wheelhouse's listing, the image's labels) and its
parent's key (for a root node: the base image's ID). Tag templates and the registry are not part of
it, so renaming tags never rebuilds. Alongside the key each node keeps its *inputs* (one hash per
template file, context file and setting) so a rebuild can say which of them changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from . import tags as tagging
from .render import CONTEXT_DIR, VERSIONS_PATH
from .tags import KEY_PENDING

if TYPE_CHECKING:  # keys reads plans (types only: plan does not import keys)
    from .plan import Node, Plan

SCHEME = "imagebuilder-key/2"
KEY_LABEL = "io.imagebuilder.key"
INPUTS_LABEL = "io.imagebuilder.inputs"
LABEL_PREFIX = "io.imagebuilder"


def short(key: str) -> str:
    return key[:12]


def cache_tag(key: str) -> str:
    """The registry tag that records a key: `<repo>:cache-<key12>`."""
    return f"cache-{short(key)}"


def cache_ref(node: Node) -> str:
    """The node's key tag in its registry: content-addressed, never a public tag."""
    return tagging.reference(node.entry.target, cache_tag(node.key))


def content_labels(node: Node) -> dict[str, str]:
    """The labels baked into a node's image. Only content goes here (no tags, no registry, no repository),
    so they can be part of the key: a cached image's labels are still true when it is reused under new
    tags or in another repository, and images of one content share one key wherever they are pushed."""
    entry = node.entry
    versions = {name: value for name, value in entry.versions().items()
                if value is not None and (node.scope is None or name in node.scope)}
    out = {
        "org.opencontainers.image.description": node.layer.description or f"imagebuilder layer {node.layer.name}",
        "org.opencontainers.image.vendor": "imagebuilder",
        f"{LABEL_PREFIX}.layer": node.layer.name,
        f"{LABEL_PREFIX}.versions": VERSIONS_PATH,
    }
    if node.scope is None:
        out.update({"org.opencontainers.image.title": f"{entry.id} {node.name}", f"{LABEL_PREFIX}.node": node.id,
                    f"{LABEL_PREFIX}.entry": entry.id})
    else:  # shared by every entry that agrees on its scope: its labels say nothing that is true of one entry only
        said = " ".join(f"{name} {versions[name]}" for name in node.scope if name in versions)
        out["org.opencontainers.image.title"] = f"{node.layer.name}" + (f" ({said})" if said else "")
        out[f"{LABEL_PREFIX}.scope"] = ",".join(node.scope) or "-"
    for name, value in versions.items():
        out[f"{LABEL_PREFIX}.version.{name}"] = value
    user = entry.user.settings()
    out[f"{LABEL_PREFIX}.user"] = f"{user['uid']}:{user['gid']}:{user['home']}"  # what `smoke IMAGE` checks
    if entry.overrides and (node.scope is None or "nccl" in node.scope):
        out[f"{LABEL_PREFIX}.overrides"] = " ".join(f"{name}=={version}" for name, version in entry.overrides)
    return out


def lineage_name(labels: Mapping[str, str]) -> str:
    """What a node's images are called across builds, read from their labels (`content_labels`): an entry's own
    node by its id; a scoped node by its layer and the versions of its scope (the same for every entry that
    shares it, and for the next build of it); empty for an image without either."""
    node = labels.get(f"{LABEL_PREFIX}.node")
    if node:
        return node
    scope = labels.get(f"{LABEL_PREFIX}.scope")
    if scope is None:
        return ""
    versions = " ".join(f"{name}={labels.get(f'{LABEL_PREFIX}.version.{name}', '')}"
                        for name in scope.split(",") if name and name != "-")
    return f"{labels.get(f'{LABEL_PREFIX}.layer', '')} ({versions})"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclasses.dataclass
class _Hasher:
    """Memoises digests of the byte strings the renderer shares between nodes (CA bundle, layer files)
    and the listing of each wheelhouse."""

    blobs: dict[int, tuple[bytes, str]] = dataclasses.field(default_factory=dict)
    listings: dict[Path, str] = dataclasses.field(default_factory=dict)
    pinned: dict[Path, tuple[tuple[str, str], ...]] = dataclasses.field(default_factory=dict)  # the lock's pins

    def blob(self, data: bytes) -> str:
        hit = self.blobs.get(id(data))
        if hit is None or hit[0] is not data:
            hit = (data, _sha(data))
            self.blobs[id(data)] = hit
        return hit[1]

    def wheelhouse(self, folder: Path | None) -> str | None:
        """Names and sizes of the wheels pip may take from a wheelhouse (their content is named by the pins); with a
        lock (`pinned`), each file it serves by name and locked sha256: a re-locked file changes the key."""
        if folder is None:
            return None
        if folder not in self.listings:
            if (locked := self.pinned.get(folder)) is not None:
                self.listings[folder] = _sha(json.dumps({"locked": sorted(locked)}).encode())
            else:
                wheels = sorted((p.name, p.stat().st_size) for p in folder.glob("*.whl")) if folder.is_dir() else []
                self.listings[folder] = _sha(json.dumps(wheels).encode())
        return self.listings[folder]

    @classmethod
    def of(cls, plan: Plan) -> _Hasher:
        """A hasher for one plan: its locked wheelhouses' pins (`Plan.wheelhouses`) name those folders."""
        return cls(pinned={w.folder: w.files for w in plan.wheelhouses})


def assign(plan: Plan, base_ids: Mapping[str, str]) -> Plan:
    """The plan with every node's key and inputs filled in. `base_ids` maps each base image reference
    to its image ID (or registry digest); a node whose base is missing from it gets no key. The plan keeps the
    bases its keys start from (`Plan.bases`: those it resolved already, `plan/bases.py`, and the others given
    here), so what builds a root, records it and vouches for it reads the one ID its key was made from."""
    from .plan import Base  # (at run time: plan does not import keys)

    known = {b.name for b in plan.bases}
    plan = plan.with_bases((*plan.bases, *(Base(name, image) for name, image in base_ids.items()
                                           if name not in known and image)))
    hasher = _Hasher.of(plan)
    keyed: dict[str, Node] = {}
    for node in plan.nodes:
        parent_key = base_ids.get(node.base_image or "", "") if node.parent is None else keyed[node.parent].key
        key, inputs = node_key(node, parent_key, hasher) if parent_key else ("", ())
        tags = tuple(t.replace(KEY_PENDING, short(key)) for t in node.tags) if key else node.tags
        aliases = tuple(a.replace(KEY_PENDING, short(key)) for a in node.aliases) if key else node.aliases
        keyed[node.id] = dataclasses.replace(node, key=key, inputs=inputs, tags=tags, aliases=aliases)
    # An alias names the last node it covers: {key12} in it is that node's key (once known).
    def target_key(covered: tuple[str, ...]) -> str:
        target = keyed.get(covered[-1])
        return short(target.key) if target is not None and target.key else KEY_PENDING

    cover = tuple((ref.replace(KEY_PENDING, target_key(covered)), covered) for ref, covered in plan.alias_cover)
    return dataclasses.replace(plan.with_nodes([keyed[n.id] for n in plan.nodes]), alias_cover=cover)


def identities(plan: Plan) -> dict[str, str]:
    """node id -> what its image is made of: its key; before its base image is resolved (no engine, a base not
    pulled yet), the same key with the base image's name standing in for its ID. Nodes of several entries with
    one identity are one image: built once (`cache.decide`), one bake target, staged once (`waves.waves`)."""
    hasher = _Hasher.of(plan)
    same: dict[str, str] = {}
    for node in plan.nodes:
        below = same[node.parent] if node.parent else f"base {node.base_image}"
        same[node.id] = node.key or node_key(node, below, hasher)[0]
    return same


def first_of(same: Mapping[str, str]) -> dict[str, str]:
    """node id -> the first node, in plan order, of its identity (`identities`): itself, or the node whose
    image it is."""
    first: dict[str, str] = {}
    return {node_id: first.setdefault(identity, node_id) for node_id, identity in same.items()}


def node_key(node: Node, parent_key: str, hasher: _Hasher | None = None) -> tuple[str, tuple[tuple[str, str], ...]]:
    hasher = hasher or _Hasher()
    rendered = node.rendered
    dockerfile = rendered.dockerfile
    if rendered.parent_image:
        dockerfile = dockerfile.replace(rendered.parent_image, "<parent>")
    files = [(rel, hasher.blob(data), rel in rendered.executables) for rel, data in rendered.files]
    settings = {"network": node.entry.build.network, "wheelhouse": hasher.wheelhouse(node.entry.build.wheelhouse),
                "labels": content_labels(node)}
    digests = {"dockerfile": _sha(dockerfile.encode()), "settings": _sha(json.dumps(settings, sort_keys=True).encode())}
    # The key hashes the digests of the parts (each hashed once), not the parts again.
    payload = {"scheme": SCHEME, **digests, "files": files, "parent": parent_key}
    key = _sha(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
    inputs = {
        **digests,
        "parent": parent_key,
        **{f"template:{path}": digest for path, digest in rendered.templates},
        **file_inputs(files),
    }
    return key, tuple(sorted(inputs.items()))


MAX_FILE_INPUTS = 64  # the inputs label must stay small: a Dockerfile line holds at most 64 KiB


def file_inputs(files: list[tuple[str, str, bool]]) -> dict[str, str]:
    """One input per context file, so a rebuild can name the file that changed. A layer that copies in a
    whole tree (thousands of headers, say) gets one input per folder instead, at the deepest level that
    keeps them within MAX_FILE_INPUTS (`file:usr/include/**`); imagebuilder's own files stay separate."""
    def one(digest: str, exe: bool) -> str:
        return f"{digest}{'+x' if exe else ''}"

    ours = CONTEXT_DIR + "/"
    own = [f for f in files if not f[0].startswith(ours)]
    out = {f"file:{rel}": one(digest, exe) for rel, digest, exe in files if rel.startswith(ours)}
    if len(own) <= MAX_FILE_INPUTS:
        return {**out, **{f"file:{rel}": one(digest, exe) for rel, digest, exe in own}}
    best: dict[str, list[str]] = {"**": [f"{rel}\0{one(d, x)}" for rel, d, x in own]}
    for depth in range(1, max(rel.count("/") for rel, _, _ in own) + 1):
        groups: dict[str, list[str]] = {}
        for rel, digest, exe in own:
            parts = rel.split("/")
            name = "/".join(parts[:depth]) + "/**" if len(parts) > depth else rel
            groups.setdefault(name, []).append(f"{rel}\0{one(digest, exe)}")
        if len(groups) > MAX_FILE_INPUTS:
            break
        best = groups
    for name, items in best.items():  # a folder: the digest of its files; a file: its own
        out[f"file:{name}"] = _sha("\n".join(sorted(items)).encode()) if name.endswith("**") else \
            items[0].split("\0", 1)[1]
    return out


_SPECIAL_FILES = {f"{CONTEXT_DIR}/constraints.txt": "pins (constraints.txt)",
                  f"{CONTEXT_DIR}/ca-bundle.pem": "CA bundle"}


PREVIOUS_FROM = "previous:from"  # in a node's previous inputs: which image they were read from


def changes(old: Mapping[str, str], new: Mapping[str, str], layer_dir: str) -> list[str]:
    """What differs between two nodes' inputs, in words, most telling first."""
    said: list[str] = []
    for name in sorted(set(old) | set(new)):
        kind, _, what = name.partition(":")
        if kind not in ("template", "file") or old.get(name) == new.get(name):
            continue
        label = f"template {what}" if kind == "template" else _SPECIAL_FILES.get(what) or f"file {layer_dir}/{what}"
        state = "added" if name not in old else "removed" if name not in new else "changed"
        said.append(f"{label} {state}")
    if not said and old.get("dockerfile") != new.get("dockerfile"):
        said.append("rendered Dockerfile changed (versions, vars or build settings)")
    if old.get("settings") != new.get("settings"):
        said.append("build settings or labels changed")
    return said


NEVER_BUILT = "never built"  # no earlier image of the node, on this engine or in the registry


NOT_HERE = "no earlier image of this node on this engine (its registry does not answer: not asked)"


def reason(node: Node, previous: Mapping[str, str] | None, parent_status: str | None, *, asked: bool = True) -> str:
    """Why a node that has no image for its key must build, against `previous`, the inputs of the node's newest
    earlier image (`cache.previous_inputs`; its `PREVIOUS_FROM` says which image that is), or None: never built,
    as far as the engine and, when it was `asked`, the registry know."""
    if previous is None:
        return NEVER_BUILT if asked else NOT_HERE
    since = f" (since {previous[PREVIOUS_FROM]})" if previous.get(PREVIOUS_FROM) else ""
    new = dict(node.inputs)
    said = changes(previous, new, _layer_dir(node))
    if parent_status == "build":
        return "; ".join(["parent rebuilt", *said]) + (since if said else "")
    if previous.get("parent") != new.get("parent"):
        said.append(f"base image {node.base_image} changed" if node.parent is None else "parent changed")
    if not said:
        return "no image with this key locally or in the registry"
    return "; ".join(said) + since


def _layer_dir(node: Node) -> str:
    path = node.layer.path
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)
