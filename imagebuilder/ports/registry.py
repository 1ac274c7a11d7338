"""The registry's HTTP API (distribution v2), for what the engine cannot do without pulling:
a manifest HEAD to find a key tag, reading an image's labels from its config, and pointing a tag at a
manifest that is already there (a copy of the manifest, no layer moves).

Credentials come from IMAGEBUILDER_REGISTRY_USER / IMAGEBUILDER_REGISTRY_PASSWORD (for the hosts they are for) or
the Docker client config (its credential helpers too: `ports.credentials`); they are sent only to the registry
that asked for them, or to the token service it names on its own host (one on another host only where
IMAGEBUILDER_REGISTRY_HOSTS lists it; never over plain HTTP off loopback), and never logged; nor are the tokens. A
registry the engine speaks plain HTTP to, off loopback, gets none (nor does the engine's push or pull) unless
IMAGEBUILDER_REGISTRY_PLAIN_HTTP_AUTH=1 says so. Tokens are asked per repository and action (`scope`), as the
registry challenges, and asked again when one is refused as expired.

Every registry is spoken to over HTTPS first, its certificate checked (`tls`: the system's CAs, --registry-ca
and Docker's certs.d); a loopback registry or one the engine lists as insecure is spoken to over plain HTTP when
it does not speak TLS at all, as the engine does. A certificate that is not trusted, credentials the token
service refuses and tokens the registry refuses are `RegistryAccess` errors (exit 2): never retried, and never
taken for an outage.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import io
import json
import os
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

import requests
import tenacity
import urllib3

from ..errors import EngineError, RegistryAccess
from . import Registry as RegistryPort
from . import tls
from .credentials import credentials, pair_hosts, plain_http_allowed, realm_allowed
from .hashing import Hashing
from .reference import DOCKER_HUB, Reference, is_loopback, parse

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
REMOVED_TYPE = "application/vnd.imagebuilder.removed.v1"  # what a tag names while it is being removed


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
    insecure: bool = False  # plain HTTP allowed, where the registry does not speak TLS (loopback, engine-listed)
    auth: tuple[str, str] | None = field(default=None, repr=False)  # never printed
    timeout: float = 20.0
    attempts: int = 3
    on_retry: Callable[[str], None] | None = None  # told about each retry
    cafiles: tuple[Path, ...] = ()  # extra CAs its certificate may chain to (`tls.RegistryTrust`)
    realms: frozenset[str] = frozenset()  # other hosts whose token service may get `auth` (`credentials.pair_hosts`)
    withheld: str | None = None  # why credentials configured for it are not used (for messages)
    _session: requests.Session = field(default_factory=requests.Session, repr=False)
    _token: dict[str, str] = field(default_factory=dict, repr=False)
    _scheme: str | None = field(default=None, repr=False)  # once known: https, or http (an insecure one)
    _push: dict[str, str | None] = field(default_factory=dict, repr=False)  # repository -> why not (can_push)
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict, repr=False)  # (tag_lock)
    _locks_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:  # (the token service, on https too, is checked against the same CAs)
        self._session.mount("https://", tls.ContextAdapter(tls.context(self.cafiles)))

    @classmethod
    def for_host(cls, host: str, insecure_hosts: tuple[str, ...] = (), trust: tls.RegistryTrust | None = None,
                 scope: tuple[str, ...] = ()) -> Registry:
        """The client of `host`: its credentials (the environment's pair where it is for this host, `scope` being
        the matrix's registry), none for a registry spoken to over plain HTTP off loopback unless the environment
        allows it."""
        cafiles = tuple((trust or tls.RegistryTrust()).files(host))
        auth, withheld = credentials(host, scope=scope), None
        if auth is not None and host in insecure_hosts and not is_loopback(host) and not plain_http_allowed(
                os.environ):
            auth, withheld = None, (f"the engine lists {host} as an insecure registry (plain HTTP): credentials are "
                                    "not sent to it, nor given to the engine for it; set "
                                    "IMAGEBUILDER_REGISTRY_PLAIN_HTTP_AUTH=1 to send them anyway")
        return cls(host=host, insecure=is_loopback(host) or host in insecure_hosts, auth=auth, cafiles=cafiles,
                   realms=pair_hosts(os.environ, scope), withheld=withheld)

    @property
    def base(self) -> str:
        host = "registry-1.docker.io" if self.host in DOCKER_HUB else self.host
        return f"{self._scheme or 'https'}://{host}/v2/"

    @property
    def who(self) -> str:
        """Who this client is to the registry, for messages (a user name is not a secret)."""
        if self.auth:
            return f"user {self.auth[0]!r}"
        return f"anonymous ({self.withheld})" if self.withheld else "anonymous (no credentials)"

    # -- requests with auth and retries ---------------------------------------------------------
    def _request(self, method: str, path: str, *, scope: str, headers: Mapping[str, str] | None = None,
                 data: bytes | None = None, stream: bool = False) -> requests.Response:
        retrying = tenacity.Retrying(retry=tenacity.retry_if_exception(_transient),
                                     stop=tenacity.stop_after_attempt(self.attempts),
                                     wait=tenacity.wait_exponential(multiplier=0.5, max=8), reraise=True,
                                     before_sleep=self._notice(method, path))
        try:
            return retrying(self._once, method, path, scope, dict(headers or {}), data, stream)
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

    def _send(self, method: str, path: str, headers: dict[str, str], data: bytes | None,
              stream: bool = False) -> requests.Response:
        """One request over HTTPS, or plain HTTP where this registry may (`insecure`) and, asked first, answered
        in plain HTTP (or, with no port named, refused HTTPS's): learned once, as the engine does. A certificate
        that is not trusted is a `RegistryAccess` error, never answered by falling back; any other failure is
        the network's (retried)."""
        try:
            resp = self._session.request(method, self.base + path, headers=headers, data=data, timeout=self.timeout,
                                         stream=stream)
        except requests.exceptions.SSLError as exc:
            why = tls.untrusted(exc)
            if why is not None:
                raise RegistryAccess(f"registry {self.host}: its TLS certificate is not trusted ({why})",
                                     hint=tls.hint(self.host, self.cafiles)) from None
            if not tls.plain_http(exc):
                raise  # the network's
            if not (self.insecure and self._scheme is None):
                raise RegistryAccess(f"registry {self.host} answered in plain HTTP, not TLS", hint="only a loopback "
                                     "registry or one the engine lists in `insecure-registries` is spoken to over "
                                     "plain HTTP (as the engine does)") from None
            self._scheme = "http"  # it does not speak TLS
            return self._send(method, path, headers, data, stream)
        except requests.exceptions.ConnectionError:
            no_port = urllib.parse.urlsplit(f"//{self.host}").port is None  # HTTPS on 443, HTTP on 80
            if not (self.insecure and self._scheme is None and no_port):
                raise
            self._scheme = "http"
            return self._send(method, path, headers, data, stream)
        if self._scheme is None:
            self._scheme = "https"  # it answered over TLS: never plain HTTP from now on
        return resp

    def _once(self, method: str, path: str, scope: str, headers: dict[str, str], data: bytes | None,
              stream: bool = False) -> requests.Response:
        if scope in self._token:
            headers["Authorization"] = self._token[scope]
        resp = self._send(method, path, headers, data, stream)
        if resp.status_code == 401:
            challenge = resp.headers.get("WWW-Authenticate", "")
            header = self._authorize(challenge, scope)
            if header:
                self._token[scope] = headers["Authorization"] = header
                resp = self._send(method, path, headers, data, stream)
                refused = _challenge(resp.headers.get("WWW-Authenticate", "")).get("error")
                if resp.status_code == 401 and refused == "invalid_token":  # a fresh token, refused
                    self._token.pop(scope, None)
                    raise RegistryAccess(
                        f"registry {self.host} refused the token its token service issued to {self.who} "
                        f"(invalid_token: {_said(resp)})", hint="the registry does not trust the token service's "
                        "signing key, or their clocks differ; ask the registry's administrators")
        if resp.status_code >= 500 or resp.status_code == 429:
            raise _Status(resp.status_code, resp.reason)
        return resp

    def _authorize(self, challenge: str, scope: str) -> str | None:
        """An Authorization header for a 401 challenge: Basic with the stored credentials, or a Bearer
        token from the realm the registry names (the token service gets the credentials, if any), for every
        scope asked (repeated `scope` parameters, as the token protocol has them). A token service that refuses
        is a `RegistryAccess` error naming the user and what the service said; no secret is in it."""
        scheme, _, _ = challenge.partition(" ")
        if scheme.lower() == "basic":
            if self.auth is None:
                return None
            return "Basic " + base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
        if scheme.lower() != "bearer":
            return None
        fields = _challenge(challenge)
        realm = fields.pop("realm", None)
        if not realm:
            return None
        fields.pop("error", None)
        fields.pop("scope", None)
        shown = realm.split("?", 1)[0]
        where = urllib.parse.urlsplit(realm)
        if self.auth is not None and where.scheme.lower() == "http" and not is_loopback(where.netloc):
            raise RegistryAccess(f"registry {self.host}: its token service {shown} is plain HTTP; the credentials of "
                                 f"{self.who} are not sent there", hint="the token service must speak HTTPS")
        auth, elsewhere = self.auth, None
        if auth is not None and not realm_allowed(self.host, where.netloc, self.realms):
            auth, elsewhere = None, where.netloc  # a token service on another host: asked without credentials
        params = [*fields.items(), *(("scope", one) for one in scope.split())]
        try:
            resp = self._session.get(realm, params=params, auth=auth, timeout=self.timeout)
        except requests.exceptions.SSLError as exc:
            why = tls.untrusted(exc)
            if why is None:
                raise  # the network's: retried
            raise RegistryAccess(f"registry {self.host}: the TLS certificate of its token service {shown} is not "
                                 f"trusted ({why})", hint=tls.hint(self.host, self.cafiles)) from None
        if resp.status_code in (401, 403) and elsewhere is not None:
            raise RegistryAccess(f"registry {self.host}: its token service {shown} is on another host ({elsewhere}); "
                                 f"the credentials of {self.who} were not sent there, and it refused to answer "
                                 f"without them (HTTP {resp.status_code})", hint=f"if {elsewhere} is this registry's "
                                 f"token service, list it: IMAGEBUILDER_REGISTRY_HOSTS='{self.host} {elsewhere}'")
        if resp.status_code in (401, 403):
            what = f"refused the credentials of {self.who}" if self.auth else "wants credentials, and none were given"
            raise RegistryAccess(f"registry {self.host}: its token service {shown} {what} "
                                 f"(HTTP {resp.status_code}: {_said(resp)})",
                                 hint=f"log in (`docker login {self.host}`) or set IMAGEBUILDER_REGISTRY_USER and "
                                 "IMAGEBUILDER_REGISTRY_PASSWORD; a token or password that expired must be renewed")
        if resp.status_code != 200:
            raise _Status(resp.status_code, f"token service {shown}: {resp.reason}")
        try:
            body = resp.json()
            token = body.get("token") or body.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryAccess(f"registry {self.host}: its token service {shown} answered without a token")
        return f"Bearer {token}"

    def denied(self, resp: requests.Response, action: str, repo: str) -> str:
        """What a 401 or 403 on `action` means, for a message: who may not do what, and what the registry said."""
        return f"{self.who} may not {action} {self.host}/{repo} (HTTP {resp.status_code}: {_said(resp)})"

    def _failed(self, resp: requests.Response, what: str, action: str, repo: str) -> EngineError:
        """The error for an answer that is not what `what` needed: who may not do it where it was refused."""
        if resp.status_code in (401, 403):
            return EngineError(f"registry {self.host}: {what}: {self.denied(resp, action, repo)}")
        return EngineError(f"registry {self.host}: {what}: HTTP {resp.status_code}")

    def can_push(self, repo: str) -> str | None:
        """Whether these credentials may push to `repo`, asked once per repository: an upload is started and
        cancelled (nothing is written). None when they may; else why not, as the registry said it."""
        if repo not in self._push:
            scope = f"repository:{repo}:pull,push"
            resp = self._request("POST", f"{repo}/blobs/uploads/", scope=scope)
            if resp.status_code == 202:
                location = resp.headers.get("Location", "")
                if "/v2/" in location:  # cancelled; a registry that cannot cancel lets the upload expire
                    with contextlib.suppress(EngineError):
                        self._request("DELETE", location.split("/v2/", 1)[1], scope=scope)
                self._push[repo] = None
            elif resp.status_code in (401, 403):
                self._push[repo] = self.denied(resp, "push to", repo)
            else:
                raise EngineError(f"registry {self.host}: cannot start an upload to {repo} (HTTP {resp.status_code})")
        return self._push[repo]

    # -- manifests --------------------------------------------------------------------------------
    def manifest_digest(self, repo: str, reference: str) -> str | None:
        """The digest a tag (or digest) resolves to, by a manifest HEAD; None when there is no such manifest."""
        resp = self._request("HEAD", f"{repo}/manifests/{reference}", scope=f"repository:{repo}:pull",
                             headers={"Accept": ", ".join(MANIFEST_TYPES)})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._failed(resp, f"HEAD {repo}:{reference}", "pull from", repo)
        return resp.headers.get("Docker-Content-Digest")

    def manifest(self, repo: str, reference: str) -> tuple[bytes, str]:
        """A manifest's exact bytes and media type; asked by digest, they are checked against it."""
        resp = self._request("GET", f"{repo}/manifests/{reference}", scope=f"repository:{repo}:pull",
                             headers={"Accept": ", ".join(MANIFEST_TYPES)})
        if resp.status_code != 200:
            raise self._failed(resp, f"GET {repo}:{reference}", "pull from", repo)
        if reference.startswith("sha256:") and "sha256:" + hashlib.sha256(resp.content).hexdigest() != reference:
            raise EngineError(f"registry {self.host}: the manifest it sent for {repo}@{reference[:19]} does not match "
                              "that digest")
        return resp.content, resp.headers.get("Content-Type", MANIFEST_TYPES[-1]).split(";")[0]

    def put_manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> str:
        return self.push_manifest(repo, tag, body, media_type)[0]

    def push_manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> tuple[str, str | None]:
        """PUT a manifest (under a tag, or by its digest); its digest, and the `OCI-Subject` header the registry
        answered with (OCI distribution 1.1: the subject it listed the manifest under; None when it said none)."""
        resp = self._request("PUT", f"{repo}/manifests/{tag}", scope=f"repository:{repo}:pull,push",
                             headers={"Content-Type": media_type}, data=body)
        if resp.status_code in (401, 403):
            raise self._failed(resp, f"PUT {repo}:{tag}", "push to", repo)
        if resp.status_code not in (200, 201):
            raise EngineError(f"registry {self.host}: PUT {repo}:{tag}: HTTP {resp.status_code} {_said(resp)}")
        return resp.headers.get("Docker-Content-Digest", ""), resp.headers.get("OCI-Subject")

    def referrers(self, repo: str, digest: str) -> dict[str, Any] | None:
        """The referrers API's image index for `digest` (OCI distribution 1.1); None where the registry has no such
        API (a 404 that is not an index, as Distribution 2.x answers)."""
        resp = self._request("GET", f"{repo}/referrers/{digest}", scope=f"repository:{repo}:pull",
                             headers={"Accept": MANIFEST_TYPES[0]})
        if resp.status_code != 200 or not resp.headers.get("Content-Type", "").startswith(MANIFEST_TYPES[0]):
            return None
        try:
            doc = resp.json()
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    def deletes_tags(self, repo: str) -> bool:
        """Whether the registry deletes a manifest by tag (OCI distribution 1.1): a DELETE of a tag that does not
        exist (a random name) is answered 404 or 202 where it does, 400/405 where it deletes only by digest."""
        resp = self._request("DELETE", f"{repo}/manifests/imagebuilder-probe-{os.urandom(6).hex()}",
                             scope=f"repository:{repo}:pull,push,delete")
        return resp.status_code in (202, 404)

    def tag_lock(self, repo: str, tag: str) -> threading.Lock:
        """This client's lock on one tag: read-modify-writes of one tag from this process (a referrers index, a
        `.att` manifest) take turns; other writers are answered by reading back (`referrers`)."""
        with self._locks_lock:
            return self._locks.setdefault((repo, tag), threading.Lock())

    def tags(self, repo: str) -> list[str]:
        """Every tag of a repository (following the registry's pagination)."""
        out: list[str] = []
        path = f"{repo}/tags/list?n=1000"
        while path:
            resp = self._request("GET", path, scope=f"repository:{repo}:pull")
            if resp.status_code == 404:
                return out
            if resp.status_code != 200:
                raise self._failed(resp, f"listing tags of {repo}", "pull from", repo)
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
        if resp.status_code in (401, 403):
            raise self._failed(resp, f"mounting {digest[:19]} from {source_repo}", "push to", target_repo)
        if resp.status_code != 201:
            raise EngineError(f"registry {self.host}: cannot mount {digest[:19]} from {source_repo} into "
                              f"{target_repo} (HTTP {resp.status_code})")

    def blob(self, repo: str, digest: str) -> bytes:
        resp = self._request("GET", f"{repo}/blobs/{digest}", scope=f"repository:{repo}:pull")
        if resp.status_code != 200:
            raise self._failed(resp, f"GET {repo} blob {digest[:19]}", "pull from", repo)
        if "sha256:" + hashlib.sha256(resp.content).hexdigest() != digest:
            raise EngineError(f"registry {self.host}: blob {digest[:19]} of {repo} does not match its digest")
        return resp.content

    @contextlib.contextmanager
    def open_blob(self, repo: str, digest: str) -> Iterator[BinaryIO]:
        """A blob as a stream, for one that is too large to hold (an image layer): its digest is checked once it
        has been read to the end (`EngineError` then, after what was read from it; read it all before using it)."""
        resp = self._request("GET", f"{repo}/blobs/{digest}", scope=f"repository:{repo}:pull", stream=True)
        try:
            if resp.status_code != 200:
                raise self._failed(resp, f"GET {repo} blob {digest[:19]}", "pull from", repo)
            reader = Hashing(resp.raw)
            try:
                yield cast(BinaryIO, io.BufferedReader(reader, 1 << 20))
                if reader.rest() != digest:
                    raise EngineError(f"registry {self.host}: blob {digest[:19]} of {repo} does not match its digest")
            except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError,
                    http.client.HTTPException) as exc:
                raise EngineError(f"registry {self.host}: reading blob {digest[:19]} of {repo}: {_why(exc)}") from None
        finally:
            resp.close()

    def put_blob(self, repo: str, data: bytes) -> str:
        """Upload a small blob in one request (a POST, then a PUT with its digest); returns the digest."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        head = self._request("HEAD", f"{repo}/blobs/{digest}", scope=f"repository:{repo}:pull")
        if head.status_code == 200:
            return digest
        scope = f"repository:{repo}:pull,push"
        start = self._request("POST", f"{repo}/blobs/uploads/", scope=scope)
        location = start.headers.get("Location", "")
        if start.status_code in (401, 403):
            raise self._failed(start, f"upload to {repo}", "push to", repo)
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
        if "sha256:" + hashlib.sha256(resp.content).hexdigest() != config:  # as `blob`: what the manifest names
            raise EngineError(f"registry {self.host}: the config of {repo}:{reference} does not match its digest "
                              f"{str(config)[:19]}")
        out: dict[str, Any] = json.loads(resp.content)
        return out

    def labels(self, repo: str, reference: str) -> dict[str, str] | None:
        """The labels in an image's config (single-platform manifests); None when there is no such image."""
        config = self.config(repo, reference)
        if config is None:
            return None
        labels = (config.get("config") or {}).get("Labels") or {}
        return {str(k): str(v) for k, v in labels.items()}


def _challenge(header: str) -> dict[str, str]:
    """The parameters of a `WWW-Authenticate: Bearer realm="...",service="...",scope="...",error="..."` header."""
    return dict(re.findall(r'(\w+)="([^"]*)"', header.partition(" ")[2]))


def _said(resp: requests.Response) -> str:
    """What a registry or token service said in an error body (the distribution spec's `errors`, OAuth2's
    `error_description`, Docker Hub's `details`), short; its reason phrase when it said nothing readable."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    said: list[str] = []
    if isinstance(body, dict):
        for err in body.get("errors") or []:
            if isinstance(err, dict):
                said.append(": ".join(str(err[k]) for k in ("code", "message") if err.get(k)))
        for key in ("error_description", "details", "message", "error"):
            if isinstance(body.get(key), str) and not said:
                said.append(body[key])
    text = "; ".join(s for s in said if s) or resp.reason or "no reason given"
    return text[:300]


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
    def of_engine(cls, insecure: Callable[[], tuple[str, ...]], trust: tls.RegistryTrust | None = None, *,
                  use: bool = True, scope: tuple[str, ...] = ()) -> Registries:
        """Clients that may speak plain HTTP where the engine does (its insecure registries, asked once), and
        trust the CAs `trust` names; the environment's credentials go to the hosts `scope` names (the matrix's
        registry) unless IMAGEBUILDER_REGISTRY_HOSTS says otherwise."""
        hosts: list[tuple[str, ...]] = []

        def connect(host: str) -> RegistryPort:
            if not hosts:
                hosts.append(insecure())
            return Registry.for_host(host, hosts[0], trust, scope)
        return cls(connect, use=use)

    def __call__(self, host: str) -> RegistryPort:
        with self._lock:
            client = self._clients.get(host)
        if client is None:  # (made outside the lock: a credential helper may take its time)
            made = self.connect(host)
            made.on_retry = lambda line: self.on_retry(line) if self.on_retry else None
            with self._lock:
                client = self._clients.setdefault(host, made)
        return client

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
