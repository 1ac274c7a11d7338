"""The one judge (`evidence/ruling.py`), rule by rule, on `Beside` values read by the one reader from the fakes: each
test breaks what one rule guards and shows the judge refusing, naming it (benchmarks/rule_mutants_i50.py removes
each rule in turn and runs the test that must then fail). Roles are read where statements are opened: a key may
sign only what its roles allow, whoever asks."""

from __future__ import annotations

import dataclasses
import json

import pytest

from imagebuilder.evidence import beside, passes
from imagebuilder.evidence.passes import PassRecord, RegistryPasses
from imagebuilder.evidence.provenance import Build, RegistryBuilds
from imagebuilder.evidence.ruling import Ask, judge, vsa_result
from imagebuilder.evidence.signing import BUILD, CPU, GPU, PUBLISH, Signer, Trust

from .fakes import FakeRegistry

REPO = "ml/x"
SPEC = "5" * 64
KEY = "k" * 64
PARENT = "sha256:" + "0" * 64
H100 = {"kind": "gpu", "verified": True, "count": 8, "models": ["NVIDIA H100 80GB HBM3"]}


@dataclasses.dataclass
class World:
    reg: FakeRegistry
    manifest: str
    config: str
    builder: Signer
    verifier: Signer
    hosted: Signer

    def trust(self) -> Trust:
        """The nightly's keyring: a build key, the GPU runners' key, the hosted fleet's key, each with its roles."""
        return Trust((self.builder.public.with_roles({BUILD}), self.verifier.public.with_roles({GPU}),
                      self.hosted.public.with_roles({CPU, PUBLISH})))

    def record(self, **changes: object) -> PassRecord:
        base = PassRecord(passes.PASSED, config=self.config, spec=SPEC, node="e/task", entry="e", gpu=dict(H100),
                          date="2026-11-27T12:00:00+00:00", suite="s" * 64)
        return dataclasses.replace(base, **changes).at(self.manifest, f"{self.reg.host}/{REPO}")  # type: ignore[arg-type]

    def put(self, record: PassRecord, signer: Signer | None = None, *, per_model: bool = False) -> str:
        store = RegistryPasses(self.reg, Trust(((signer or self.verifier).public,)), signer or self.verifier)
        return store.put(REPO, record, per_model=per_model)

    def build(self, signer: Signer | None = None, **changes: str) -> None:
        fields = {"node": "e/task", "key": KEY, "config": self.config, "parent": PARENT, "parent_name": "e/business",
                  **changes}
        RegistryBuilds(self.reg, Trust(((signer or self.builder).public,)), signer or self.builder).put(
            REPO, self.manifest, Build(**fields, date="2026-11-27T11:00:00+00:00"))  # type: ignore[arg-type]

    def read(self, trust: Trust | None = None) -> beside.Beside:
        return beside.read(self.reg, REPO, self.manifest, trust or self.trust(), sbom=True, vsa=True)


@pytest.fixture
def world() -> World:
    reg = FakeRegistry()
    manifest, config = reg.image(REPO, "cache-aaaa", "tested")
    w = World(reg, manifest, config, Signer.generate("build key"), Signer.generate("gpu key"),
              Signer.generate("hosted key"))
    w.build()
    w.put(w.record())
    return w


ASK = Ask(spec=SPEC, key=KEY, parent=PARENT, verified=True, gpu=True)


def test_an_honest_digest_is_admitted_and_says_what_counted(world: World) -> None:
    ruled = judge(world.read(), ASK)
    assert ruled.admitted and ruled.why == () and ruled.build is not None
    best = ruled.best()
    assert best is not None and passes.is_pass_tag(best[0]) and best[1].record.gpu_verified


def test_provenance_no_build_record_or_one_of_another_key_image_or_parent_refuses(world: World) -> None:
    bare = FakeRegistry()
    manifest, config = bare.image(REPO, "cache-b", "tested")
    w = dataclasses.replace(world, reg=bare, manifest=manifest, config=config)
    w.put(w.record())
    assert judge(w.read(), ASK).first() == "no trusted build record names it: no build record is beside it"
    assert judge(w.read(), dataclasses.replace(ASK, build=False)).admitted  # (what `check` without `build` asks)
    w.build(key="x" * 64)
    assert "is of key xxxxxxxxxxxx, not kkkkkkkkkkkk" in str(judge(w.read(), ASK).first())
    w.build(config="sha256:" + "c" * 64)  # a config a pusher swapped in: the record names another image
    assert "is about image sha256:cccc" in str(judge(w.read(), ASK).first())
    w.build(parent="sha256:" + "9" * 64)
    assert "it was built on image sha256:9999" in str(judge(w.read(), ASK).first())
    w.build(signer=Signer.generate("a pusher's own key"))
    assert "signed by an untrusted key" in str(judge(w.read(), ASK).first())


def test_a_build_record_counts_only_signed_by_a_key_trusted_for_builds(world: World) -> None:
    world.build(signer=world.hosted)  # the hosted fleet's key is trusted, but not for builds
    why = str(judge(world.read(), ASK).first())
    assert why.startswith("no trusted build record names it") and "not for build" in why


def test_a_gpu_pass_counts_only_signed_by_a_key_trusted_for_gpu_passes(world: World) -> None:
    """N5-04: the hosted (CPU) fleet's key signs "GPU-verified on 8x H100" for an image no GPU ran: it does not
    count, whoever asks; the same key's CPU pass of a CPU image does."""
    fresh = FakeRegistry()
    manifest, config = fresh.image(REPO, "cache-c", "cuda leaf")
    w = dataclasses.replace(world, reg=fresh, manifest=manifest, config=config)
    w.build()
    w.put(w.record(), signer=w.hosted)
    ruled = judge(w.read(), ASK)
    assert not ruled.admitted and ruled.first() == "no trusted pass of the suite of spec 5555555555555555"
    assert any("not for gpu" in i for i in ruled.ignored)
    assert not judge(w.read(), Ask(gpu_model="H100", build=False)).admitted
    w.put(w.record(gpu={"kind": "cpu", "verified": False}), signer=w.hosted)
    assert judge(w.read(), dataclasses.replace(ASK, gpu=False)).admitted  # a CPU pass by the CPU fleet's key
    w.put(w.record(), signer=w.builder)  # a build key never signs a pass
    assert any("not for gpu" in i for i in judge(w.read(), ASK).ignored)


def test_a_record_about_another_image_does_not_count(world: World) -> None:
    world.put(world.record(config="sha256:" + "e" * 64))  # the same digest, a record naming another config
    ruled = judge(world.read(), ASK)
    assert not ruled.admitted and any("about image sha256:eeee" in i for i in ruled.ignored)


def test_only_the_spec_asked_counts(world: World) -> None:
    ruled = judge(world.read(), dataclasses.replace(ASK, spec="6" * 64))
    assert not ruled.admitted and ruled.first() == "no trusted pass of the suite of spec 6666666666666666"
    assert judge(world.read(), dataclasses.replace(ASK, spec=SPEC[:12])).admitted  # (check --spec: a prefix)


def test_verdicts_fail_closed_newest_per_model_and_an_overwritten_one_refuses(world: World) -> None:
    """N5-02: `check` applies publish's rule. A signed failure refuses; a later pass on that model wins; a verdict
    tag overwritten with another verdict's record, or with anything else, refuses, named."""
    gpu = {**H100, "count": 1}
    early = world.record(gpu=gpu, date="2026-11-27T09:00:00+00:00")
    late = dataclasses.replace(early, verdict=passes.FAILED, date="2026-11-27T10:00:00+00:00")
    passed_tag, failed_tag = world.put(early, per_model=True), world.put(late, per_model=True)
    ruled = judge(world.read(), ASK)
    assert not ruled.admitted and ruled.first() is not None and \
        ruled.first().startswith("failed this spec's suite on NVIDIA H100")  # type: ignore[union-attr]
    world.reg.tagged[(REPO, failed_tag)] = world.reg.tagged[(REPO, passed_tag)]  # the replay (N5-02 b)
    ruled = judge(world.read(), ASK)
    assert not ruled.admitted and f"{failed_tag}: its record is not the verdict this tag names" in str(ruled.first())
    world.reg.tagged[(REPO, failed_tag)] = world.reg.tagged[(REPO, "cache-aaaa")]  # any manifest over it (N5-02 a)
    assert not judge(world.read(), ASK).admitted
    del world.reg.tagged[(REPO, failed_tag)]
    world.put(late, per_model=True)
    world.put(dataclasses.replace(early, date="2026-11-27T11:00:00+00:00"), per_model=True)  # passed again, later
    assert judge(world.read(), ASK).admitted


def test_a_model_named_asks_its_pass_and_only_its_failures_refuse(world: World) -> None:
    other = world.record(verdict=passes.FAILED, gpu={**H100, "models": ["NVIDIA A100-SXM4-80GB"]})
    world.put(other, per_model=True)
    assert not judge(world.read(), ASK).admitted  # with no model named, any model's failure refuses
    assert judge(world.read(), dataclasses.replace(ASK, gpu_model="H100")).admitted
    assert not judge(world.read(), dataclasses.replace(ASK, gpu_model="A100")).admitted
    assert "no trusted pass on B200" in judge(world.read(), dataclasses.replace(ASK, gpu_model="B200")).why


def test_a_cuda_pass_without_gpus_is_not_verified_nor_a_gpu_pass(world: World) -> None:
    fresh = FakeRegistry()
    manifest, config = fresh.image(REPO, "cache-d", "cuda leaf")
    w = dataclasses.replace(world, reg=fresh, manifest=manifest, config=config)
    w.build()
    w.put(w.record(gpu={"kind": "gpu", "verified": False, "models": []}), signer=w.hosted)
    ruled = judge(w.read(), ASK)
    assert "it passed without a GPU only (not GPU-verified; verify it on a GPU host)" in ruled.why
    assert "no trusted pass on real GPUs" in ruled.why
    assert judge(w.read(), Ask(spec=SPEC, key=KEY)).admitted  # (publish --allow-untested-gpu asks no more)


def test_a_verdict_is_not_the_pass(world: World) -> None:
    fresh = FakeRegistry()
    manifest, config = fresh.image(REPO, "cache-e", "leaf")
    w = dataclasses.replace(world, reg=fresh, manifest=manifest, config=config)
    w.build()
    w.put(w.record(), per_model=True)  # a model's verdict alone
    assert judge(w.read(), ASK).first() == "no trusted pass of the suite of spec 5555555555555555"
    assert judge(w.read(), Ask(gpu_model="H100", passed=False, build=False)).admitted  # it says H100 passed


def test_sbom_and_vsa_are_asked_when_the_policy_asks(world: World) -> None:
    ruled = judge(world.read(), dataclasses.replace(ASK, sbom=True, vsa=True))
    assert ruled.why == ("no trusted SBOM (none beside it)", "no trusted VSA that says PASSED")


def test_the_vsa_says_what_the_judge_ruled(world: World) -> None:
    """N5-10: after a failure on H100 and a later pass there, publish publishes; the VSA must say PASSED, and
    FAILED whenever the same rule refuses (here: no build record)."""
    gpu = {**H100, "count": 1}
    world.put(world.record(verdict=passes.FAILED, gpu=gpu, date="2026-11-27T09:00:00+00:00"), per_model=True)
    world.put(world.record(gpu=gpu, date="2026-11-27T10:00:00+00:00"), per_model=True)
    assert vsa_result(world.read(), SPEC, KEY).admitted
    bare = FakeRegistry()
    manifest, config = bare.image(REPO, "cache-f", "leaf")
    w = dataclasses.replace(world, reg=bare, manifest=manifest, config=config)
    w.put(w.record())
    assert not vsa_result(w.read(), SPEC, KEY).admitted


def test_a_pushed_att_that_is_not_json_is_named_never_raised(world: World) -> None:
    """N5-07: a `.att` whose layer is not JSON (a valid OCI manifest a real registry accepts)."""
    layer = world.reg.put_blob(REPO, b"not json at all")
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "application/vnd.oci.empty.v1+json",
                                  "digest": world.reg.put_blob(REPO, b"{}"), "size": 2},
                       "layers": [{"mediaType": "application/vnd.dsse.envelope.v1+json", "digest": layer, "size": 15,
                                   "annotations": {"predicateType": "https://slsa.dev/verification_summary/v1"}}]})
    world.reg.put_manifest(REPO, world.manifest.replace(":", "-") + ".att", body.encode(),
                           "application/vnd.oci.image.manifest.v1+json")
    ruled = judge(world.read(), dataclasses.replace(ASK, vsa=True))
    assert "no trusted VSA that says PASSED" in ruled.why
    assert any("not a readable" in i for i in ruled.ignored)


def test_a_cpu_key_cannot_pass_off_a_gpu_claim_under_a_cpu_kind(world: World) -> None:
    """Review of issue 50: the CPU fleet's key signs `{"kind": "cpu", "models": ["NVIDIA H100 …"]}` for a CUDA image.
    Naming GPU models needs the `gpu` role whatever `kind` says, a model's pass must be a run on GPUs, and a CUDA
    image's pass (its spec's expectations say CUDA) must be on GPUs to be `verified`."""
    fresh = FakeRegistry()
    manifest, config = fresh.image(REPO, "cache-g", "cuda leaf")
    w = dataclasses.replace(world, reg=fresh, manifest=manifest, config=config)
    w.build()
    cuda = {"cuda": "12.6", "torch": "2.7.1"}
    w.put(w.record(gpu={"kind": "cpu", "models": ["NVIDIA H100 80GB HBM3"]}, expect=cuda), signer=w.hosted)
    ruled = judge(w.read(), Ask(gpu_model="H100", build=False))
    assert not ruled.admitted and any("not for gpu" in i for i in ruled.ignored)
    w.put(w.record(gpu={"kind": "cpu", "verified": False}, expect=cuda), signer=w.hosted)  # a CPU-kind pass, CUDA image
    ruled = judge(w.read(), Ask(spec=SPEC, verified=True))  # (what promote asks)
    assert not ruled.admitted and \
        "it passed without a GPU only (not GPU-verified; verify it on a GPU host)" in ruled.why
    assert judge(w.read(), Ask(spec=SPEC, verified=True, build=False, passed=True)).why == ruled.why


def test_a_record_whose_gpu_or_expect_is_not_a_mapping_is_named_never_raised(world: World) -> None:
    """Review of issue 50: `"gpu": []` signed by a trusted key is no record (not counted, named), never a traceback."""
    bad = world.record()
    doc = {**bad.to_json(), "gpu": []}
    signer = world.verifier
    from imagebuilder.evidence import attestation
    from imagebuilder.evidence.signing import statement as make_statement

    envelope = signer.sign(make_statement("r", world.manifest, passes.PREDICATE_TYPE, doc))
    tag = passes.record_tag(world.manifest, SPEC)
    attestation.put(world.reg, REPO, tag, envelope, artifact_type=passes.ARTIFACT_TYPE, subject=world.manifest,
                    predicate_type=passes.PREDICATE_TYPE, annotations={})
    ruled = judge(world.read(), ASK)
    assert not ruled.admitted and any("not a pass record" in i for i in ruled.ignored)
