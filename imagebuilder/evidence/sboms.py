"""SBOM attestations: the CycloneDX document of one image, named by its manifest digest, signed like a pass record
and kept beside the image (`attestation`: tag `sha256-<hex>.signed-sbom`, `artifactType`
`application/vnd.cyclonedx+json`). The tag `sha256-<hex>.sbom` is other tools' (cosign's, NVIDIA's): there a raw
CycloneDX document is expected, and `ecosystem` writes one; nothing under it counts here.

The document is the predicate of an in-toto Statement of predicate type `https://cyclonedx.org/bom` (the type
cosign and in-toto give CycloneDX attestations) whose subject is the image's manifest digest, in a DSSE envelope.
It counts only when its signature verifies against a trusted key (the same `Trust` as pass records: whoever may
not write a pass may not write an SBOM either), its subject is this very digest, and the document itself names
that digest as the image it describes (`metadata.component.version`). Anything else under the tag is named, never
counted. `LocalLayers` keeps what was read from each layer (by the layer's diff_id) in the cache folder, signed the
same way: a layer is read once per machine, whatever image it is part of.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import EngineError
from . import attestation, referrers
from .signing import PUBLISH, Rejected, Signer, Trust, key_label, predicate_of, statement

ARTIFACT_TYPE = "application/vnd.cyclonedx+json"
PREDICATE_TYPE = "https://cyclonedx.org/bom"
LAYER_PREDICATE = "https://imagebuilder.dev/layer-contents/v1"
KIND = "signed-sbom"  # (not `sbom`: that tag holds a raw document for other tools)


def sbom_tag(manifest: str) -> str:
    return attestation.tag(manifest, KIND)


@dataclass(frozen=True)
class SignedSbom:
    """An SBOM that counts: signed by a trusted key, about this digest."""

    document: Mapping[str, Any]
    keyid: str
    source: str

    def signer(self) -> str:
        return key_label(self.keyid, self.source)


@dataclass(frozen=True)
class Found:
    """What a registry holds beside one image: an SBOM that counts, or why the one there does not (both None:
    there is none)."""

    sbom: SignedSbom | None = None
    rejected: str | None = None


def described(document: Mapping[str, Any]) -> str | None:
    """The image digest a CycloneDX document says it describes (`metadata.component.version`)."""
    component = (document.get("metadata") or {}).get("component") if isinstance(document, Mapping) else None
    version = component.get("version") if isinstance(component, Mapping) else None
    return str(version) if isinstance(version, str) else None


def opened(trust: Trust, envelope: Any, subject: str) -> SignedSbom:
    """The SBOM inside an envelope about the image `subject`, signed by a trusted key; `Rejected` saying why not."""
    payload, key = trust.open(envelope)
    key.allow(PUBLISH, "an SBOM")
    document = predicate_of(payload, subject, PREDICATE_TYPE)
    if described(document) != subject:
        raise Rejected(f"its document describes {described(document) or 'no image'}, not {subject}")
    return SignedSbom(document, key.keyid, key.source)


class Also(Protocol):
    """What is written beside each signed SBOM once it is stored (`ecosystem.Ecosystem`)."""

    @property
    def probe(self) -> referrers.Probe: ...

    def sbom(self, registry: attestation.Store, repo: str, manifest: str, envelope: Mapping[str, Any],
             document: Mapping[str, Any], tag: str) -> None: ...


@dataclass
class RegistrySboms:
    """SBOM attestations in one registry; only one whose signature verifies against `trust` counts; `signer`
    signs what this run writes."""

    registry: attestation.Store
    trust: Trust
    signer: Signer | None = None
    also: Also | None = None  # writes the ecosystem's copies (`ecosystem.Ecosystem`)

    def lookup(self, repo: str, manifest: str) -> Found:
        tag = sbom_tag(manifest)
        try:
            stored = attestation.read(self.registry, repo, tag, ARTIFACT_TYPE)
            if stored is None:
                return Found()
            subject, envelope = stored
            if subject != manifest:
                return Found(rejected=f"the SBOM {tag} is attached to another image ({subject})")
            return Found(opened(self.trust, envelope, manifest))
        except attestation.NotAttestation as exc:
            return Found(rejected=str(exc))
        except Rejected as exc:
            return Found(rejected=f"the SBOM {tag} does not count: {exc}")

    def put(self, repo: str, manifest: str, document: Mapping[str, Any], *, node: str) -> str:
        """Sign the document and store it beside `repo@manifest`; read back, it must count. Returns its tag."""
        if self.signer is None:
            raise EngineError("no signing key: this run cannot write SBOMs (keys are named with --trust-key and "
                              "IMAGEBUILDER_SIGNING_KEY is not set)")
        tag = sbom_tag(manifest)
        component = (document.get("metadata") or {}).get("component") or {}
        envelope = self.signer.sign(statement(str(component.get("name") or repo), manifest, PREDICATE_TYPE, document))
        attestation.put(self.registry, repo, tag, envelope, artifact_type=ARTIFACT_TYPE, subject=manifest,
                        predicate_type=PREDICATE_TYPE, probe=self.also.probe if self.also else None,
                        annotations={"io.imagebuilder.node": node, "io.imagebuilder.signer": self.signer.public.keyid,
                                     "org.opencontainers.image.created": str((document.get("metadata") or {})
                                                                             .get("timestamp") or "")})
        if self.lookup(repo, manifest).sbom is None:
            raise EngineError(f"the SBOM {repo}:{tag} did not read back as signed by this run")
        if self.also is not None:
            self.also.sbom(self.registry, repo, manifest, envelope, document, tag)
        return tag


@dataclass(frozen=True)
class LocalLayers:
    """What was read from each layer, by its diff_id, in the cache folder: a signed envelope per layer (the folder
    is no source of trust: one that does not verify is read again)."""

    folder: Path
    trust: Trust
    signer: Signer | None = None

    def _path(self, diff_id: str) -> Path:
        return self.folder / "layers" / f"{diff_id.replace(':', '-')}.json"

    def get(self, diff_id: str) -> dict[str, Any] | None:
        try:
            payload, _ = self.trust.open(json.loads(self._path(diff_id).read_text(encoding="utf-8")))
            return predicate_of(payload, diff_id, LAYER_PREDICATE)
        except (OSError, ValueError, Rejected):
            return None

    def put(self, diff_id: str, contents: Mapping[str, Any]) -> None:
        if self.signer is None:
            return
        path = self._path(diff_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(self.signer.sign(statement("layer", diff_id, LAYER_PREDICATE, contents))),
                       encoding="utf-8")
        tmp.replace(path)
