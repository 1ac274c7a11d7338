"""What a build reaches on 127.0.0.1 for the length of a run (builds use host networking): the wheelhouses,
served as pip find-links, and a proxy for every package index that needs credentials; both only to the run's own
builds (its token).

Index credentials (`secrets/index_auth.py`: `~/.netrc` by host, or the environment's pair for the hosts
`IMAGEBUILDER_INDEX_HOSTS` names) never enter a Dockerfile, a build arg, a layer, the history, a label or
an ENV: pip is pointed at the proxy (`http://127.0.0.1:<port>/...`, through the build arg the text
declares), and the proxy adds the
`Authorization` header on its way to the index. Links in the index's pages that point back to the index are
rewritten to the proxy; links to other hosts, and redirects to them, go there directly, without credentials.

The proxy serves only the builds of its run. Each run makes a token of its own; the builds that need an index
proxy or a wheelhouse get `http_proxy=http://imagebuilder:<token>@127.0.0.1:<port>` (and `HTTP_PROXY`), one of Docker's
predefined build args, which the builder keeps out of the image's history and of the build cache's key and gives
to every RUN step's environment (not its command line). pip, apt and curl then send their plain-HTTP requests to
the proxy with the token; a request without it (another process on the machine, a build of another run) is
answered 407 and reaches nothing. Requests for an index go on with its credentials, and only for paths under the
index's own (its URL's path, less a last `simple` or `+simple` segment: where its pages and files are; `index_root`):
another path on that host (another repository of an Artifactory, say) is answered 403 and reaches nothing, so the
credentials go to the index and nowhere else on its host. Plain-HTTP requests for
anything else (Debian's mirror) are passed on as they came, with no credentials. HTTPS is not proxied: it goes
from the build to its host directly, as before.

A wheelhouse (`build.wheelhouse`) is one more address of the same servers: `http://127.0.0.1:<port>/` (the port
stable per folder: the URL is a build arg, part of the cache key; where another run on the machine holds that port,
the builds are still given it, and this run's proxy answers for it) lists the folder's files as pip's find-links,
and serves them, to requests with the run's token only; another process on the machine gets 407, as at an index
proxy. The folder's own files only (a link to a file counts, as in the node's key): no subfolder, no `..`.

A Docker client config with proxies (`proxies.default` in config.json: docker-py gives them to every build) is kept
working: plain-HTTP requests for other origins go on through its `httpProxy` (unless its `noProxy` names them),
and the builds get its `noProxy` without the loopback names in it (so that they still reach this proxy).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hmac
import html
import http.client
import http.server
import io
import os
import secrets
import ssl
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..plan.plan import Plan, State
from ..plan.render import build_args, declared, stable_port, wheelhouse_port
from ..plan.wheels import served, served_files
from ..ports.credentials import docker_config
from ..ports.reference import is_loopback
from ..secrets.index_auth import Credentials, index_credentials

__all__ = ["Credentials", "Served", "Upstream", "index_credentials", "serve_indexes"]

PROXY_USER = "imagebuilder"
WHEELHOUSE = "wheelhouse"  # a route's scheme: a folder served from here, not an origin to forward to

_REWRITTEN = ("text/html", "application/vnd.pypi.simple", "application/json")
_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                          "proxy-authorization", "proxy-authenticate", "content-length", "content-encoding"})


def _server(port: int, handler: Any) -> http.server.ThreadingHTTPServer:
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@contextlib.contextmanager
def _serving(servers: list[http.server.ThreadingHTTPServer]) -> Iterator[None]:
    try:
        yield
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


@dataclass(frozen=True)
class Upstream:
    """The proxies the Docker client config gives builds (`proxies.default`), which this run's proxy stands in
    front of for plain HTTP."""

    http: str | None = None  # httpProxy: where other origins' plain-HTTP requests go on to
    no_proxy: str | None = None  # noProxy: the origins reached directly

    @classmethod
    def of_config(cls, env: Mapping[str, str]) -> Upstream:
        proxies = docker_config(env)[1].get("proxies") or {}
        proxies = (proxies.get("default") if isinstance(proxies, dict) else None) or {}
        if not isinstance(proxies, dict):
            return cls()
        http, no_proxy = proxies.get("httpProxy"), proxies.get("noProxy")
        return cls(http if isinstance(http, str) and http else None,
                   no_proxy if isinstance(no_proxy, str) and no_proxy else None)

    def builds_no_proxy(self) -> str | None:
        """`noProxy` without loopback names: the builds must reach this run's proxy through their http_proxy."""
        if self.no_proxy is None:
            return None
        kept = [n for n in (item.strip() for item in self.no_proxy.split(","))  # (a CIDR: its address)
                if n and not is_loopback(n.split("/", 1)[0]) and not n.startswith("127.")]
        return ",".join(kept)

    def bypassed(self, host: str) -> bool:
        """Whether `noProxy` names the host: `*`, the name, or a domain it is in (`example.com`, `.example.com`)."""
        for entry in (e.strip().lower() for e in (self.no_proxy or "").split(",")):
            name = entry.lstrip(".").split(":", 1)[0]
            if entry == "*" or (name and (host.lower() == name or host.lower().endswith("." + name))):
                return True
        return False

    def route(self, authority: str) -> tuple[str, str | None] | None:
        """(proxy host:port, its Proxy-Authorization) for a plain-HTTP origin, or None: straight to it."""
        if self.http is None or self.bypassed(urllib.parse.urlsplit(f"//{authority}").hostname or ""):
            return None
        parts = urllib.parse.urlsplit(self.http if "://" in self.http else f"http://{self.http}")
        auth = None
        if parts.username:
            pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            auth = "Basic " + base64.b64encode(pair.encode()).decode()
        return f"{parts.hostname}:{parts.port or 80}", auth


@dataclass(frozen=True)
class Served:
    """What one run serves its builds on loopback: index URL -> the URL pip is given (its proxy); wheelhouse folder
    -> the URL pip is given (find-links); and what a build that uses either is given besides (Docker's predefined
    proxy build args, with the run's token)."""

    urls: Mapping[str, str] = field(default_factory=dict)
    wheelhouses: Mapping[Path, str] = field(default_factory=dict)
    token: str = field(default="", repr=False)  # never printed: a known secret of the run
    port: int = 0  # where the builds' http_proxy points
    upstream: Upstream = field(default_factory=Upstream)

    def build_args(self) -> dict[str, str]:
        """`http_proxy` and `HTTP_PROXY` for a build that uses an index proxy or a wheelhouse (none when the run
        serves neither), and the client config's `noProxy` without loopback names."""
        if not self.urls and not self.wheelhouses:
            return {}
        proxy = f"http://{PROXY_USER}:{self.token}@127.0.0.1:{self.port}"
        out = {"http_proxy": proxy, "HTTP_PROXY": proxy}
        no_proxy = self.upstream.builds_no_proxy()
        if no_proxy is not None:
            out.update(no_proxy=no_proxy, NO_PROXY=no_proxy)
        return out


@contextlib.contextmanager
def serve_indexes(indexes: Mapping[str, Credentials], cafile: Path | None = None,
                  upstream: Upstream | None = None, wheelhouses: Iterable[Path] = (),
                  pinned: Mapping[Path, tuple[tuple[str, str], ...]] | None = None) -> Iterator[Served]:
    """A proxy on 127.0.0.1 for each index URL that needs credentials and a server for each wheelhouse folder,
    each serving only requests that carry this run's token (see above); other plain-HTTP origins through
    `upstream`'s proxy where it has one. `pinned`: a locked wheelhouse's files (name, `sha256:<hex>`): only they
    are listed and served, each link with its `#sha256=` for pip to check the bytes it gets."""
    upstream = upstream or Upstream()
    servers: list[http.server.ThreadingHTTPServer] = []
    urls: dict[str, str] = {}
    context = ssl.create_default_context(cafile=str(cafile) if cafile else None)
    token = secrets.token_urlsafe(24)
    routes: dict[str, tuple[str, str, str, str]] = {}  # own address -> (scheme, netloc, Authorization, root path)
    expected = "Basic " + base64.b64encode(f"{PROXY_USER}:{token}".encode()).decode()
    pins = {str(folder): dict(files) for folder, files in (pinned or {}).items()}
    handler = functools.partial(_IndexProxy, routes, expected, context, upstream, pins)

    def start(port: int, route: tuple[str, str, str, str]) -> str:
        """A server of this run on `port` (or any free one) for `route`: the address its builds are given. That is
        `127.0.0.1:<port>` also where another process holds the port (two runs at once of one wheelhouse or
        index): every request a build makes comes through this run's proxy (http_proxy, with the run's token),
        which routes by the address the request names, so the build args, and the engine's cache keys with
        them, stay the same."""
        server = _server(port, handler)
        servers.append(server)
        own = f"127.0.0.1:{server.server_address[1]}"
        routes[own] = route
        stable = f"127.0.0.1:{port}"
        return stable if routes.setdefault(stable, route) == route else own

    with _serving(servers):
        for url, creds in sorted(indexes.items()):
            parts = urllib.parse.urlsplit(url)
            own = start(stable_port(url), (parts.scheme, parts.netloc, creds.header(), index_root(parts.path)))
            urls[url] = urllib.parse.urlunsplit(("http", own, parts.path, parts.query, ""))
        folders = {folder: f"http://{start(wheelhouse_port(folder), (WHEELHOUSE, str(folder), '', '/'))}/"
                   for folder in sorted(set(wheelhouses))}
        yield Served(urls, folders, token, servers[0].server_address[1] if servers else 0, upstream)


def index_root(path: str) -> str:
    """The path an index's credentials are lent for: its URL's path, less a last `simple`/`+simple` segment (where
    PyPI-style repositories keep their files: Artifactory's `.../packages/`, devpi's `.../+f/`), ending in `/`."""
    parts = [p for p in path.split("/") if p]
    if parts and parts[-1] in ("simple", "+simple"):
        parts = parts[:-1]
    return "/" + "".join(f"{p}/" for p in parts)


def under(path: str, root: str) -> bool:
    """Whether a request's path is under `root`, read as the index's server reads it (percent-decoded; any `..`
    or `.` segment refused)."""
    plain = urllib.parse.unquote(urllib.parse.urlsplit(path).path or "/")
    if any(segment in ("..", ".") for segment in plain.split("/")) or "\\" in plain:
        return False
    return (plain if plain.endswith("/") else plain + "/").startswith(root)


class _IndexProxy(http.server.BaseHTTPRequestHandler):
    """A plain-HTTP proxy for the builds of one run: a request without the run's token is refused (407); one for
    an index this run proxies goes there with its credentials (GET/HEAD; its own links and redirects point back
    here); any other plain-HTTP GET/HEAD goes on as it came, with no credentials. A request may come in proxy
    form (`GET http://host/path`, from a client told `http_proxy`) or straight to an index's own port (with the
    token in `Proxy-Authorization` all the same)."""

    protocol_version = "HTTP/1.1"

    def __init__(self, routes: Mapping[str, tuple[str, str, str, str]], expected: str, context: ssl.SSLContext,
                 upstream: Upstream, pins: Mapping[str, Mapping[str, str]], *args: Any) -> None:
        self.routes, self.expected, self.ssl_context, self.upstream = routes, expected, context, upstream
        self.pins = pins
        super().__init__(*args)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_HEAD(self) -> None:
        self.handle_one(body=False)

    def do_GET(self) -> None:
        self.handle_one(body=True)

    def do_CONNECT(self) -> None:  # HTTPS is not proxied (https_proxy is never set)
        self.refuse(405, "imagebuilder's index proxy does not tunnel")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_CONNECT

    def refuse(self, status: int, why: str, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status, why)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def handle_one(self, *, body: bool) -> None:
        given = self.headers.get("Proxy-Authorization", "").encode("latin-1")  # (as http.server decoded it)
        if not hmac.compare_digest(given, self.expected.encode()):
            return self.refuse(407, "this proxy serves only the builds of its imagebuilder run",
                               {"Proxy-Authenticate": 'Basic realm="imagebuilder"'})
        target = urllib.parse.urlsplit(self.path)
        if target.scheme:  # proxy form: the client names the origin
            if target.scheme != "http":
                return self.refuse(400, "only plain-HTTP requests are proxied")
            authority, path = target.netloc, urllib.parse.urlunsplit(("", "", target.path, target.query, ""))
        else:
            authority, path = self.headers.get("Host") or "", self.path
        route = self.routes.get(authority)
        if route is None:  # not an index of this run's: passed on as it came, without credentials
            via = self.upstream.route(authority)
            if via is not None:  # through the client config's proxy, in proxy form
                return self.forward("http", via[0], f"http://{authority}{path}", None, local=None, body=body,
                                    proxy_authorization=via[1])
            return self.forward("http", authority, path, None, local=None, body=body)
        scheme, netloc, authorization, root = route
        if scheme == WHEELHOUSE:
            return self.wheelhouse(Path(netloc), path, body=body)
        if not under(path, root):
            return self.refuse(403, f"only paths under {root} of this index are proxied")
        return self.forward(scheme, netloc, path, authorization, local=f"http://{authority}", body=body)

    def wheelhouse(self, folder: Path, path: str, *, body: bool) -> None:
        """`/`: the folder's files as links (pip's find-links); `/<name>`: that file. The folder's own regular files
        only (a link to one counts, as it does in the node's key: `keys.wheelhouse`): no subfolder, no `..`, no
        name that is not UTF-8 (404). A file that goes away or changes size while it is sent ends the answer short,
        never with another file's bytes. A locked wheelhouse lists and serves the files its lock pins only, each
        link with the pinned hash (`#sha256=`: pip refuses a download whose bytes are not those)."""
        plain = urllib.parse.unquote(urllib.parse.urlsplit(path).path or "/")
        pins = self.pins.get(str(folder))
        if plain == "/":
            names = [n for n in served_files(folder) if pins is None or n in pins]
            links = "".join(f'<a href="{urllib.parse.quote(name)}{_fragment(pins, name)}">{html.escape(name)}</a><br>\n'
                            for name in names)
            data = f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n".encode()
            return self.answer(200, "text/html; charset=utf-8", len(data), io.BytesIO(data) if body else None)
        name = plain[1:]
        unpinned = pins is not None and name not in pins
        if "/" in name or name in ("", ".", "..") or unpinned or not served(folder / name):
            return self.refuse(404, "no such file in this wheelhouse")
        try:
            handle = (folder / name).open("rb")
        except OSError:
            return self.refuse(404, "no such file in this wheelhouse")
        with handle:
            size = os.fstat(handle.fileno()).st_size
            return self.answer(200, "application/octet-stream", size, handle if body else None)

    def answer(self, status: int, kind: str, length: int, data: BinaryIO | None) -> None:
        """A whole answer of `length` bytes (from `data`; none for HEAD). A client gone mid-answer (a build
        cancelled) ends it quietly."""
        self.close_connection = True
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(length))
            self.send_header("Connection", "close")
            self.end_headers()
            left = length if data is not None else 0
            while left > 0 and data is not None and (chunk := data.read(min(left, 1 << 20))):
                self.wfile.write(chunk)
                left -= len(chunk)
        except (ConnectionError, TimeoutError):
            pass

    def forward(self, scheme: str, netloc: str, path: str, authorization: str | None, *, local: str | None,
                body: bool, proxy_authorization: str | None = None) -> None:
        """The request to `scheme://netloc` (with `authorization`; a proxy's with `proxy_authorization`); the
        answer back, an index's own links and redirects pointing at `local`."""
        upstream = f"{scheme}://{netloc}"
        conn: http.client.HTTPConnection = (
            http.client.HTTPSConnection(netloc, timeout=120, context=self.ssl_context)
            if scheme == "https" else http.client.HTTPConnection(netloc, timeout=120))
        try:
            headers = {**({"Authorization": authorization} if authorization else {}),
                       **({"Proxy-Authorization": proxy_authorization} if proxy_authorization else {}),
                       "Accept-Encoding": "identity",
                       **{k: v for k, v in self.headers.items() if k.lower() in ("accept", "user-agent", "range")}}
            conn.request(self.command, path or "/", headers=headers)
            response = conn.getresponse()
            data = response.read() if body and local and self._rewritten(response) else None
            if data is not None and local is not None:
                data = data.replace(upstream.encode(), local.encode())
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() in _HOP_HEADERS or name.lower() in ("www-authenticate", "set-cookie"):
                    continue
                if local is not None and name.lower() == "location" and value.startswith(upstream):
                    value = local + value[len(upstream):]
                self.send_header(name, value)
            length = len(data) if data is not None else response.getheader("Content-Length")
            if length is not None:
                self.send_header("Content-Length", str(length))
            self.send_header("Connection", "close")
            self.end_headers()
            if body:
                if data is not None:
                    self.wfile.write(data)
                else:
                    while chunk := response.read(1 << 20):
                        self.wfile.write(chunk)
        except (OSError, http.client.HTTPException) as exc:
            self.send_error(502, f"{upstream} unreachable: {type(exc).__name__}")
        finally:
            conn.close()
            self.close_connection = True

    @staticmethod
    def _rewritten(response: http.client.HTTPResponse) -> bool:
        kind = (response.getheader("Content-Type") or "").lower()
        return kind.startswith(_REWRITTEN)


def _fragment(pins: Mapping[str, str] | None, name: str) -> str:
    """A find-links link's hash fragment: `#sha256=<hex>` of a locked file; "" for a wheelhouse with no lock."""
    return "" if pins is None else "#" + pins[name].replace(":", "=", 1)


def index_credentials_of(plan: Plan, env: Mapping[str, str]) -> dict[str, Credentials]:
    """The index URLs this plan's builds use that have credentials (environment or ~/.netrc)."""
    urls = {url for node in plan.nodes if node.status != State.CACHED
            for name, url in build_args(node.entry).items() if name in declared(node.rendered.dockerfile)}
    return {url: creds for url in sorted(urls) if (creds := index_credentials(url, env)) is not None}


def index_passwords(creds: Mapping[str, Credentials]) -> list[tuple[str, str]]:
    """Each index password, named for the redaction of logs and reports."""
    return [(f"the password for index {url} ({c.source})", c.password) for url, c in creds.items()]
