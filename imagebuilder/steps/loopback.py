"""What a build reaches on 127.0.0.1 for the length of a run (builds use host networking): the wheelhouses,
served as pip find-links, and a proxy for every package index that needs credentials.

Index credentials (`secrets/index_auth.py`: `~/.netrc` by host, or the environment's pair for the hosts
`IMAGEBUILDER_INDEX_HOSTS` names) never enter a Dockerfile, a build arg, a layer, the history, a label or
an ENV: pip is pointed at the proxy (`http://127.0.0.1:<port>/...`, through the build arg the text
declares), and the proxy adds the
`Authorization` header on its way to the index. Links in the index's pages that point back to the index are
rewritten to the proxy; links to other hosts, and redirects to them, go there directly, without credentials.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import http.server
import ssl
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..plan.render import stable_port, wheelhouse_port
from ..secrets.index_auth import Credentials, index_credentials

__all__ = ["Credentials", "index_credentials", "serve_indexes", "serve_wheelhouses"]

_REWRITTEN = ("text/html", "application/vnd.pypi.simple", "application/json")
_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                          "proxy-authorization", "proxy-authenticate", "content-length", "content-encoding"})


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


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


@contextlib.contextmanager
def serve_wheelhouses(folders: set[Path]) -> Iterator[dict[Path, str]]:
    """Serve each wheelhouse over HTTP for the length of the run, so wheels are offered to pip as find-links
    without ever being copied into a layer."""
    servers: list[http.server.ThreadingHTTPServer] = []
    urls: dict[Path, str] = {}
    with _serving(servers):
        for folder in sorted(folders):
            server = _server(wheelhouse_port(folder), functools.partial(_Quiet, directory=str(folder)))
            servers.append(server)
            urls[folder] = f"http://127.0.0.1:{server.server_address[1]}/"
        yield urls


@contextlib.contextmanager
def serve_indexes(indexes: Mapping[str, Credentials], cafile: Path | None = None) -> Iterator[dict[str, str]]:
    """A proxy on 127.0.0.1 for each index URL that needs credentials: index URL -> the URL pip is given."""
    servers: list[http.server.ThreadingHTTPServer] = []
    urls: dict[str, str] = {}
    context = ssl.create_default_context(cafile=str(cafile) if cafile else None)
    with _serving(servers):
        for url, creds in sorted(indexes.items()):
            parts = urllib.parse.urlsplit(url)
            handler = functools.partial(_IndexProxy, parts.scheme, parts.netloc, creds.header(), context)
            server = _server(stable_port(url), handler)
            servers.append(server)
            urls[url] = urllib.parse.urlunsplit(("http", f"127.0.0.1:{server.server_address[1]}", parts.path,
                                                 parts.query, ""))
        yield urls


class _IndexProxy(http.server.BaseHTTPRequestHandler):
    """GET/HEAD to one index origin, with its credentials added; its own links and redirects point back here."""

    protocol_version = "HTTP/1.1"

    def __init__(self, scheme: str, netloc: str, authorization: str, context: ssl.SSLContext,
                 *args: Any) -> None:
        self.upstream_scheme, self.upstream_netloc = scheme, netloc
        self.authorization, self.ssl_context = authorization, context
        super().__init__(*args)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_HEAD(self) -> None:
        self.forward(body=False)

    def do_GET(self) -> None:
        self.forward(body=True)

    def forward(self, *, body: bool) -> None:
        upstream = f"{self.upstream_scheme}://{self.upstream_netloc}"
        local = f"http://{self.headers.get('Host') or '127.0.0.1'}"
        conn: http.client.HTTPConnection = (
            http.client.HTTPSConnection(self.upstream_netloc, timeout=120, context=self.ssl_context)
            if self.upstream_scheme == "https" else http.client.HTTPConnection(self.upstream_netloc, timeout=120))
        try:
            headers = {"Authorization": self.authorization, "Accept-Encoding": "identity",
                       **{k: v for k, v in self.headers.items() if k.lower() in ("accept", "user-agent", "range")}}
            conn.request(self.command, self.path, headers=headers)
            response = conn.getresponse()
            data = response.read() if body and self._rewritten(response) else None
            if data is not None:
                data = data.replace(upstream.encode(), local.encode())
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() in _HOP_HEADERS or name.lower() in ("www-authenticate", "set-cookie"):
                    continue
                if name.lower() == "location" and value.startswith(upstream):
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
            self.send_error(502, f"index {upstream} unreachable: {type(exc).__name__}")
        finally:
            conn.close()
            self.close_connection = True

    @staticmethod
    def _rewritten(response: http.client.HTTPResponse) -> bool:
        kind = (response.getheader("Content-Type") or "").lower()
        return kind.startswith(_REWRITTEN)
