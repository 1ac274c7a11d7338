"""The plan as a `docker-bake.json`, for teams that build with BuildKit (`docker buildx bake`).

Each node is a target whose context is its rendered folder. A child's `FROM <parent tag>` is bound to
the parent's target through a named context (`contexts: {"<parent tag>": "target:<parent>"}`), so
bake builds the chain in order without a registry round trip. Tags and labels are the ones imagebuilder
would apply; smoke tests and the GPU gate are not part of bake: run `imagebuilder smoke` on the results.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from . import keys
from .plan import Node, Plan
from .render import FIND_LINKS_ARG, wheelhouse_port
from .tags import KEY_PENDING


def target_name(node: Node) -> str:
    """Bake target names allow letters, digits, `_` and `-`."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", node.id.replace("/", "--"))


def bake_file(plan: Plan, contexts: Path, relative_to: Path, *, public: bool = False) -> dict[str, Any]:
    """One target per distinct image: nodes of several entries with one content (the shared OS, CUDA and
    torch nodes) are one target, and children build on that target. A target is tagged with its key tag only
    (known when the plan has keys): what bake builds has not passed the suite, so it gets no public name unless
    `public` says so (then every tag and alias of its nodes, as before the suite ever ran)."""
    targets: dict[str, Any] = {}
    first = keys.first_of(keys.identities(plan))
    for node in plan.nodes:
        tags = [keys.cache_ref(node)] if node.key else []
        if public:
            tags += [t for t in node.tags if KEY_PENDING not in t] + list(node.aliases)
        if first[node.id] != node.id:  # the same image as an earlier node: its target carries this node's tags
            shared = targets[target_name(plan.node(first[node.id]))]["tags"]
            shared += [t for t in tags if t not in shared]
            continue
        folder = os.path.relpath(contexts / node.id, relative_to)
        target: dict[str, Any] = {
            "context": folder,
            "dockerfile": "Dockerfile",
            # immutable tags whose key is not known here (no engine to resolve the base) are left out
            "tags": tags,
            "labels": keys.content_labels(node) | ({keys.KEY_LABEL: node.key} if node.key else {}),
            "network": node.entry.build.network,
        }
        if node.entry.build.wheelhouse:  # pip reads the served wheelhouse's URL from a build arg
            target["args"] = {FIND_LINKS_ARG: f"http://127.0.0.1:{wheelhouse_port(node.entry.build.wheelhouse)}/"}
        if node.parent is not None:
            parent = plan.node(first[node.parent])
            target["contexts"] = {node.rendered.parent_image: f"target:{target_name(parent)}"}
        elif (base := plan.base(node.base_image)) is not None and base.lock and base.digest:  # the locked manifest
            target["contexts"] = {node.rendered.parent_image: f"docker-image://{base.digest}"}
        targets[target_name(node)] = target
    groups = {"default": {"targets": [target_name(n) for n in plan.nodes if n.leaf]}}
    for entry in plan.entries():
        groups[re.sub(r"[^A-Za-z0-9_-]", "_", entry.id)] = {
            "targets": [target_name(n) for n in plan.nodes if n.entry.id == entry.id and n.leaf]}
    return {"group": groups, "target": targets}
