"""Against a registry like the ones users push to (secure_registry.py: HTTPS with a private CA, Bearer tokens scoped
per repository and action from a token service, started once per session by pytest-docker): stage, verify and
publish across two repositories and promote into a third (blobs mounted); a pull-only user can verify but not
publish, and is told why before anything moves; credentials and tokens are never shown; an expired credential,
a wrong password, a token the registry does not trust and a certificate no trusted CA signs each stop the
command before anything is built or pushed, with one message that says what to do.

The images are the session chain's (conftest.cpu_chain: built and smoke-tested once per session, its pass in the
session's mirror), so nothing here builds: this is about the registry, not the images."""

from __future__ import annotations

import http.server
import json
import re
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from imagebuilder.evidence import passes
from imagebuilder.evidence.passes import RegistryPasses
from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.registry import Registry

from .conftest import REGISTRY, Chain, CliRun, itest_matrix, public_key, report, session_trust
from .secure_registry import CERTS_D, SecureRegistry

COPY = "itest/debian-copy:bookworm"  # the base image under a second name: a second entry of the same images


def two_repositories(chain: Chain, host: str, name: str) -> Path:
    """The chain's matrix (its layers, so its nodes are cached on this engine) into `host`: the entry into
    itest/NAME-a, the same images under a second base name into itest/NAME-b."""
    text = chain.matrix.read_text(encoding="utf-8")
    text = re.sub(r"(?m)^registry: .*$", f"registry: {host}/itest", text)
    text = re.sub(r"(?m)^repository: .*$", f"repository: {name}-a", text)
    text = text.replace('  python: ["3.11"]\n', f'  python: ["3.11"]\n  base_image: [debian:bookworm, "{COPY}"]\n')
    text += f'include:\n  - {{base_image: "{COPY}", repository: "{name}-b"}}\n'
    path = chain.folder / f"secure-{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def seed_layers(chain: Chain, target: Registry, repository: str) -> None:
    """The chain's layer blobs (as the chain's push compressed them) into `target`: a registry that already holds
    the base layers, as users' usually do. The engine's push then finds each layer there by the digest it pushed
    before and uploads none (a push into an empty registry would gzip the torch layer again: ~45 s here); the
    manifests, tags and every request's TLS and tokens are as they would be."""
    source = Registry.for_host(REGISTRY)
    for node in chain.nodes.values():
        manifest = json.loads(source.manifest(f"itest/{chain.repository}", node["digest"])[0])
        for blob in manifest["layers"]:
            target.put_blob(repository, source.blob(f"itest/{chain.repository}", blob["digest"]))


def shown(runs: list[CliRun], *folders: Path) -> str:
    """Everything a user sees: the commands' output, and every file of their reports and logs."""
    files = [p.read_text(errors="replace") for f in folders if f.exists() for p in f.rglob("*") if p.is_file()]
    return "\n".join([*(r.text for r in runs), *files])


def test_stage_verify_publish_and_promote_through_tls_and_scoped_tokens(
        engine: DockerEngine, secure_registry: SecureRegistry, cpu_chain: Chain, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    reg = secure_registry
    engine.tag(engine.image_id("debian:bookworm") or "debian:bookworm", COPY)
    name = f"tls-{uuid.uuid4().hex[:8]}"
    matrix = two_repositories(cpu_chain, reg.host, name)
    pusher, reader = reg.login("pusher"), reg.login("reader")
    runs: list[CliRun] = []

    def run(*args: str, user: dict[str, str], folder: str) -> CliRun:
        done = cli(*args, "--matrix", str(matrix), "--report", str(tmp_path / folder), env=user)
        runs.append(done)
        return done

    client = Registry.for_host(reg.host)  # (the CA from certs.d, as the engine's)
    client.auth = ("pusher", reg.passwords["pusher"])
    seed_layers(cpu_chain, client, f"itest/{name}-a")

    # The engine and imagebuilder both take the registry's CA from certs.d (the fixture put it there, as users do).
    staged = run("stage", user=pusher, folder="stage")
    assert staged.code == 0, staged.text[-3000:]
    nodes = report(tmp_path / "stage")["nodes"]
    assert {n["publish"] for n in nodes} == {"staged"} and "▶ build" not in staged.out  # the chain's images
    for suffix in ("a", "b"):  # each entry's key tags in its own repository (b's blobs mounted from a by the engine)
        assert any(t.startswith("cache-") for t in client.tags(f"itest/{name}-{suffix}")), suffix

    # A pull-only user, on a machine that has no pass yet: its verify would have to write the records, so the
    # suite never starts, and it says why.
    builder = ("--trust-build-key", str(public_key(tmp_path / "stager.pub")))  # (the session's key staged it)
    early = cli("--cache-dir", str(tmp_path / "reader-1"), *builder, "verify", "--matrix", str(matrix), "--report",
                str(tmp_path / "reader-verify-1"), env=reader)
    runs.append(early)
    assert early.code == 1 and "Traceback" not in early.text, early.text[-3000:]
    assert "▶ smoke" not in early.out
    refused = [n for n in report(tmp_path / "reader-verify-1")["nodes"] if n["leaf"]]
    assert len(refused) == 2 and all(
        f"user 'reader' may not push to {reg.host}/itest/{name}-" in n["error"] and "not tested" in n["error"]
        for n in refused), refused

    # The pusher verifies (the session's pass of these very images, in its mirror): records in both repositories.
    verified = run("verify", user=pusher, folder="verify")
    assert verified.code == 0, verified.text[-3000:]
    store = RegistryPasses(client, session_trust())
    for node in (n for n in report(tmp_path / "verify")["nodes"] if n["leaf"]):
        repo = f"itest/{node['repository'].rsplit('/', 1)[-1]}" if node.get("repository") else None
        assert node["pass_record"].startswith(f"registry {reg.host}/itest/{name}-"), node
        assert repo is None or any(store.read(repo, t).found for t in passes.tags_for(
            node["digest"], client.tags(repo))), node

    # Now the reader can verify (it finds the signed records, trusting the verifier's key) and writes nothing.
    trust = public_key(tmp_path / "verifier.pub")
    again = cli("--cache-dir", str(tmp_path / "reader-2"), "--trust-key", str(trust), "verify", "--matrix",
                str(matrix), "--report", str(tmp_path / "reader-verify-2"), env=reader)  # (named alone: every role)
    runs.append(again)
    assert again.code == 0 and "passed on" in again.out, again.text[-3000:]

    # ... but not publish: told why before any tag moves. A dry run only reads, so it may.
    before = {s: client.tags(f"itest/{name}-{s}") for s in ("a", "b")}
    denied = run("publish", user=reader, folder="reader-publish")
    assert denied.code == 2 and "Traceback" not in denied.text, denied.text[-3000:]
    assert f"publishing needs push to {reg.host}/itest/{name}-a: user 'reader' may not push" in denied.err
    assert {s: client.tags(f"itest/{name}-{s}") for s in ("a", "b")} == before
    dry = run("publish", "--dry-run", user=reader, folder="reader-dry")
    assert dry.code == 0, dry.text[-3000:]

    published = run("publish", user=pusher, folder="publish")
    assert published.code == 0, published.text[-3000:]
    for node in report(tmp_path / "publish")["nodes"]:
        repo = f"itest/{name}-{'b' if 'copy' in node['entry'] else 'a'}"
        for tag in node["tags"]:
            assert client.manifest_digest(repo, tag.rsplit(":", 1)[1]) == node["digest"], tag

    # promote into a third repository: blobs mounted across repositories with a token for both; the reader may not.
    # (The records are the chain's passes, of its nodes: its matrix says what they are a pass of.)
    source = f"{reg.host}/itest/{name}-a:*-task"
    target = f"{reg.host}/itest/{name}-stable:{{tag}}"
    listed = {"IMAGEBUILDER_REGISTRY_HOSTS": reg.host}  # (the chain's matrix names another registry: list this one)
    no = cli("promote", "--matrix", str(cpu_chain.matrix), "--from", source, "--to", target, env={**reader, **listed})
    runs.append(no)
    assert no.code == 2 and f"promote needs push to {reg.host}/itest/{name}-stable: user 'reader'" in no.err, no.text
    promoted = cli("promote", "--matrix", str(cpu_chain.matrix), "--from", source, "--to", target,
                   env={**pusher, **listed})
    runs.append(promoted)
    assert promoted.code == 0, promoted.text[-3000:]
    task = next(n for n in report(tmp_path / "publish")["nodes"] if n["layer"] == "task" and "copy" not in n["entry"])
    stable = client.tags(f"itest/{name}-stable")
    assert any(client.manifest_digest(f"itest/{name}-stable", t) == task["digest"] for t in stable)
    assert passes.tags_for(task["digest"], stable)  # its pass record came along

    # Scopes were asked per repository and action, as the token service saw them.
    scopes = {s for t in reg.issued() for s in t["scopes"]}
    assert f"repository:itest/{name}-stable:pull,push" in scopes and f"repository:itest/{name}-a:pull" in scopes

    # No password and no token, anywhere a user looks: output, reports, logs, the images' history and configs.
    history = [json.dumps(engine.history(n["image"])) for n in report(tmp_path / "stage")["nodes"] if n["image"]]
    configs = [json.dumps(client.config(f"itest/{name}-a", n["digest"]))
               for n in report(tmp_path / "publish")["nodes"] if "copy" not in n["entry"]]
    everything = shown(runs, tmp_path) + "\n".join(history + configs)
    leaked = [s for s in reg.secrets() if s in everything]
    assert len(reg.issued()) > 10 and not leaked, f"{len(leaked)} secret(s) shown"


def test_who_the_registry_does_not_let_in_is_stopped_before_anything_is_built(
        engine: DockerEngine, secure_registry: SecureRegistry, cpu_chain: Chain, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    reg = secure_registry
    name = f"tls-{uuid.uuid4().hex[:8]}"
    matrix = two_repositories(cpu_chain, reg.host, name)
    wrong = {**reg.login("pusher"), "IMAGEBUILDER_REGISTRY_PASSWORD": "not-the-password"}
    cases = {  # who -> what the one message must say
        "lapsed": (reg.login("lapsed"), "refused the credentials of user 'lapsed' (HTTP 401: UNAUTHORIZED: the "
                   "credential of user 'lapsed' expired at"),
        "wrong": (wrong, "refused the credentials of user 'pusher' (HTTP 401: UNAUTHORIZED: incorrect username or "
                  "password)"),
        "anonymous": ({}, "wants credentials, and none were given"),
        "forger": (reg.login("forger"), f"registry {reg.host} refused the token its token service issued to user "
                   "'forger' (invalid_token"),
    }
    runs = []
    for who, (env, message) in cases.items():
        done = cli("stage", "--matrix", str(matrix), "--report", str(tmp_path / who), env=env)
        runs.append(done)
        assert done.code == 2, (who, done.text[-3000:])
        assert message in done.err and "Traceback" not in done.text, (who, done.err)
        assert "▶ build" not in done.out and "▶ push" not in done.out, who
    # Nothing was pushed by any of them.
    client = Registry.for_host(reg.host)
    client.auth = ("pusher", reg.passwords["pusher"])
    assert client.tags(f"itest/{name}-a") == [] and client.tags(f"itest/{name}-b") == []

    # A registry whose certificate no trusted CA signs: refused, and never spoken to over plain HTTP instead,
    # loopback or not; giving another CA does not make it trusted.
    for extra in ([], ["--registry-ca", str(reg.ca)]):
        rogue = cli(*extra, "stage", "--matrix", str(matrix), "--registry", f"{reg.rogue}/itest", "--report",
                    str(tmp_path / "rogue"))
        runs.append(rogue)
        assert rogue.code == 2 and "Traceback" not in rogue.text, rogue.text[-3000:]
        assert f"registry {reg.rogue}: its TLS certificate is not trusted (unable to get local issuer " \
               "certificate)" in rogue.err, rogue.err
        assert "--registry-ca FILE" in rogue.err and f"/etc/docker/certs.d/{reg.rogue}/ca.crt" in rogue.err

    # The CA given to imagebuilder but not to the engine: imagebuilder's checks pass, the engine's push refuses,
    # and the message says where the engine looks.
    trusted = CERTS_D / reg.host
    held = tmp_path / "certs.d"
    shutil.move(trusted, held)
    try:
        engine_only = cli("--registry-ca", str(reg.ca), "stage", "--matrix", str(matrix), "--report",
                          str(tmp_path / "engine"), env=reg.login("pusher"))
    finally:
        shutil.move(held, trusted)
    runs.append(engine_only)
    assert engine_only.code == 1 and "Traceback" not in engine_only.text, engine_only.text[-3000:]
    assert "x509: certificate signed by unknown authority" in engine_only.text
    assert f"the engine does not trust {reg.host}'s certificate: put its CA in /etc/docker/certs.d/{reg.host}/" \
           "ca.crt on the engine's host" in engine_only.text, engine_only.text[-3000:]
    leaked = [s for s in reg.secrets() if s in shown(runs, tmp_path)]
    assert not leaked, f"{len(leaked)} secret(s) shown"


class Recorder(http.server.BaseHTTPRequestHandler):
    """A loopback HTTP server that records each request's Authorization; as a registry it challenges for a token from
    `realm`, as a token service it answers a token only to a request with credentials."""

    realm: str | None = None  # a registry's token service; None: it is a token service
    seen: list[tuple[str, str]]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        self.seen.append((self.path, auth))
        status, headers, body = 404, {}, b""
        if self.realm is not None and not auth.startswith("Bearer "):
            status, headers = 401, {"WWW-Authenticate": f'Bearer realm="{self.realm}",service="foreign"'}
        elif self.realm is not None:
            status, body = 200, b'{"tags": []}'
        elif auth:
            status, body = 200, b'{"token": "foreign-token"}'
        else:
            status = 401
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET


def serve(address: str, realm: str | None) -> tuple[http.server.ThreadingHTTPServer, list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []
    handler = type("Handler", (Recorder,), {"realm": realm, "seen": seen})
    server = http.server.ThreadingHTTPServer((address, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_a_token_service_on_another_host_gets_no_credentials(
        secure_registry: SecureRegistry, tmp_path: Path, cli: Callable[..., CliRun]) -> None:
    """CI's registry pair (IMAGEBUILDER_REGISTRY_USER/PASSWORD) goes to the matrix's registry (and its token service,
    on its own host name) by default, and to no other registry; a registry listed in IMAGEBUILDER_REGISTRY_HOSTS
    whose token service is on another host (here 127.0.0.2) does not get it sent there unless that host is listed
    too. The foreign registry and its token service are loopback servers that record what they are sent."""
    reg = secure_registry
    realm_server, realm_seen = serve("127.0.0.2", None)
    realm = f"127.0.0.2:{realm_server.server_address[1]}"
    foreign_server, foreign_seen = serve("127.0.0.1", f"http://{realm}/token")
    foreign = f"127.0.0.1:{foreign_server.server_address[1]}"
    matrix = itest_matrix(tmp_path, f"creds-{uuid.uuid4().hex[:8]}", layers="[base]", body="""
        matrix: {torch: ["2.13.0"], accelerator: [cpu], python: ["3.11"]}
        """)
    matrix.write_text(matrix.read_text().replace(f"registry: {REGISTRY}/itest", f"registry: {reg.host}/itest"))
    pusher = reg.login("pusher")
    try:
        # The matrix's registry: its token service got the pair (a token was issued to pusher for a read).
        before = len(reg.issued())
        read = cli("history", "--matrix", str(matrix), env=pusher)
        assert read.code == 0, read.text[-2000:]
        assert [t["user"] for t in reg.issued()[before:]] == ["pusher"], reg.issued()[before:]
        # Another registry, not listed: nothing is sent anywhere, and the token service refuses the anonymous ask.
        promote = ("promote", "--matrix", str(matrix), "--from", f"{foreign}/itest/x:*", "--to", "stable-{match}")
        unlisted = cli(*promote, env=pusher)
        assert unlisted.code == 2 and "wants credentials, and none were given" in unlisted.err, unlisted.text
        # Listed, with its token service on another host that is not: the registry is spoken to, the realm gets
        # nothing, and the one message says what to list.
        listed = cli(*promote, env={**pusher, "IMAGEBUILDER_REGISTRY_HOSTS": f"{reg.host} {foreign}"})
        assert listed.code == 2 and f"is on another host ({realm})" in listed.err, listed.text
        assert "Traceback" not in listed.text and reg.passwords["pusher"] not in listed.text
        assert realm_seen and all(auth == "" for _, auth in realm_seen), realm_seen
        assert all(not auth.startswith("Basic") for _, auth in foreign_seen), foreign_seen
        # Listed too: the realm gets the pair (the rule, not the network, kept it away before).
        both = cli(*promote, env={**pusher, "IMAGEBUILDER_REGISTRY_HOSTS": f"{reg.host} {foreign} {realm}"})
        assert both.code == 2 and "matches no tag" in both.err, both.text
        assert realm_seen[-1][1].startswith("Basic "), realm_seen[-1]
    finally:
        realm_server.shutdown()
        foreign_server.shutdown()
