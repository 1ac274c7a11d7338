"""Everything beside one digest, read once: the one reader that verify, publish, promote and `check` share. Every
kind of evidence is listed here (`KINDS`), read from the registry under the digest's evidence tags and in the
Sigstore layouts, and opened with one keyring (`signing.Trust`, whose keys carry their roles): what counts is kept
with who signed it, what does not is kept with why. Nothing here decides; `ruling.judge` does, from a `Beside`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import EngineError
from . import passes, predicates, sigstore
from .passes import Lookup, RecordRegistry, RegistryPasses
from .provenance import RegistryBuilds, Vouched
from .sboms import Found as SbomFound
from .sboms import RegistrySboms
from .signing import PUBLISH, Trust

KINDS = {  # each kind of evidence beside a digest: where it is, and what it says
    "pass": "a pass record, `sha256-<hex>.pass-<spec16>`: the suite of one spec passed in this image",
    "untested": "an untested record, `sha256-<hex>.untested-<spec16>`: published without a pass (--allow-untested)",
    "verdict": "a GPU model's verdict, `sha256-<hex>.gpu<model8>-<spec16>-<time>`: passed or failed on that model",
    "build": "a build record, `sha256-<hex>.build`: SLSA provenance naming the node's key, config and parent",
    "sbom": "a signed SBOM, `sha256-<hex>.signed-sbom`: the CycloneDX document of this digest",
    "vsa": "a SLSA VSA in the Sigstore layouts (bundle referrers, `.att`): a verdict for other tools",
}


@dataclass(frozen=True)
class Beside:
    """What one digest has beside it, opened with one keyring: each record tag and what reading it gave (counted,
    or why not), the build record that counts (or why none does), the SBOM, and the VSAs."""

    image: str  # host/repo@digest, as messages name it
    digest: str
    config: str | None  # the image's config digest (its image ID); None: not a single-platform image manifest
    records: tuple[tuple[str, Lookup], ...] = ()  # every pass, untested and verdict tag beside it
    build: Vouched | None = None
    build_why: str = "not read"  # why no build record counts ("" when one does)
    sbom: SbomFound = field(default_factory=SbomFound)
    vsas: tuple[sigstore.Found, ...] = ()
    unread: tuple[str, ...] = ()  # what was beside it and could not be opened (other than records), and why


def read(registry: RecordRegistry, repo: str, digest: str, trust: Trust, *, tags: list[str] | None = None,
         records: bool = True, sbom: bool = False, vsa: bool = False) -> Beside:
    """Read what is beside `repo@digest`: its config and build record always; every record tag unless `records`
    is False; the SBOM and the VSAs when asked (they cost more reads). `tags`: the repository's tags, when the
    caller has them."""
    image = f"{registry.host}/{repo}@{digest}"
    store = RegistryPasses(registry, trust)
    config = store.config_digest(repo, digest)
    names = passes.tags_for(digest, registry.tags(repo) if tags is None else tags) if records else []
    held = tuple((name, store.read(repo, name)) for name in names)
    vouched, why = RegistryBuilds(registry, trust).vouched(repo, digest)
    found_sbom = RegistrySboms(registry, trust).lookup(repo, digest) if sbom else SbomFound()
    vsas: list[sigstore.Found] = []
    unread: list[str] = []
    if vsa:
        try:
            got, rejected = sigstore.read(registry, repo, digest, predicates.VSA, trust, role=PUBLISH)
        except EngineError as exc:
            got, rejected = [], [f"the VSAs could not be read ({exc.message})"]
        vsas, unread = got, rejected
    return Beside(image, digest, config, held, vouched, why, found_sbom, tuple(vsas), tuple(unread))
