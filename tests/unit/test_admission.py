"""`imagebuilder check`: may this digest run? Only evidence signed by a named key counts; a failed verdict refuses;
the policy asks for a pass, a GPU pass, a pass on one model, an SBOM or a VSA; exit 0 / 1 / 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuilder.cli import main
from imagebuilder.evidence import admission, passes, sigstore
from imagebuilder.evidence.ecosystem import Ecosystem
from imagebuilder.evidence.passes import RegistryPasses
from imagebuilder.evidence.provenance import Build, RegistryBuilds
from imagebuilder.evidence.signing import Signer, Trust

from .fakes import FakeRegistry
from .test_ecosystem import REPO, SPEC, record

H100 = "NVIDIA H100 80GB HBM3"


def published(signer: Signer, **changes: object) -> tuple[FakeRegistry, str]:
    reg = FakeRegistry()
    manifest, config = reg.image(REPO, "cache-a", "tested")
    store = RegistryPasses(reg, Trust((signer.public,)), signer, Ecosystem(sigstore.Layouts("both"), signer))
    passed = record(manifest, config, **changes)
    store.put(REPO, passed)
    if passes.gpu_model(passed.gpu):
        store.put(REPO, passed, per_model=True)
    return reg, manifest


def test_a_pass_signed_by_a_named_key_admits_and_only_a_named_key_counts() -> None:
    ours, theirs = Signer.generate("ours"), Signer.generate("someone else")
    reg, manifest = published(ours)
    admitted = admission.check(reg, REPO, manifest, Trust((ours.public,)), policy=("pass", "gpu"), gpu_model="H100")
    assert admitted.admitted and admitted.why == () and H100 in admitted.passes[0]
    refused = admission.check(reg, REPO, manifest, Trust((theirs.public,)))
    assert not refused.admitted and refused.why == ("no trusted pass of the suite",)
    assert any("untrusted key" in line for line in refused.ignored)


def test_a_failed_verdict_refuses_whatever_passed_elsewhere() -> None:
    signer = Signer.generate()
    reg, manifest = published(signer)
    config = RegistryPasses(reg, Trust((signer.public,))).config_digest(REPO, manifest)
    assert config is not None
    failed = record(manifest, config, verdict=passes.FAILED, gpu={"kind": "gpu", "verified": True, "count": 1,
                                                                  "models": ["NVIDIA A100-SXM4-80GB"]})
    RegistryPasses(reg, Trust((signer.public,)), signer).put(REPO, failed, per_model=True)
    trust = Trust((signer.public,))
    verdict = admission.check(reg, REPO, manifest, trust)
    assert not verdict.admitted and verdict.why[0].startswith("failed this spec's suite on NVIDIA A100-SXM4-80GB")
    assert admission.check(reg, REPO, manifest, trust, gpu_model="H100").admitted  # (that model's verdict only)
    assert not admission.check(reg, REPO, manifest, trust, gpu_model="A100").admitted


def test_the_policy_asks_for_a_gpu_pass_an_sbom_and_a_vsa() -> None:
    signer = Signer.generate()
    reg, manifest = published(signer, gpu={"kind": "cpu", "verified": False})
    trust = Trust((signer.public,))
    verdict = admission.check(reg, REPO, manifest, trust, policy=("gpu", "sbom", "vsa"))
    assert verdict.why == ("no trusted pass on real GPUs", "no trusted SBOM (none beside it)",
                           "no trusted VSA that says PASSED")
    found = [(t, "sha256:" + "0" * 64, RegistryPasses(reg, trust).read(REPO, t).record)
             for t in passes.tags_for(manifest, reg.tags(REPO))]
    Ecosystem(sigstore.Layouts("att"), signer).vsa(reg, REPO, f"{reg.host}/{REPO}", manifest, SPEC,
                                                   [(t, d, r) for t, d, r in found if r is not None], admitted=True)
    after = admission.check(reg, REPO, manifest, trust, policy=("vsa",))
    assert after.admitted and "PASSED IMAGEBUILDER_SUITE_PASSED" in after.vsas[0]
    assert not admission.check(reg, REPO, manifest, Trust((Signer.generate().public,)), policy=("vsa",)).admitted


def test_the_command_wants_a_digest_and_a_named_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "k.pem"
    key.write_bytes(Signer.generate().public.pem())
    assert main(["--cache-dir", str(tmp_path / "c"), "check", "127.0.0.1:5000/ml/x:latest", "--trust-key",
                 str(key)]) == 2
    assert "name the image by digest" in capsys.readouterr().err
    assert main(["--cache-dir", str(tmp_path / "c"), "check", "127.0.0.1:5000/ml/x@sha256:" + "a" * 64]) == 2


def test_the_command_counts_only_the_keys_named_not_this_machines_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import imagebuilder.cli as cli_mod

    cache = tmp_path / "cache"
    local = Signer.local(cache / "keys")  # this machine's own key signs the record
    reg, manifest = published(local)
    monkeypatch.setattr(cli_mod.Context, "registry", lambda self, host: reg)
    named, other = tmp_path / "local.pem", tmp_path / "other.pem"
    named.write_bytes(local.public.pem())
    other.write_bytes(Signer.generate().public.pem())
    image = f"{reg.host}/{REPO}@{manifest}"
    assert main(["--cache-dir", str(cache), "check", image, "--trust-key", str(other)]) == 1
    assert "REFUSED" in capsys.readouterr().out
    assert main(["--cache-dir", str(cache), "check", image, "--trust-key", str(named), "--gpu", "H100"]) == 0
    assert "ADMITTED" in capsys.readouterr().out


def test_check_refuses_after_a_signed_failure_is_overwritten_or_a_pass_copied_over_it() -> None:
    """N5-02: `check` applies publish's verdict rule. The leaf passed on H200 and failed on H100 (both signed); a
    pusher (a) puts any manifest under the H100 verdict's tag, or (b) copies the H200 pass's artifact over it."""
    signer = Signer.generate()
    reg, manifest = published(signer, gpu={"kind": "gpu", "verified": True, "count": 1, "models": ["NVIDIA H200"]})
    config = RegistryPasses(reg, Trust((signer.public,))).config_digest(REPO, manifest)
    assert config is not None
    store = RegistryPasses(reg, Trust((signer.public,)), signer)
    h200 = next(t for (_, t) in reg.tagged if ".gpu" in t)
    failed = store.put(REPO, record(manifest, config, verdict=passes.FAILED, date="2026-11-27T13:00:00+00:00",
                                    gpu={"kind": "gpu", "verified": True, "count": 1, "models": [H100]}),
                       per_model=True)
    trust = Trust((signer.public,))
    assert admission.check(reg, REPO, manifest, trust).why[0].startswith(f"failed this spec's suite on {H100}")
    reg.tagged[(REPO, failed)] = reg.tagged[(REPO, "cache-a")]  # (a) any manifest over the failure
    over = admission.check(reg, REPO, manifest, trust)
    assert not over.admitted and f"{failed}: " in over.why[0] and "blocks as a failure would" in over.why[0]
    reg.tagged[(REPO, failed)] = reg.tagged[(REPO, h200)]  # (b) the H200 pass copied over it
    copied = admission.check(reg, REPO, manifest, trust)
    assert not copied.admitted and "its record is not the verdict this tag names" in copied.why[0]


def test_check_policy_build_asks_a_build_record_by_a_key_trusted_for_builds() -> None:
    signer, builder = Signer.generate("gpu"), Signer.generate("build")
    reg, manifest = published(signer)
    config = RegistryPasses(reg, Trust((signer.public,))).config_digest(REPO, manifest)
    assert config is not None
    trust = Trust((signer.public.with_roles({"gpu", "cpu"}), builder.public.with_roles({"build"})))
    refused = admission.check(reg, REPO, manifest, trust, policy=("build", "pass"))
    assert refused.why == ("no trusted build record names it: no build record is beside it",)
    RegistryBuilds(reg, Trust((signer.public,)), signer).put(REPO, manifest, Build(
        "e/task", "k" * 64, config, "sha256:" + "0" * 64, "e/business"))
    by_gpu_key = admission.check(reg, REPO, manifest, trust, policy=("build", "pass"))
    assert not by_gpu_key.admitted and "not for build" in by_gpu_key.why[0]  # a pass key never vouches for a build
    RegistryBuilds(reg, Trust((builder.public,)), builder).put(REPO, manifest, Build(
        "e/task", "k" * 64, config, "sha256:" + "0" * 64, "e/business"))
    admitted = admission.check(reg, REPO, manifest, trust, policy=("build", "pass"))
    assert admitted.admitted and admitted.build.startswith("e/task (key kkkkkkkkkkkk)")
