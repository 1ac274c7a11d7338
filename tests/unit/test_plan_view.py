"""`imagebuilder plan`'s tree: golden text of the default matrix at 80 and 160 columns, and what it must say
(every image once, never a line past the width, `{key12}` before keys are known, never-built nodes)."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from imagebuilder.plan import cache as cache_mod
from imagebuilder.plan import keys, view
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.plan import Decision, State
from imagebuilder.plan.tags import KEY_PENDING

from .test_cache_decide import Known
from .test_render import GOLDEN, default_plan


def stable_keys(plan: plan_mod.Plan) -> plan_mod.Plan:
    """The plan with each distinct key replaced by a made-up one, in order (so a template change does not change
    this golden text: the tree's layout is what it pins), its tags following."""
    real = list(dict.fromkeys(n.key for n in plan.nodes))
    fake = {k: hashlib.sha256(f"key {i}".encode()).hexdigest() for i, k in enumerate(real)}
    return plan.with_nodes([dataclasses.replace(n, key=fake[n.key], tags=tuple(
        t.replace(n.key[:12], fake[n.key][:12]) for t in n.tags)) for n in plan.nodes])


def decided_default() -> plan_mod.Plan:
    """matrix.yaml decided as on a machine that has the os image and the 2.8.0 CPU runtime entry's images (cached)
    and nothing else (never built)."""
    plan = stable_keys(keys.assign(default_plan(), {"debian:bookworm": "sha256:" + "1" * 64}))
    present = {n.id for n in plan.nodes if n.entry.id == "2.8.0-cpu-py3.11-runtime"} | {plan.nodes[0].id}  # + os
    return cache_mod.decide(plan, Known(None, None, present=present))  # type: ignore[arg-type]


@pytest.mark.parametrize("width", [80, 160])
def test_plan_tree_golden(width: int, update_golden: bool) -> None:
    """After an intended change of the tree's layout: pytest tests/unit/test_plan_view.py --update-golden."""
    text = "\n".join(line.plain() for line in view.tree(decided_default(), width)) + "\n"
    golden = GOLDEN / "plan" / f"tree-{width}.txt"
    if update_golden:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8"), f"the plan tree changed; see {golden} (--update-golden)"


@pytest.mark.parametrize("width", [40, 60, 80, 120, 160])
def test_the_tree_fits_and_shows_each_image_once(width: int) -> None:
    plan = decided_default()
    lines = [line.plain() for line in view.tree(plan, width)]
    assert max(len(line) for line in lines) <= width
    distinct = [n for n in plan.nodes if not n.decision.same_as]
    node_lines = [line for line in lines if "─ " in line]
    assert len(node_lines) == len(distinct) == 40
    if width >= 60:  # each distinct image's short key on exactly one node line (narrower, the deepest are cut)
        for n in distinct:
            assert sum(keys.short(n.key) in line for line in node_lines) == 1, n.id
    text = "\n".join(lines)
    assert "7 entries" in text and "os  cached" in text and "cuda  build" in text
    assert text.count("never built") >= 1 and "cached" in text


def test_before_keys_are_known_tags_say_key12_not_a_placeholder() -> None:
    plan = default_plan()  # no engine: no keys
    unknown = Decision(State.UNKNOWN, "no engine to resolve the base image")
    plan = plan.with_nodes([dataclasses.replace(n, decision=unknown) for n in plan.nodes])
    text = "\n".join(line.plain() for line in view.tree(plan, 100))
    assert KEY_PENDING not in text and "{key12}" in text and "unknown" in text


def test_a_node_never_built_says_so_and_a_changed_one_says_since_what() -> None:
    plan = stable_keys(keys.assign(default_plan(), {"debian:bookworm": "sha256:" + "1" * 64}))
    os_node = plan.nodes[0]
    assert keys.reason(os_node, None, None) == keys.NEVER_BUILT
    assert keys.reason(os_node, None, None, asked=False) == \
        "no earlier image of this node on this engine (its registry does not answer: not asked)"
    earlier = {**dict(os_node.inputs), "settings": "other", keys.PREVIOUS_FROM: "image 0123456789ab on this engine"}
    assert keys.reason(os_node, earlier, None) == \
        "build settings or labels changed (since image 0123456789ab on this engine)"


def test_table_format_keeps_a_row_per_node() -> None:
    plan = decided_default()
    assert view.table(plan).row_count == len(plan.nodes)
