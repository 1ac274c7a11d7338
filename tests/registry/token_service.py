"""A registry token service for the tests, as GHCR, Harbor or GitLab run one: the Docker token authentication
protocol (a GET of the realm with Basic credentials and `scope` parameters; a JWT back) over TLS, for a
Distribution registry that trusts its signing certificate (`auth.token.rootcertbundle`).

Runs in a service container (tests/registry/compose.yaml) with Debian's python3 and python3-cryptography; the
tests' fixture writes its configuration (tests/integration/secure_registry.py):

    {"service": ..., "issuer": ..., "lifetime": seconds,
     "keys": {"NAME": {"cert": PEM file, "key": PEM file}, ...},     # "trusted" signs unless a user says
     "users": {"NAME": {"password": ..., "actions": ["pull", ...], "key": "trusted", "expired": epoch or null}}}

A user gets, for each repository asked, the intersection of what was asked and its `actions` (a pull-only user
asking for push gets a token for pull: the registry then refuses the push, as real ones do). A wrong password,
an unknown user or a credential past its `expired` time is a 401 with a JSON error body; no credentials at all
is a 401 too (nothing here is public). Every token issued is appended to the state folder's `issued.log`, so a
test can show that none of them was ever printed.
"""

from __future__ import annotations

import argparse
import base64
import hmac
import http.server
import json
import socket
import ssl
import threading
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Service:
    def __init__(self, config: dict[str, Any], folder: Path, state: Path) -> None:
        self.config = config
        self.state = state
        self.lock = threading.Lock()
        self.signers = {}
        for name, files in config["keys"].items():
            cert = x509.load_pem_x509_certificate((folder / files["cert"]).read_bytes())
            key = serialization.load_pem_private_key((folder / files["key"]).read_bytes(), password=None)
            self.signers[name] = (base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode(), key)

    def user(self, header: str) -> tuple[str | None, str | None]:
        """(user, None) for good credentials, else (None, why)."""
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic" or not value:
            return None, "authentication required: this registry has no anonymous access"
        try:
            name, _, password = base64.b64decode(value).decode().partition(":")
        except ValueError:
            return None, "malformed Basic credentials"
        user = self.config["users"].get(name)
        if user is None or not hmac.compare_digest(user["password"], password):
            return None, "incorrect username or password"
        if user.get("expired") is not None and time.time() > user["expired"]:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(user["expired"]))
            return None, f"the credential of user {name!r} expired at {stamp}"
        return name, None

    def access(self, name: str, scopes: list[str]) -> list[dict[str, Any]]:
        allowed = set(self.config["users"][name]["actions"])
        out = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            repository, _, actions = rest.rpartition(":")
            if kind != "repository" or not repository:
                continue
            granted = [a for a in actions.split(",") if a in allowed]
            out.append({"type": "repository", "name": repository, "actions": granted})
        return out

    def token(self, name: str, scopes: list[str]) -> dict[str, Any]:
        user = self.config["users"][name]
        chain, key = self.signers[user.get("key", "trusted")]
        now = int(time.time())
        lifetime = int(self.config["lifetime"])
        claims = {"iss": self.config["issuer"], "sub": name, "aud": self.config["service"], "iat": now,
                  "nbf": now - 5, "exp": now + lifetime, "jti": uuid.uuid4().hex, "access": self.access(name, scopes)}
        header = {"typ": "JWT", "alg": "RS256", "x5c": [chain]}
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        token = f"{signing_input}.{b64url(signature)}"
        with self.lock, (self.state / "issued.log").open("a", encoding="utf-8") as log:
            log.write(json.dumps({"user": name, "scopes": scopes, "token": token}) + "\n")
        issued = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        return {"token": token, "access_token": token, "expires_in": lifetime, "issued_at": issued}


def handler(service: Service) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/healthz":
                return self.reply(200, {"ok": True})
            if url.path != "/token":
                return self.reply(404, {"errors": [{"code": "NOT_FOUND", "message": url.path}]})
            query = urllib.parse.parse_qs(url.query)
            if query.get("service", [""])[0] != service.config["service"]:
                return self.reply(400, {"errors": [{"code": "BAD_REQUEST", "message": "unknown service"}]})
            name, why = service.user(self.headers.get("Authorization", ""))
            if name is None:
                return self.reply(401, {"errors": [{"code": "UNAUTHORIZED", "message": why}]},
                                  {"WWW-Authenticate": 'Basic realm="imagebuilder-itest"'})
            scopes = [s for value in query.get("scope", []) for s in value.split()]
            return self.reply(200, service.token(name, scopes))

        def reply(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass  # the query names users and scopes, never secrets; still, nothing is logged

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="host:port, or [v6 address]:port")
    parser.add_argument("--config", required=True, type=Path, help="the JSON above; files relative to its folder")
    parser.add_argument("--tls-cert", required=True, type=Path)
    parser.add_argument("--tls-key", required=True, type=Path)
    parser.add_argument("--state", required=True, type=Path, help="a writable folder for issued.log")
    args = parser.parse_args()
    config = json.loads(args.config.read_text(encoding="utf-8"))
    service = Service(config, args.config.parent, args.state)
    host, _, port = args.listen.rpartition(":")

    class Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6 if host.startswith("[") else socket.AF_INET

    server = Server((host.strip("[]"), int(port)), handler(service))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(args.tls_cert), str(args.tls_key))
    # the handshake happens in each request's thread (not in accept): a client that stalls holds up only itself
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    server.serve_forever()


if __name__ == "__main__":
    main()
