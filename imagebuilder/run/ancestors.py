"""An ancestor's pass through a leaf that passed: the built-on walk, by the diff_ids of both images' configs
(read by digest), never by a label. Verify writes such passes; publish checks them."""

from __future__ import annotations

from ..errors import Refused
from ..evidence import passes
from ..evidence.passes import PassRecord
from ..plan.lineage import blob_configs, diff_ids, rooted
from ..plan.plan import Node
from .context import RunContext


def via(run: RunContext, node: Node, leaf: Node, passed: PassRecord, leaf_digest: str, config: str) -> PassRecord:
    """The pass of an ancestor `node` whose image is `config`, through the leaf that passed on an image built on
    it: only when the leaf's image was built on exactly that image's layers (`lineage.rooted`: the ancestor's
    diff_ids are the first of the tested image's, both read from their configs by digest; labels are never
    read); `Refused` naming both images otherwise (a parent rebuilt elsewhere under the same key, or one that
    only a label names as the base, was never tested)."""
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
                      expect=run.specs.of(node)["expect"], gpu=passed.gpu, date=passes.now(),
                      suite=passes.suite_hash(),
                      via={"node": leaf.id, "manifest": leaf_digest, "config": passed.config,
                           "record": passes.record_tag(leaf_digest, passed.spec)})
