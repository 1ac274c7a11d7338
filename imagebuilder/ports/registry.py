"""The registry's HTTP API (distribution v2), for what the engine cannot do without pulling:
a manifest HEAD to find a key tag, reading an image's labels from its config, and pointing a tag at a
manifest that is already there (a copy of the manifest, no layer moves).

Credentials come from the Docker client config (`~/.docker/config.json` `auths`, or DOCKER_CONFIG) or
from IMAGEBUILDER_REGISTRY_USER / IMAGEBUILDER_REGISTRY_PASSWORD; they are sent only to the registry
that asked for them (or its token service) and never logged. Loopback registries and those the engine
lists as insecure are spoken to over plain HTTP, as the engine does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import tenacity

from ..errors import EngineError
from . import Registry as RegistryPort
from .reference import DOCKER_HUB, Reference, parse

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
REMOVED_TYPE = "application/vnd.imagebuilder.removed.v1"  # what a tag names while it is being removed


def credentials(host: str, env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    env = os.environ if env is None else env
    user, password = env.get("IMAGEBUILDER_REGISTRY_USER"), env.get("IMAGEBUILDER_REGISTRY_PASSWORD")
    if user and password:
        return user, password
    config = Path(env.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"
    try:
        auths = json.loads(config.read_text(encoding="utf-8")).get("auths") or {}
    except (OSError, ValueError):
        return None
    names = (*DOCKER_HUB, "https://index.docker.io/v1/") if host in DOCKER_HUB else (host,)
    for key, value in auths.items():
        bare = re.sub(r"^https?://", "", key).rstrip("/")
        if (key in names or bare in names) and isinstance(value, dict) and value.get("auth"):
            user, _, password = base64.b64decode(value["auth"]).decode().partition(":")
            return user, password
    return None


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
        return True
    return isinstance(exc, _Status) and (exc.status >= 500 or exc.status == 429)


class _Status(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text}")
        self.status = status


@dataclass
class Registry:
    """One registry host. Thread-safe enough for HEADs from several workers (one session per thread
    is not needed: requests' pool is)."""

    host: str
    insecure: bool = False
    auth: tuple[str, str] | None = field(default=None, repr=False)  # never printed
    timeout: float = 20.0
    attempts: int = 3
    on_retry: Callable[[str], None] | None = None  # told about each retry
    _session: requests.Session = field(default_factory=requests.Session, repr=False)
    _token: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def for_host(cls, host: str, insecure_hosts: tuple[str, ...] = ()) -> Registry:
        bare = host.split(":")[0]
        loopback = bare in ("localhost", "::1", "[::1]") or bare.startswith("127.")
        return cls(host=host, insecure=loopback or host in insecure_hosts, auth=credentials(host))

    @property
    def base(self) -> str:
        host = "registry-1.docker.io" if self.host in DOCKER_HUB else self.host
        return f"{'http' if self.insecure else 'https'}://{host}/v2/"

    # -- requests with auth and retries ---------------------------------------------------------
    def _request(self, method: str, path: str, *, scope: str, headers: Mapping[str, str] | None = None,
                 data: bytes | None = None) -> requests.Response:
        retrying = tenacity.Retrying(retry=tenacity.retry_if_exception(_transient),
                                     stop=tenacity.stop_after_attempt(self.attempts),
                                     wait=tenacity.wait_exponential(multiplier=0.5, max=8), reraise=True,
                                     before_sleep=self._notice(method, path))
        try:
            return retrying(self._once, method, path, scope, dict(headers or {}), data)
        except _Status as exc:
            raise EngineError(f"registry {self.host}: {method} {path}: {exc}") from None
        except requests.exceptions.RequestException as exc:
            raise EngineError(f"registry {self.host} unreachable ({_why(exc)})") from None

    def _notice(self, method: str, path: str) -> Callable[[tenacity.RetryCallState], None]:
        def notice(state: tenacity.RetryCallState) -> None:
            if self.on_retry is not None:
                exc = state.outcome.exception() if state.outcome else None
                self.on_retry(f"retrying {method} {self.host}/v2/{path} (attempt {state.attempt_number + 1} of "
                              f"{self.attempts}) after: {type(exc).__name__ if exc else '?'}")
        return notice

    def _once(self, method: str, path: str, scope: str, headers: dict[str, str], data: bytes | None) \
            -> requests.Response:
        if scope in self._token:
            headers["Authorization"] = self._token[scope]
        resp = self._session.request(method, self.base + path, headers=headers, data=data, timeout=self.timeout)
        if resp.status_code == 401:
            header = self._authorize(resp.headers.get("WWW-Authenticate", ""), scope)
            if header:
                self._token[scope] = headers["Authorization"] = header
                resp = self._session.request(method, self.base + path, headers=headers, data=data,
                                             timeout=self.timeout)
        if resp.status_code >= 500 or resp.status_code == 429:
            raise _Status(resp.status_code, resp.reason)
        return resp

    def _authorize(self, challenge: str, scope: str) -> str | None:
        """An Authorization header for a 401 challenge: Basic with the stored credentials, or a Bearer
        token from the realm the registry names (the token service gets the credentials, if any)."""
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if self.auth is None:
                return None
            return "Basic " + base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
        if scheme.lower() != "bearer":
            return None
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        realm = fields.pop("realm", None)
        if not realm:
            return None
        fields["scope"] = scope
        resp = self._session.get(realm, params=fields, auth=self.auth, timeout=self.timeout)
        if resp.status_code != 200:
            return None
        body = resp.json()
        token = body.get("token") or body.get("access_token")
        return f"Bearer {token}" if token else None

    # -- manifests --------------------------------------------------------------------------------
    def manifest_digest(self, repo: str, reference: str) -> str | None:
        """The digest a tag (or digest) resolves to, by a manifest HEAD; None when there is no such manifest."""
        resp = self._request("HEAD", f"{repo}/manifests/{reference}", scope=f"repository:{repo}:pull",
                             headers={"Accept": ", ".join(MANIFEST_TYPES)})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise EngineError(f"registry {self.host}: HEAD {repo}:{reference}: HTTP {resp.status_code}")
        return resp.headers.get("Docker-Content-Digest")

    def manifest(self, repo: str, reference: str) -> tuple[bytes, str]:
        """A manifest's exact bytes and media type."""
        resp = self._request("GET", f"{repo}/manifests/{reference}", scope=f"repository:{repo}:pull",
                             headers={"Accept": ", ".join(MANIFEST_TYPES)})
        if resp.status_code != 200:
            raise EngineError(f"registry {self.host}: GET {repo}:{reference}: HTTP {resp.status_code}")
        return resp.content, resp.headers.get("Content-Type", MANIFEST_TYPES[-1]).split(";")[0]

    def put_manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> str:
        resp = self._request("PUT", f"{repo}/manifests/{tag}", scope=f"repository:{repo}:pull,push",
                             headers={"Content-Type": media_type}, data=body)
        if resp.status_code not in (200, 201):
            raise EngineError(f"registry {self.host}: PUT {repo}:{tag}: HTTP {resp.status_code} "
                              f"{resp.text[:200]}")
        return resp.headers.get("Docker-Content-Digest", "")

    def tags(self, repo: str) -> list[str]:
        """Every tag of a repository (following the registry's pagination)."""
        out: list[str] = []
        path = f"{repo}/tags/list?n=1000"
        while path:
            resp = self._request("GET", path, scope=f"repository:{repo}:pull")
            if resp.status_code == 404:
                return out
            if resp.status_code != 200:
                raise EngineError(f"registry {self.host}: listing tags of {repo}: HTTP {resp.status_code}")
            out += resp.json().get("tags") or []
            link = resp.links.get("next", {}).get("url", "")
            path = link.split("/v2/", 1)[1] if "/v2/" in link else ""
        return sorted(out)

    def copy(self, source_repo: str, digest: str, target_repo: str, tag: str) -> str:
        """Point `target_repo:tag` at the manifest `source_repo@digest`. Within one repository this is a
        manifest PUT; across repositories the config and layer blobs are mounted first (no data moves)."""
        body, media_type = self.manifest(source_repo, digest)
        if target_repo != source_repo:
            doc: dict[str, Any] = json.loads(body)
            if "manifests" in doc:
                raise EngineError(f"{source_repo}@{digest} is a multi-platform index; copy it with a registry tool")
            for blob in [doc.get("config") or {}, *(doc.get("layers") or [])]:
                self.mount(source_repo, str(blob["digest"]), target_repo)
        return self.put_manifest(target_repo, tag, body, media_type)

    def untag(self, repo: str, tag: str) -> bool:
        """Remove one tag and nothing else; whether it is gone. Where the registry deletes by tag (OCI
        distribution 1.1) that is one DELETE. A Distribution 2.x registry deletes only by digest, and deleting
        the image's digest would remove every tag of that image: so the tag is first pointed at a throwaway
        manifest of its own (an empty artifact, `REMOVED_TYPE`, that no engine runs) and that manifest is
        deleted by digest, which takes exactly this tag with it. Where that DELETE is refused too (deletion
        turned off), the tag is pointed back at what it named: False."""
        scope = f"repository:{repo}:pull,push,delete"
        resp = self._request("DELETE", f"{repo}/manifests/{tag}", scope=scope)
        if resp.status_code not in (200, 202):
            named = self.manifest_digest(repo, tag)
            empty = self.put_blob(repo, b"{}")
            body = json.dumps({
                "schemaVersion": 2, "mediaType": MANIFEST_TYPES[2], "artifactType": REMOVED_TYPE,
                "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty, "size": 2},
                "layers": [], "annotations": {"io.imagebuilder.removed": tag, "io.imagebuilder.nonce": os.urandom(
                    8).hex()}}).encode()
            self.put_manifest(repo, tag, body, MANIFEST_TYPES[2])
            tombstone = "sha256:" + hashlib.sha256(body).hexdigest()
            resp = self._request("DELETE", f"{repo}/manifests/{tombstone}", scope=scope)
            if resp.status_code not in (200, 202):
                if named is not None:
                    self.copy(repo, named, repo, tag)  # as it was: this registry deletes nothing
                return False
        return self.manifest_digest(repo, tag) is None

    def mount(self, source_repo: str, digest: str, target_repo: str) -> None:
        head = self._request("HEAD", f"{target_repo}/blobs/{digest}", scope=f"repository:{target_repo}:pull")
        if head.status_code == 200:
            return
        resp = self._request("POST", f"{target_repo}/blobs/uploads/?mount={digest}&from={source_repo}",
                             scope=f"repository:{target_repo}:pull,push repository:{source_repo}:pull")
        if resp.status_code != 201:
            raise EngineError(f"registry {self.host}: cannot mount {digest[:19]} from {source_repo} into "
                              f"{target_repo} (HTTP {resp.status_code})")

    def blob(self, repo: str, digest: str) -> bytes:
        resp = self._request("GET", f"{repo}/blobs/{digest}", scope=f"repository:{repo}:pull")
        if resp.status_code != 200:
            raise EngineError(f"registry {self.host}: GET {repo} blob {digest[:19]}: HTTP {resp.status_code}")
        if "sha256:" + hashlib.sha256(resp.content).hexdigest() != digest:
            raise EngineError(f"registry {self.host}: blob {digest[:19]} of {repo} does not match its digest")
        return resp.content

    def put_blob(self, repo: str, data: bytes) -> str:
        """Upload a small blob in one request (a POST, then a PUT with its digest); returns the digest."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        head = self._request("HEAD", f"{repo}/blobs/{digest}", scope=f"repository:{repo}:pull")
        if head.status_code == 200:
            return digest
        scope = f"repository:{repo}:pull,push"
        start = self._request("POST", f"{repo}/blobs/uploads/", scope=scope)
        location = start.headers.get("Location", "")
        if start.status_code != 202 or not location:
            raise EngineError(f"registry {self.host}: cannot start an upload to {repo} (HTTP {start.status_code})")
        path = location.split("/v2/", 1)[1] if "/v2/" in location else location.lstrip("/")
        path += ("&" if "?" in path else "?") + "digest=" + digest
        done = self._request("PUT", path, scope=scope, headers={"Content-Type": "application/octet-stream"},
                             data=data)
        if done.status_code not in (201, 204):
            raise EngineError(f"registry {self.host}: upload to {repo}: HTTP {done.status_code}")
        return digest

    def config(self, repo: str, reference: str) -> dict[str, Any] | None:
        """An image's config document (single-platform manifests: its Env, Labels and history); None when
        there is no such image."""
        if self.manifest_digest(repo, reference) is None:
            return None
        body, _ = self.manifest(repo, reference)
        doc: dict[str, Any] = json.loads(body)
        config = (doc.get("config") or {}).get("digest")
        if not config:
            return None
        resp = self._request("GET", f"{repo}/blobs/{config}", scope=f"repository:{repo}:pull")
        if resp.status_code != 200:
            return None
        out: dict[str, Any] = json.loads(resp.content)
        return out

    def labels(self, repo: str, reference: str) -> dict[str, str] | None:
        """The labels in an image's config (single-platform manifests); None when there is no such image."""
        config = self.config(repo, reference)
        if config is None:
            return None
        labels = (config.get("config") or {}).get("Labels") or {}
        return {str(k): str(v) for k, v in labels.items()}


def _why(exc: BaseException) -> str:
    text = str(exc)
    for needle in ("Connection refused", "Name or service not known", "timed out", "Connection reset"):
        if needle.lower() in text.lower():
            return needle.lower()
    return type(exc).__name__


@dataclass
class Registries:
    """The registry clients of one command, one per host. A host that failed a lookup is not asked again by
    lookups that may do without it (`answers`); retries are told to `on_retry`."""

    connect: Callable[[str], RegistryPort]  # host -> its client
    use: bool = True  # False: key tags and passes are not looked up in registries (plan without a registry)
    on_retry: Callable[[str], None] | None = None
    _clients: dict[str, RegistryPort] = field(default_factory=dict)
    _down: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of_engine(cls, insecure: Callable[[], tuple[str, ...]], *, use: bool = True) -> Registries:
        """Clients that speak plain HTTP where the engine does (its insecure registries, asked once)."""
        hosts: list[tuple[str, ...]] = []

        def connect(host: str) -> RegistryPort:
            if not hosts:
                hosts.append(insecure())
            return Registry.for_host(host, hosts[0])
        return cls(connect, use=use)

    def __call__(self, host: str) -> RegistryPort:
        with self._lock:
            if host not in self._clients:
                client = self._clients[host] = self.connect(host)
                client.on_retry = lambda line: self.on_retry(line) if self.on_retry else None
            return self._clients[host]

    def at(self, ref: str) -> tuple[RegistryPort, Reference]:
        """The client of the registry a reference names, and the reference parsed."""
        parsed = parse(ref)
        return self(parsed.host), parsed

    def digest(self, ref: str) -> str | None:
        """The manifest digest a reference names in its registry (a manifest HEAD); None when there is none."""
        client, parsed = self.at(ref)
        return client.manifest_digest(parsed.repository, parsed.reference)

    def auth(self, ref: str) -> tuple[str, str] | None:
        """The credentials for the registry a reference names (for the engine's push and pull)."""
        return self.at(ref)[0].auth

    def answers(self, host: str) -> bool:
        """Whether to ask this registry in a lookup: registries are in use and it did not fail one."""
        return self.use and host not in self._down

    def down(self, host: str) -> None:
        self._down.add(host)
