"""The publishing rule on the real engine and registry: a public tag names only a digest that has a pass
record of this suite beside it. `--no-smoke` stages key tags only; a key tag that names another image is
never published as tested."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from imagebuilder.evidence import attestation, passes, predicates, provenance, referrers, sboms, sigstore
from imagebuilder.evidence.passes import RegistryPasses
from imagebuilder.evidence.signing import Signer
from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.registry import Registry

from .conftest import ROOT, Chain, CliRun, cpu_matrix, public_key, registry_tags, report, salted_layers, session_trust


def chain_layers_matrix(tmp_path: Path, repository: str, wheelhouse: Path, cpu_chain: Chain,
                        engine: DockerEngine) -> Path:
    """The session chain's layers (same keys: keys name no repository) published into this test's own
    repository: every image is on the engine (pulled back if a test removed it) and the leaf's pass is in
    the session's local mirror, so nothing builds and no suite runs."""
    for layer in ("base", "business", "task"):
        cpu_chain.image(engine, layer)
    return cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, business, task]",
                      extra=f"layers_path: [{cpu_chain.folder / 'layers'}]\n")


def test_no_smoke_stages_key_tags_and_applies_no_public_tag(
        engine: DockerEngine, registry: str, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    salted_layers(tmp_path / "layers", ["base"], f"itest {repository}")
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base]", extra="layers_path: [layers]\n")
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-smoke")
    assert run.code == 0, run.text[-3000:]
    (node,) = report(tmp_path / "r")["nodes"]
    assert node["smoke"] == "skipped" and node["publish"] == "staged" and node["tags"] == []
    assert node["digest"].startswith("sha256:") and node["pass_record"] is None
    # Straight to the registry: the key tag (staging, never public) with its build record, and nothing else.
    every = registry_tags(registry, f"itest/{repository}", cache=True)
    assert [t for t in every if not attestation.is_evidence_tag(t)] == [f"cache-{node['key'][:12]}"]
    assert provenance.tag(node["digest"]) in every
    assert Registry.for_host(registry).manifest_digest(f"itest/{repository}", f"cache-{node['key'][:12]}") \
        == node["digest"]
    assert "staged" in run.out and "no public tag" in run.out


def test_a_different_image_under_the_key_tag_is_replaced_by_the_tested_one(
        engine: DockerEngine, registry: str, wheelhouse: Path, base_image: str, cpu_chain: Chain, repository: str,
        tmp_path: Path, cli: Callable[..., CliRun]) -> None:
    matrix = chain_layers_matrix(tmp_path, repository, wheelhouse, cpu_chain, engine)
    nodes = cpu_chain.nodes
    repo = f"itest/{repository}"
    key_tag = f"{registry}/{repo}:cache-{nodes['task']['key'][:12]}"
    # Another image (Debian's, small and part of no node) pre-seeded under the task's key tag: what an
    # untested run, a rebuild or another day's pip leaves behind.
    engine.tag(base_image, key_tag)
    seeded = engine.push(key_tag)
    engine.untag(key_tag)
    assert seeded != nodes["task"]["digest"]

    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"))
    assert run.code == 0, run.text[-3000:]
    task = {n["layer"]: n for n in report(tmp_path / "r")["nodes"]}["task"]
    assert task["smoke"] == "cached" and "(local mirror" in run.out  # the chain's pass, by image ID
    assert f"names {seeded}" in run.out and nodes["task"]["image"] in run.out  # both digests are said
    reg = Registry.for_host(registry)
    tested = reg.manifest_digest(repo, f"cache-{nodes['task']['key'][:12]}")
    assert tested is not None and task["digest"] == tested != seeded
    store = RegistryPasses(reg, session_trust())
    assert store.config_digest(repo, tested) == nodes["task"]["image"]  # the very image that passed
    for tag in registry_tags(registry, repo):  # no public tag names the seeded digest
        assert reg.manifest_digest(repo, tag) != seeded, tag
    assert reg.manifest_digest(repo, "2.13.0-cpu-py3.11-runtime-task") == tested
    assert task["pass_record"].endswith("(written by this run)")
    record = store.read(repo, record_tag(task)).record
    assert record is not None and record.passed and record.manifest == tested
    assert record.config == nodes["task"]["image"] and record.report is not None
    assert passes.tags_for(seeded, registry_tags(registry, repo, cache=True)) == []  # the seeded digest: none


def record_tag(node: dict[str, str]) -> str:
    """The tag of the record a report names: `registry host:port/repo:TAG[ (...)]`."""
    assert node["pass_record"].startswith("registry "), node["pass_record"]
    return node["pass_record"].split(" ")[1].rsplit(":", 1)[1]


def test_the_published_record_says_what_passed_where(registry: str, cpu_chain: Chain) -> None:
    reg = Registry.for_host(registry)
    repo = f"itest/{cpu_chain.repository}"
    every = registry_tags(registry, repo, cache=True)
    for layer, node in cpu_chain.nodes.items():
        assert node["pass_record"].startswith(f"registry {registry}/{repo}:sha256-"), node["pass_record"]
        tag = record_tag(node)
        assert tag in every and passes.tags_for(node["digest"], every) == [tag]
        body, _ = reg.manifest(repo, tag)
        doc = json.loads(body)
        assert doc["subject"]["digest"] == node["digest"] and doc["artifactType"] == passes.ARTIFACT_TYPE
        assert [layer["mediaType"] for layer in doc["layers"]] == ["application/vnd.dsse.envelope.v1+json"]
        record = RegistryPasses(reg, session_trust()).read(repo, tag).record
        assert record is not None and record.passed and record.manifest == node["digest"]
        assert record.config == node["image"] and record.suite == passes.suite_hash()
        assert record.gpu == {"verified": False, "kind": "cpu"} and record.expect["torch"] == "2.13.0"
        if layer == "task":
            assert record.report is not None and record.report["passed"] is True and record.via is None
        else:  # an ancestor passed through the leaf built on it
            assert record.report is None and record.via is not None
            assert record.via["node"].endswith("/task") and record.via["manifest"] == cpu_chain.nodes["task"]["digest"]


def test_what_other_tools_find_beside_each_published_digest(registry: str, cpu_chain: Chain, tmp_path: Path) -> None:
    """On Distribution 2.8 (no referrers API, no OCI-Subject): the fallback index `sha256-<hex>` lists every
    record with its artifact type; Sigstore's own verifier (npm @sigstore/verify, which no one here wrote) checks
    each bundle with the PEM public key and refuses a tampered bundle and a foreign key; securesystemslib checks
    every `.att` layer."""
    reg = Registry.for_host(registry)
    repo = f"itest/{cpu_chain.repository}"
    found = cpu_chain.report["attestations"]
    assert found["layouts"] == "both" and found["registries"][registry] == {
        "oci_subject": False, "referrers_api": False, "tag_deletion": False,
        "referrers": "fallback index (tag sha256-<hex>)"}
    key = public_key(tmp_path / "key.pem")
    foreign = tmp_path / "foreign.pem"
    foreign.write_bytes(Signer.generate().public.pem())
    trusted = session_trust().keys[0]
    sslib = SSlibKey(trusted.fingerprint, "ed25519", "ed25519", {"public": trusted.raw})  # (the keyid we sign with)
    every = registry_tags(registry, repo, cache=True)
    files: list[tuple[Path, str, str]] = []  # each bundle, its image's digest and its predicate type
    for layer, node in cpu_chain.nodes.items():
        digest = node["digest"]
        index, _ = reg.manifest(repo, referrers.index_tag(digest))
        listed = json.loads(index)["manifests"]
        by_digest = {m["digest"]: m for m in listed}
        records = [t for t in every if t.startswith(digest.replace(":", "-") + ".") and not t.endswith(".att")]
        assert {t.rsplit(".", 1)[1].split("-")[0] for t in records} == {"pass", "signed", "sbom", "build"}, records
        for tag in records:  # every record of ours beside the digest is listed, with its artifact type
            entry = by_digest[reg.manifest_digest(repo, tag)]
            assert entry["artifactType"] == json.loads(reg.manifest(repo, tag)[0])["artifactType"], tag
        bundles = [m for m in listed if m["artifactType"] == sigstore.BUNDLE_TYPE]
        kinds = sorted(m["annotations"]["dev.sigstore.bundle.predicateType"] for m in bundles)
        assert kinds == sorted([passes.PREDICATE_TYPE, predicates.TEST_RESULT, predicates.VSA, sboms.PREDICATE_TYPE,
                                provenance.PREDICATE_TYPE])  # (the build record too, for `--type slsaprovenance1`)
        for entry in bundles:
            manifest = json.loads(reg.manifest(repo, entry["digest"])[0])
            path = tmp_path / f"{entry['digest'][7:19]}.json"
            path.write_bytes(reg.blob(repo, manifest["layers"][0]["digest"]))
            files.append((path, digest, entry["annotations"]["dev.sigstore.bundle.predicateType"]))
        att = json.loads(reg.manifest(repo, sigstore.att_tag(digest))[0])
        types = sorted(layer["annotations"]["predicateType"] for layer in att["layers"])
        assert types == kinds
        for one in att["layers"]:
            assert one["mediaType"] == "application/vnd.dsse.envelope.v1+json"
            envelope = json.loads(reg.blob(repo, one["digest"]))
            assert list(Envelope.from_dict(envelope).verify([sslib], 1)) == [trusted.fingerprint], layer
        raw = json.loads(reg.manifest(repo, f"{digest.replace(':', '-')}.sbom")[0])  # other tools' `.sbom`: raw
        assert json.loads(reg.blob(repo, raw["layers"][0]["digest"]))["bomFormat"] == "CycloneDX"
    said = sigstore_verify(key, *(path for path, _, _ in files))  # every bundle, by Sigstore's own verifier
    assert said.returncode == 0, said.stderr
    for statement, (_, digest, predicate_type) in zip(json.loads(said.stdout), files, strict=True):
        assert statement["subject"][0]["digest"] == {"sha256": digest[7:]}
        assert statement["predicateType"] == predicate_type
    path, _, _ = files[0]
    assert sigstore_verify(foreign, path).returncode == 1  # a foreign key: refused
    bundle = json.loads(path.read_text())
    statement = json.loads(said.stdout)[0]
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(
        {**statement, "predicate": {"result": "PASSED"}}).encode()).decode()
    path.write_text(json.dumps(bundle))
    refused = sigstore_verify(key, path)  # a tampered statement: refused
    assert refused.returncode == 1 and "SIGNATURE_ERROR" in refused.stderr, refused.stderr


def sigstore_verify(key: Path, *bundles: Path) -> subprocess.CompletedProcess[str]:
    script = ROOT / "tests" / "sigstore" / "verify.js"
    if not (script.parent / "node_modules").is_dir():
        pytest.fail("npm @sigstore/verify is not installed: run `make sigstore` (.ci/sigstore.sh)")
    return subprocess.run(["node", str(script), str(key), *map(str, bundles)], capture_output=True, text=True,
                          timeout=120)
