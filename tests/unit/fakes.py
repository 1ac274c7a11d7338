"""In-memory stand-ins behind the small protocols of `passes` and `publish`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from imagebuilder.errors import EngineError
from imagebuilder.ports.engine import LineSink

IMAGE_TYPE = "application/vnd.oci.image.manifest.v1+json"


@dataclass
class FakeRegistry:
    """Blobs and manifests by digest, tags per repository: what a Distribution registry does, in memory."""

    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    tagged: dict[tuple[str, str], str] = field(default_factory=dict)

    def _resolve(self, repo: str, reference: str) -> str | None:
        return reference if reference.startswith("sha256:") and reference in self.manifests \
            else self.tagged.get((repo, reference))

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        return self._resolve(repo, reference)

    def manifest(self, repo: str, reference: str) -> tuple[bytes, str]:
        digest = self._resolve(repo, reference)
        if digest is None:
            raise EngineError(f"GET {repo}:{reference}: HTTP 404")
        return self.manifests[digest]

    def put_manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> str:
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        self.manifests[digest] = (body, media_type)
        self.tagged[(repo, tag)] = digest
        return digest

    def blob(self, repo: str, digest: str) -> bytes:
        return self.blobs[digest]

    def put_blob(self, repo: str, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return digest

    def tags(self, repo: str) -> list[str]:
        return sorted(t for r, t in self.tagged if r == repo)

    def copy(self, source_repo: str, digest: str, target_repo: str, tag: str) -> str:
        self.tagged[(target_repo, tag)] = digest
        return digest

    def image(self, repo: str, tag: str, content: str) -> tuple[str, str]:
        """Push an image: returns (manifest digest, config digest)."""
        config = self.put_blob(repo, json.dumps({"config": {"Labels": {"x": content}}}).encode())
        return self.image_of(repo, tag, config), config

    def image_of(self, repo: str, tag: str, config: str) -> str:
        """Push an image manifest for a config digest (an engine's image ID); returns the manifest digest."""
        body = json.dumps({"schemaVersion": 2, "mediaType": IMAGE_TYPE, "layers": [],
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config}})
        return self.put_manifest(repo, tag, body.encode(), IMAGE_TYPE)




@dataclass
class FakeEngine:
    """Local tags and pushes into a FakeRegistry: a pushed manifest's config digest is the image ID."""

    registry: FakeRegistry
    local_tags: dict[str, str] = field(default_factory=dict)
    pushed: list[str] = field(default_factory=list)

    def tag(self, image: str, ref: str) -> None:
        self.local_tags[ref] = image

    def push(self, ref: str, *, sink: LineSink | None = None, auth: tuple[str, str] | None = None) -> str:
        name, _, tag = ref.rpartition(":")
        repo = name.split("/", 1)[1]
        self.pushed.append(ref)
        return self.registry.image_of(repo, tag, self.local_tags[ref])
