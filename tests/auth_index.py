"""A package index on loopback that answers only requests with the right Authorization header (401 with a Basic
challenge otherwise) and records every Authorization header it was sent: the upstream of the loopback-proxy
unit tests and of the integration test whose index needs credentials."""

from __future__ import annotations

import base64
import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator
from typing import Any

# (path, the server's port) -> (status, headers, body)
Respond = Callable[[str, int], tuple[int, dict[str, str], bytes]]


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@contextlib.contextmanager
def auth_index(expected: str, respond: Respond) -> Iterator[tuple[str, list[str]]]:
    """(the index's URL, ending in /simple; the Authorization headers it saw, "" where none was sent)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization") or "")
            if self.headers.get("Authorization") != expected:
                status, headers, body = 401, {"WWW-Authenticate": 'Basic realm="index"'}, b""
            else:
                status, headers, body = respond(self.path, server.server_port)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", seen
    finally:
        server.shutdown()
        server.server_close()
