"""A registry like the ones users push to (GHCR, Harbor, GitLab): HTTPS with a private CA and Bearer tokens from a
token service, scoped per repository and action. The services are containers started once per test session by
pytest-docker from tests/registry/compose.yaml, from an image built from the seeded debian:bookworm; this module
makes what they need first (a test CA and the certificates it signs, the token service's signing key, the users,
free loopback ports) and gives the engine the CA the way users do (/etc/docker/certs.d/HOST/ca.crt).

The registry and its token service answer at `registry.imagebuilder.test`, a name /etc/hosts gives the IPv6
loopback address: the engine treats 127.0.0.0/8 as insecure (no certificate check) but not ::1, so its pushes
and pulls check the certificate against certs.d as they would for a registry elsewhere; imagebuilder, too, treats
the name as any remote registry's (HTTPS only). Nothing leaves the machine.

Users of the token service: `pusher` (pull, push, delete), `reader` (pull only), `lapsed` (a credential that
expired), `forger` (its tokens are signed by a key the registry does not trust). The `rogue` registry has a
certificate that no CA of the tests signs.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import random
import secrets
import shutil
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "tests" / "registry" / "compose.yaml"
CERTS_D = Path("/etc/docker/certs.d")  # where the engine looks for a registry's CA
HOSTS = Path("/etc/hosts")
NAME = "registry.imagebuilder.test"  # -> ::1 (HOSTS_LINE)
HOSTS_LINE = f"::1 {NAME}  # imagebuilder's tests (tests/integration/secure_registry.py)"
SERVICE, ISSUER = "imagebuilder-itest", "imagebuilder-itest-token"
USERS = {"pusher": ["pull", "push", "delete"], "reader": ["pull"], "lapsed": ["pull", "push", "delete"],
         "forger": ["pull", "push", "delete"]}
Key = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class SecureRegistry:
    host: str  # registry.imagebuilder.test:PORT (::1): TLS (the test CA), token auth
    rogue: str  # 127.0.0.1:PORT: TLS with a certificate no CA of the tests signs; no auth
    token_url: str
    ca: Path  # the test CA's certificate (PEM)
    folder: Path  # the services' files; state/issued.log holds every token issued
    passwords: dict[str, str]

    def login(self, user: str) -> dict[str, str]:
        """The environment that makes imagebuilder (and the engine's pushes and pulls) act as `user`."""
        return {"IMAGEBUILDER_REGISTRY_USER": user, "IMAGEBUILDER_REGISTRY_PASSWORD": self.passwords[user]}

    def issued(self) -> list[dict[str, Any]]:
        """Every token the token service issued so far: {user, scopes, token}."""
        log = self.folder / "state" / "issued.log"
        text = log.read_text(encoding="utf-8") if log.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def secrets(self) -> list[str]:
        """What must never be shown: every password and every token issued."""
        return [*self.passwords.values(), *(t["token"] for t in self.issued())]


def free_port() -> int:
    """A port free on both loopback addresses (the services listen on ::1 or 127.0.0.1), below both the kernel's
    ephemeral range (32768-60999: what other tests' servers get from `bind(0)` while compose starts) and
    imagebuilder's stable ports (20000-39999), so that nothing takes it before the service does."""
    while True:
        port = random.randrange(10000, 20000)
        with socket.socket(socket.AF_INET6) as six, socket.socket() as four:
            try:
                six.bind(("::1", port))
                four.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


@contextlib.contextmanager
def hosts_entry() -> Iterator[None]:
    """`registry.imagebuilder.test` -> ::1 in /etc/hosts while the services run (the line is removed after)."""
    text = HOSTS.read_text(encoding="utf-8")
    added = HOSTS_LINE not in text.splitlines()
    if added:
        HOSTS.write_text(text + ("" if text.endswith("\n") or not text else "\n") + HOSTS_LINE + "\n", encoding="utf-8")
    try:
        yield
    finally:
        if added:
            lines = HOSTS.read_text(encoding="utf-8").splitlines(keepends=True)
            HOSTS.write_text("".join(line for line in lines if line.rstrip("\n") != HOSTS_LINE), encoding="utf-8")


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def certificate(subject: str, key: Key, issuer: tuple[x509.Certificate, Key] | None = None, *, ca: bool = False,
                server: bool = False) -> x509.Certificate:
    """A certificate for `key`, signed by `issuer` (self-signed without one), valid for a day from an hour ago."""
    now = datetime.datetime.now(datetime.timezone.utc)
    signer_cert, signer_key = issuer if issuer else (None, key)
    builder = (x509.CertificateBuilder().subject_name(_name(subject))
               .issuer_name(signer_cert.subject if signer_cert else _name(subject)).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName(NAME), x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
             x509.IPAddress(ipaddress.ip_address("::1"))]), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    return builder.sign(signer_key, hashes.SHA256())


def write_pair(folder: Path, name: str, cert: x509.Certificate, key: Key) -> None:
    (folder / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / f"{name}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))


def registry_config(address: str, cert: str, auth: str = "") -> str:
    return textwrap.dedent(f"""
        version: 0.1
        log: {{level: warn}}
        storage: {{filesystem: {{rootdirectory: /var/lib/registry}}, delete: {{enabled: true}}}}
        http: {{addr: "{address}", secret: "{secrets.token_hex(16)}",
                tls: {{certificate: /config/{cert}.crt, key: /config/{cert}.key}}}}
        """).lstrip() + auth


def write_services(folder: Path, ports: dict[str, int]) -> SecureRegistry:
    """Every file the services read (config/) and the folder they write (state/)."""
    config, state = folder / "config", folder / "state"
    config.mkdir(parents=True)
    state.mkdir()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate("imagebuilder itest CA", ca_key, ca=True)
    (folder / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for name in ("registry", "token"):
        key = ec.generate_private_key(ec.SECP256R1())
        write_pair(config, name, certificate(f"{name} 127.0.0.1", key, (ca, ca_key), server=True), key)
    rogue_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    rogue_ca = certificate("nobody's CA", rogue_key, ca=True)
    (folder / "rogue-ca.crt").write_bytes(rogue_ca.public_bytes(serialization.Encoding.PEM))  # the fixture's alone
    write_pair(config, "rogue", certificate("rogue 127.0.0.1", server_key, (rogue_ca, rogue_key), server=True),
               server_key)
    for name in ("signer", "forged"):  # token signing keys: the registry trusts `signer` alone
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        write_pair(config, name, certificate(f"token {name}", key), key)
    passwords = {user: secrets.token_urlsafe(18) for user in USERS}
    users = {user: {"password": passwords[user], "actions": actions,
                    "key": "forged" if user == "forger" else "trusted",
                    "expired": time.time() - 3600 if user == "lapsed" else None} for user, actions in USERS.items()}
    (config / "token.json").write_text(json.dumps({
        "service": SERVICE, "issuer": ISSUER, "lifetime": 300, "users": users,
        "keys": {"trusted": {"cert": "signer.crt", "key": "signer.key"},
                 "forged": {"cert": "forged.crt", "key": "forged.key"}}}), encoding="utf-8")
    token_url = f"https://{NAME}:{ports['token']}/token"
    (config / "registry.yml").write_text(registry_config(f"[::1]:{ports['registry']}", "registry", textwrap.dedent(f"""
        auth:
          token: {{realm: "{token_url}", service: {SERVICE}, issuer: {ISSUER},
                   rootcertbundle: /config/signer.crt}}
        """)), encoding="utf-8")
    (config / "rogue.yml").write_text(registry_config(f"127.0.0.1:{ports['rogue']}", "rogue"), encoding="utf-8")
    for path in config.iterdir():
        path.chmod(0o644)  # (the tests' own files: the services read them as root anyway)
    return SecureRegistry(f"{NAME}:{ports['registry']}", f"127.0.0.1:{ports['rogue']}", token_url,
                          folder / "ca.crt", folder, passwords)


def compose_command() -> str:
    """The compose this machine has (`.ci/compose.sh` installs one): the plugin, else docker-compose."""
    for command in ("docker compose", "docker-compose"):
        if subprocess.run(f"{command} version", shell=True, capture_output=True).returncode == 0:
            return command
    pytest.fail("no compose command (`docker compose` or `docker-compose`): run `bash .ci/compose.sh`",
                pytrace=False)


def answers(url: str, verify: str | bool, statuses: tuple[int, ...]) -> bool:
    try:
        return requests.get(url, verify=verify, timeout=2).status_code in statuses
    except requests.RequestException:
        return False


# pytest-docker's fixtures, set for these services (its `docker_services` runs `setup`, yields, runs `cleanup`).
@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    return str(COMPOSE_FILE)


@pytest.fixture(scope="session")
def docker_compose_command() -> str:
    return compose_command()


@pytest.fixture(scope="session")
def docker_setup(docker_compose_command: str) -> list[str]:
    # docker-compose (v1) has no --wait: `secure_registry` waits for the services to answer either way
    return ["up --build -d"] if docker_compose_command == "docker-compose" else ["up --build --wait"]


@pytest.fixture(scope="session")
def docker_cleanup() -> list[str]:
    return ["down -v --remove-orphans -t 0"]  # (nothing of theirs needs a clean stop: their data goes)


@pytest.fixture(scope="session")
def registry_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRegistry]:
    """The services' files, and the environment compose reads them by (set for the session)."""
    ports = {"registry": free_port(), "token": free_port(), "rogue": free_port()}
    services = write_services(tmp_path_factory.mktemp("secure-registry"), ports)
    with pytest.MonkeyPatch.context() as env, hosts_entry():  # (a session's: the monkeypatch fixture is a test's)
        env.setenv("IB_REGISTRY_DIR", str(services.folder))
        env.setenv("IB_TOKEN_LISTEN", f"[::1]:{ports['token']}")
        yield services


@pytest.fixture(scope="session")
def secure_registry(registry_services: SecureRegistry, docker_services: Any, engine: Any) -> Iterator[SecureRegistry]:
    """The services, up and answering; the engine trusts the test CA for the registry (certs.d)."""
    services = registry_services
    trusted = CERTS_D / services.host
    trusted.mkdir(parents=True, exist_ok=True)
    shutil.copy(services.ca, trusted / "ca.crt")
    try:
        token = services.token_url.rsplit("/", 1)[0] + "/healthz"
        docker_services.wait_until_responsive(
            lambda: answers(f"https://{services.host}/v2/", str(services.ca), (401,))
            and answers(token, str(services.ca), (200,))
            and answers(f"https://{services.rogue}/v2/", str(services.folder / "rogue-ca.crt"), (200,)),
            timeout=60, pause=0.2)
        yield services
    finally:
        shutil.rmtree(trusted, ignore_errors=True)
