"""Signed evidence: a pass record is an in-toto Statement about the image's digest in a DSSE envelope signed with
Ed25519. An independent DSSE implementation (securesystemslib) verifies what imagebuilder signs; imagebuilder
counts nothing unsigned, tampered, about another image, or signed by a key it does not trust, and says which."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from imagebuilder.errors import InputError
from imagebuilder.evidence import attestation, passes, referrers
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
from imagebuilder.evidence.sigstore import BUNDLE_TYPE, Layouts

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


def go_dsse_verify(envelope: dict[str, object], public: PublicKey) -> bool:
    """go-securesystemslib's `dsse.envelopeVerifier.Verify` (dsse/verify.go at 1509a8f), as sigstore-go calls it for
    cosign v3 bundles and Kyverno's SigstoreBundle mode: one provider, sigstore's `VerifierAdapter` with `Pub` set,
    whose KeyID() gives none, so the provider's keyid is `SHA256KeyID(pub)` = `ssh.FingerprintSHA256` of the key;
    a signature whose keyid is set and differs is skipped. The fingerprint is computed here from the SSH wire form
    (RFC 8709: string "ssh-ed25519", string key), not by imagebuilder's code."""
    raw = bytes.fromhex(public.raw)
    wire = len(b"ssh-ed25519").to_bytes(4, "big") + b"ssh-ed25519" + len(raw).to_bytes(4, "big") + raw
    provider_keyid = "SHA256:" + base64.b64encode(hashlib.sha256(wire).digest()).decode().rstrip("=")
    body = base64.b64decode(str(envelope["payload"]))
    payload_type = str(envelope["payloadType"])
    pae = b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type.encode(), len(body), body)
    for signature in envelope["signatures"]:  # type: ignore[attr-defined]
        keyid = str(signature.get("keyid") or "")
        if keyid and keyid != provider_keyid:
            continue  # (`if s.KeyID != "" && keyID != "" && err == nil && s.KeyID != keyID { continue }`)
        try:
            public.key.verify(base64.b64decode(signature["sig"]), pae)
        except InvalidSignature:
            continue
        return True
    return False  # "Accepted signatures do not match threshold, Found: 0, Expected 1"


def test_a_verifier_that_compares_keyids_as_sigstore_go_does_accepts_our_bundles() -> None:
    """Issue 50: cosign v3 and Kyverno refused every bundle of ours because the keyid was our own hex form. Our
    signatures carry the key's SSH fingerprint; a signature with no keyid (cosign's own signer) is read too."""
    signer, other = Signer.generate(), Signer.generate()
    reg = FakeRegistry()
    manifest, _ = reg.image("ml/x", "cache-a", "tested")
    envelope = signer.sign(statement("r/ml/x", manifest, passes.PREDICATE_TYPE, {"verdict": "passed"}))
    Layouts("bundle").write(reg, "ml/x", manifest, envelope, public=signer.public,
                            predicate_type=passes.PREDICATE_TYPE, record="t", created="2026-11-28T00:00:00+00:00")
    (entry,) = [m for m in referrers.listed(reg, "ml/x", manifest) if m.get("artifactType") == BUNDLE_TYPE]
    layer = json.loads(reg.manifest("ml/x", str(entry["digest"]))[0])["layers"][0]["digest"]
    bundled = json.loads(reg.blob("ml/x", layer))["dsseEnvelope"]
    assert go_dsse_verify(bundled, signer.public) and not go_dsse_verify(bundled, other.public)
    legacy = {**envelope, "signatures": [{**envelope["signatures"][0], "keyid": signer.public.keyid}]}
    assert not go_dsse_verify(legacy, signer.public)  # the form we wrote before: skipped, as sigstore-go skips it
    blank = {**envelope, "signatures": [{**envelope["signatures"][0], "keyid": ""}]}
    assert go_dsse_verify(blank, signer.public)
    trust = Trust((other.public, signer.public))
    for form in (envelope, legacy, blank):  # our reader: the fingerprint, our hex id, or none (every key tried)
        assert trust.open(form)[1].keyid == signer.public.keyid
    with pytest.raises(Rejected, match="untrusted key"):
        Trust((other.public,)).open(blank)


def test_keys_are_named_with_roles_and_each_role_counts_only_the_keys_named_for_it(tmp_path: Path) -> None:
    gpu, hosted, build = Signer.generate("gpu"), Signer.generate("hosted"), Signer.generate("build")
    for name, key in (("gpu", gpu), ("hosted", hosted), ("build", build)):
        (tmp_path / f"{name}.pub").write_bytes(key.public.pem())
    keys = Keys.load(tmp_path / "cache", {}, (f"gpu={tmp_path / 'gpu.pub'}", f"cpu,publish={tmp_path / 'hosted.pub'}"),
                     (tmp_path / "build.pub",))
    roles = {k.source.rsplit("/", 1)[-1]: sorted(k.roles) for k in keys.trust.plus(keys.build_trust).keys}
    assert roles == {"gpu.pub": ["gpu"], "hosted.pub": ["cpu", "publish"], "build.pub": ["build"]}
    assert keys.signer is None and keys.builder is None  # named for every group: this machine's own key counts nowhere
    assert not (tmp_path / "cache" / "local.pem").exists()
    with pytest.raises(InputError, match="unknown role 'gpus'"):
        Keys.load(tmp_path / "cache", {}, (f"gpus={tmp_path / 'gpu.pub'}",))
    # Only builds named (a verify machine that trusts the stage machine's build key): its own key still signs passes.
    verifier = Keys.load(tmp_path / "v", {}, (), (tmp_path / "build.pub",))
    assert verifier.signer is not None and verifier.builder is None
    assert verifier.signer.public.keyid in verifier.trust.ids() and verifier.signer.public.keyid not in \
        verifier.build_trust.ids()


def test_the_build_record_is_also_where_cosign_looks_and_verifies_as_sigstore_go_would() -> None:
    """The build record, a third of the evidence, in the bundle and `.att` layouts too (`cosign verify-attestation
    --type slsaprovenance1 --key build.pub`), signed by the build key only."""
    from imagebuilder.evidence import provenance, sigstore
    from imagebuilder.evidence.signing import BUILD

    builder, verifier = Signer.generate("build key"), Signer.generate("gpu key")
    reg = FakeRegistry()
    manifest, config = reg.image("ml/x", "cache-0123456789ab", "built")
    build = provenance.Build("e/base", "b" * 64, config, "sha256:" + "c" * 64, "debian:bookworm", {},
                             "2026-11-27T10:00:00+00:00")
    provenance.RegistryBuilds(reg, Trust((builder.public,)), builder, Layouts("both")).put("ml/x", manifest, build)
    trust = Trust((builder.public.with_roles({BUILD}), verifier.public.with_roles({"gpu"})))
    found, rejected = sigstore.read(reg, "ml/x", manifest, provenance.PREDICATE_TYPE, trust, role=BUILD)
    assert sorted(f.where.split()[0] for f in found) == ["bundle", sigstore.att_tag(manifest)] and rejected == []
    assert all(provenance.Build.from_predicate(f.predicate) == build for f in found)
    (entry,) = [m for m in referrers.listed(reg, "ml/x", manifest) if m.get("artifactType") == BUNDLE_TYPE]
    layer = json.loads(reg.manifest("ml/x", str(entry["digest"]))[0])["layers"][0]["digest"]
    assert go_dsse_verify(json.loads(reg.blob("ml/x", layer))["dsseEnvelope"], builder.public)
    none, refused = sigstore.read(reg, "ml/x", manifest, provenance.PREDICATE_TYPE, trust, role="gpu")
    assert none == [] and all("not for gpu" in r for r in refused)  # (the build key signs no pass)


@pytest.mark.parametrize("separator", [" ", ":", "  \n "])
def test_the_nightlys_key_lists_are_read_as_written(tmp_path: Path, separator: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """N5-05: IMAGEBUILDER_TRUST_KEYS as nightly.yml writes it (roles, space-separated; `:` as PATH has), and
    IMAGEBUILDER_TRUST_BUILD_KEYS: each key is read, with its roles (`keys trusted` says them)."""
    from imagebuilder.cli import main

    (tmp_path / "keys").mkdir()
    for name in ("signing", "hosted", "build"):
        (tmp_path / "keys" / f"{name}.pub").write_bytes(Signer.generate(name).public.pem())
    nightly = ".github/workflows/nightly.yml"
    text = (Path(__file__).resolve().parents[2] / nightly).read_text()
    assert "'gpu=keys/signing.pub cpu,publish=keys/hosted.pub'" in text  # (the value tested here is the nightly's)
    env = {"IMAGEBUILDER_TRUST_KEYS": separator.join(["gpu=keys/signing.pub", "cpu,publish=keys/hosted.pub"]),
           "IMAGEBUILDER_TRUST_BUILD_KEYS": "keys/build.pub"}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)  # (the nightly names the keys relative to the checkout)
        for name, value in env.items():
            patch.setenv(name, value)
        assert main(["--cache-dir", str(tmp_path / "cache"), "keys", "trusted"]) == 0
    out = capsys.readouterr().out
    assert "gpu by " in out and "(keys/signing.pub)" in out.split("gpu by ")[1].split("\n")[0]
    assert "(keys/hosted.pub)" in out.split("cpu by ")[1].split("\n")[0]
    assert "(keys/build.pub)" in out.split("  build by ")[1].split("\n")[0]
