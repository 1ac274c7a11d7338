"""An ancestor's pass through a leaf that passed: the built-on walk, by the diff_ids of both images' configs
(read by digest), never by a label. Verify writes such passes; publish checks them."""

from __future__ import annotations

from ..errors import Refused
from ..evidence import passes
from ..evidence.passes import PassRecord
from ..plan.lineage import blob_configs, diff_ids, rooted
from ..plan.plan import Node
from .context import RunContext
from .keytags import unvouched


def via(run: RunContext, node: Node, leaf: Node, passed: PassRecord, leaf_digest: str, digest: str,
        config: str) -> PassRecord:
    """The pass of an ancestor `node` whose image is `repo@digest` (config `config`), through the leaf that passed
    on an image built on it: only when a trusted build record names that very image (its config, not only its
    layers: a config is part of the image) as this node's key's, built on its parent's (`keytags.unvouched`; the
    nodes between it and the leaf are held to the same rule where they are staged and published), and the leaf's
    image was built on exactly its layers (`lineage.rooted`: the ancestor's diff_ids are the first of the tested
    image's, both read from their configs by digest; labels are never read); `Refused` naming both
    images otherwise (a parent rebuilt elsewhere under the same key, one under another config, or one that only a
    label names as the base, was never tested)."""
    why = unvouched(run, node, digest)
    if why is not None:
        raise Refused(f"{node.id}'s key tag names {digest}, and {why}: nothing vouches that {leaf.id} was built on "
                      "it, so its pass is not credited")
    host, repo, _ = run.key_tag(leaf)
    client = run.registries(host)
    config_of = blob_configs(lambda image: client.blob(repo, image))
    tested, below = diff_ids(config_of(passed.config)), diff_ids(config_of(config))
    if not tested or not below:
        raise Refused(f"{leaf.id} passed in image {passed.config[:19]}; the layers of "
                      f"{'that image' if not tested else f'{node.id} (image {config})'} cannot be read from "
                      f"{host}/{repo}: nothing says it was tested")
    if not rooted(below, tested):
        raise Refused(f"{leaf.id} passed in image {passed.config[:19]}, whose layers do not start with the "
                      f"{len(below)} layer(s) of image {config}, which {node.id}'s key tag names: nothing was "
                      "tested on that image")
    return PassRecord(passes.PASSED, config=config, spec=run.specs.key(node), node=node.id, entry=node.entry.id,
                      expect=dict(run.specs.of(node).expect), gpu=passed.gpu, date=passes.now(),
                      suite=passes.suite_hash(),
                      via={"node": leaf.id, "manifest": leaf_digest, "config": passed.config,
                           "record": passes.record_tag(leaf_digest, passed.spec)})
