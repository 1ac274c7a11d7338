"""`sbom`: the signed CycloneDX SBOM beside an image in its registry, verified (signed by a trusted key, about
this very digest). A tag is looked up to its digest first."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import InputError
from ..evidence.sboms import RegistrySboms, sbom_tag
from ..evidence.signing import Trust
from ..ports.reference import Reference
from ..ports.registry import Registry


def digest_of(registry: Registry, ref: Reference) -> str:
    """The digest `ref` names: its own, else the one its tag names now in `registry` (an input error when there
    is no such image)."""
    if ref.reference.startswith("sha256:"):
        return ref.reference
    digest = registry.manifest_digest(ref.repository, ref.reference)
    if digest is None:
        raise InputError(f"{ref}: no such image in {ref.host}/{ref.repository}")
    return digest


@dataclass(frozen=True)
class Sbom:
    """The SBOM beside one digest (`text`, JSON ending in a newline, and `said`: its size and signer), or why
    there is none that counts (`failure`)."""

    where: str  # host/repository@digest
    text: str = ""
    said: str = ""
    failure: str | None = None


def find(registry: Registry, trust: Trust, ref: Reference, digest: str) -> Sbom:
    """The SBOM beside `digest` in `ref`'s repository, when one signed by `trust` is about that very digest."""
    found = RegistrySboms(registry, trust).lookup(ref.repository, digest)
    where = f"{ref.host}/{ref.repository}@{digest}"
    if found.sbom is None:
        return Sbom(where, failure=f"{where}: " + (found.rejected or f"no SBOM beside it (no {sbom_tag(digest)}); "
                                                   "`imagebuilder publish` writes one"))
    components = len(found.sbom.document.get("components") or [])
    return Sbom(where, json.dumps(found.sbom.document, indent=1, sort_keys=True) + "\n",
                f"{components} components, signed by {found.sbom.signer()}")
