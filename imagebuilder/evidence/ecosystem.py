"""The ecosystem's copies of our evidence: what is written beside each native record so that standard tools read
it (`sigstore` layouts, `predicates`), and the raw SBOM where cosign and trivy expect one. Called by the
stores once their native record is written (`passes.RegistryPasses.also`, `sboms.RegistrySboms.also`) and by
publish once per published digest (`vsa`); every statement is signed by the run's signer, like the record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import attestation, predicates, referrers
from .passes import PREDICATE_TYPE as PASS_PREDICATE
from .passes import PassRecord, now
from .sboms import ARTIFACT_TYPE as CYCLONEDX
from .sboms import PREDICATE_TYPE as SBOM_PREDICATE
from .signing import Signer, statement
from .sigstore import Layouts

RAW_SBOM_KIND = "sbom"  # `sha256-<hex>.sbom`: the raw CycloneDX document (cosign's and NVIDIA's convention)


def raw_sbom_tag(manifest: str) -> str:
    return attestation.tag(manifest, RAW_SBOM_KIND)


@dataclass(frozen=True)
class Ecosystem:
    """Writes the ecosystem's copies of one run's evidence, in the layouts the run chose (none when they are
    `off`), each statement signed by `signer`, the run's own (`RunContext.ecosystem`: there is none without
    one). It only writes: nothing here reads evidence back."""

    layouts: Layouts
    signer: Signer

    @property
    def probe(self) -> referrers.Probe:
        return self.layouts.probe

    def _write(self, registry: attestation.Store, repo: str, manifest: str, name: str, predicate_type: str,
               predicate: Mapping[str, Any], record: str, created: str, envelope: Mapping[str, Any] | None = None
               ) -> None:
        if self.layouts.kinds == "off":
            return
        signed = envelope or self.signer.sign(statement(name, manifest, predicate_type, predicate))
        self.layouts.write(registry, repo, manifest, signed, public=self.signer.public, predicate_type=predicate_type,
                           record=record, created=created)

    def record(self, registry: attestation.Store, repo: str, record: PassRecord, envelope: Mapping[str, Any],
               tag: str) -> None:
        """A pass record (or a GPU model's verdict) just written under `tag`: the record itself and its test-result
        statement, in the layouts."""
        assert record.manifest is not None
        name, created = record.repository or repo, record.date or now()
        self._write(registry, repo, record.manifest, name, PASS_PREDICATE, {}, tag, created, envelope)
        self._write(registry, repo, record.manifest, name, predicates.TEST_RESULT, predicates.test_result(record), tag,
                    created)

    def sbom(self, registry: attestation.Store, repo: str, manifest: str, envelope: Mapping[str, Any],
             document: Mapping[str, Any], tag: str) -> None:
        """An SBOM just signed under `tag`: the signed statement in the layouts, and the raw document at
        `sha256-<hex>.sbom` (unsigned: other tools' convention; never read as evidence here)."""
        created = str((document.get("metadata") or {}).get("timestamp") or now())
        self._write(registry, repo, manifest, repo, SBOM_PREDICATE, {}, tag, created, envelope)
        attestation.artifact(registry, repo, raw_sbom_tag(manifest), json.dumps(document, sort_keys=True).encode(),
                             layer_type=CYCLONEDX, artifact_type=CYCLONEDX, subject=manifest, probe=self.layouts.probe,
                             annotations={attestation.RECORD_ANNOTATION: raw_sbom_tag(manifest),
                                          "org.opencontainers.image.created": created})

    def vsa(self, registry: attestation.Store, repo: str, resource: str, manifest: str, spec: str,
            records: Iterable[tuple[str, str, PassRecord]], *, admitted: bool) -> dict[str, Any]:
        """The VSA of a published digest: `admitted` as the judge ruled (`ruling.vsa_result`), from the trusted
        passes it counted ((tag, artifact digest, record)), signed into the layouts; returns the predicate."""
        listed = list(records)
        predicate = predicates.vsa(resource, manifest, spec, [r for _, _, r in listed],
                                   [(f"oci://{resource}:{tag}", digest) for tag, digest, _ in listed], now(),
                                   admitted=admitted)
        self._write(registry, repo, manifest, resource, predicates.VSA, predicate, attestation.tag(manifest, "vsa"),
                    str(predicate["timeVerified"]))
        return predicate
