"""The publishing rule with an in-memory registry and engine: public tags name only digests with a pass
record of this suite; untested entries are staged; a key tag that names another image is never taken as
tested; a pass of another image is refused, naming both."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from imagebuilder.evidence import passes
from imagebuilder.evidence.passes import PassRecord, RegistryPasses
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.plan import keys
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.plan import Node, Plan
from imagebuilder.plan.render import Renderer
from imagebuilder.report import Result, Status
from imagebuilder.steps.publish import Publisher

from ..conftest import MatrixWriter
from .fakes import FakeEngine, FakeRegistry

REPO = "ml/pytorch"


@dataclass
class FakeRun:
    """A run whose three nodes (base -> business -> task) were built: each has a local image."""

    plan: Plan
    registry_: FakeRegistry = field(default_factory=FakeRegistry)
    results: dict[str, Result] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)
    passes: dict[str, PassRecord] = field(default_factory=dict)
    tested_manifests: dict[str, str] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)
    said: list[str] = field(default_factory=list)
    engine: FakeEngine | None = None
    secrets_in: dict[str, list[str]] = field(default_factory=dict)  # node id -> what a secret scan finds

    def __post_init__(self) -> None:
        self.engine = FakeEngine(self.registry_)
        for i, node in enumerate(self.plan.nodes):
            self.images[node.id] = f"sha256:{i + 1}" + "0" * 63
            self.results[node.id] = Result(node.id, node.entry.id, node.name, node.leaf, build=Status.BUILT,
                                           smoke=Status.PASSED if node.leaf else None)

    def say(self, text: str) -> None:
        self.said.append(text)

    def worker_engine(self) -> FakeEngine:
        assert self.engine is not None
        return self.engine

    def local_image(self, node: Node) -> str:
        return self.images[node.id]

    def spec_key(self, node: Node) -> str:
        return passes.spec_key({"node": node.id})

    def smoke_spec(self, node: Node) -> dict[str, Any]:
        return {"expect": {"torch": "2.6.0"}}

    def sign(self, node: Node, ref: str) -> None:
        pass

    def auth(self, ref: str) -> tuple[str, str] | None:
        return None

    def registry(self, host: str) -> FakeRegistry:
        return self.registry_

    def leaks(self, node: Node) -> list[str]:
        return self.secrets_in.get(node.id, [])

    def passed(self, node: Node, image: str | None = None) -> None:
        """The leaf passed its suite in this image (default: its own)."""
        self.passes[node.id] = PassRecord(passes.PASSED, config=image or self.images[node.id],
                                          spec=self.spec_key(node), node=node.id, entry=node.entry.id,
                                          date="2026-11-23", suite=passes.suite_hash())

    def tags(self) -> dict[str, str]:
        """Public tags in the registry -> digest."""
        return {t: d for (r, t), d in self.registry_.tagged.items()
                if r == REPO and not t.startswith("cache-") and not passes.is_record_tag(t)}


@pytest.fixture
def run(write_matrix: MatrixWriter, header: str, table: CompatTable) -> FakeRun:
    path = write_matrix(header + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n")
    plan = keys.assign(plan_mod.make(matrix_mod.load(path, table, env={}), Renderer()),
                       {"debian:bookworm": "sha256:" + "f" * 64})
    return FakeRun(plan)


def publish(run: FakeRun, **options: bool) -> bool:
    entry = run.plan.entries()[0]
    return Publisher(run, **options).run_publish(entry, list(run.plan.nodes))  # type: ignore[arg-type]


def leaf(run: FakeRun) -> Node:
    return next(n for n in run.plan.nodes if n.leaf)


def test_a_passed_entry_is_published_with_a_record_beside_every_digest(run: FakeRun) -> None:
    run.passed(leaf(run))
    assert publish(run)
    store = RegistryPasses(run.registry_)
    for node in run.plan.nodes:
        result = run.results[node.id]
        assert result.publish == Status.PUSHED and result.digest is not None
        assert all(run.tags()[ref.rsplit(":", 1)[1]] == result.digest for ref in node.tags)
        record = store.find(REPO, result.digest, run.spec_key(node))
        assert record is not None and record.config == run.images[node.id]
        assert (record.via is None) == node.leaf  # ancestors pass through the leaf built on them
        assert result.pass_record is not None and result.pass_record.endswith("(written by this run)")


def test_no_pass_stages_key_tags_only(run: FakeRun) -> None:
    run.results[leaf(run).id].smoke = Status.SKIPPED  # --no-smoke
    assert publish(run)
    assert run.tags() == {}
    assert all(run.results[n.id].publish == Status.STAGED and run.results[n.id].digest for n in run.plan.nodes)
    assert sorted(t for _, t in run.registry_.tagged) == sorted(f"cache-{n.key[:12]}" for n in run.plan.nodes)


def test_without_push_an_untested_entry_is_not_even_tagged_locally(run: FakeRun) -> None:
    run.results[leaf(run).id].smoke = Status.SKIPPED
    assert publish(run, push=False)
    assert run.engine is not None and run.engine.local_tags == {} and run.registry_.tagged == {}
    assert {run.results[n.id].publish for n in run.plan.nodes} == {Status.STAGED}


def test_allow_untested_publishes_and_says_so_beside_every_digest(run: FakeRun) -> None:
    run.results[leaf(run).id].smoke = Status.SKIPPED
    assert publish(run, allow_untested=True)
    assert run.tags()
    store = RegistryPasses(run.registry_)
    every = run.registry_.tags(REPO)
    for node in run.plan.nodes:
        result = run.results[node.id]
        assert result.untested and result.pass_record is not None and result.pass_record.startswith("UNTESTED")
        assert store.find(REPO, str(result.digest), run.spec_key(node)) is None  # never a pass
        assert [r.allowed_by for r in store.all_for(REPO, str(result.digest), every)] == ["--allow-untested"]
    assert any("UNTESTED" in line for line in run.said)


def test_a_key_tag_naming_another_image_is_replaced_by_the_tested_one(run: FakeRun) -> None:
    task = leaf(run)
    seeded = run.registry_.image_of(REPO, f"cache-{task.key[:12]}", "sha256:" + "e" * 64)
    run.passed(task)
    assert publish(run)
    digest = run.results[task.id].digest
    assert digest is not None and digest != seeded
    assert RegistryPasses(run.registry_).config_digest(REPO, digest) == run.images[task.id]
    assert seeded not in run.tags().values()
    assert any(f"names {seeded}" in line and run.images[task.id] in line for line in run.said)


def test_a_pass_of_another_image_is_refused_naming_both(run: FakeRun) -> None:
    task = leaf(run)
    run.passed(task, image="sha256:" + "d" * 64)  # the suite ran in another image than the one published
    assert not publish(run)
    result = run.results[task.id]
    assert result.publish == Status.FAILED
    assert "has no pass record" in str(result.error) and "sha256:" + "d" * 64 in str(result.error)
    assert run.images[task.id] in str(result.error)
    assert run.tags() == {}  # all or nothing: no node of the entry is tagged


def test_a_failed_or_gpu_unverified_leaf_holds_the_entry(run: FakeRun) -> None:
    run.results[leaf(run).id].smoke = Status.FAILED  # e.g. a skip on a GPU run
    assert not publish(run)
    assert {run.results[n.id].publish for n in run.plan.nodes} == {Status.HELD} and run.registry_.tagged == {}
    run.results[leaf(run).id].smoke = Status.PASSED
    run.results[leaf(run).id].gpu_verified = False
    run.passed(leaf(run))
    assert not publish(run)
    assert run.registry_.tagged == {}
    assert publish(run, allow_untested_gpu=True) and run.tags()


def test_a_pass_on_gpus_replaces_a_pass_without_one(run: FakeRun) -> None:
    """CPU fleets build and test what they can; a GPU fleet's pass of the same image then takes the record's
    place (same tag), so promote can tell the image was verified on GPUs."""
    task = leaf(run)
    run.passed(task)
    cpu_only = {"verified": False, "kind": "gpu", "models": []}
    run.passes[task.id] = replace(run.passes[task.id], gpu=cpu_only)
    run.results[task.id].gpu_verified = False
    assert publish(run, allow_untested_gpu=True)
    digest = str(run.results[task.id].digest)
    store = RegistryPasses(run.registry_)
    first = store.find(REPO, digest, run.spec_key(task))
    assert first is not None and not first.gpu_verified
    on_gpus = {"verified": True, "kind": "gpu", "models": ["NVIDIA H200"]}
    run.passes[task.id] = replace(run.passes[task.id], gpu=on_gpus)
    run.results[task.id].gpu_verified = True
    assert publish(run)
    again = store.find(REPO, digest, run.spec_key(task))
    assert again is not None and again.gpu_verified and again.gpu["models"] == ["NVIDIA H200"]


def test_a_cached_image_with_a_secret_holds_its_entry_and_nothing_is_pushed(run: FakeRun) -> None:
    run.passed(leaf(run))
    business = run.plan.nodes[1]
    run.results[business.id].build = Status.CACHED  # built by an earlier run, before this secret was known
    run.secrets_in[business.id] = ["$HF_TOKEN appears in the file /opt/team/.env"]
    assert not publish(run)
    assert run.tags() == {} and run.registry_.tagged == {}  # not even a key tag
    assert all(r.publish == Status.HELD for r in run.results.values())
    assert "HF_TOKEN appears in the file /opt/team/.env" in (run.results[business.id].error or "")
    # the gate looks at cached images only: built ones were scanned as they were built
    run.results[business.id].build = Status.BUILT
    assert publish(run) and run.tags()
