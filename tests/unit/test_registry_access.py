"""Who a registry lets in, and over what: TLS checked against the system's CAs, --registry-ca and certs.d (real TLS
servers on loopback); plain HTTP only where allowed and the registry speaks no TLS; Bearer tokens asked per scope
from the realm the registry names, renewed when refused as expired; a token service that refuses the credentials,
a registry that refuses a fresh token and an untrusted certificate are `RegistryAccess` errors that name who and
what, never a secret; `can_push` asks without writing. The steps ask it before anything builds or moves."""

from __future__ import annotations

import base64
import datetime
import http.server
import ipaddress
import json
import os
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from imagebuilder.errors import EngineError, InputError, RegistryAccess
from imagebuilder.ports import engine as engine_mod
from imagebuilder.ports.credentials import credentials
from imagebuilder.ports.registry import Registry
from imagebuilder.ports.tls import RegistryTrust

HOST = "reg.example:5000"
REALM = "https://auth.example/token"
CHALLENGE = f'Bearer realm="{REALM}",service="reg",scope="repository:ml/x:pull"'


# -- a scripted registry and token service -----------------------------------------------------------------

@dataclass
class Script:
    """A requests session: each request is answered by the first rule whose method and URL prefix match."""

    rules: list[tuple[str, str, Callable[[dict[str, Any]], tuple[int, dict[str, str], Any]]]]
    asked: list[dict[str, Any]] = field(default_factory=list)

    def request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        call = {"method": method, "url": url, **kwargs, "headers": dict(kwargs.get("headers") or {})}
        self.asked.append(call)
        for rule_method, prefix, answer in self.rules:
            if method == rule_method and url.startswith(prefix):
                status, headers, body = answer(call)
                resp = requests.Response()
                resp.status_code, resp.reason = status, {200: "OK", 202: "Accepted", 401: "Unauthorized"}.get(
                    status, "?")
                resp.headers.update(headers)
                resp._content = json.dumps(body).encode() if body is not None else b""
                resp.url = url
                return resp
        raise AssertionError(f"unexpected {method} {url}")

    def get(self, url: str, **kwargs: Any) -> requests.Response:
        return self.request("GET", url, **kwargs)

    def mount(self, prefix: str, adapter: Any) -> None:
        pass


def bearer(call: dict[str, Any]) -> str:
    return str((call.get("headers") or {}).get("Authorization", ""))


def client(script: Script, auth: tuple[str, str] | None = ("robot", "s3cret-pw"),
           realms: frozenset[str] = frozenset({"auth.example"})) -> Registry:
    """A client of HOST whose token service (REALM, on another host) is listed (IMAGEBUILDER_REGISTRY_HOSTS)."""
    return Registry(HOST, auth=auth, attempts=1, realms=realms, _session=script)  # type: ignore[arg-type]


def test_tokens_are_asked_per_scope_with_every_scope_a_parameter_and_renewed_when_refused() -> None:
    issued: list[str] = []

    def token(call: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        issued.append(f"tok-{len(issued)}")
        return 200, {}, {"token": issued[-1], "expires_in": 300}

    def manifest(call: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        ok = bool(issued) and bearer(call) == f"Bearer {issued[-1]}"
        return (200, {"Docker-Content-Digest": "sha256:" + "a" * 64}, None) if ok else \
            (401, {"WWW-Authenticate": CHALLENGE + ',error="invalid_token"'}, None)

    script = Script([("GET", REALM, token), ("HEAD", f"https://{HOST}/v2/ml/x/manifests/", manifest),
                     ("POST", f"https://{HOST}/v2/ml/y/blobs/uploads/",
                      lambda call: (401, {"WWW-Authenticate": CHALLENGE}, None) if not bearer(call) else
                      (201, {}, None))])
    reg = client(script)
    # A token held from before expired (the registry says invalid_token): a new one is asked for, and used.
    reg._token["repository:ml/x:pull"] = "Bearer stale"
    assert reg.manifest_digest("ml/x", "cache-1") == "sha256:" + "a" * 64
    realm_calls = [c for c in script.asked if c["url"] == REALM]
    assert len(realm_calls) == 1 and realm_calls[0]["auth"] == ("robot", "s3cret-pw")
    assert [bearer(c) for c in script.asked if c["method"] == "HEAD"] == ["Bearer stale", "Bearer tok-0"]
    assert ("scope", "repository:ml/x:pull") in realm_calls[0]["params"] and ("service", "reg") in \
        realm_calls[0]["params"]
    # A mount needs two scopes: each its own `scope` parameter, as the token protocol has them.
    reg._request("POST", "ml/y/blobs/uploads/?mount=sha256:b&from=ml/x",
                 scope="repository:ml/y:pull,push repository:ml/x:pull")
    last = [c for c in script.asked if c["url"] == REALM][-1]["params"]
    assert [v for k, v in last if k == "scope"] == ["repository:ml/y:pull,push", "repository:ml/x:pull"]


def test_a_token_service_that_refuses_the_credentials_is_one_error_naming_the_user_never_the_password() -> None:
    script = Script([("GET", REALM, lambda call: (401, {}, {"errors": [{"code": "UNAUTHORIZED", "message":
                                                                         "the credential expired"}]})),
                     ("HEAD", f"https://{HOST}/v2/", lambda call: (401, {"WWW-Authenticate": CHALLENGE}, None))])
    with pytest.raises(RegistryAccess) as caught:
        client(script).manifest_digest("ml/x", "latest")
    text = str(caught.value)
    assert caught.value.exit_code == 2
    assert text.startswith(f"registry {HOST}: its token service {REALM} refused the credentials of user 'robot' "
                           "(HTTP 401: UNAUTHORIZED: the credential expired)")
    assert "s3cret-pw" not in text and "docker login" in text
    with pytest.raises(RegistryAccess, match="wants credentials, and none were given"):
        client(script, auth=None).manifest_digest("ml/x", "latest")
    assert len(script.asked) == 4  # never retried: the set-up must change


def test_a_fresh_token_the_registry_refuses_is_not_asked_for_again_and_again() -> None:
    script = Script([("GET", REALM, lambda call: (200, {}, {"access_token": "forged"})),
                     ("HEAD", f"https://{HOST}/v2/", lambda call: (401, {"WWW-Authenticate": CHALLENGE + (
                         ',error="invalid_token"' if bearer(call) else "")}, None))])
    with pytest.raises(RegistryAccess, match=r"refused the token its token service issued to user 'robot' "
                       r"\(invalid_token: Unauthorized\)"):
        client(script).manifest_digest("ml/x", "latest")
    assert len(script.asked) == 3  # the request, the token, the request with it: then the error


def test_credentials_never_go_to_a_plain_http_token_service_off_loopback() -> None:
    plain = 'Bearer realm="http://auth.example/token",service="reg"'
    script = Script([("HEAD", f"https://{HOST}/v2/", lambda call: (401, {"WWW-Authenticate": plain}, None))])
    with pytest.raises(RegistryAccess, match="is plain HTTP; the credentials of user 'robot' are not sent there"):
        client(script).manifest_digest("ml/x", "latest")
    assert [c["url"] for c in script.asked] == [f"https://{HOST}/v2/ml/x/manifests/latest"]


def test_can_push_starts_and_cancels_an_upload_and_says_who_may_not() -> None:
    location = f"https://{HOST}/v2/ml/x/blobs/uploads/uuid-1?_state=s"
    script = Script([("POST", f"https://{HOST}/v2/ml/x/", lambda call: (202, {"Location": location}, None)),
                     ("DELETE", location, lambda call: (204, {}, None)),
                     ("POST", f"https://{HOST}/v2/ml/ro/", lambda call: (401, {}, {"errors": [
                         {"code": "UNAUTHORIZED", "message": "authentication required"}]}))])
    reg = client(script, auth=("reader", "pw"))
    assert reg.can_push("ml/x") is None and reg.can_push("ml/x") is None  # asked once per repository
    assert [c["method"] for c in script.asked] == ["POST", "DELETE"]
    assert reg.can_push("ml/ro") == (f"user 'reader' may not push to {HOST}/ml/ro (HTTP 401: UNAUTHORIZED: "
                                     "authentication required)")


@pytest.mark.parametrize(("body", "said"), [
    ({"errors": [{"code": "DENIED", "message": "requested access to the resource is denied"}]},
     "DENIED: requested access to the resource is denied"),
    ({"error": "invalid_grant", "error_description": "token expired"}, "token expired"),
    ({"details": "incorrect username or password"}, "incorrect username or password"),
    ("<html>", "Unauthorized"),
])
def test_what_a_registry_said_is_read_from_each_common_error_body(body: Any, said: str) -> None:
    script = Script([("PUT", f"https://{HOST}/v2/", lambda call: (401, {}, body))])
    with pytest.raises(EngineError) as caught:
        client(script).put_manifest("ml/x", "t", b"{}", "application/json")
    assert str(caught.value) == f"registry {HOST}: PUT ml/x:t: user 'robot' may not push to {HOST}/ml/x (HTTP " \
                                f"401: {said})"


# -- real TLS on loopback ----------------------------------------------------------------------------------

def _cert(key: ec.EllipticCurvePrivateKey, name: str, issuer: tuple[x509.Certificate, Any] | None = None,
          ca: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer[0].subject if issuer else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(hours=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


@dataclass
class Served:
    host: str
    ca: Path


class V2(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"name": "ml/x", "tags": ["t"]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[bool], Served]]:
    """A /v2/ on a free loopback port, over TLS (a certificate signed by a CA of the test's own) or plain HTTP."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(over_tls: bool) -> Served:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), V2)
        ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
        ca = _cert(ca_key, "test CA", ca=True)
        (tmp_path / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        if over_tls:
            (tmp_path / "server.pem").write_bytes(_cert(key, "server", (ca, ca_key)).public_bytes(
                serialization.Encoding.PEM) + key.private_bytes(serialization.Encoding.PEM,
                                                                serialization.PrivateFormat.PKCS8,
                                                                serialization.NoEncryption()))
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tmp_path / "server.pem"))
            server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return Served(f"127.0.0.1:{server.server_address[1]}", tmp_path / "ca.crt")

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_certificate_no_trusted_ca_signs_is_refused_even_on_loopback(serve: Callable[[bool], Served]) -> None:
    served = serve(True)
    with pytest.raises(RegistryAccess) as caught:
        Registry(served.host, insecure=True, attempts=1).tags("ml/x")  # loopback: never plain HTTP instead
    assert str(caught.value).startswith(f"registry {served.host}: its TLS certificate is not trusted (unable to get "
                                        "local issuer certificate)")
    assert f"/etc/docker/certs.d/{served.host}/ca.crt" in str(caught.value)
    assert Registry(served.host, insecure=True, cafiles=(served.ca,)).tags("ml/x") == ["t"]  # --registry-ca


def test_certs_d_gives_a_registry_its_ca(serve: Callable[[bool], Served], tmp_path: Path) -> None:
    served = serve(True)
    folder = tmp_path / "certs.d" / served.host
    folder.mkdir(parents=True)
    (folder / "ca.crt").write_bytes(served.ca.read_bytes())
    trust = RegistryTrust(certs_d=tmp_path / "certs.d")
    assert trust.files(served.host) == [folder / "ca.crt"] and trust.files("other:5000") == []
    assert Registry.for_host(served.host, trust=trust).tags("ml/x") == ["t"]


def test_plain_http_only_where_allowed_and_the_registry_speaks_no_tls(serve: Callable[[bool], Served]) -> None:
    served = serve(False)
    reg = Registry(served.host, insecure=True, attempts=1)
    assert reg.tags("ml/x") == ["t"] and reg.base.startswith("http://")
    with pytest.raises(RegistryAccess, match=f"registry {served.host} answered in plain HTTP, not TLS"):
        Registry(served.host, insecure=False, attempts=1).tags("ml/x")


def test_the_engine_says_where_it_looks_for_a_registry_ca() -> None:
    said = engine_mod._untrusted("reg.example:5000/ml/x:t", 'push reg.example:5000/ml/x:t: Get "https://reg.example:'
                                 '5000/v2/": x509: certificate signed by unknown authority')
    assert said.endswith("; the engine does not trust reg.example:5000's certificate: put its CA in "
                         "/etc/docker/certs.d/reg.example:5000/ca.crt on the engine's host")
    assert engine_mod._untrusted("r/x", "push r/x: denied") == "push r/x: denied"


def test_basic_challenge_still_works() -> None:
    basic = 'Basic realm="itest"'
    script = Script([("GET", f"https://{HOST}/v2/ml/x/tags/", lambda call: (200, {}, {"tags": ["a"]}) if bearer(
        call) == "Basic " + base64.b64encode(b"robot:s3cret-pw").decode() else (401, {"WWW-Authenticate": basic},
                                                                                None))])
    assert client(script).tags("ml/x") == ["a"]
    assert urllib.parse.urlsplit(script.asked[-1]["url"]).path == "/v2/ml/x/tags/list"


# -- credentials as the Docker client finds them -------------------------------------------------------------

def test_credentials_come_from_the_helper_the_docker_config_names(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """credHelpers for a registry, else credsStore, else auths; a real helper program on PATH, asked `get` with the
    registry on stdin, as the Docker client asks it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-itest"
    helper.write_text("#!/bin/sh\n[ \"$1\" = get ] || exit 3\nread server\ncase \"$server\" in\n"
                      "  ecr.example:5000) echo '{\"ServerURL\":\"x\",\"Username\":\"AWS\",\"Secret\":\"ecr-pw\"}' ;;\n"
                      "  https://index.docker.io/v1/) echo '{\"Username\":\"hubber\",\"Secret\":\"hub-pw\"}' ;;\n"
                      "  acr.example) echo '{\"Username\":\"<token>\",\"Secret\":\"refresh\"}' ;;\n"
                      "  *) echo 'credentials not found in native keychain'; exit 1 ;;\nesac\n")
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    config = tmp_path / "docker"
    config.mkdir()
    env = {"DOCKER_CONFIG": str(config)}

    def write(doc: dict[str, Any]) -> None:
        (config / "config.json").write_text(json.dumps(doc))

    write({"credHelpers": {"ecr.example:5000": "itest"},
           "auths": {"file.example": {"auth": base64.b64encode(b"robot:file-pw").decode()}}})
    assert credentials("ecr.example:5000", env) == ("AWS", "ecr-pw")
    assert credentials("file.example", env) == ("robot", "file-pw")  # no helper for it: the file's entry
    write({"credsStore": "itest", "auths": {"file.example": {}}})
    assert credentials("docker.io", env) == ("hubber", "hub-pw")  # Docker Hub under its server name
    assert credentials("file.example", env) is None  # the store has nothing for it
    with pytest.raises(RegistryAccess, match="holds an identity token") as caught:
        credentials("acr.example", env)
    assert "refresh" not in str(caught.value)
    write({"credsStore": "missing"})
    with pytest.raises(RegistryAccess, match=r"names the credential helper 'missing' for reg.example, and "
                       r"docker-credential-missing could not be run"):
        credentials("reg.example", env)
    pair = {**env, "IMAGEBUILDER_REGISTRY_USER": "u", "IMAGEBUILDER_REGISTRY_PASSWORD": "p"}
    assert credentials("reg.example", pair, scope=("reg.example",)) == ("u", "p")  # the environment first


def test_a_tls_failure_of_the_network_is_retried_never_a_fallback_and_a_plain_answer_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    calls: list[str] = []

    def flaky(call: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        calls.append(call["url"])
        if len(calls) == 1:
            raise requests.exceptions.SSLError("EOF occurred in violation of protocol (_ssl.c:2427)")
        return 200, {}, {"tags": ["t"]}

    script = Script([("GET", f"https://{HOST}/v2/", flaky)])
    reg = Registry(HOST, insecure=True, attempts=2, _session=script)  # type: ignore[arg-type]
    assert reg.tags("ml/x") == ["t"] and reg.base.startswith("https://")  # retried over TLS; no plain HTTP
    assert calls == [f"https://{HOST}/v2/ml/x/tags/list?n=1000"] * 2


def test_an_insecure_registry_named_without_a_port_is_plain_http_on_80_when_443_refuses() -> None:
    def refused(call: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        raise requests.exceptions.ConnectionError("Connection refused")

    script = Script([("GET", "https://registry.lan/v2/", refused),
                     ("GET", "http://registry.lan/v2/", lambda call: (200, {}, {"tags": ["t"]}))])
    assert Registry("registry.lan", insecure=True, attempts=1, _session=script).tags(  # type: ignore[arg-type]
        "ml/x") == ["t"]
    with pytest.raises(EngineError, match="unreachable"):  # with a port, HTTPS and HTTP would be the same port
        Registry("registry.lan:5000", insecure=True, attempts=1, _session=Script(  # type: ignore[arg-type]
            [("GET", "https://registry.lan:5000/v2/", refused)])).tags("ml/x")


def test_the_system_cas_count_and_a_broken_ca_file_is_named(serve: Callable[[bool], Served], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    served = serve(True)
    with pytest.raises(RegistryAccess, match="not trusted"):
        Registry(served.host, attempts=1).tags("ml/x")
    monkeypatch.setenv("SSL_CERT_FILE", str(served.ca))  # the system's CAs (OpenSSL's default file), as `update-
    assert Registry(served.host, attempts=1).tags("ml/x") == ["t"]  # ca-certificates` leaves them: trusted
    broken = tmp_path / "certs.d" / "reg.example:5000"
    broken.mkdir(parents=True)
    (broken / "ca.crt").write_text("not a certificate\n")
    with pytest.raises(InputError, match=r"certs.d/reg.example:5000/ca.crt: not a CA certificate file"):
        Registry.for_host("reg.example:5000", trust=RegistryTrust(certs_d=tmp_path / "certs.d"))


# -- which hosts get the environment's pair (audit N5, N20) ---------------------------------------------------

PAIR = {"IMAGEBUILDER_REGISTRY_USER": "ci-bot", "IMAGEBUILDER_REGISTRY_PASSWORD": "s3cret",
        "DOCKER_CONFIG": "/nonexistent"}


def test_the_environments_pair_goes_only_to_the_hosts_it_is_for() -> None:
    """The matrix's registry by default; IMAGEBUILDER_REGISTRY_HOSTS instead when set (a name without a port: any
    port); any other host gets the Docker config's, here none. Docker Hub's names are one registry."""
    assert credentials("registry.corp.example", PAIR, scope=("registry.corp.example",)) == ("ci-bot", "s3cret")
    for host in ("evil.example.net", "registry.corp.example.evil.net", "ghcr.io"):
        assert credentials(host, PAIR, scope=("registry.corp.example",)) is None, host
    assert credentials("registry.corp.example", PAIR) is None  # a command that reads no matrix: nowhere
    listed = {**PAIR, "IMAGEBUILDER_REGISTRY_HOSTS": "ghcr.io, reg.lan:5000"}
    assert credentials("ghcr.io", listed, scope=("registry.corp.example",)) == ("ci-bot", "s3cret")
    assert credentials("ghcr.io:443", listed) == ("ci-bot", "s3cret") and credentials("reg.lan:5000", listed)
    assert credentials("reg.lan:5001", listed) is None and credentials("registry.corp.example", listed,
                                                                       scope=("registry.corp.example",)) is None
    assert credentials("registry-1.docker.io", PAIR, scope=("docker.io",)) == ("ci-bot", "s3cret")


def test_a_token_service_on_another_host_gets_no_credentials_unless_listed() -> None:
    """The registry's token service on another host is asked without credentials (and, refusing, the error says
    what to list); on the registry's own host name, or listed, it gets them."""
    foreign = 'Bearer realm="https://evil.example/token",service="reg"'
    asked: list[Any] = []

    def token(call: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        asked.append(call.get("auth"))
        return (401, {}, {"details": "who are you"}) if call.get("auth") is None else (200, {}, {"token": "t"})

    script = Script([("GET", "https://evil.example/token", token),
                     ("HEAD", f"https://{HOST}/v2/", lambda call: (200, {"Docker-Content-Digest": "sha256:1"}, None)
                      if bearer(call) else (401, {"WWW-Authenticate": foreign}, None))])
    with pytest.raises(RegistryAccess, match=r"is on another host \(evil.example\); the credentials of user 'robot' "
                       r"were not sent there") as caught:
        client(script, realms=frozenset({HOST})).manifest_digest("ml/x", "latest")
    assert "s3cret-pw" not in str(caught.value) and "IMAGEBUILDER_REGISTRY_HOSTS" in str(caught.value.hint)
    assert asked == [None]
    assert client(script, realms=frozenset({HOST, "evil.example"})).manifest_digest("ml/x", "latest") == "sha256:1"
    assert asked[-1] == ("robot", "s3cret-pw")
    own = 'Bearer realm="https://reg.example:5001/token",service="reg"'
    script = Script([("GET", "https://reg.example:5001/token", token),
                     ("HEAD", f"https://{HOST}/v2/", lambda call: (200, {"Docker-Content-Digest": "sha256:2"}, None)
                      if bearer(call) else (401, {"WWW-Authenticate": own}, None))])
    assert client(script, realms=frozenset()).manifest_digest("ml/x", "latest") == "sha256:2"
    assert asked[-1] == ("robot", "s3cret-pw")


def test_an_insecure_registry_off_loopback_gets_no_credentials_unless_the_environment_allows_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """N20: plain HTTP off loopback carries no credentials, to imagebuilder's client or the engine (`auth` is what
    the engine is given); IMAGEBUILDER_REGISTRY_PLAIN_HTTP_AUTH=1 allows it. Loopback keeps them."""
    for key, value in PAIR.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("IMAGEBUILDER_REGISTRY_HOSTS", "registry.lan 127.0.0.1:5000")
    plain = Registry.for_host("registry.lan", ("registry.lan",))
    assert plain.auth is None and plain.insecure and "insecure registry" in plain.who
    assert Registry.for_host("registry.lan").auth == ("ci-bot", "s3cret")  # over TLS
    assert Registry.for_host("127.0.0.1:5000", ("127.0.0.1:5000",)).auth == ("ci-bot", "s3cret")
    monkeypatch.setenv("IMAGEBUILDER_REGISTRY_PLAIN_HTTP_AUTH", "1")
    assert Registry.for_host("registry.lan", ("registry.lan",)).auth == ("ci-bot", "s3cret")


def test_a_config_blob_that_is_not_its_digest_is_refused() -> None:
    """N13: the config a manifest names is checked against its digest, as every other blob is."""
    config = json.dumps({"config": {"Labels": {"a": "b"}}}).encode()
    digest = "sha256:" + __import__("hashlib").sha256(config).hexdigest()
    manifest = json.dumps({"schemaVersion": 2, "config": {"digest": digest}, "layers": []}).encode()

    def answer(body: bytes) -> Callable[[dict[str, Any]], tuple[int, dict[str, str], Any]]:
        def reply(call: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
            return 200, {"Docker-Content-Digest": "sha256:m"}, json.loads(body)
        return reply

    def script(served: bytes) -> Script:
        return Script([("HEAD", f"https://{HOST}/v2/ml/x/manifests/", answer(manifest)),
                       ("GET", f"https://{HOST}/v2/ml/x/manifests/", answer(manifest)),
                       ("GET", f"https://{HOST}/v2/ml/x/blobs/", answer(served))])

    assert client(script(config)).labels("ml/x", "latest") == {"a": "b"}
    with pytest.raises(EngineError, match="does not match its digest"):
        client(script(json.dumps({"config": {"Labels": {}}}).encode())).labels("ml/x", "latest")
