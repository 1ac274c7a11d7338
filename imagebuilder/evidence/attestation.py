"""Attestations: signed statements about one image, kept in the registry beside it. One rule for every kind of
evidence (pass records, SBOMs): an OCI 1.1 artifact that a plain Distribution registry accepts, with an empty
config, exactly one layer (the DSSE envelope, `application/vnd.dsse.envelope.v1+json`), an `artifactType`
naming the kind, and a `subject` naming the image's manifest, so a registry with the referrers API lists it
under the image. It is tagged `sha256-<image manifest hex>.<kind>`, so it is found from the image's digest with
one manifest HEAD on registries without that API too. What the envelope says counts only once its signature
verifies against a trusted key (`signing.Trust`) and its Statement's subject is the very digest: this module
only stores and finds; the kinds open what they find."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Protocol

from .signing import ENVELOPE_TYPE

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
EMPTY_TYPE, EMPTY = "application/vnd.oci.empty.v1+json", b"{}"
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"  # (as buildx's attestations name it)
_TAG = re.compile(r"sha256-[0-9a-f]{64}\.(?:(?:pass|untested|gpu[0-9a-f]{8})-[0-9a-f]{16}(?:-[0-9]{8}T[0-9]{6}Z)?"
                  r"|sbom|build)")


class Store(Protocol):
    """What attestations need of a registry (the real `registry.Registry`, or a fake in unit tests)."""

    def manifest_digest(self, repo: str, reference: str) -> str | None: ...

    def manifest(self, repo: str, reference: str) -> tuple[bytes, str]: ...

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
        predicate_type: str, annotations: Mapping[str, str]) -> str:
    """Store a signed envelope about the image `repo@subject` under the tag `name`; returns the artifact's
    manifest digest."""
    data = json.dumps(envelope, sort_keys=True).encode()
    layer = registry.put_blob(repo, data)
    empty = registry.put_blob(repo, EMPTY)
    subject_body, subject_type = registry.manifest(repo, subject)
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": EMPTY_TYPE, "digest": empty, "size": len(EMPTY)},
        "layers": [{"mediaType": ENVELOPE_TYPE, "digest": layer, "size": len(data),
                    "annotations": {PREDICATE_ANNOTATION: predicate_type}}],
        "subject": {"mediaType": subject_type, "digest": subject, "size": len(subject_body)},
        "annotations": dict(annotations),
    }
    return registry.put_manifest(repo, name, json.dumps(doc, sort_keys=True).encode(), OCI_MANIFEST)


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
