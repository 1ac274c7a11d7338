"""Attestations: signed statements about one image, kept in the registry beside it. One rule for every kind of
evidence (pass records, SBOMs): an OCI 1.1 artifact that a plain Distribution registry accepts, with an empty
config, exactly one layer (the DSSE envelope, `application/vnd.dsse.envelope.v1+json`), an `artifactType`
naming the kind, and a `subject` naming the image's manifest, so a registry with the referrers API lists it
under the image. It is tagged `sha256-<image manifest hex>.<kind>`, so it is found from the image's digest with
one manifest HEAD on registries without that API too. What the envelope says counts only once its signature
verifies against a trusted key (`signing.Trust`) and its Statement's subject is the very digest: this module
only stores and finds; the kinds open what they find.

Every artifact with a `subject` is listed where tools look for referrers (`referrers`: the registry's own
referrers API where it answers `OCI-Subject`, else the fallback index at tag `sha256-<hex>`). The tags beside an
image that are evidence, never public tags: our records, the fallback index, cosign's `.att`, `.sig` and `.sbom`."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Protocol

from . import referrers
from .signing import ENVELOPE_TYPE

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
EMPTY_TYPE, EMPTY = "application/vnd.oci.empty.v1+json", b"{}"
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"  # (as buildx's attestations name it)
RECORD_ANNOTATION = referrers.RECORD
BY_DIGEST = "@digest"  # `artifact`'s reference for a manifest pushed by its own digest, untagged (a bundle's)
_TAG = re.compile(r"sha256-[0-9a-f]{64}"
                  r"(?:\.(?:(?:pass|untested|gpu[0-9a-f]{8})-[0-9a-f]{16}(?:-[0-9]{8}T[0-9]{6}Z)?"
                  r"|signed-sbom|sbom|att|sig|build))?")


class Store(referrers.Store, Protocol):
    """What attestations need of a registry (the real `registry.Registry`, or a fake in unit tests)."""

    def put_manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> str: ...

    def blob(self, repo: str, digest: str) -> bytes: ...

    def put_blob(self, repo: str, data: bytes) -> str: ...


class NotAttestation(ValueError):
    """What is under an attestation's tag is not one of this kind (unsigned, another kind, another format)."""


def tag(manifest: str, kind: str) -> str:
    """The tag of the attestation of `kind` beside the image `manifest` (a digest)."""
    algo, _, hexdigest = manifest.partition(":")
    return f"{algo}-{hexdigest}.{kind}"


def is_evidence_tag(name: str) -> bool:
    """Whether a tag is one of imagebuilder's attestations (a pass record of any verdict, an SBOM, a build
    record): never a
    public tag, never promoted, never listed as one."""
    return _TAG.fullmatch(name) is not None


def put(registry: Store, repo: str, name: str, envelope: Mapping[str, Any], *, artifact_type: str, subject: str,
        predicate_type: str, annotations: Mapping[str, str], probe: referrers.Probe | None = None) -> str:
    """Store a signed envelope about the image `repo@subject` under the tag `name`; returns the artifact's
    manifest digest."""
    data = json.dumps(envelope, sort_keys=True).encode()
    return artifact(registry, repo, name, data, layer_type=ENVELOPE_TYPE, artifact_type=artifact_type, subject=subject,
                    annotations={RECORD_ANNOTATION: name, **annotations},
                    layer_annotations={PREDICATE_ANNOTATION: predicate_type}, probe=probe)


def artifact(registry: Store, repo: str, reference: str, data: bytes, *, layer_type: str, artifact_type: str,
             subject: str, annotations: Mapping[str, str], layer_annotations: Mapping[str, str] | None = None,
             probe: referrers.Probe | None = None) -> str:
    """An OCI 1.1 artifact of one layer (`data`) about the image `repo@subject`, pushed under `reference` (a tag, or
    its own digest: `BY_DIGEST`) and listed among the image's referrers; returns its manifest digest."""
    layer = registry.put_blob(repo, data)
    empty = registry.put_blob(repo, EMPTY)
    subject_body, subject_type = registry.manifest(repo, subject)
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": EMPTY_TYPE, "digest": empty, "size": len(EMPTY)},
        "layers": [{"mediaType": layer_type, "digest": layer, "size": len(data),
                    **({"annotations": dict(layer_annotations)} if layer_annotations else {})}],
        "subject": {"mediaType": subject_type, "digest": subject, "size": len(subject_body)},
        "annotations": dict(annotations),
    }
    body = json.dumps(doc, sort_keys=True).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    pushed, answered = registry.push_manifest(repo, digest if reference == BY_DIGEST else reference, body,
                                              OCI_MANIFEST)
    lists = probe.pushed(registry, repo, subject, answered) if probe is not None else answered == subject
    if not lists:  # the registry did not list it under its subject: the fallback index is ours to keep
        referrers.add(registry, repo, subject, referrers.descriptor(body, pushed or digest, OCI_MANIFEST))
    return pushed or digest


def read(registry: Store, repo: str, name: str, artifact_type: str) -> tuple[str, Any] | None:
    """The image digest an attestation under the tag `name` names as its subject, and its envelope (not yet
    opened); None when there is no such tag; `NotAttestation` when what is there is not of this kind."""
    if registry.manifest_digest(repo, name) is None:
        return None
    body, _ = registry.manifest(repo, name)
    try:
        doc = json.loads(body)
        subject = str(doc["subject"]["digest"])
        layers = [d for d in doc.get("layers") or [] if d.get("mediaType") == ENVELOPE_TYPE]
        if doc.get("artifactType") != artifact_type or len(layers) != 1:
            raise NotAttestation(f"{name} is not a signed {artifact_type} (unsigned, or of an older format)")
        return subject, json.loads(registry.blob(repo, str(layers[0]["digest"])))
    except NotAttestation:
        raise
    except (ValueError, KeyError, TypeError, AttributeError):
        raise NotAttestation(f"{name} is not a {artifact_type}") from None
