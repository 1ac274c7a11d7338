"""Evidence the ecosystem can read, on the in-memory registry: the fallback referrers index (kept where the registry
does not answer OCI-Subject, other tools' entries kept, a lost race merged again), cosign's layouts (Sigstore bundle
referrers, the shared `.att` tag: concurrent writers lose nothing), the standard predicates checked against JSON
Schemas written from their specs, the raw SBOM at `.sbom`, and golden files pinning the exact bytes."""

from __future__ import annotations

import base64
import copy
import json
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from imagebuilder.evidence import attestation, passes, predicates, referrers, sboms, sigstore
from imagebuilder.evidence.ecosystem import Ecosystem, raw_sbom_tag
from imagebuilder.evidence.passes import PassRecord, RegistryPasses
from imagebuilder.evidence.sboms import RegistrySboms
from imagebuilder.evidence.signing import Signer, Trust, statement

from .fakes import FakeRegistry, sha

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "ecosystem"
SCHEMAS = ROOT / "tests" / "schemas"
SPEC = "5" * 64
REPO = "ml/x"


def fixed_signer() -> Signer:
    return Signer(Ed25519PrivateKey.from_private_bytes(bytes(range(32))), "the tests' fixed key")


def record(manifest: str, config: str, **changes: Any) -> PassRecord:
    report = {"passed": True, "gpu_verified": True, "gpus": 2, "checks": [
        {"name": "cuda.available", "status": "pass"}, {"name": "nccl.allreduce", "status": "pass"},
        {"name": "throughput.cuda:0", "status": "pass", "device": "NVIDIA H100 80GB HBM3"},
        {"name": "flash_attn", "status": "skip", "reason": "not installed"}]}
    fields: dict[str, Any] = {"config": config, "spec": SPEC, "node": "e/task", "entry": "e", "suite": "7" * 64,
                              "date": "2026-11-27T12:00:00+00:00", "report": report, "expect": {"torch": "2.13.0"},
                              "gpu": {"kind": "gpu", "verified": True, "count": 2, "models": ["NVIDIA H100 80GB HBM3"],
                                      "driver": "570.1"}}
    verdict = changes.pop("verdict", passes.PASSED)
    fields.update(changes)
    return PassRecord(verdict, **fields).at(manifest, f"127.0.0.1:5000/{REPO}")


def store(reg: FakeRegistry, kinds: str = "both", signer: Signer | None = None) -> RegistryPasses:
    signer = signer or fixed_signer()
    return RegistryPasses(reg, Trust((signer.public,)), signer, Ecosystem(sigstore.Layouts(kinds), signer))


def index(reg: FakeRegistry, manifest: str) -> dict[str, Any]:
    body, media_type = reg.manifest(REPO, referrers.index_tag(manifest))
    assert media_type == referrers.INDEX_TYPE
    doc: dict[str, Any] = json.loads(body)
    return doc


def types(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((m["artifactType"], (m.get("annotations") or {}).get("dev.sigstore.bundle.predicateType", ""))
                  for m in doc["manifests"])


# -- the fallback referrers index ----------------------------------------------------------------------------


def test_without_oci_subject_every_record_is_listed_in_the_fallback_index_with_its_artifact_type() -> None:
    reg = FakeRegistry()
    manifest, config = reg.image(REPO, "cache-a", "tested")
    tag = store(reg).put(REPO, record(manifest, config))
    listed = index(reg, manifest)
    assert types(listed) == sorted([
        (passes.ARTIFACT_TYPE, ""),
        (sigstore.BUNDLE_TYPE, passes.PREDICATE_TYPE),
        (sigstore.BUNDLE_TYPE, predicates.TEST_RESULT)])
    native = next(m for m in listed["manifests"] if m["artifactType"] == passes.ARTIFACT_TYPE)
    assert native["digest"] == reg.manifest_digest(REPO, tag)
    assert native["annotations"][referrers.RECORD] == tag and native["size"] == len(reg.manifests[native["digest"]][0])
    for entry in listed["manifests"]:  # each entry is the very manifest, which names the image as its subject
        assert json.loads(reg.manifests[entry["digest"]][0])["subject"]["digest"] == manifest
    assert referrers.listed(reg, REPO, manifest) == listed["manifests"]
    assert attestation.is_evidence_tag(referrers.index_tag(manifest)) and attestation.is_evidence_tag(
        sigstore.att_tag(manifest)) and not reg.public_tags(REPO).get(referrers.index_tag(manifest))


def test_a_registry_that_answers_oci_subject_keeps_its_own_list_and_no_index_is_written() -> None:
    reg = FakeRegistry(referrers_api=True)
    manifest, config = reg.image(REPO, "cache-a", "tested")
    ecosystem = Ecosystem(sigstore.Layouts("both"), fixed_signer())
    RegistryPasses(reg, Trust((fixed_signer().public,)), fixed_signer(), ecosystem).put(REPO, record(manifest, config))
    assert reg.manifest_digest(REPO, referrers.index_tag(manifest)) is None
    assert len(referrers.listed(reg, REPO, manifest)) == 3  # (from the referrers API)
    assert ecosystem.layouts.found()["registries"] == {reg.host: {
        "oci_subject": True, "referrers_api": True, "tag_deletion": True, "referrers": "registry (referrers API)"}}


def test_the_probe_records_what_a_distribution_registry_lacks() -> None:
    reg = FakeRegistry()
    manifest, config = reg.image(REPO, "cache-a", "tested")
    ecosystem = Ecosystem(sigstore.Layouts("off"), fixed_signer())
    RegistryPasses(reg, Trust((fixed_signer().public,)), fixed_signer(), ecosystem).put(REPO, record(manifest, config))
    assert ecosystem.layouts.found() == {"layouts": "off", "registries": {reg.host: {
        "oci_subject": False, "referrers_api": False, "tag_deletion": False,
        "referrers": "fallback index (tag sha256-<hex>)"}}}
    assert types(index(reg, manifest)) == [(passes.ARTIFACT_TYPE, "")]  # (off: the native record, listed all the same)


def test_another_tools_entries_in_the_index_are_kept_and_only_our_superseded_entry_replaced() -> None:
    reg = FakeRegistry()
    manifest, config = reg.image(REPO, "cache-a", "tested")
    foreign = {"mediaType": attestation.OCI_MANIFEST, "digest": sha(b"their signature"), "size": 9,
               "artifactType": "application/vnd.example.sig", "annotations": {"x": "y"}, "data": "unknown field"}
    reg.put_manifest(REPO, referrers.index_tag(manifest), json.dumps(
        {"schemaVersion": 2, "mediaType": referrers.INDEX_TYPE, "manifests": [foreign]}).encode(), referrers.INDEX_TYPE)
    passes_ = store(reg, "off")
    passes_.put(REPO, record(manifest, config, date="2026-11-27T12:00:00+00:00"))
    passes_.put(REPO, record(manifest, config, date="2026-11-28T12:00:00+00:00"))  # the record written again
    listed = index(reg, manifest)["manifests"]
    assert listed[0] == foreign and len(listed) == 2
    assert listed[1]["digest"] == reg.manifest_digest(REPO, passes.record_tag(manifest, SPEC))


def test_a_writer_that_replaced_the_index_between_our_read_and_write_is_merged_with_again() -> None:
    reg = FakeRegistry()
    manifest, config = reg.image(REPO, "cache-a", "tested")
    theirs = {"mediaType": attestation.OCI_MANIFEST, "digest": sha(b"theirs"), "size": 6, "artifactType": "x/y"}
    raced: list[str] = []

    def other_writer(repo: str, tag: str) -> None:  # right after our PUT, another tool's read-modify-write lands
        if tag == referrers.index_tag(manifest) and not raced:
            raced.append(tag)
            reg.put_manifest(repo, tag, json.dumps({"schemaVersion": 2, "mediaType": referrers.INDEX_TYPE,
                                                    "manifests": [theirs]}).encode(), referrers.INDEX_TYPE)
    reg.on_push.append(other_writer)
    store(reg, "off").put(REPO, record(manifest, config))
    assert raced and [m["artifactType"] for m in index(reg, manifest)["manifests"]] == ["x/y", passes.ARTIFACT_TYPE]


# -- cosign's layouts ----------------------------------------------------------------------------------------


def test_att_layers_are_dsse_envelopes_that_securesystemslib_verifies_with_their_predicate_type() -> None:
    reg = FakeRegistry()
    manifest, config = reg.image(REPO, "cache-a", "tested")
    signer = fixed_signer()
    store(reg, "att").put(REPO, record(manifest, config))
    doc = json.loads(reg.manifest(REPO, sigstore.att_tag(manifest))[0])
    assert [(layer["mediaType"], layer["annotations"]["predicateType"]) for layer in doc["layers"]] == [
        (sigstore.ENVELOPE_TYPE, passes.PREDICATE_TYPE), (sigstore.ENVELOPE_TYPE, predicates.TEST_RESULT)]
    config_doc = json.loads(reg.blobs[doc["config"]["digest"]])
    assert config_doc["rootfs"]["diff_ids"] == [layer["digest"] for layer in doc["layers"]]
    key = SSlibKey(signer.public.fingerprint, "ed25519", "ed25519", {"public": signer.public.raw})
    for layer in doc["layers"]:
        envelope = json.loads(reg.blobs[layer["digest"]])
        assert list(Envelope.from_dict(copy.deepcopy(envelope)).verify([key], 1)) == [signer.public.fingerprint]
        statement = json.loads(base64.b64decode(envelope["payload"]))
        assert statement["predicateType"] == layer["annotations"]["predicateType"]
        assert statement["subject"][0]["digest"] == {"sha256": manifest.partition(":")[2]}
    assert reg.manifest_digest(REPO, referrers.index_tag(manifest)) is not None
    assert sigstore.BUNDLE_TYPE not in {m["artifactType"] for m in index(reg, manifest)["manifests"]}


def test_concurrent_writers_to_one_att_tag_lose_no_attestation() -> None:
    reg = FakeRegistry()
    manifest, _ = reg.image(REPO, "cache-a", "tested")
    signer = fixed_signer()
    layouts = sigstore.Layouts("att")
    envelopes = [signer.sign(statement(REPO, manifest, f"https://example.com/p/{i}", {"i": i}))
                 for i in range(8)]
    raced: list[str] = []

    def other_writer(repo: str, tag: str) -> None:  # another process's write, which never saw ours
        if tag == sigstore.att_tag(manifest) and len(raced) < 2:
            raced.append(tag)
            data = b'{"payload":"e30=","payloadType":"application/vnd.in-toto+json","signatures":[]}'
            theirs = sigstore.att_layer(data, reg.put_blob(repo, data), "https://example.com/theirs", "theirs")
            reg.put_manifest(repo, tag, json.dumps(sigstore.att_merged(None, theirs, {})).encode(),
                             attestation.OCI_MANIFEST)
    reg.on_push.append(other_writer)
    threads = [threading.Thread(target=layouts.write, args=(reg, REPO, manifest, envelope), kwargs={
        "public": signer.public, "predicate_type": f"https://example.com/p/{i}", "record": f"r{i}", "created": "x"})
        for i, envelope in enumerate(envelopes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    doc = json.loads(reg.manifest(REPO, sigstore.att_tag(manifest))[0])
    predicate_types = sorted(layer["annotations"]["predicateType"] for layer in doc["layers"])
    assert predicate_types == sorted(["https://example.com/theirs", *(f"https://example.com/p/{i}" for i in range(8))])


def test_a_bundle_holds_the_envelope_and_the_keys_hint_and_is_a_referrer_of_the_image() -> None:
    reg = FakeRegistry()
    manifest, config = reg.image(REPO, "cache-a", "tested")
    signer = fixed_signer()
    store(reg, "bundle").put(REPO, record(manifest, config))
    bundles = [m for m in index(reg, manifest)["manifests"] if m["artifactType"] == sigstore.BUNDLE_TYPE]
    assert len(bundles) == 2 and reg.manifest_digest(REPO, sigstore.att_tag(manifest)) is None
    for entry in bundles:
        doc = json.loads(reg.manifests[entry["digest"]][0])
        assert doc["config"]["mediaType"] == attestation.EMPTY_TYPE and len(doc["layers"]) == 1
        assert doc["layers"][0]["mediaType"] == sigstore.BUNDLE_TYPE
        assert entry["annotations"]["dev.sigstore.bundle.content"] == "dsse-envelope"
        bundle = json.loads(reg.blobs[doc["layers"][0]["digest"]])
        assert bundle["verificationMaterial"] == {"publicKey": {"hint": sigstore.hint(signer.public)},
                                                  "tlogEntries": []}
        assert bundle["dsseEnvelope"]["signatures"][0]["keyid"] == signer.public.fingerprint


# -- golden files: the exact bytes, from a fixed key and fixed dates -------------------------------------------


def golden_registry() -> tuple[FakeRegistry, str]:
    reg = FakeRegistry()
    manifest, config = reg.image(REPO, "cache-a", "golden")
    store(reg).put(REPO, record(manifest, config))
    return reg, manifest


@pytest.mark.parametrize("name", ["index.json", "att.json", "bundle-pass.json", "bundle-test-result.json",
                                  "pass-manifest.json"])
def test_golden_manifests_and_bundles(name: str, update_golden: bool) -> None:
    reg, manifest = golden_registry()
    bundles = {json.loads(reg.manifests[m["digest"]][0])["annotations"]["dev.sigstore.bundle.predicateType"]:
               json.loads(reg.blobs[json.loads(reg.manifests[m["digest"]][0])["layers"][0]["digest"]])
               for m in index(reg, manifest)["manifests"] if m["artifactType"] == sigstore.BUNDLE_TYPE}
    made = {"index.json": index(reg, manifest),
            "att.json": json.loads(reg.manifest(REPO, sigstore.att_tag(manifest))[0]),
            "bundle-pass.json": bundles[passes.PREDICATE_TYPE],
            "bundle-test-result.json": bundles[predicates.TEST_RESULT],
            "pass-manifest.json": json.loads(reg.manifest(REPO, passes.record_tag(manifest, SPEC))[0])}[name]
    text = json.dumps(made, indent=1, sort_keys=True) + "\n"
    path = GOLDEN / name
    if update_golden:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} changed: rerun with --update-golden and review"


# -- standard predicates, checked against JSON Schemas written from their specs ---------------------------------


def validate(statement: dict[str, Any], schema: str) -> None:
    jsonschema.validate(statement, json.loads((SCHEMAS / schema).read_text(encoding="utf-8")),
                        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def as_statement(predicate_type: str, predicate: dict[str, Any]) -> dict[str, Any]:
    return json.loads(statement("127.0.0.1:5000/ml/x", "sha256:" + "a" * 64, predicate_type, predicate))


def test_test_result_predicates_follow_the_spec_and_name_the_checks() -> None:
    manifest = "sha256:" + "a" * 64
    done = predicates.test_result(record(manifest, "sha256:" + "c" * 64))
    validate(as_statement(predicates.TEST_RESULT, done), "in-toto-test-result-v0.1.json")
    assert done["result"] == "WARNED" and done["warnedTests"] == ["flash_attn"] and done["failedTests"] == []
    assert done["configuration"][1]["digest"] == {"sha256": SPEC}
    failed = predicates.test_result(record(manifest, "sha256:" + "c" * 64, verdict=passes.FAILED, report={
        "checks": [{"name": "nccl.allreduce", "status": "fail"}]}))
    assert failed["result"] == "FAILED" and failed["failedTests"] == ["nccl.allreduce"]
    validate(as_statement(predicates.TEST_RESULT, failed), "in-toto-test-result-v0.1.json")
    with pytest.raises(jsonschema.ValidationError):  # the schema refuses a predicate without its configuration
        validate(as_statement(predicates.TEST_RESULT, {k: v for k, v in done.items() if k != "configuration"}),
                 "in-toto-test-result-v0.1.json")


def test_a_vsa_summarises_the_trusted_passes_in_our_own_level_names() -> None:
    manifest = "sha256:" + "a" * 64
    passed = record(manifest, "sha256:" + "c" * 64)
    vsa = predicates.vsa("127.0.0.1:5000/ml/x", manifest, SPEC, [passed], [("oci://r:t", "sha256:" + "b" * 64)],
                         "2026-11-27T12:00:00+00:00", admitted=True)
    validate(as_statement(predicates.VSA, vsa), "slsa-vsa-v1.json")
    assert vsa["verificationResult"] == "PASSED" and vsa["resourceUri"] == f"oci://127.0.0.1:5000/ml/x@{manifest}"
    assert vsa["verifiedLevels"] == ["IMAGEBUILDER_GPU_NVIDIA_H100_80GB_HBM3", "IMAGEBUILDER_GPU_VERIFIED",
                                     "IMAGEBUILDER_SUITE_PASSED"]
    # The result is the judge's (tests/unit/test_ruling.py: `vsa_result`), never derived again here.
    refused = predicates.vsa("r/x", manifest, SPEC, [passed], [], "2026-11-27T12:00:00+00:00", admitted=False)
    assert refused["verificationResult"] == "FAILED" and refused["verifiedLevels"] == []
    other_spec = predicates.vsa("r/x", manifest, "6" * 64, [passed], [], "2026-11-27T12:00:00+00:00", admitted=True)
    assert other_spec["verifiedLevels"] == []  # (a pass of another spec reaches no level of this one)
    with pytest.raises(jsonschema.ValidationError):  # a level named like SLSA's own is refused
        validate(as_statement(predicates.VSA, {**vsa, "verifiedLevels": ["SLSA_GPU_TESTED"]}), "slsa-vsa-v1.json")


# -- SBOMs: the signed one under its own tag, the raw document where other tools expect it ---------------------


def test_the_signed_sbom_no_longer_takes_the_sbom_tag_which_holds_the_raw_document() -> None:
    reg = FakeRegistry()
    manifest, _ = reg.image(REPO, "cache-a", "tested")
    signer = fixed_signer()
    document = {"bomFormat": "CycloneDX", "specVersion": "1.6", "metadata": {
        "timestamp": "2026-11-27T12:00:00+00:00", "component": {"name": "127.0.0.1:5000/ml/x", "version": manifest}},
        "components": []}
    found = RegistrySboms(reg, Trust((signer.public,)), signer, Ecosystem(sigstore.Layouts("both"), signer))
    tag = found.put(REPO, manifest, document, node="e/task")
    assert tag.endswith(".signed-sbom") and raw_sbom_tag(manifest).endswith(".sbom")
    raw = json.loads(reg.manifest(REPO, raw_sbom_tag(manifest))[0])
    assert raw["artifactType"] == raw["layers"][0]["mediaType"] == sboms.ARTIFACT_TYPE
    assert json.loads(reg.blobs[raw["layers"][0]["digest"]]) == document  # the raw document, no envelope
    listed = types(index(reg, manifest))
    assert listed == sorted([(sboms.ARTIFACT_TYPE, ""), (sboms.ARTIFACT_TYPE, ""),
                             (sigstore.BUNDLE_TYPE, sboms.PREDICATE_TYPE)])
    att = json.loads(reg.manifest(REPO, sigstore.att_tag(manifest))[0])
    assert [layer["annotations"]["predicateType"] for layer in att["layers"]] == [sboms.PREDICATE_TYPE]
    assert found.lookup(REPO, manifest).sbom is not None


def test_the_docs_policies_name_what_we_write() -> None:
    """docs/guide/ecosystem-tools.md: its Kyverno and policy-controller policies parse, and ask for the predicate
    type and level names this code writes (no package ships their CRDs' schemas to check them against)."""
    import re

    import yaml

    text = (ROOT / "docs" / "guide" / "ecosystem-tools.md").read_text(encoding="utf-8")
    docs = {d["kind"]: d for block in re.findall(r"```yaml\n(.*?)```", text, re.S) for d in yaml.safe_load_all(block)}
    rule = docs["ClusterPolicy"]["spec"]["rules"][0]["verifyImages"][0]["attestations"][0]
    assert rule["type"] == predicates.VSA
    conditions = rule["conditions"][0]["all"]
    assert {"key": "{{ verifiedLevels }}", "operator": "AnyIn", "value": [predicates.GPU_VERIFIED]} in conditions
    assert rule["attestors"][0]["entries"][0]["keys"]["rekor"] == {"ignoreTlog": True}
    authority = docs["ClusterImagePolicy"]["spec"]["authorities"][0]
    assert authority["attestations"][0]["predicateType"] == predicates.VSA and "ctlog" not in authority
    assert predicates.GPU_VERIFIED in authority["attestations"][0]["policy"]["data"]
    assert predicates.model_level("NVIDIA H100 80GB HBM3") in text
