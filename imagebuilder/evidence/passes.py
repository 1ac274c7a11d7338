"""Pass records: the evidence that one image, named by digest, passed one smoke suite with one set of
expectations. They are kept in the registry beside the image, so that any machine with registry access
can tell what passed; a local folder only mirrors them.

A record is a small JSON document stored as an OCI artifact that a plain Distribution registry accepts:
an image manifest with no layers whose config blob is the record (media type `RECORD_TYPE`) and whose
`subject` names the image's manifest. It is tagged `sha256-<image manifest hex>.pass-<spec16>`, so it is
found from the image's digest with one manifest HEAD, also on registries without the referrers API.
`spec16` is the start of the spec key: a hash of the suite's source and everything the suite is told
(expectations, GPU settings, layer checks, allowed skips). A record counts for an image only when its
manifest and config digests are that image's (see `RegistryPasses.find`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from .. import __version__
from ..errors import EngineError
from ..smoke import suite_source

RECORD_TYPE = "application/vnd.imagebuilder.pass.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
FORMAT = "imagebuilder.pass/v1"
PASSED = "passed"  # the suite ran on this image (or, `via`, on a child built on it) and passed
UNTESTED = "untested"  # published without a pass, by an explicit --allow-untested: never counts as a pass
_TAG = re.compile(r"(?P<algo>sha256)-(?P<hex>[0-9a-f]{64})\.(?P<kind>pass|untested)-(?P<spec>[0-9a-f]{16})")


def suite_hash() -> str:
    return hashlib.sha256(suite_source()).hexdigest()


def spec_key(spec: Mapping[str, Any]) -> str:
    """What a pass is a pass of: the suite's source and everything it is told, never the image."""
    payload = json.dumps({"suite": suite_hash(), **spec}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def record_tag(manifest: str, spec: str, verdict: str = PASSED) -> str:
    algo, _, hexdigest = manifest.partition(":")
    return f"{algo}-{hexdigest}.{'pass' if verdict == PASSED else 'untested'}-{spec[:16]}"


def is_record_tag(tag: str) -> bool:
    return _TAG.fullmatch(tag) is not None


def tags_for(manifest: str, tags: list[str]) -> list[str]:
    """The record tags (of any spec and verdict) among `tags` that are about this manifest."""
    prefix = manifest.replace(":", "-", 1) + "."
    return [t for t in tags if t.startswith(prefix) and is_record_tag(t)]


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class PassRecord:
    verdict: str  # PASSED | UNTESTED
    config: str  # the image's config digest (the engine's image ID): what the suite ran in
    spec: str  # spec_key of what was run
    node: str
    entry: str
    expect: Mapping[str, Any] = field(default_factory=dict)
    gpu: Mapping[str, Any] = field(default_factory=dict)  # {"verified": bool, "count", "models", "driver"}
    date: str = ""
    manifest: str | None = None  # the image's manifest digest, once it is in a registry
    repository: str | None = None  # host/repo the manifest was pushed to
    suite: str = ""
    report: Mapping[str, Any] | None = None  # the smoke report (leaves)
    via: Mapping[str, Any] | None = None  # ancestors: the leaf whose suite ran on an image built on this one
    allowed_by: str | None = None  # UNTESTED: the flag that allowed it
    tool: str = f"imagebuilder {__version__}"
    format: str = FORMAT

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Any) -> PassRecord | None:
        """A record read back; None for anything that is not one of ours (never an exception)."""
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            return None
        names = set(cls.__dataclass_fields__)
        try:
            record = cls(**{k: v for k, v in doc.items() if k in names})
        except TypeError:
            return None
        ok = record.verdict in (PASSED, UNTESTED) and all(isinstance(v, str) for v in (record.config, record.spec))
        return record if ok else None

    def at(self, manifest: str, repository: str) -> PassRecord:
        return replace(self, manifest=manifest, repository=repository)

    @property
    def passed(self) -> bool:
        return self.verdict == PASSED

    @property
    def gpu_verified(self) -> bool:
        """A CUDA image's pass on real GPUs (a CPU image's pass needs none)."""
        return self.gpu.get("kind") != "gpu" or bool(self.gpu.get("verified"))

    def serves(self, *, gpus_here: bool) -> bool:
        """Whether this pass may stand in for running the suite here: a CUDA image's pass without a GPU
        does not, where GPUs are (the suite runs again and can verify it: CPU fleets build, GPU fleets
        test)."""
        return self.passed and (self.gpu_verified or not gpus_here)


class RecordRegistry(Protocol):
    """What pass records need of a registry (the real `registry.Registry`, or a fake in unit tests)."""

    def manifest_digest(self, repo: str, reference: str) -> str | None: ...

    def manifest(self, repo: str, reference: str) -> tuple[bytes, str]: ...

    def put_manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> str: ...

    def blob(self, repo: str, digest: str) -> bytes: ...

    def put_blob(self, repo: str, data: bytes) -> str: ...


@dataclass
class RegistryPasses:
    """Pass records in one registry."""

    registry: RecordRegistry

    def config_digest(self, repo: str, manifest: str) -> str | None:
        """The config digest (image ID) of an image manifest; None for an index or a missing manifest."""
        try:
            body, _ = self.registry.manifest(repo, manifest)
            doc = json.loads(body)
        except (EngineError, ValueError):
            return None
        config = doc.get("config") if isinstance(doc, dict) else None
        return str(config["digest"]) if isinstance(config, dict) and config.get("digest") else None

    def read(self, repo: str, tag: str) -> PassRecord | None:
        if self.registry.manifest_digest(repo, tag) is None:
            return None
        body, _ = self.registry.manifest(repo, tag)
        try:
            doc = json.loads(body)
            config = doc["config"]
            if config.get("mediaType") != RECORD_TYPE:
                return None
            return PassRecord.from_json(json.loads(self.registry.blob(repo, str(config["digest"]))))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def find(self, repo: str, manifest: str, spec: str, config: str | None = None) -> PassRecord | None:
        """The pass of `spec` for the image `repo@manifest`: only a record that names this very manifest
        and its config digest counts (a record copied or tagged beside another image does not)."""
        record = self.read(repo, record_tag(manifest, spec))
        if record is None or not record.passed or record.spec != spec or record.manifest != manifest:
            return None
        config = config or self.config_digest(repo, manifest)
        return record if config is not None and record.config == config else None

    def put(self, repo: str, record: PassRecord) -> str:
        """Store a record beside its image (`record.manifest` in `repo`); returns its tag."""
        assert record.manifest is not None
        data = json.dumps(record.to_json(), sort_keys=True, indent=1).encode()
        blob = self.registry.put_blob(repo, data)
        subject_body, subject_type = self.registry.manifest(repo, record.manifest)
        doc = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": RECORD_TYPE,
            "config": {"mediaType": RECORD_TYPE, "digest": blob, "size": len(data)},
            "layers": [],
            "subject": {"mediaType": subject_type, "digest": record.manifest, "size": len(subject_body)},
            "annotations": {"io.imagebuilder.verdict": record.verdict, "io.imagebuilder.node": record.node,
                            "org.opencontainers.image.created": record.date or now()},
        }
        tag = record_tag(record.manifest, record.spec, record.verdict)
        self.registry.put_manifest(repo, tag, json.dumps(doc, sort_keys=True).encode(), OCI_MANIFEST)
        return tag

    def write(self, repo: str, record: PassRecord) -> str:
        """`put`, then read it back: a pass that does not read back as a pass of its image is an error."""
        assert record.manifest is not None
        tag = self.put(repo, record)
        if record.passed and self.find(repo, record.manifest, record.spec, record.config) is None:
            raise EngineError(f"the pass record {repo}:{tag} did not read back: not published")
        return tag

    def all_for(self, repo: str, manifest: str, tags: list[str]) -> list[PassRecord]:
        """Every record (any spec, any verdict) beside this manifest, given the repository's tags."""
        records = [self.read(repo, tag) for tag in tags_for(manifest, tags)]
        return [r for r in records if r is not None and r.manifest == manifest]


@dataclass(frozen=True)
class LocalPasses:
    """The local mirror: one JSON file per (image config digest, spec)."""

    folder: Path

    def _path(self, config: str, spec: str) -> Path:
        return self.folder / "passes" / f"{config.replace(':', '-')}.{spec[:32]}.json"

    def get(self, config: str, spec: str) -> PassRecord | None:
        try:
            record = PassRecord.from_json(json.loads(self._path(config, spec).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None
        if record is None or not record.passed or record.config != config or record.spec != spec:
            return None
        return record

    def put(self, record: PassRecord) -> None:
        path = self._path(record.config, record.spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(record.to_json(), indent=1, default=str), encoding="utf-8")
        tmp.replace(path)


def gpu_facts(report: Mapping[str, Any] | None, cuda: bool) -> dict[str, Any]:
    """What a record says about where its suite ran: the GPU models and driver, or cpu."""
    if not cuda:
        return {"verified": False, "kind": "cpu"}
    checks = list((report or {}).get("checks") or [])
    models = sorted({str(c["device"]) for c in checks if isinstance(c, dict) and c.get("device")})
    driver = next((str(c.get("value")) for c in checks if isinstance(c, dict) and c.get("name") == "versions.driver"
                   and c.get("value")), None)
    return {"verified": bool((report or {}).get("gpu_verified")), "kind": "gpu", "count": (report or {}).get("gpus"),
            "models": models, "driver": driver}
