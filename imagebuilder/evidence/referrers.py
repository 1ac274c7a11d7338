"""Referrers: how a tool that was never told where our evidence is finds it from the image's digest (OCI
distribution spec 1.1, "Pushing manifests with subject").

Every manifest with a `subject` is pushed and the registry's answer read: a registry with the referrers API says
`OCI-Subject: <subject digest>` and lists the manifest itself. One that does not say it (Distribution 2.x, which
the tests run, Docker Hub, GHCR) leaves it to the client, which MUST add the manifest's descriptor to the
fallback referrers index: an OCI image index tagged `sha256-<subject hex>` listing each referrer with its
`artifactType` and annotations (what `oras discover`, `regctl artifact list`, cosign and trivy read there).

That index is shared with every other tool that attaches things to the image: it is read, our entry added
(replacing only an entry of ours for the same record, `RECORD`), written, and read back. Writes from this
process take turns (`tag_lock`); another writer that overwrote the index between our read and our write is
seen on reading back (an entry we wrote or saw is missing) and answered by merging again, a few times. A
Distribution registry offers no conditional write: two clients that write within the same moment after both
read back can still lose one entry; the window is one round trip, and it is said (docs/guide/ecosystem-tools.md).

`Probe`: what a registry does, asked once per run and host (referrers API, `OCI-Subject`, deletion by tag),
for report.json.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import EngineError, ImageBuilderError

INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
RECORD = "io.imagebuilder.record"  # on our referrers: the record they are a form of (its native tag)
_FORM = ("artifactType", "dev.sigstore.bundle.predicateType")  # one entry per record, artifact type and predicate


class Store(Protocol):
    """What referrers need of a registry (the real `registry.Registry`, or a fake in unit tests)."""

    host: str

    def manifest_digest(self, repo: str, reference: str) -> str | None: ...

    def manifest(self, repo: str, reference: str) -> tuple[bytes, str]: ...

    def push_manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> tuple[str, str | None]: ...

    def referrers(self, repo: str, digest: str) -> dict[str, Any] | None: ...

    def deletes_tags(self, repo: str) -> bool: ...

    def tag_lock(self, repo: str, tag: str) -> AbstractContextManager[Any]: ...


def index_tag(subject: str) -> str:
    """The fallback referrers index's tag for the image `subject` (a digest): `sha256-<hex>`."""
    algo, _, hexdigest = subject.partition(":")
    return f"{algo}-{hexdigest}"


def descriptor(body: bytes, digest: str, media_type: str) -> dict[str, Any]:
    """A referrer's entry in an index: its manifest's descriptor, `artifactType` (else its config's media type, as
    the spec says) and annotations."""
    doc = json.loads(body)
    entry: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": len(body),
                             "artifactType": doc.get("artifactType") or (doc.get("config") or {}).get("mediaType")}
    if doc.get("annotations"):
        entry["annotations"] = dict(doc["annotations"])
    return entry


def _form(entry: Mapping[str, Any]) -> tuple[str, ...] | None:
    annotations = entry.get("annotations") or {}
    if not isinstance(annotations, Mapping) or not annotations.get(RECORD):
        return None
    return (str(annotations[RECORD]), str(entry.get("artifactType")), str(annotations.get(_FORM[1], "")))


def merged(index: Mapping[str, Any] | None, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The index with `entry` added: every other entry kept, in order (another tool's, unknown fields and all);
    only an earlier entry of ours in the same form for the same record is replaced (a record rewritten)."""
    manifests = [m for m in (index or {}).get("manifests") or [] if isinstance(m, Mapping)]
    form = _form(entry)
    kept = [dict(m) for m in manifests if m.get("digest") != entry["digest"] and (form is None or _form(m) != form)]
    out = {k: v for k, v in (index or {}).items() if k not in ("manifests",)}
    out.update({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": [*kept, dict(entry)]})
    return out


def _read(registry: Store, repo: str, digest: str | None, members: str = "manifests") -> dict[str, Any] | None:
    if digest is None:
        return None
    try:
        doc = json.loads(registry.manifest(repo, digest)[0])
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get(members), list) else None


def add(registry: Store, repo: str, subject: str, entry: Mapping[str, Any]) -> str:
    """Add `entry` to the fallback referrers index of `repo@subject`; returns the index's digest."""
    return update(registry, repo, index_tag(subject), INDEX_TYPE, lambda index: merged(index, entry), "manifests")


def update(registry: Store, repo: str, tag: str, media_type: str,
           change: Callable[[dict[str, Any] | None], dict[str, Any]], members: str, *, attempts: int = 6,
           pause: float = 0.2) -> str:
    """Read-modify-write of one shared tag (an index's `manifests`, a `.att` manifest's `layers`): read, change,
    write, read back; changed again from what is there when another writer replaced it (an entry we wrote or saw
    is missing). Returns what the tag names."""
    with registry.tag_lock(repo, tag):
        for attempt in range(attempts):
            seen = registry.manifest_digest(repo, tag)
            new = change(_read(registry, repo, seen, members))
            if registry.manifest_digest(repo, tag) != seen:
                continue  # moved while we read it: read it again
            registry.push_manifest(repo, tag, json.dumps(new, sort_keys=True).encode(), media_type)
            now = registry.manifest_digest(repo, tag)
            after = _read(registry, repo, now, members)
            if now is not None and after is not None and _digests(new, members) <= _digests(after, members):
                return now
            time.sleep(pause * (attempt + 1) * random.uniform(0.5, 1.5))  # another writer: merge with theirs
    raise EngineError(f"registry {registry.host}: {repo}:{tag} kept changing under {attempts} writes; what this "
                      "run added to it is not there")


def _digests(doc: Mapping[str, Any], members: str) -> set[str]:
    return {str(m.get("digest")) for m in doc.get(members) or [] if isinstance(m, Mapping)}


def listed(registry: Store, repo: str, subject: str) -> list[dict[str, Any]]:
    """The referrers of `repo@subject`, as a reader finds them: the referrers API, else the fallback index."""
    doc = registry.referrers(repo, subject)
    if doc is None:
        doc = _read(registry, repo, registry.manifest_digest(repo, index_tag(subject)))
    return [dict(m) for m in (doc or {}).get("manifests") or [] if isinstance(m, Mapping)]


def _asked(question: Callable[[], bool]) -> bool | str:
    """A probe's answer, or why the registry gave none (it refused the request: never a reason to stop a run)."""
    try:
        return question()
    except ImageBuilderError as exc:
        return f"unknown ({exc.message})"


@dataclass
class Probe:
    """What each registry does, asked once per run and host: the referrers API (a GET of the first subject's
    referrers), whether a push with `subject` is answered `OCI-Subject`, and deletion by tag."""

    found: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def pushed(self, registry: Store, repo: str, subject: str, answered: str | None) -> bool:
        """Note one push of a manifest with `subject` (what the registry answered); whether it lists the manifest
        itself (else the fallback index is ours to keep)."""
        lists = answered == subject
        with self._lock:
            known = registry.host in self.found
            if known:
                self.found[registry.host]["oci_subject"] = self.found[registry.host]["oci_subject"] or lists
                return lists
            self.found[registry.host] = {"oci_subject": lists}
        facts = {"referrers_api": _asked(lambda: registry.referrers(repo, subject) is not None),
                 "tag_deletion": _asked(lambda: registry.deletes_tags(repo))}
        with self._lock:
            self.found[registry.host].update(facts)
        return lists

    def report(self) -> dict[str, dict[str, Any]]:
        """For report.json: per host, what it was found to do, and so where referrers are listed."""
        with self._lock:
            return {host: {**facts, "referrers": "registry (referrers API)" if facts.get("oci_subject")
                           else "fallback index (tag sha256-<hex>)"} for host, facts in sorted(self.found.items())}
