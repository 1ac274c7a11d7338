"""Pass records: the evidence that one image, named by digest, passed one smoke suite with one set of
expectations. They are kept in the registry beside the image, so that any machine with registry access
can tell what passed; a local folder only mirrors them.

A record is the predicate of an in-toto Statement whose subject is the image's manifest digest, in a DSSE
envelope signed by the step that ran the suite (`signing`). It is stored as an attestation (`attestation`: an
OCI 1.1 artifact, `artifactType` `ARTIFACT_TYPE`, whose `subject` is the image's manifest). It is tagged
`sha256-<image manifest hex>.pass-<spec16>`, so it is found from the image's digest with one manifest HEAD, also
on registries without the referrers API. `spec16` is the start of the spec key: a hash of the suite's source and
everything the suite is told (expectations, GPU settings, layer checks, allowed skips). A record counts for an
image only when its signature verifies against a trusted key and its subject, manifest and config digests are
that image's (`RegistryPasses.lookup`); anything else beside the digest is named, never counted.
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
from ..smoke import suite_data, suite_source
from ..smoke.judge import rules
from . import attestation, referrers
from .signing import CPU, GPU, PUBLISH, Rejected, Signer, Trust, key_label, predicate_of, statement

ARTIFACT_TYPE = "application/vnd.imagebuilder.pass.v2+json"  # an OCI artifact: one DSSE envelope, a subject
PREDICATE_TYPE = "https://imagebuilder.dev/pass/v2"  # the in-toto predicate: a PassRecord
FORMAT = "imagebuilder.pass/v2"
PASSED = "passed"  # the suite ran on this image (or, `via`, on a child built on it) and passed
UNTESTED = "untested"  # published without a pass, by an explicit --allow-untested: never counts as a pass
FAILED = "failed"  # a GPU model's verdict: the suite failed on this image on that model (it blocks publishing)
_TAG = re.compile(r"(?P<algo>sha256)-(?P<hex>[0-9a-f]{64})\.(?P<kind>pass|untested|gpu[0-9a-f]{8})"
                  r"-(?P<spec>[0-9a-f]{16})(?:-(?P<stamp>[0-9]{8}T[0-9]{6}Z))?")


def suite_hash() -> str:
    """The suite as it runs: its source, and each data file copied in beside it (its GPU peak table) by name."""
    digest = hashlib.sha256(suite_source())
    for name, data in sorted(suite_data().items()):
        digest.update(b"\0" + name.encode() + b"\0" + data)
    return digest.hexdigest()


def spec_key(document: Mapping[str, Any]) -> str:
    """What a pass is a pass of: the suite's source, the rules the host judges its report by, and everything the
    suite is told (`document`: a spec's JSON form, `smoke.spec.Spec.to_json`); never the image."""
    payload = json.dumps({"suite": suite_hash(), "rules": rules(), **document}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def stamp(date: str) -> str:
    """A record's signed time as it stands in a verdict's tag (UTC, to the second)."""
    try:
        when = datetime.datetime.fromisoformat(date)
    except ValueError:
        return "00000000T000000Z"
    if when.tzinfo is not None:
        when = when.astimezone(datetime.timezone.utc)
    return when.strftime("%Y%m%dT%H%M%SZ")


def model_kind(model: str) -> str:
    return f"gpu{hashlib.sha256(model.encode()).hexdigest()[:8]}"


def record_tag(manifest: str, spec: str, verdict: str = PASSED, model: str | None = None, date: str = "") -> str:
    """The record's tag beside the image: its pass (or untested record) for a spec; with `model`, the verdict
    (passed or failed) on that GPU model at the record's signed time (`date`): verdicts only accumulate, each
    under a tag of its own, and a record under a tag that names another time is no verdict."""
    if model:
        return attestation.tag(manifest, f"{model_kind(model)}-{spec[:16]}-{stamp(date)}")
    return attestation.tag(manifest, f"{'pass' if verdict == PASSED else 'untested'}-{spec[:16]}")


def gpu_model(gpu: Mapping[str, Any]) -> str | None:
    """The GPU model(s) a record's suite ran on, as one name; None for a run without GPUs."""
    models = sorted(str(m) for m in gpu.get("models") or [])
    return " + ".join(models) if gpu.get("kind") == "gpu" and models else None


def is_record_tag(tag: str) -> bool:
    return _TAG.fullmatch(tag) is not None


def is_pass_tag(tag: str) -> bool:
    """Whether a record tag is a spec's pass (`.pass-<spec16>`), not an untested record or a model's verdict."""
    match = _TAG.fullmatch(tag)
    return match is not None and match.group("kind") == "pass"


def tags_for(manifest: str, tags: list[str]) -> list[str]:
    """The record tags (of any spec and verdict) among `tags` that are about this manifest."""
    prefix = manifest.replace(":", "-", 1) + "."
    return [t for t in tags if t.startswith(prefix) and is_record_tag(t)]


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class PassRecord:
    """What one run says of one image (`config`) and one spec: it passed the suite (an ancestor: `via` a leaf
    built on it), was published untested, or a GPU model's verdict on it. Verify makes passes and verdicts
    (`run.ancestors` the `via` ones), publish and promote untested records. A record counts only as a `Signed`
    one read back; `from_json` gives None for anything not of this format, never an exception."""

    verdict: str  # PASSED | UNTESTED | FAILED (a GPU model's verdict)
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
    performance: Mapping[str, Any] | None = None  # the runner, the metrics and the gate's finding (`regression`)
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
        ok = record.verdict in (PASSED, UNTESTED, FAILED) and \
            all(isinstance(v, str) for v in (record.config, record.spec)) and \
            all(isinstance(v, Mapping) for v in (record.gpu, record.expect))
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


class RecordRegistry(attestation.Store, Protocol):
    """What pass records need of a registry (the real `registry.Registry`, or a fake in unit tests): what any
    attestation needs, and the repository's tags (a GPU model's verdicts are found among them)."""

    def tags(self, repo: str) -> list[str]: ...


def stands(there: PassRecord | None, own: PassRecord | None) -> bool:
    """Whether the pass already beside a digest is kept, rather than this run's written over it: always, unless
    this run holds a pass on GPUs and the one there was without (the same image, now verified)."""
    return there is not None and (there.gpu_verified or own is None or not own.gpu_verified)


@dataclass(frozen=True)
class Signed:
    """A record that counts: its envelope verified against a trusted key whose roles cover what it says
    (`role_of`). Made only by `opened`; `keyid` and `source` name that key."""

    record: PassRecord
    keyid: str
    source: str  # where that key is trusted from

    def signer(self) -> str:
        return key_label(self.keyid, self.source)


@dataclass(frozen=True)
class Lookup:
    """What a registry holds beside one image for one spec: a pass that counts, or why the record there does not
    (None and None: there is no record)."""

    found: Signed | None = None
    rejected: str | None = None

    @property
    def record(self) -> PassRecord | None:
        return self.found.record if self.found is not None else None


def spec16(tag: str) -> str | None:
    match = _TAG.fullmatch(tag)
    return match.group("spec") if match else None


@dataclass(frozen=True)
class Verdicts:
    """What the GPU models' verdicts beside one image say, failing closed (read by the judge, `ruling.judge`): per
    model only the newest verdict counts (by its signed time), so a replayed older pass does not undo a later
    failure; a verdict-shaped tag whose record does not verify, or is not the verdict its tag names (another image,
    spec, model or time: a record copied or replayed under it), blocks the image as a failure would, named."""

    failed: tuple[Signed, ...] = ()  # each model whose newest verdict failed
    unreadable: tuple[str, ...] = ()  # "<tag>: why" of each verdict tag that says nothing that counts

    @classmethod
    def of(cls, manifest: str, spec: str, read: list[tuple[str, Lookup]]) -> Verdicts:
        newest: dict[str, tuple[str, Signed]] = {}
        unreadable = []
        for tag, got in read:
            match = _TAG.fullmatch(tag)
            record = got.record
            if match is None or got.found is None or record is None:
                unreadable.append(f"{tag}: {got.rejected or 'not a signed verdict'}")
                continue
            model = gpu_model(record.gpu)
            if record.spec != spec or record.manifest != manifest or model is None \
                    or match.group("kind") != model_kind(model) or match.group("stamp") != stamp(record.date):
                unreadable.append(f"{tag}: its record is not the verdict this tag names (of {model or 'no GPU'} at "
                                  f"{record.date or '?'}): copied or replayed")
                continue
            time = str(match.group("stamp"))
            if match.group("kind") not in newest or newest[match.group("kind")][0] < time:
                newest[match.group("kind")] = (time, got.found)
        failed = tuple(s for _, s in newest.values() if s.record.verdict == FAILED)
        return cls(failed, tuple(unreadable))


def envelope(signer: Signer, record: PassRecord, subject: str) -> dict[str, Any]:
    """The record as the predicate of an in-toto Statement about the image `subject` (a digest), signed."""
    name = record.repository or record.node
    return signer.sign(statement(name, subject, PREDICATE_TYPE, record.to_json()))


def role_of(record: PassRecord) -> str:
    """The role a key needs to sign this record (`signing.ROLES`): a run on GPUs (a pass that says so, or a GPU
    model's verdict) needs `gpu`; an untested record `publish`; any other pass `cpu`."""
    if record.verdict == UNTESTED:
        return PUBLISH
    claims_gpus = bool(record.gpu.get("verified")) or bool(record.gpu.get("models"))  # (whatever `kind` it says)
    return GPU if claims_gpus else CPU


def opened(trust: Trust, envelope_doc: Any, subject: str) -> Signed:
    """The record inside an envelope about `subject`, signed by a trusted key whose roles cover what it says
    (`role_of`); `Rejected` saying why not."""
    payload, key = trust.open(envelope_doc)
    record = PassRecord.from_json(predicate_of(payload, subject, PREDICATE_TYPE))
    if record is None:
        raise Rejected("its predicate is not a pass record")
    key.allow(role_of(record), f"a {record.verdict} record of a run on {gpu_model(record.gpu) or 'no GPU'}")
    return Signed(record, key.keyid, key.source)


class Also(Protocol):
    """What is written beside each record once it is stored (`ecosystem.Ecosystem`: its copies for other tools)."""

    @property
    def probe(self) -> referrers.Probe: ...

    def record(self, registry: attestation.Store, repo: str, record: PassRecord, envelope: Mapping[str, Any],
               tag: str) -> None: ...


@dataclass
class RegistryPasses:
    """Pass records in one registry: signed envelopes in OCI artifacts beside the images they are about. Only a
    record whose signature verifies against `trust` counts; `signer` signs what this run writes; `also` writes
    the ecosystem's copies of each."""

    registry: RecordRegistry
    trust: Trust
    signer: Signer | None = None
    also: Also | None = None

    def config_digest(self, repo: str, manifest: str) -> str | None:
        """The config digest (image ID) of an image manifest; None for an index or a missing manifest."""
        try:
            body, _ = self.registry.manifest(repo, manifest)
            doc = json.loads(body)
        except (EngineError, ValueError):
            return None
        config = doc.get("config") if isinstance(doc, dict) else None
        return str(config["digest"]) if isinstance(config, dict) and config.get("digest") else None

    def read(self, repo: str, tag: str) -> Lookup:
        """The record under a record tag: counted (signed by a trusted key, about the image its tag and its
        artifact's subject name) or rejected with the reason; an empty Lookup when the tag does not exist."""
        try:
            stored = attestation.read(self.registry, repo, tag, ARTIFACT_TYPE)
            if stored is None:
                return Lookup()
            subject, envelope_doc = stored
            found = opened(self.trust, envelope_doc, subject)
        except attestation.NotAttestation:
            return Lookup(rejected=f"{tag} is not a signed pass record (unsigned, or of an older format)")
        except Rejected as exc:
            return Lookup(rejected=f"the record {tag} does not count: {exc}")
        if found.record.manifest != subject or not tag.startswith(subject.replace(":", "-", 1) + "."):
            return Lookup(rejected=f"the record {tag} is about another image ({found.record.manifest})")
        return Lookup(found)

    def lookup(self, repo: str, manifest: str, spec: str, config: str | None = None) -> Lookup:
        """The pass of `spec` for the image `repo@manifest`: only a trusted record that names this very manifest
        and its config digest counts (a record copied or tagged beside another image does not)."""
        got = self.read(repo, record_tag(manifest, spec))
        record = got.record
        if record is None:
            return got
        if not record.passed or record.spec != spec or record.manifest != manifest:
            return Lookup(rejected=f"the record beside {manifest} is not a pass of this spec")
        config = config or self.config_digest(repo, manifest)
        if config is None or record.config != config:
            return Lookup(rejected=f"the record beside {manifest} is about image {record.config}, not {config}")
        return got

    def find(self, repo: str, manifest: str, spec: str, config: str | None = None) -> PassRecord | None:
        return self.lookup(repo, manifest, spec, config).record

    def put(self, repo: str, record: PassRecord, *, per_model: bool = False) -> str:
        """Store a record beside its image (`record.manifest` in `repo`), signed by this run; returns its tag.
        `per_model`: as the verdict of the GPU model it ran on (passed or failed), beside its pass."""
        assert record.manifest is not None
        if self.signer is None:
            raise EngineError("no signing key: this run cannot write pass records (keys are named with --trust-key and "
                              "IMAGEBUILDER_SIGNING_KEY is not set)")
        model = gpu_model(record.gpu) if per_model else None
        if per_model and model is None:
            raise EngineError(f"{record.node}: a GPU model's verdict needs a run on GPUs")
        tag = record_tag(record.manifest, record.spec, record.verdict, model, record.date)
        signed = envelope(self.signer, record, record.manifest)
        attestation.put(self.registry, repo, tag, signed, artifact_type=ARTIFACT_TYPE, subject=record.manifest,
                        predicate_type=PREDICATE_TYPE, probe=self.also.probe if self.also else None,
                        annotations={"io.imagebuilder.verdict": record.verdict, "io.imagebuilder.node": record.node,
                                     "io.imagebuilder.signer": self.signer.public.keyid,
                                     "org.opencontainers.image.created": record.date or now()})
        if self.also is not None:
            self.also.record(self.registry, repo, record, signed, tag)
        return tag

    def write(self, repo: str, record: PassRecord) -> str:
        """`put`, then read it back: a pass that does not read back as a pass of its image is an error."""
        assert record.manifest is not None
        tag = self.put(repo, record)
        if record.passed and self.find(repo, record.manifest, record.spec, record.config) is None:
            raise EngineError(f"the pass record {repo}:{tag} did not read back: not published")
        return tag

    def tags_of(self, repo: str) -> list[str]:
        return self.registry.tags(repo)

    def read_found(self, repo: str, tag: str) -> Signed | None:
        """The record under a record tag when it counts (`read`); None otherwise."""
        try:
            return self.read(repo, tag).found
        except EngineError:
            return None

    def all_for(self, repo: str, manifest: str, tags: list[str]) -> list[Lookup]:
        """Every record (any spec, any verdict) beside this manifest, given the repository's tags."""
        return [self.read(repo, tag) for tag in tags_for(manifest, tags)]


@dataclass(frozen=True)
class LocalPasses:
    """The local mirror: one signed envelope per (image config digest, spec). A mirrored pass counts only when
    its signature verifies against the run's trust, like a record in a registry: the folder itself is no
    source of trust."""

    folder: Path
    trust: Trust
    signer: Signer | None = None

    def _path(self, config: str, spec: str) -> Path:
        return self.folder / "passes" / f"{config.replace(':', '-')}.{spec[:32]}.json"

    def get(self, config: str, spec: str) -> PassRecord | None:
        found = self.found(config, spec)
        return found.record if found is not None else None

    def found(self, config: str, spec: str) -> Signed | None:
        """The mirrored pass of this image and spec, with who signed it; None when there is none that counts."""
        try:
            found = opened(self.trust, json.loads(self._path(config, spec).read_text(encoding="utf-8")), config)
        except (OSError, ValueError, Rejected):
            return None
        record = found.record
        if not record.passed or record.config != config or record.spec != spec:
            return None
        return found

    def put(self, record: PassRecord) -> None:
        if self.signer is None:
            return
        path = self._path(record.config, record.spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(envelope(self.signer, record, record.config), indent=1, default=str),
                       encoding="utf-8")
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
