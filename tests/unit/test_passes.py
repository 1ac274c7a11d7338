"""Pass records and the publishing rule, against an in-memory registry: a record counts only for the very
image it was written for; skips on a GPU run are not passes; promote moves only what passed."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuilder.commands import promote
from imagebuilder.errors import InputError, Refused
from imagebuilder.evidence import beside, passes, ruling
from imagebuilder.evidence.passes import LocalPasses, PassRecord, RegistryPasses
from imagebuilder.evidence.provenance import Build, RegistryBuilds
from imagebuilder.evidence.signing import Keys, Signer, Trust
from imagebuilder.smoke.judge import gpu_skips
from imagebuilder.smoke.suite import throughput_verdict

from .fakes import FakeRegistry

SPEC = passes.spec_key({"expect": {"torch": "2.13.0"}})
SIGNER = Signer.generate("the verifier's key")
KEYS = Keys(SIGNER, Trust((SIGNER.public,)))
SPECS = {"e/task": SPEC}  # node -> the spec the current matrix expects of it


def record(config: str, verdict: str = passes.PASSED, spec: str = SPEC) -> PassRecord:
    return PassRecord(verdict, config=config, spec=spec, node="e/task", entry="e", expect={"torch": "2.13.0"},
                      gpu={"verified": True, "kind": "gpu", "models": ["NVIDIA H100 80GB HBM3"]}, date="2026-11-23",
                      suite=passes.suite_hash())


def test_a_record_is_found_from_the_image_digest_and_only_for_that_image() -> None:
    reg = FakeRegistry()
    store = RegistryPasses(reg, KEYS.trust, SIGNER)
    manifest, config = reg.image("ml/x", "cache-aaaa", "tested")
    tag = store.put("ml/x", record(config).at(manifest, "r/ml/x"))
    assert tag == f"sha256-{manifest[7:]}.pass-{SPEC[:16]}" and passes.is_record_tag(tag)
    found = store.find("ml/x", manifest, SPEC)
    assert found is not None and found.config == config and found.passed
    body, _ = reg.manifest("ml/x", tag)
    doc = json.loads(body)
    assert doc["subject"]["digest"] == manifest and doc["artifactType"] == passes.ARTIFACT_TYPE
    assert [layer["mediaType"] for layer in doc["layers"]] == ["application/vnd.dsse.envelope.v1+json"]
    # Another spec (other expectations or suite): no pass.
    assert store.find("ml/x", manifest, passes.spec_key({"expect": {"torch": "2.12.0"}})) is None
    # Another image under the same key (a rebuild): its digest has no record.
    other, _ = reg.image("ml/x", "cache-aaaa", "rebuilt")
    assert store.find("ml/x", other, SPEC) is None
    # A record copied beside another digest (its tag renamed) does not count there.
    reg.tagged[("ml/x", passes.record_tag(other, SPEC))] = reg.tagged[("ml/x", tag)]
    assert store.find("ml/x", other, SPEC) is None
    # A record whose config is another image's does not count either.
    forged = store.put("ml/x", record("sha256:" + "f" * 64).at(other, "r/ml/x"))
    assert forged and store.find("ml/x", other, SPEC) is None


def test_an_untested_record_is_never_a_pass() -> None:
    reg = FakeRegistry()
    store = RegistryPasses(reg, KEYS.trust, SIGNER)
    manifest, config = reg.image("ml/x", "cache-b", "x")
    store.put("ml/x", record(config, passes.UNTESTED).at(manifest, "r/ml/x"))
    assert store.find("ml/x", manifest, SPEC) is None
    found = store.all_for("ml/x", manifest, reg.tags("ml/x"))
    assert [r.record.verdict for r in found if r.record] == [passes.UNTESTED]


def test_the_local_mirror_keeps_passes_by_image_and_spec(tmp_path: Path) -> None:
    local = LocalPasses(tmp_path, KEYS.trust, SIGNER)
    config = "sha256:" + "1" * 64
    assert local.get(config, SPEC) is None
    local.put(record(config, passes.UNTESTED))
    assert local.get(config, SPEC) is None
    local.put(record(config))
    got = local.get(config, SPEC)
    assert got is not None and got.passed
    assert local.get("sha256:" + "2" * 64, SPEC) is None
    assert local.get(config, passes.spec_key({"expect": {}})) is None


def test_records_read_back_ignore_what_is_not_ours() -> None:
    assert PassRecord.from_json({"format": "other"}) is None
    assert PassRecord.from_json({"format": passes.FORMAT, "verdict": "maybe", "config": "x", "spec": "y",
                                 "node": "n", "entry": "e"}) is None
    assert PassRecord.from_json({"format": passes.FORMAT, "verdict": "passed", "unknown": 1}) is None
    doc = record("sha256:" + "3" * 64).to_json()
    assert PassRecord.from_json(json.loads(json.dumps(doc))) == record("sha256:" + "3" * 64)


UNKNOWN_GPU = [
    {"name": "versions.torch", "status": "pass"},
    {"name": "throughput.cuda:0", "status": "skip", "reason": "unknown GPU model 'Tesla T4'"},
]


def test_an_unknown_gpu_skip_blocks_publishing_unless_allowed() -> None:
    assert gpu_skips(UNKNOWN_GPU, gpu_run=True)[0] == ["throughput.cuda:0: unknown GPU model 'Tesla T4'"]
    assert gpu_skips(UNKNOWN_GPU, gpu_run=True, allow=("throughput",))[0] == []
    assert gpu_skips(UNKNOWN_GPU, gpu_run=True, allow=("throughput.cuda:*",))[0] == []
    assert gpu_skips(UNKNOWN_GPU, gpu_run=True, allow=("versions.driver",))[0] != []
    # A CPU run skips the GPU checks by design: judged by what it ran.
    assert gpu_skips(UNKNOWN_GPU, gpu_run=False)[0] == []


def test_a_matrix_floor_per_gpu_name_judges_gpus_missing_from_the_table() -> None:
    assert throughput_verdict("Tesla T4", 50.0, 0.6)["status"] == "skip"
    assert throughput_verdict("Tesla T4", 50.0, 0.6, [["tesla t4", 40]])["status"] == "pass"
    failed = throughput_verdict("Tesla T4", 30.0, 0.6, [["T4", 40]])
    assert failed["status"] == "fail" and "floor 40 for Tesla T4" in failed["reason"]
    assert throughput_verdict("NVIDIA H100 80GB HBM3", 100.0, 0.6)["status"] == "fail"  # the table still holds
    # issue 42 (G): a floor told for a pattern that matches a GPU of the table, below its bound, is no floor there
    low = throughput_verdict("NVIDIA H100 80GB HBM3", 30.0, 0.6, [["NVIDIA", 0.001]])
    assert low["status"] == "fail" and low["expected"] == ">= 593.6"
    assert throughput_verdict("NVIDIA H100 80GB HBM3", 600.0, 0.6, [["H100", 500]])["expected"] == ">= 500"


def built(reg: FakeRegistry, manifest: str, config: str, node: str = "e/task") -> str:
    """A build record beside `manifest`, signed by the machine's key (which, named alone, may sign builds too)."""
    return RegistryBuilds(reg, KEYS.trust, SIGNER).put("ml/x", manifest, Build(
        node, "k" * 64, config, "sha256:" + "0" * 64, "e/business", {}, "2026-11-27T08:00:00+00:00"))


def moves(reg: FakeRegistry, source: str, target: str) -> list[promote.Move]:
    return promote.plan_moves(reg, source, target)  # type: ignore[arg-type]


def test_promote_moves_only_what_passed_and_records_what_it_was_told_to_move() -> None:
    reg = FakeRegistry()
    store = RegistryPasses(reg, KEYS.trust, SIGNER)
    tested, config = reg.image("ml/x", "nightly-a", "a")
    untested, _ = reg.image("ml/x", "nightly-b", "b")
    store.put("ml/x", record(config).at(tested, "r/ml/x"))
    planned = moves(reg, "r:5000/ml/x:nightly-*", "r:5000/ml/x-stable:{tag}")
    assert [m.source.rsplit(":", 1)[1] for m in planned] == ["nightly-a", "nightly-b"]  # record tags never match
    unbuilt = promote.evidence(reg, KEYS.trust, planned[0], reg.tags("ml/x"), SPECS.get)  # type: ignore[arg-type]
    assert not unbuilt.passed and unbuilt.why.startswith("no trusted build record names it")  # provenance first
    built(reg, tested, config)
    proofs = [promote.evidence(reg, KEYS.trust, m, reg.tags("ml/x"), SPECS.get) for m in planned]  # type: ignore[arg-type]
    assert [p.passed for p in proofs] == [True, False]
    assert "no pass record" in proofs[1].why
    with pytest.raises(Refused, match="no pass record"):
        promote.apply(reg, KEYS, planned[1], proofs[1])  # type: ignore[arg-type]
    assert reg.manifest_digest("ml/x-stable", "nightly-b") is None  # refused before anything moved
    promote.apply(reg, KEYS, planned[0], proofs[0])  # type: ignore[arg-type]
    assert reg.manifest_digest("ml/x-stable", "nightly-a") == tested
    assert store.find("ml/x-stable", tested, SPEC) is not None  # the record went along, and the build record
    assert RegistryBuilds(reg, KEYS.trust).vouched("ml/x-stable", tested)[0] is not None
    promote.apply(reg, KEYS, planned[1], proofs[1], allow_untested=True)  # type: ignore[arg-type]
    assert reg.manifest_digest("ml/x-stable", "nightly-b") == untested
    kept = store.all_for("ml/x-stable", untested, reg.tags("ml/x-stable"))
    assert [(r.record.verdict, r.record.allowed_by) for r in kept if r.record] == [
        (passes.UNTESTED, "--allow-untested (promote)")]


def test_a_cuda_pass_without_a_gpu_serves_only_where_there_is_no_gpu_and_is_never_promoted() -> None:
    config = "sha256:" + "4" * 64
    no_gpu = replace(record(config), gpu={"verified": False, "kind": "gpu", "models": []})
    assert no_gpu.serves(gpus_here=False) and not no_gpu.serves(gpus_here=True)  # GPU fleets test it again
    assert record(config).serves(gpus_here=True)
    cpu = replace(record(config), gpu={"verified": False, "kind": "cpu"})
    assert cpu.serves(gpus_here=True) and cpu.gpu_verified
    reg = FakeRegistry()
    manifest, config = reg.image("ml/x", "nightly-c", "c")
    built(reg, manifest, config)
    RegistryPasses(reg, KEYS.trust, SIGNER).put("ml/x", replace(no_gpu, config=config).at(manifest, "r/ml/x"))
    (move,) = promote.plan_moves(reg, "r:5000/ml/x:nightly-*", "stable-{match}")  # type: ignore[arg-type]
    proof = promote.evidence(reg, KEYS.trust, move, reg.tags("ml/x"), SPECS.get)  # type: ignore[arg-type]
    assert not proof.passed and "without a GPU" in proof.why


def test_promote_counts_only_a_pass_of_the_spec_the_matrix_expects_now() -> None:
    reg = FakeRegistry()
    manifest, config = reg.image("ml/x", "nightly-a", "a")
    built(reg, manifest, config)
    RegistryPasses(reg, KEYS.trust, SIGNER).put("ml/x", record(config).at(manifest, "r/ml/x"))
    (move,) = moves(reg, "r:5000/ml/x:nightly-*", "stable-{match}")
    assert promote.evidence(reg, KEYS.trust, move, reg.tags("ml/x"), SPECS.get).passed  # type: ignore[arg-type]
    other = {"e/task": passes.spec_key({"expect": {"torch": "2.13.0", "throughput_floor": 0.9}})}
    proof = promote.evidence(reg, KEYS.trust, move, reg.tags("ml/x"), other.get)  # type: ignore[arg-type]
    assert not proof.passed and "is of another spec than the current matrix expects of e/task" in proof.why
    gone = promote.evidence(reg, KEYS.trust, move, reg.tags("ml/x"), {}.get)  # type: ignore[arg-type]
    assert not gone.passed and "which the current matrix does not have" in gone.why
    stranger = Trust((Signer.generate().public,))
    untrusted = promote.evidence(reg, stranger, move, reg.tags("ml/x"), SPECS.get)  # type: ignore[arg-type]
    assert not untrusted.passed and "signed by an untrusted key" in untrusted.why


@pytest.mark.parametrize("target", ["cache-{match}", "sha256-" + "a" * 64 + ".pass-" + "b" * 16])
def test_promote_never_writes_a_key_or_record_tag(target: str) -> None:
    reg = FakeRegistry()
    reg.image("ml/x", "nightly-a", "a")
    (move,) = moves(reg, "r:5000/ml/x:nightly-*", target)
    with pytest.raises(InputError, match="which only imagebuilder's own steps write"):
        promote.check_target(reg, KEYS.trust, move, reg.tags("ml/x"))  # type: ignore[arg-type]


def test_promote_does_not_take_another_nodes_tag() -> None:
    reg = FakeRegistry()
    store = RegistryPasses(reg, KEYS.trust, SIGNER)
    mine, my_config = reg.image("ml/x", "nightly-a", "a")
    theirs, their_config = reg.image("ml/x", "stable-a", "b")  # another node's image under the target tag
    store.put("ml/x", record(my_config).at(mine, "r/ml/x"))
    store.put("ml/x", replace(record(their_config), node="e/other").at(theirs, "r/ml/x"))
    (move,) = moves(reg, "r:5000/ml/x:nightly-*", "stable-{match}")
    with pytest.raises(InputError, match=r"recorded as e/other; .* is e/task: not overwritten"):
        promote.check_target(reg, KEYS.trust, move, reg.tags("ml/x"))  # type: ignore[arg-type]


def test_a_gpu_models_verdict_is_not_the_pass_and_its_failure_blocks_promote() -> None:
    reg = FakeRegistry()
    store = RegistryPasses(reg, KEYS.trust, SIGNER)
    manifest, config = reg.image("ml/x", "nightly-a", "a")
    built(reg, manifest, config)
    on_h100 = record(config).at(manifest, "r/ml/x")
    store.put("ml/x", on_h100, per_model=True)  # a model's verdict alone, no pass record
    (move,) = moves(reg, "r:5000/ml/x:nightly-*", "stable-{match}")
    assert not promote.evidence(reg, KEYS.trust, move, reg.tags("ml/x"), SPECS.get).passed  # type: ignore[arg-type]
    store.put("ml/x", on_h100)  # the pass
    assert promote.evidence(reg, KEYS.trust, move, reg.tags("ml/x"), SPECS.get).passed  # type: ignore[arg-type]
    store.put("ml/x", replace(on_h100, verdict=passes.FAILED, gpu={**on_h100.gpu, "models": ["NVIDIA H200"]}),
              per_model=True)
    proof = promote.evidence(reg, KEYS.trust, move, reg.tags("ml/x"), SPECS.get)  # type: ignore[arg-type]
    assert not proof.passed and proof.why.startswith("failed this spec's suite on NVIDIA H200")


def _verdicts(reg: FakeRegistry, manifest: str) -> str | None:
    """What the one judge says of the digest's verdicts of SPEC (nothing else asked); None when none blocks it."""
    found = beside.read(reg, "ml/x", manifest, KEYS.trust)  # type: ignore[arg-type]
    return ruling.judge(found, ruling.Ask(spec=SPEC, build=False, passed=False)).first()


def test_a_newer_verdict_wins_and_a_replayed_older_pass_does_not_undo_a_failure() -> None:
    """Issue 39 (N2): on one GPU model a verdict of 09:00 passed and one of 10:00 failed. A pusher who copies the
    09:00 pass over the 10:00 failure's tag gets a tag whose record is not the verdict it names: it blocks, named.
    A pass re-signed later (a new run that passed) is newer and wins; a stale pass never does."""
    reg = FakeRegistry()
    store = RegistryPasses(reg, KEYS.trust, SIGNER)
    manifest, config = reg.image("ml/x", "nightly-a", "a")
    gpu = {"kind": "gpu", "verified": True, "models": ["NVIDIA H100"]}
    early = replace(record(config), gpu=gpu, date="2026-11-27T09:00:00+00:00").at(manifest, "r/ml/x")
    late = replace(early, verdict=passes.FAILED, date="2026-11-27T10:00:00+00:00")
    passed_tag, failed_tag = store.put("ml/x", early, per_model=True), store.put("ml/x", late, per_model=True)
    assert passed_tag != failed_tag and failed_tag.endswith("-20261127T100000Z")
    why = _verdicts(reg, manifest)
    assert why is not None and why.startswith("failed this spec's suite on NVIDIA H100 (spec")
    reg.tagged[("ml/x", failed_tag)] = reg.tagged[("ml/x", passed_tag)]  # the replay, as a pusher does it
    why = _verdicts(reg, manifest)
    assert why is not None and f"{failed_tag}: its record is not the verdict this tag names" in why
    assert "copied or replayed" in why
    del reg.tagged[("ml/x", failed_tag)]  # (deletion rights: the hole README names)
    assert _verdicts(reg, manifest) is None
    store.put("ml/x", late, per_model=True)
    store.put("ml/x", replace(early, date="2026-11-27T11:00:00+00:00"), per_model=True)  # passed again, later
    assert _verdicts(reg, manifest) is None


def test_a_verdict_tag_that_does_not_verify_blocks_as_a_failure_would() -> None:
    reg = FakeRegistry()
    manifest, _ = reg.image("ml/x", "nightly-a", "a")
    other, _ = reg.image("ml/x", "junk", "junk")
    tag = passes.record_tag(manifest, SPEC, passes.FAILED, "NVIDIA H100", "2026-11-27T10:00:00+00:00")
    reg.tagged[("ml/x", tag)] = other  # any manifest a pusher puts under a verdict's tag
    why = _verdicts(reg, manifest)
    assert why is not None and tag in why and "does not count" in why


def test_promote_carries_every_verdict_so_a_failure_blocks_from_the_target_too() -> None:
    """N12: a digest that passed on H200 and failed on H100, promoted with --allow-untested into another repository,
    took only its pass record (none here) along: the failure stayed behind, and promoting from the target counted
    nothing against it. Every record tag of the digest goes along now."""
    reg = FakeRegistry()
    store = RegistryPasses(reg, KEYS.trust, SIGNER)
    manifest, config = reg.image("ml/x", "nightly-a", "a")
    built(reg, manifest, config)
    on_h100 = record(config).at(manifest, "r/ml/x")
    store.put("ml/x", replace(on_h100, verdict=passes.FAILED), per_model=True)
    (move,) = moves(reg, "r:5000/ml/x:nightly-*", "r:5000/ml/x-stable:{tag}")
    proof = promote.evidence(reg, KEYS.trust, move, reg.tags("ml/x"), SPECS.get)  # type: ignore[arg-type]
    assert not proof.passed and proof.why.startswith("failed this spec's suite on NVIDIA H100")
    promote.apply(reg, KEYS, move, proof, allow_untested=True)  # type: ignore[arg-type]
    assert reg.manifest_digest("ml/x-stable", "nightly-a") == manifest
    (again,) = moves(reg, "r:5000/ml/x-stable:nightly-*", "stable-{match}")
    from_target = promote.evidence(reg, KEYS.trust, again, reg.tags("ml/x-stable"), SPECS.get)  # type: ignore[arg-type]
    assert not from_target.passed, from_target.why
    assert from_target.why.startswith("failed this spec's suite on NVIDIA H100"), from_target.why
