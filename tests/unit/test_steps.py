"""stage → verify → publish for a three-node chain (base → business → task), composed as the commands compose
them and run by `steps.run.execute` on the in-memory ports: three machines whose only hand-off is the registry.
The ledger is checked after each step."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from imagebuilder.errors import InputError, RegistryAccess
from imagebuilder.evidence import passes
from imagebuilder.evidence.passes import RegistryPasses
from imagebuilder.evidence.provenance import BuildTrust
from imagebuilder.evidence.signing import SIGNING_KEY_ENV, Keys, Signer, Trust
from imagebuilder.evidence.spec import Specs
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.ledger import BuildStatus, NodeRecord, PublishStatus, VerifyStatus
from imagebuilder.plan import bases, keys
from imagebuilder.plan import cache as cache_mod
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.plan import Plan, State
from imagebuilder.plan.render import Renderer
from imagebuilder.ports.registry import Registries
from imagebuilder.run.context import Step
from imagebuilder.smoke.runner import GpuHost
from imagebuilder.steps.publish import Publish
from imagebuilder.steps.run import RunOptions, execute
from imagebuilder.steps.stage import KeyTags, Stage, Staged
from imagebuilder.steps.supply import SupplyChain
from imagebuilder.steps.verify import Verify

from ..conftest import MatrixWriter
from .fakes import H100, FakeEngine, FakeRegistry, registries, suite_report

REPO = "ml/pytorch"


def machine(registry: FakeRegistry) -> FakeEngine:
    """A fresh machine: an engine that holds only the base image."""
    engine = FakeEngine(registry)
    engine.add({"config": {"Labels": {"os": "debian"}}}, "debian:bookworm")
    return engine


def decided(plan: Plan, engine: FakeEngine, trust: Trust | None = None) -> tuple[Plan, Registries]:
    keyed = bases.keyed(bases.resolve(plan, engine))
    pool = registries(engine.registry)
    return cache_mod.decide(keyed, cache_mod.Cache(engine, pool, BuildTrust(trust) if trust else None)), pool


def run(plan: Plan, engine: FakeEngine, steps: tuple[Step, ...], folder: Path,
        trusted: tuple[Path, ...] = (), builders: tuple[Path, ...] = ()) -> dict[str, NodeRecord]:
    decided_plan, pool = decided(plan, engine)
    for step in steps:
        if isinstance(step, Staged):
            step.require(decided_plan, pool)
    # A machine that names the keys it trusts signs with a key of its own given to it (IMAGEBUILDER_SIGNING_KEY:
    # in CI, the publish job's key); with none named, its own cache folder's key.
    env = {SIGNING_KEY_ENV: str(Signer.local(folder / "job-key").source.split("(")[1].rstrip(")"))} if trusted else {}
    keys = Keys.load(folder / "cache" / "keys", env, trusted, builders)
    records = execute(engine, decided_plan, pool, Specs(decided_plan), keys, steps, Console(file=io.StringIO()),
                      RunOptions(report_dir=folder, cache_dir=folder / "cache", logs="none"))
    return {r.layer: r for r in records}


def build_key(folder: Path) -> Path:
    """The public half of the key a machine (its run folder) signed build records with: what the machines after
    it name with --trust-build-key."""
    out = folder / "build.pub"
    out.write_bytes(Signer.local(folder / "cache" / "keys").public.pem())
    return out


@pytest.fixture
def chain(write_matrix: MatrixWriter, header: str, table: CompatTable) -> Plan:
    path = write_matrix(header + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n")
    return plan_mod.make(matrix_mod.load(path, table, env={}), Renderer())


def test_stage_verify_publish_on_three_machines(chain: Plan, tmp_path: Path) -> None:
    registry = FakeRegistry()

    # Machine 1 (CPU): stage. Every node is built on its parent's image and pushed under its key tag only.
    first = machine(registry)
    staged = run(chain, first, (Stage(), KeyTags()), tmp_path / "stage")
    assert [r.build for r in staged.values()] == [BuildStatus.BUILT] * 3
    assert staged["base"].parent_image == first.image_id("debian:bookworm")
    assert staged["business"].parent_image == staged["base"].image
    assert staged["task"].parent_image == staged["business"].image
    assert {r.publish for r in staged.values()} == {PublishStatus.STAGED}
    assert all(r.verify is None and r.record is None for r in staged.values())  # no suite ran
    for record in staged.values():
        assert registry.manifest_digest(REPO, keys.cache_tag(str(record.key))) == record.digest
        assert RegistryPasses(registry, Keys.load(tmp_path / "stage" / "cache" / "keys", {}).trust).config_digest(
            REPO, str(record.digest)) == record.image
    assert registry.public_tags(REPO) == {} and first.runs == []

    # Machine 2 (GPU runner): verify. Nothing builds; the leaf is pulled by the digest its key tag names,
    # tested, and its pass is written beside that digest.
    second = machine(registry)
    assert {n.status for n in decided(chain, second)[0].nodes} == {State.CACHED}
    builder = build_key(tmp_path / "stage")
    verified = run(chain, second, (Staged("verify"), Verify(record=True)), tmp_path / "verify", builders=(builder,))
    second_keys = Keys.load(tmp_path / "verify" / "cache" / "keys", {})
    assert {r.build for r in verified.values()} == {BuildStatus.CACHED} and second.builds == []
    task = verified["task"]
    assert task.verify == VerifyStatus.PASSED and second.runs == [staged["task"].image]
    assert second.pulled == [f"127.0.0.1:5000/{REPO}@{staged['task'].digest}"]
    assert task.digest == staged["task"].digest and task.record is not None
    assert task.record.config == staged["task"].image and task.spec == task.record.spec
    assert str(task.pass_record).endswith("(written by this run)")
    found = RegistryPasses(registry, second_keys.trust).find(REPO, str(task.digest), str(task.spec))
    assert found is not None and found.manifest == task.digest
    assert verified["base"].verify is None and verified["base"].image is None  # ancestors: nothing pulled
    assert registry.public_tags(REPO) == {}

    # Machine 3: publish. Nothing builds or runs; the leaf's pass is found by digest (it counts: the publish
    # machine trusts the verifier's public key), every node's tags point at its staged digest, and each
    # ancestor's record says which leaf passed on it.
    verifier = tmp_path / "verifier.pub"
    verifier.write_bytes(Signer.local(tmp_path / "verify" / "cache" / "keys").public.pem())
    third = machine(registry)
    steps = (Staged("publish"), Verify(run_suite=False), Publish(supply=SupplyChain(), stage_untested=False))
    untrusting = run(chain, third, steps, tmp_path / "untrusting", builders=(builder,))
    assert untrusting["task"].verify == VerifyStatus.SKIPPED and registry.public_tags(REPO) == {}
    unbuilt = run(chain, third, steps, tmp_path / "unbuilt", trusted=(verifier,))  # the stage machine's key unnamed
    assert {r.build for r in unbuilt.values()} == {BuildStatus.FAILED, BuildStatus.BLOCKED}
    assert "not staged by a trusted build key" in str(unbuilt["base"].error) and registry.public_tags(REPO) == {}
    published = run(chain, third, steps, tmp_path / "publish", trusted=(verifier,), builders=(builder,))
    assert third.builds == [] and third.runs == [] and third.pulled == []
    assert published["task"].verify == VerifyStatus.FOUND
    assert {r.publish for r in published.values()} == {PublishStatus.PUSHED}
    tags = registry.public_tags(REPO)
    store = RegistryPasses(registry, Keys.load(tmp_path / "publish" / "cache" / "keys", {}, (verifier,)).trust)
    leaf_record = passes.record_tag(str(staged["task"].digest), str(verified["task"].spec))
    for node in chain.nodes:
        record = published[node.name]
        assert record.digest == staged[node.name].digest
        assert record.tags and all(tags[ref.rsplit(":", 1)[1]] == record.digest for ref in record.tags)
        found = store.find(REPO, str(record.digest), Specs(chain).key(node))
        assert found is not None and found.passed
        assert found.via is None if node.leaf else found.via == {
            "node": node.entry.id + "/task", "manifest": staged["task"].digest, "config": staged["task"].image,
            "record": leaf_record}
    assert all(r.ok for r in published.values())


def test_verify_tests_the_staged_digest_not_another_build_of_its_key(chain: Plan, tmp_path: Path) -> None:
    """A runner that built the matrix before holds another image with the leaf's key (same inputs, another
    build). What it tests, and what its pass is bound to, is the image the key tag names, pulled by digest."""
    registry = FakeRegistry()
    staged = run(chain, machine(registry), (Stage(), KeyTags()), tmp_path / "stage")
    runner = machine(registry)
    labels = {"io.imagebuilder.key": str(staged["task"].key), "rebuilt": "yes"}
    other = runner.add({"config": {"Labels": labels, "Env": []}})
    assert decided(chain, runner)[0].nodes[-1].decision.image == other  # the plan finds the local one
    verified = run(chain, runner, (Staged("verify"), Verify(record=True)), tmp_path / "verify",
                   builders=(build_key(tmp_path / "stage"),))
    task = verified["task"]
    assert task.verify == VerifyStatus.PASSED and runner.runs == [staged["task"].image] != [other]
    assert task.image == staged["task"].image and task.digest == staged["task"].digest and task.ok
    assert str(task.pass_record).endswith("(written by this run)")


def test_an_ancestor_rebuilt_elsewhere_under_its_key_gets_no_pass(chain: Plan, tmp_path: Path) -> None:
    """Another machine rebuilt the base (same key, another image) and staged it: the key tag moved. The leaf was
    built on the old base, so its pass says nothing of the new one: no `via` record is written for it, and
    publish refuses it, naming both images; the nodes the leaf was really built on are recorded."""
    registry = FakeRegistry()
    staged = run(chain, machine(registry), (Stage(), KeyTags()), tmp_path / "stage")
    other = machine(registry)
    base_ref = f"127.0.0.1:5000/{REPO}:{keys.cache_tag(str(staged['base'].key))}"
    doc = {"config": {"Labels": {"io.imagebuilder.key": str(staged["base"].key), "rebuilt": "elsewhere"}},
           "layers": ["sha256:" + "a" * 64], "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "a" * 64]}}
    moved_image = other.add(doc)
    other.tag(moved_image, base_ref)
    moved = other.push(base_ref)
    assert moved != staged["base"].digest
    verified = run(chain, machine(registry), (Staged("verify"), Verify(record=True)), tmp_path / "verify",
                   builders=(build_key(tmp_path / "stage"),))
    base = verified["base"]
    assert base.build == BuildStatus.FAILED and not base.ok  # no trusted build record names the moved image
    assert "not staged by a trusted build key" in str(base.error) and moved in str(base.error)
    assert verified["task"].verify is None and verified["task"].build == BuildStatus.BLOCKED  # nothing tested
    trust = Keys.load(tmp_path / "verify" / "cache" / "keys", {}).trust
    assert RegistryPasses(registry, trust).find(REPO, moved, Specs(chain).key(chain.nodes[0])) is None


def test_a_failure_on_one_gpu_model_blocks_the_digest_whatever_passed_on_another(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    """Each GPU runner's verdict is recorded beside the digest, failures too: an image that passed on H200s and
    failed on H100s is not published, and publish says where it failed."""
    path = write_matrix(header + "smoke: {gpus: devices}\nmatrix: {torch: [2.6.0], accelerator: [cu124], "
                        "python: ['3.11']}\n")
    plan = plan_mod.make(matrix_mod.load(path, table, env={}), Renderer())
    registry = FakeRegistry()
    run(plan, machine(registry), (Stage(), KeyTags()), tmp_path / "stage")
    h200 = machine(registry)
    h200.model = "NVIDIA H200"
    host = GpuHost(("/dev/nvidia0",), ("NVIDIA H200",), "580.65.06")
    builder = build_key(tmp_path / "stage")
    passed = run(plan, h200, (Staged("verify"), Verify(record=True, same_gpu_model=True, host=host)),
                 tmp_path / "h200", builders=(builder,))
    assert passed["task"].verify == VerifyStatus.PASSED and passed["task"].gpu_verified
    h100 = machine(registry)
    h100.report = lambda image, expect, commands, gpus: suite_report(
        expect, commands, gpus, **{"throughput.cuda:0": "fail:420 TFLOP/s is below the floor 593.6"})
    h100_host = GpuHost(("/dev/nvidia0",), (H100,), "580.65.06")
    failed = run(plan, h100, (Staged("verify"), Verify(record=True, same_gpu_model=True, host=h100_host)),
                 tmp_path / "h100", builders=(builder,))
    assert failed["task"].verify == VerifyStatus.FAILED
    verdicts = sorted(t for (_, t) in registry.tagged if ".gpu" in t)
    assert len(verdicts) == 2  # one per GPU model, beside the digest
    for folder in (tmp_path / "h200", tmp_path / "h100"):
        (folder / "signer.pub").write_bytes(Signer.local(folder / "cache" / "keys").public.pem())
    published = run(plan, machine(registry), (Staged("publish"), Verify(run_suite=False),
                                              Publish(stage_untested=False, supply=SupplyChain())),
                    tmp_path / "publish",
                    trusted=(tmp_path / "h200" / "signer.pub", tmp_path / "h100" / "signer.pub"), builders=(builder,))
    task = published["task"]
    assert task.publish == PublishStatus.FAILED and registry.public_tags(REPO) == {}
    assert f"failed this spec's suite on {H100}" in str(task.error)


def test_credentials_that_may_only_pull_stop_stage_and_publish_before_anything_and_verify_before_the_suite(
        chain: Plan, tmp_path: Path) -> None:
    registry = FakeRegistry(read_only={REPO})
    engine = machine(registry)
    for steps in ((Stage(), KeyTags()), (Stage(), Verify(), Publish(supply=SupplyChain()))):
        with pytest.raises(RegistryAccess, match=rf"needs push to 127.0.0.1:5000/{REPO}: user 'reader' may not push"):
            run(chain, engine, steps, tmp_path / "refused")
        assert engine.builds == [] and engine.runs == [] and registry.tagged == {}  # nothing built, nothing pushed
    registry.read_only.clear()
    run(chain, engine, (Stage(), KeyTags()), tmp_path / "stage")  # a pusher stages
    runner = machine(registry)
    registry.read_only.add(REPO)
    builder = build_key(tmp_path / "stage")
    verified = run(chain, runner, (Staged("verify"), Verify(record=True)), tmp_path / "verify", builders=(builder,))
    task = verified["task"]
    assert task.verify == VerifyStatus.FAILED and runner.runs == [] and runner.pulled == []  # no suite, no pull
    assert task.error == f"not tested: its pass record could not be written (user 'reader' may not push to " \
                         f"127.0.0.1:5000/{REPO} (HTTP 401: UNAUTHORIZED))"
    dry = run(chain, runner, (Staged("publish"), Verify(run_suite=False),
                              Publish(stage_untested=False, dry_run=True, supply=SupplyChain())), tmp_path / "dry",
              builders=(builder,))
    assert {r.publish for r in dry.values()} == {PublishStatus.HELD}  # a dry run only reads: no refusal


def test_a_key_tag_is_built_on_only_when_a_trusted_build_record_vouches_for_it(chain: Plan, tmp_path: Path) -> None:
    """Issue 39 (a poisoned key tag): a pusher replaces the business node's key tag with an image built FROM it that
    carries a backdoor (its labels inherited, so its key label is right). A machine that does not hold the image
    asks for the key tag's build record: there is none by a trusted build key, so business is built again (and
    the task on it), saying why, and the backdoor is built on by nothing. The honest key tags are reused."""
    registry = FakeRegistry()
    staged = run(chain, machine(registry), (Stage(), KeyTags()), tmp_path / "stage")
    builder = Keys.load(tmp_path / "stage" / "cache" / "keys", {})
    attacker = machine(registry)
    business = staged["business"]
    honest = attacker.pull(f"127.0.0.1:5000/{REPO}@{business.digest}")
    doc = json.loads(json.dumps(attacker.images[honest]))
    doc["layers"] = doc["rootfs"]["diff_ids"] = [*doc["layers"], "sha256:" + "b" * 64]  # /usr/local/bin/backdoor
    ref = f"127.0.0.1:5000/{REPO}:{keys.cache_tag(str(business.key))}"
    attacker.tag(attacker.add(doc), ref)
    attacker.push(ref)
    runner = machine(registry)
    plan, _ = decided(chain, runner, builder.build_trust)
    statuses = {n.name: (n.status, n.reason) for n in plan.nodes}
    assert statuses["base"][0] == State.CACHED  # vouched for, and built on the base this run uses
    assert statuses["business"][0] == State.BUILD and "not reused: no build record is beside it" in \
        statuses["business"][1]
    assert statuses["task"][0] == State.BUILD
    # A record signed by a key this run does not trust counts no more than none.
    other = Keys.load(tmp_path / "attacker" / "keys", {})
    assert other.builder is not None
    from imagebuilder.evidence.provenance import Build, RegistryBuilds

    forged = registry.manifest_digest(REPO, keys.cache_tag(str(business.key)))
    assert forged is not None
    RegistryBuilds(registry, other.build_trust, other.builder).put(REPO, forged, Build(
        business.node, str(business.key), attacker.image_id(ref) or "", str(staged["base"].image), "base"))
    plan, _ = decided(chain, runner, builder.build_trust)
    business_node = next(n for n in plan.nodes if n.name == "business")
    assert business_node.status == State.BUILD and "signed by an untrusted key" in business_node.reason
    # The honest chain, as staged, is reused whole by a machine that trusts its builder.
    clean = FakeRegistry()
    run(chain, machine(clean), (Stage(), KeyTags()), tmp_path / "clean")
    clean_keys = Keys.load(tmp_path / "clean" / "cache" / "keys", {})
    assert {n.status for n in decided(chain, machine(clean), clean_keys.build_trust)[0].nodes} == {State.CACHED}


def test_a_pushers_leaf_under_the_leafs_key_tag_is_not_tested_published_or_staged_over(chain: Plan,
                                                                                      tmp_path: Path) -> None:
    """N5-03: the honest leaf plus a backdoor layer, pushed under the leaf's key tag with no build record. verify
    does not run the suite in it, `node stage` does not call it done, and stage pushes the honest leaf over it."""
    from imagebuilder.run.handoff import Handoff

    registry = FakeRegistry()
    builder_machine = machine(registry)
    staged = run(chain, builder_machine, (Stage(), KeyTags()), tmp_path / "stage")
    builder = build_key(tmp_path / "stage")
    attacker = machine(registry)
    honest = attacker.pull(f"127.0.0.1:5000/{REPO}@{staged['task'].digest}")
    doc = json.loads(json.dumps(attacker.images[honest]))
    doc["layers"] = doc["rootfs"]["diff_ids"] = [*doc["layers"], "sha256:" + "b" * 64]  # /usr/local/bin/backdoor
    ref = f"127.0.0.1:5000/{REPO}:{keys.cache_tag(str(staged['task'].key))}"
    evil = attacker.add(doc)
    attacker.tag(evil, ref)
    evil_digest = attacker.push(ref)
    runner = machine(registry)
    verified = run(chain, runner, (Staged("verify"), Verify(record=True)), tmp_path / "verify", builders=(builder,))
    assert runner.runs == [] and verified["task"].build == BuildStatus.FAILED
    assert "not staged by a trusted build key" in str(verified["task"].error) and evil_digest in \
        str(verified["task"].error)
    # The plan a node command reads: the key tag is there, but vouched for by nothing: not done.
    trusted = Keys.load(tmp_path / "stage" / "cache" / "keys", {}).build_trust
    plan, pool = decided(chain, machine(registry), trusted)
    assert Handoff(chain.nodes[-1].id).staged(plan, pool) is None
    # The stage machine stages again: the honest leaf goes back under its key tag, with its build record.
    again = run(chain, builder_machine, (Stage(), KeyTags()), tmp_path / "stage")
    assert again["task"].digest == staged["task"].digest == registry.manifest_digest(REPO, ref.rsplit(":", 1)[1])


def test_verify_and_publish_take_the_registrys_vouched_key_tag_and_say_why_not(chain: Plan, tmp_path: Path) -> None:
    """What `verify` and `publish` decide (`Cache(staged=True)`): the registry's key tag, vouched for by a trusted
    build record, whatever this engine holds (a stale image of the key built on another parent is not what was
    staged); one vouched for by nothing, or by a key not trusted here, is named with why (`Staged.require` says it
    before anything runs), and a run that builds collects the untrusted signers to say before building."""
    registry = FakeRegistry()
    run(chain, machine(registry), (Stage(), KeyTags()), tmp_path / "stage")
    builder = Keys.load(tmp_path / "stage" / "cache" / "keys", {})
    runner = machine(registry)
    labels = {"io.imagebuilder.key": str(chain.nodes[-1].key or ""), "stale": "yes"}
    keyed = bases.keyed(bases.resolve(chain, runner))
    runner.add({"config": {"Labels": {**labels, "io.imagebuilder.key": str(keyed.nodes[-1].key)}}})  # stale, here
    vouched = cache_mod.decide(keyed, cache_mod.Cache(runner, registries(registry), BuildTrust(builder.build_trust),
                                                      staged=True))
    assert [(n.status, n.decision.ref is not None) for n in vouched.nodes] == [(State.CACHED, True)] * 3
    stranger = Keys.load(tmp_path / "stranger" / "keys", {})
    foreign = BuildTrust(stranger.build_trust)
    refused = cache_mod.decide(keyed, cache_mod.Cache(runner, registries(registry), foreign, staged=True))
    first = refused.nodes[0]
    assert first.status == State.BUILD and first.reason.startswith("key tag ") and "signed by an untrusted key" in \
        first.reason
    assert foreign.foreign and "signed by an untrusted key" in foreign.foreign[0]
    with pytest.raises(InputError, match="not staged by a trusted build key: 3 node"):
        Staged("verify").require(refused, registries(registry))
