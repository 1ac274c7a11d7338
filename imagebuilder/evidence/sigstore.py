"""Sigstore layouts: our signed statements where cosign, Kyverno and the policy-controller look for attestations,
beside our native records (which stay the source of truth: `passes`, `sboms`). Same envelope, same key; checked
with the PEM public key and no transparency log.

- `bundle`: a Sigstore bundle v0.3 (`BUNDLE_TYPE`: the DSSE envelope, `verificationMaterial.publicKey.hint`, no
  tlog entries) as an OCI 1.1 referrer of the image, pushed by its own digest and listed in the referrers (cosign's
  BUNDLE_SPEC.md; what cosign v3 reads first).
- `att`: cosign's legacy tag `sha256-<hex>.att`: one manifest whose every layer is a DSSE envelope
  (`application/vnd.dsse.envelope.v1+json`, annotation `predicateType`), shared by every attestation of the
  image (ours and other tools'): read, merged, written and read back (`referrers.update`), so concurrent writers
  lose none (what cosign v2, Kyverno and the policy-controller read).

`Layouts.kinds` is `both` (the default: every client finds them), `bundle`, `att` or `off` (matrix key
`attestations`, CLI `--attestations`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import serialization

from . import attestation, referrers
from .signing import ENVELOPE_TYPE, PublicKey, Rejected, Trust, predicate_of

BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"  # (empty on attestations, as cosign writes them)
DEFAULT = "both"
ZERO_TIME = "0001-01-01T00:00:00Z"  # (cosign's config dates: the manifest's digest depends on its layers only)


def hint(public: PublicKey) -> str:
    """`verificationMaterial.publicKey.hint`: the standard base64 of the SHA-256 of the key's DER
    SubjectPublicKeyInfo (as cosign writes it); a verifier uses it to pick a key, never to trust one."""
    der = public.key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def bundle(envelope: Mapping[str, Any], public: PublicKey) -> dict[str, Any]:
    """A Sigstore bundle v0.3 of one signed envelope, verifiable with the public key alone."""
    return {"mediaType": BUNDLE_TYPE,
            "verificationMaterial": {"publicKey": {"hint": hint(public)}, "tlogEntries": []},
            "dsseEnvelope": {"payload": envelope["payload"], "payloadType": envelope["payloadType"],
                             "signatures": [{"sig": s["sig"], "keyid": s.get("keyid", "")}
                                            for s in envelope["signatures"]]}}


def att_tag(subject: str) -> str:
    return attestation.tag(subject, "att")


def att_layer(data: bytes, digest: str, predicate_type: str, record: str) -> dict[str, Any]:
    return {"mediaType": ENVELOPE_TYPE, "digest": digest, "size": len(data),
            "annotations": {SIGNATURE_ANNOTATION: "", "predicateType": predicate_type, referrers.RECORD: record}}


def att_merged(current: Mapping[str, Any] | None, layer: Mapping[str, Any], config: Mapping[str, Any]) -> \
        dict[str, Any]:
    """The `.att` manifest with `layer` added: every other layer kept (another tool's too); only an earlier layer of
    ours for the same record and predicate is replaced. `config` is its config descriptor (`att_config`)."""
    def form(one: Mapping[str, Any]) -> tuple[str, str] | None:
        notes = one.get("annotations") or {}
        return (str(notes[referrers.RECORD]), str(notes.get("predicateType"))) \
            if isinstance(notes, Mapping) and notes.get(referrers.RECORD) else None
    layers = [dict(one) for one in (current or {}).get("layers") or [] if isinstance(one, Mapping)
              and one.get("digest") != layer["digest"] and (form(one) is None or form(one) != form(layer))]
    return {"schemaVersion": 2, "mediaType": attestation.OCI_MANIFEST, "config": dict(config),
            "layers": [*layers, dict(layer)]}


def att_config(layers: list[Mapping[str, Any]]) -> bytes:
    """The config of a `.att` manifest, as cosign writes it: an image config whose diff_ids are its layers."""
    doc = {"architecture": "", "created": ZERO_TIME, "history": [{"created": ZERO_TIME} for _ in layers],
           "os": "", "rootfs": {"type": "layers", "diff_ids": [str(one["digest"]) for one in layers]}, "config": {}}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@dataclass
class Layouts:
    """Where this run's statements go besides our native records, and what each registry was found to do."""

    kinds: str = DEFAULT
    probe: referrers.Probe = field(default_factory=referrers.Probe)

    def write(self, registry: attestation.Store, repo: str, subject: str, envelope: Mapping[str, Any], *,
              public: PublicKey, predicate_type: str, record: str, created: str) -> list[str]:
        """Store one signed statement about `repo@subject` in the chosen layouts; what was written (for messages)."""
        written = []
        if self.kinds in ("both", "bundle"):
            data = json.dumps(bundle(envelope, public), sort_keys=True).encode()
            digest = attestation.artifact(
                registry, repo, attestation.BY_DIGEST, data, layer_type=BUNDLE_TYPE, artifact_type=BUNDLE_TYPE,
                subject=subject, probe=self.probe,
                annotations={"dev.sigstore.bundle.content": "dsse-envelope",
                             "dev.sigstore.bundle.predicateType": predicate_type,
                             "org.opencontainers.image.created": created, referrers.RECORD: record},
                layer_annotations={"org.opencontainers.image.title":
                                   f"sha256-{hashlib.sha256(data).hexdigest()}.sigstore.json"})
            written.append(f"bundle {digest[:19]}")
        if self.kinds in ("both", "att"):
            data = json.dumps(envelope, sort_keys=True).encode()
            layer = att_layer(data, registry.put_blob(repo, data), predicate_type, record)

            def change(current: dict[str, Any] | None) -> dict[str, Any]:
                draft = att_merged(current, layer, {})
                config = att_config(draft["layers"])
                draft["config"] = {"mediaType": CONFIG_TYPE, "digest": registry.put_blob(repo, config),
                                   "size": len(config)}
                return draft
            referrers.update(registry, repo, att_tag(subject), attestation.OCI_MANIFEST, change, "layers")
            written.append(att_tag(subject))
        return written

    def found(self) -> dict[str, Any]:
        """For report.json: the layouts written, and what each registry does with referrers."""
        return {"layouts": self.kinds, "registries": self.probe.report()}


@dataclass(frozen=True)
class Found:
    """A statement found in a layout that counts (signed by a trusted key, about this digest)."""

    predicate: Mapping[str, Any]
    keyid: str
    where: str


def read(registry: attestation.Store, repo: str, subject: str, predicate_type: str, trust: Trust,
         role: str | None = None) -> tuple[list[Found], list[str]]:
    """The statements of `predicate_type` about `repo@subject` in either layout (bundle referrers, the `.att` tag)
    that count (signed by a trusted key that holds `role`), and why each other one does not: anything a pusher put
    there that is not what it claims (not JSON, no layer, another shape) is named, never raised."""
    envelopes: list[tuple[Any, str]] = []
    rejected: list[str] = []

    def bundled(digest: str) -> Any:
        doc = json.loads(registry.manifest(repo, digest)[0])
        return json.loads(registry.blob(repo, str(doc["layers"][0]["digest"])))["dsseEnvelope"]

    def held(where: str, read_one: Callable[[str], Any], digest: str) -> None:
        try:
            envelopes.append((read_one(digest), where))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            rejected.append(f"{where}: not a readable {predicate_type} statement (not JSON, or not the layout it "
                            "claims)")

    for entry in referrers.listed(registry, repo, subject):
        notes = entry.get("annotations") or {}
        if isinstance(notes, Mapping) and entry.get("artifactType") == BUNDLE_TYPE and \
                notes.get("dev.sigstore.bundle.predicateType") == predicate_type:
            held(f"bundle {str(entry.get('digest'))[:19]}", bundled, str(entry.get("digest")))
    if registry.manifest_digest(repo, att_tag(subject)) is not None:
        try:
            layers = json.loads(registry.manifest(repo, att_tag(subject))[0]).get("layers") or []
            layers = layers if isinstance(layers, list) else []
        except (ValueError, AttributeError):
            layers = []
            rejected.append(f"{att_tag(subject)}: not an OCI manifest")
        for layer in layers:
            notes = layer.get("annotations") if isinstance(layer, Mapping) else None
            if isinstance(notes, Mapping) and notes.get("predicateType") == predicate_type:
                held(att_tag(subject), lambda digest: json.loads(registry.blob(repo, digest)), str(layer.get("digest")))
    found = []
    for envelope, where in envelopes:
        try:
            payload, key = trust.open(envelope)
            if role is not None:
                key.allow(role, f"a {predicate_type} statement")
            found.append(Found(predicate_of(payload, subject, predicate_type), key.keyid, where))
        except (Rejected, ValueError, TypeError, KeyError) as exc:
            rejected.append(f"{where}: {exc}")
    return found, rejected
