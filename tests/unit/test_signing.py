"""Signed evidence: a pass record is an in-toto Statement about the image's digest in a DSSE envelope signed with
Ed25519. An independent DSSE implementation (securesystemslib) verifies what imagebuilder signs; imagebuilder
counts nothing unsigned, tampered, about another image, or signed by a key it does not trust, and says which."""

from __future__ import annotations

import base64
import copy
import json
import os
import stat
from pathlib import Path

import pytest
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from imagebuilder.errors import InputError
from imagebuilder.evidence import attestation, passes
from imagebuilder.evidence.passes import PassRecord, RegistryPasses
from imagebuilder.evidence.signing import (
    NAMED,
    PAYLOAD_TYPE,
    ZERO_CONFIG,
    Keys,
    PublicKey,
    Rejected,
    Signer,
    Trust,
    statement,
)

from .fakes import FakeRegistry

SPEC = passes.spec_key({"expect": {"torch": "2.13.0"}})


def record(config: str, manifest: str) -> PassRecord:
    return PassRecord(passes.PASSED, config=config, spec=SPEC, node="e/task", entry="e", date="2026-11-24",
                      suite=passes.suite_hash()).at(manifest, "r:5000/ml/x")


def test_an_independent_dsse_verifier_accepts_what_imagebuilder_signs() -> None:
    signer = Signer.generate()
    digest = "sha256:" + "a" * 64
    envelope = signer.sign(statement("r:5000/ml/x", digest, passes.PREDICATE_TYPE, {"verdict": "passed"}))
    key = SSlibKey(signer.public.fingerprint, "ed25519", "ed25519", {"public": signer.public.raw})
    verified = Envelope.from_dict(copy.deepcopy(envelope)).verify([key], 1)  # (from_dict consumes its input)
    assert list(verified) == [signer.public.fingerprint]
    doc = json.loads(base64.b64decode(envelope["payload"]))
    assert doc["_type"] == "https://in-toto.io/Statement/v1" and envelope["payloadType"] == PAYLOAD_TYPE
    assert doc["subject"] == [{"name": "r:5000/ml/x", "digest": {"sha256": "a" * 64}}]
    tampered = dict(copy.deepcopy(envelope), payload=base64.b64encode(base64.b64decode(envelope["payload"]).replace(
        b'"passed"', b'"failed"')).decode())
    with pytest.raises(Exception, match=r"(?i)verif|threshold"):
        Envelope.from_dict(tampered).verify([key], 1)


def store(reg: FakeRegistry, signer: Signer, *trusted: Signer) -> RegistryPasses:
    return RegistryPasses(reg, Trust(tuple(s.public for s in trusted)), signer)


def test_only_a_record_signed_by_a_trusted_key_counts_and_why_not_is_said() -> None:
    verifier, intruder = Signer.generate("the verifier"), Signer.generate("someone with push rights")
    reg = FakeRegistry()
    manifest, config = reg.image("ml/x", "cache-a", "tested")
    store(reg, intruder, verifier).put("ml/x", record(config, manifest))  # pushed, but by the wrong key
    got = store(reg, verifier, verifier).lookup("ml/x", manifest, SPEC)
    assert got.record is None and "signed by an untrusted key" in str(got.rejected)
    assert intruder.public.fingerprint in str(got.rejected)  # (the keyid it carries: `ssh-keygen -lf` prints it)
    store(reg, verifier, verifier).put("ml/x", record(config, manifest))
    found = store(reg, verifier, verifier).lookup("ml/x", manifest, SPEC)
    assert found.record is not None and found.found is not None and found.found.keyid == verifier.public.keyid


def test_a_tampered_record_does_not_count() -> None:
    verifier = Signer.generate("the verifier")
    reg = FakeRegistry()
    manifest, config = reg.image("ml/x", "cache-a", "tested")
    tag = store(reg, verifier, verifier).put("ml/x", record(config, manifest))
    doc = json.loads(reg.manifest("ml/x", tag)[0])
    envelope = json.loads(reg.blob("ml/x", doc["layers"][0]["digest"]))
    payload = json.loads(base64.b64decode(envelope["payload"]))
    payload["predicate"]["expect"] = {"torch": "2.12.0"}  # the record says something else now
    envelope["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    data = json.dumps(envelope).encode()
    doc["layers"][0].update(digest=reg.put_blob("ml/x", data), size=len(data))
    reg.put_manifest("ml/x", tag, json.dumps(doc).encode(), attestation.OCI_MANIFEST)
    got = store(reg, verifier, verifier).lookup("ml/x", manifest, SPEC)
    assert got.record is None and "does not verify: the record was changed after it was signed" in str(got.rejected)


def test_an_unsigned_record_or_one_about_another_image_does_not_count() -> None:
    verifier = Signer.generate()
    reg = FakeRegistry()
    manifest, config = reg.image("ml/x", "cache-a", "tested")
    other, _ = reg.image("ml/x", "cache-b", "other")
    # an old-style record: the JSON as the config blob, no envelope
    blob = reg.put_blob("ml/x", json.dumps(record(config, manifest).to_json()).encode())
    reg.put_manifest("ml/x", passes.record_tag(manifest, SPEC), json.dumps({
        "schemaVersion": 2, "mediaType": attestation.OCI_MANIFEST, "layers": [], "subject": {"digest": manifest},
        "config": {"mediaType": "application/vnd.imagebuilder.pass.v1+json", "digest": blob}}).encode(),
        attestation.OCI_MANIFEST)
    got = store(reg, verifier, verifier).lookup("ml/x", manifest, SPEC)
    assert got.record is None and "not a signed pass record" in str(got.rejected)
    # a signed record of `other`, copied under this image's record tag
    tag = store(reg, verifier, verifier).put("ml/x", record(config, other))
    reg.tagged[("ml/x", passes.record_tag(manifest, SPEC))] = reg.tagged[("ml/x", tag)]
    assert store(reg, verifier, verifier).lookup("ml/x", manifest, SPEC).record is None


def test_this_machines_key_is_made_once_private_and_trusted(tmp_path: Path) -> None:
    keys = Keys.load(tmp_path / "keys", {})
    path = tmp_path / "keys" / "local.pem"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Keys.load(tmp_path / "keys", {}).signer.public.keyid == keys.signer.public.keyid  # kept
    assert keys.trust.ids() == [keys.signer.public.keyid]


def test_a_signing_key_that_nothing_trusts_is_refused_before_anything_runs(tmp_path: Path) -> None:
    ci_key = Signer.generate()
    private, public = tmp_path / "ci.pem", tmp_path / "ci.pub"
    private.write_bytes(ci_key.private_pem())
    os.chmod(private, 0o600)
    public.write_bytes(ci_key.public.pem())
    env = {"IMAGEBUILDER_SIGNING_KEY": str(private)}
    alone = Keys.load(tmp_path / "keys", env)  # the key the user gave signs, and is the only one that counts
    assert alone.trust.ids() == [ci_key.public.keyid] and not (tmp_path / "keys" / "local.pem").exists()
    keys = Keys.load(tmp_path / "keys", env, [public])
    assert keys.signer.public.keyid == ci_key.public.keyid and ci_key.public.keyid in keys.trust.ids()
    assert PublicKey.load(private).keyid == ci_key.public.keyid  # a private key file names its public half
    (tmp_path / "junk.pub").write_text("not a key")
    with pytest.raises(InputError, match="not a PEM Ed25519 key"):
        Keys.load(tmp_path / "keys", {}, [tmp_path / "junk.pub"])


def test_named_keys_are_the_only_keys_trusted_and_the_machines_own_key_is_not(tmp_path: Path) -> None:
    """Issue 39 (N3): once --trust-key names the CI key, a pass signed by this machine's own key (the cache folder's
    local.pem, which whoever can read or plant that folder holds) does not count, and this run signs nothing
    unless it is given a key; with nothing named, the machine's own key signs and counts, and the run says which
    case it is in."""
    local = Keys.load(tmp_path / "keys", {})
    assert local.signer is not None and local.case == ZERO_CONFIG and "single machine" in local.said()
    assert local.trust.ids() == [local.signer.public.keyid]
    assert local.build_trust.ids() == local.trust.ids()
    ci_key = Signer.generate()
    (tmp_path / "ci.pub").write_bytes(ci_key.public.pem())
    named = Keys.load(tmp_path / "keys", {}, [tmp_path / "ci.pub"])
    assert named.case == NAMED and named.trust.ids() == [ci_key.public.keyid] and named.signer is None
    assert local.signer is not None and local.signer.public.keyid not in named.build_trust.ids()
    envelope = local.signer.sign(b"{}")
    with pytest.raises(Rejected, match="untrusted key"):
        named.trust.open(envelope)
    with pytest.raises(InputError, match="no signing key whose records would count"):
        named.writer("verify writes each leaf's pass record")
    builder = Signer.generate()
    (tmp_path / "build.pub").write_bytes(builder.public.pem())
    roles = Keys.load(tmp_path / "keys", {}, [tmp_path / "ci.pub"], [tmp_path / "build.pub"])
    assert builder.public.keyid in roles.build_trust.ids() and builder.public.keyid not in roles.trust.ids()
    assert ci_key.public.keyid in roles.build_trust.ids()  # a pass key vouches for builds too, never the reverse


def test_a_private_key_others_can_read_or_that_another_user_owns_is_refused(tmp_path: Path) -> None:
    Keys.load(tmp_path / "keys", {})
    path = tmp_path / "keys" / "local.pem"
    os.chmod(path, 0o644)
    with pytest.raises(InputError, match=f"signing key {path}: mode 0644 lets others read or change it"):
        Keys.load(tmp_path / "keys", {})
    os.chmod(path, 0o600)
    Keys.load(tmp_path / "keys", {})
    if os.getuid() == 0:  # (as root, give it away: a key planted by another user)
        os.chown(path, 4242, -1)
        with pytest.raises(InputError, match="owned by user id 4242, not by this user"):
            Keys.load(tmp_path / "keys", {})


def test_the_trust_check_names_what_is_wrong() -> None:
    trust = Trust((Signer.generate().public,))
    for envelope, why in (({}, "unsigned"), ({"payload": "e30=", "payloadType": PAYLOAD_TYPE}, "unsigned"),
                          ({"payload": "e30=", "payloadType": "text/plain", "signatures": [{}]}, "payload type")):
        with pytest.raises(Rejected, match=why):
            trust.open(envelope)


def test_a_bad_signature_of_a_trusted_key_hides_no_good_one() -> None:
    """N19: an envelope whose first signature (of a trusted key id) does not verify and whose second does is read
    by the second; one with only the bad signature is refused, saying it does not verify."""
    key = Signer.generate()
    good = key.sign(b'{"a": 1}')
    bogus = {"keyid": key.public.keyid, "sig": base64.b64encode(b"\0" * 64).decode()}
    trust = Trust((key.public,))
    payload, by = trust.open({**good, "signatures": [bogus, *good["signatures"]]})
    assert payload == b'{"a": 1}' and by.keyid == key.public.keyid
    with pytest.raises(Rejected, match="does not verify"):
        trust.open({**good, "signatures": [bogus]})


def test_an_independent_dsse_verifier_accepts_a_build_record_and_it_speaks_slsa_provenance_v1() -> None:
    """The build record beside a key tag's digest (issue 39) is read by a tool no one here wrote: securesystemslib
    verifies its envelope with the build key, and refuses it with another key; its Statement is SLSA provenance v1
    with the fields that spec requires (buildDefinition.buildType, externalParameters, runDetails.builder.id)."""
    from imagebuilder.evidence import attestation, provenance

    reg, builder = FakeRegistry(), Signer.generate("the build key")
    manifest, config = reg.image("ml/x", "cache-0123456789ab", "built")
    build = provenance.Build("e/base", "b" * 64, config, "sha256:" + "c" * 64, "debian:bookworm", {"template": "x"},
                             "2026-11-27T10:00:00+00:00")
    tag = provenance.RegistryBuilds(reg, Trust((builder.public,)), builder).put("ml/x", manifest, build)
    stored = attestation.read(reg, "ml/x", tag, provenance.ARTIFACT_TYPE)
    assert stored is not None and stored[0] == manifest
    envelope = stored[1]
    key = SSlibKey(builder.public.fingerprint, "ed25519", "ed25519", {"public": builder.public.raw})
    assert list(Envelope.from_dict(copy.deepcopy(envelope)).verify([key], 1)) == [builder.public.fingerprint]
    other = Signer.generate()
    with pytest.raises(Exception, match=r"(?i)verif|threshold"):
        Envelope.from_dict(copy.deepcopy(envelope)).verify(
            [SSlibKey(other.public.fingerprint, "ed25519", "ed25519", {"public": other.public.raw})], 1)
    doc = json.loads(base64.b64decode(envelope["payload"]))
    assert doc["predicateType"] == "https://slsa.dev/provenance/v1"
    assert doc["subject"][0]["digest"] == {"sha256": manifest.split(":", 1)[1]}
    predicate = doc["predicate"]
    assert predicate["buildDefinition"]["buildType"] and predicate["buildDefinition"]["externalParameters"]["key"]
    assert predicate["runDetails"]["builder"]["id"].startswith("https://")
    assert provenance.Build.from_predicate(predicate) == build
