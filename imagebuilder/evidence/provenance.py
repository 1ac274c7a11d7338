"""Build provenance: what a build step vouches for when it pushes an image under a key tag.

A key tag (`cache-<key12>`) is a name anyone with push rights can move; it says nothing by itself. So every image
`stage` (or `build`) pushes under a key tag gets a signed statement beside its digest: an in-toto Statement whose
predicate is SLSA provenance v1 (`https://slsa.dev/provenance/v1`), subject the image's manifest digest, with the
node's key, its inputs and the parent image it was built FROM (by image ID, the parent's config digest) as resolved
dependencies. It is stored like every other attestation (`attestation`: tag `sha256-<hex>.build`). A run reuses an
image a key tag names, without building it, only when such a record signed by a trusted build key
(`signing.Keys.build_trust`) says it is this key's image, this very image (its config digest), and built on the
image this run uses for its parent; otherwise the node is built again and the run says why. The record is also
written where other tools look (`sigstore.Layouts`: a bundle referrer and a `.att` layer), so `cosign
verify-attestation --type slsaprovenance1 --key build.pub` finds it.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..errors import EngineError
from . import attestation
from .signing import BUILD, UNTRUSTED, Rejected, Signer, Trust, key_label, predicate_of, statement
from .sigstore import Layouts

ARTIFACT_TYPE = "application/vnd.imagebuilder.build.v1+json"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://imagebuilder.dev/build/v1"
KIND = "build"


def tag(manifest: str) -> str:
    return attestation.tag(manifest, KIND)


def _digest(value: str) -> dict[str, str]:
    algo, _, hexdigest = value.partition(":")
    return {algo: hexdigest} if hexdigest else {"sha256": value}


@dataclass(frozen=True)
class Build:
    """One build: the node, its key, the image made (config digest) and the image it was built FROM."""

    node: str
    key: str
    config: str  # sha256:… the image built (its image ID)
    parent: str  # sha256:… the image it was built FROM (its image ID)
    parent_name: str  # the base image's name, or the parent node's id
    inputs: Mapping[str, str] = field(default_factory=dict)
    date: str = ""

    def predicate(self, builder: str) -> dict[str, Any]:
        """SLSA provenance v1: the key and inputs as parameters; the parent image and the key as resolved
        dependencies; the image's config as a byproduct."""
        return {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"node": self.node, "key": self.key, "inputs": dict(self.inputs)},
                "internalParameters": {"tool": f"imagebuilder {__version__}"},
                "resolvedDependencies": [
                    {"name": "parent", "uri": self.parent_name, "digest": _digest(self.parent)},
                    {"name": "key", "digest": {"sha256": self.key}},
                ],
            },
            "runDetails": {
                "builder": {"id": f"https://imagebuilder.dev/builder/{builder}"},
                "metadata": {"finishedOn": self.date},
                "byproducts": [{"name": "config", "digest": _digest(self.config)}],
            },
        }

    @classmethod
    def from_predicate(cls, doc: Mapping[str, Any]) -> Build | None:
        """A build read back from its predicate; None when it is not one of ours."""
        try:
            definition = doc["buildDefinition"]
            if definition.get("buildType") != BUILD_TYPE:
                return None
            params = definition["externalParameters"]
            deps = {d.get("name"): d for d in definition.get("resolvedDependencies") or [] if isinstance(d, dict)}
            byproducts = {d.get("name"): d for d in doc["runDetails"].get("byproducts") or [] if isinstance(d, dict)}
            parent, config = deps["parent"], byproducts["config"]
            return cls(node=str(params["node"]), key=str(params["key"]),
                       config="sha256:" + str(config["digest"]["sha256"]),
                       parent="sha256:" + str(parent["digest"]["sha256"]), parent_name=str(parent.get("uri") or ""),
                       inputs={str(k): str(v) for k, v in (params.get("inputs") or {}).items()},
                       date=str(doc["runDetails"].get("metadata", {}).get("finishedOn") or ""))
        except (KeyError, TypeError, AttributeError):
            return None


@dataclass(frozen=True)
class Vouched:
    """A build record that counts, and who signed it."""

    build: Build
    signer: str


@dataclass
class RegistryBuilds:
    """Build records in one registry, beside the images they are about; read with the run's build trust."""

    registry: attestation.Store
    trust: Trust
    signer: Signer | None = None
    layouts: Layouts | None = None  # where other tools look (`sigstore`): the record there too, as cosign reads it

    def put(self, repo: str, manifest: str, build: Build) -> str:
        if self.signer is None:
            raise EngineError("no build key: this run cannot vouch for what it pushes (keys are named, and "
                              "IMAGEBUILDER_BUILD_KEY is not set)")
        name = tag(manifest)
        envelope = self.signer.sign(statement(f"{repo}", manifest, PREDICATE_TYPE,
                                              build.predicate(self.signer.public.keyid[:16])))
        created = build.date or now()
        attestation.put(self.registry, repo, name, envelope, artifact_type=ARTIFACT_TYPE, subject=manifest,
                        predicate_type=PREDICATE_TYPE, probe=self.layouts.probe if self.layouts else None,
                        annotations={"io.imagebuilder.node": build.node, "io.imagebuilder.key": build.key,
                                     "org.opencontainers.image.created": created})
        if self.layouts is not None and self.layouts.kinds != "off":  # (`cosign verify-attestation --type
            self.layouts.write(self.registry, repo, manifest, envelope, public=self.signer.public,  # slsaprovenance1`)
                               predicate_type=PREDICATE_TYPE, record=name, created=created)
        return name

    def vouched(self, repo: str, manifest: str) -> tuple[Vouched | None, str]:
        """The trusted build record beside `repo@manifest`, or None and why there is none that counts."""
        name = tag(manifest)
        try:
            stored = attestation.read(self.registry, repo, name, ARTIFACT_TYPE)
        except attestation.NotAttestation:
            return None, f"{name} is not a signed build record"
        except EngineError as exc:
            return None, f"its build record could not be read ({exc.message})"
        if stored is None:
            return None, "no build record is beside it"
        subject, envelope = stored
        if subject != manifest:
            return None, f"its build record {name} is about another image ({subject})"
        try:
            payload, key = self.trust.open(envelope)
            key.allow(BUILD, "a build record")
            build = Build.from_predicate(predicate_of(payload, manifest, PREDICATE_TYPE))
        except Rejected as exc:
            return None, f"its build record does not count: {exc}"
        if build is None:
            return None, f"{name} is not an imagebuilder build record"
        return Vouched(build, key_label(key.keyid, key.source)), ""

    def check(self, repo: str, manifest: str, *, key: str, config: str | None, parent: str | None) -> str | None:
        """Why the image `repo@manifest` may not be reused as this key's image built on `parent` (an image ID;
        None: not checked, a root's base is in its key); None when it may."""
        found, why = self.vouched(repo, manifest)
        if found is None:
            return why
        build = found.build
        if build.key != key:
            return f"its build record (signed by {found.signer}) is of key {build.key[:12]}, not {key[:12]}"
        if config is None or build.config != config:
            return f"its build record (signed by {found.signer}) is about image {build.config}, not {config}"
        if parent is not None and build.parent != parent:
            return (f"it was built on image {build.parent} (its build record, signed by {found.signer}); this run's "
                    f"parent is image {parent}")
        return None


@dataclass(frozen=True)
class BuildTrust:
    """The run's build trust, as the plan asks it (`cache.Vouch`): whether a trusted build record vouches for an
    image under a key tag. `foreign` collects the key tags whose build record is signed by a key not trusted here
    (another machine's): what a run should say before it builds anything."""

    trust: Trust
    foreign: list[str] = field(default_factory=list)

    def __call__(self, registry: attestation.Store, repo: str, digest: str, *, key: str, config: str,
                 parent: str | None) -> str | None:
        why = RegistryBuilds(registry, self.trust).check(repo, digest, key=key, config=config, parent=parent)
        if why is not None and UNTRUSTED in why:
            self.foreign.append(f"{registry.host}/{repo}@{digest[:19]}: {why}")
        return why


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")

