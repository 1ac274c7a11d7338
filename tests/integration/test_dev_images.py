"""The images people work in, on the real engine with real clients: a CPU devel image that builds a C++
extension, the non-root user (and the UID a bind mount sees), JupyterLab that will not start open and
answers only with its token, and an OpenSSH server that takes keys only, never root, with host keys of
its own per container."""

from __future__ import annotations

import json
import secrets
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import paramiko
import pytest
import requests

from imagebuilder.ports.engine import MANAGED_LABEL, DockerEngine

from .conftest import REGISTRY, CliRun, cpu_matrix, itest_matrix, report

# One line, so one leaf: the leaf's suite runs the layer checks of its whole lineage, jupyter's and ssh's; the
# services are started from each layer's own image.
DEV_LAYERS = "[base, jupyter, ssh]"
# What these images add to a runtime one, and so what is checked here: the toolchain (a C++ extension built and
# loaded), the user and the layers' own checks. The rest of the suite (gloo, the compiled FSDP step, throughput:
# ~60 s on the CI machine) is the same torch as every CPU image of the session and runs in the CPU chain's build.
DEV_CHECKS = "toolchain,health,layers"


@pytest.fixture(scope="module")
def dev_images(engine: DockerEngine, registry: str, wheelhouse: Path, base_image: str,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The devel flavor of the CPU chain with both development layers on it (ssh on jupyter), built once; the
    leaf's DEV_CHECKS run on it (`smoke --only`, what its labels ask, as in a build) and stand as its smoke report."""
    from .conftest import run_cli

    tmp = tmp_path_factory.mktemp("dev")
    repository = f"itest-dev-{uuid.uuid4().hex[:8]}"
    matrix = cpu_matrix(tmp, repository, wheelhouse, layers=DEV_LAYERS, flavor="devel")
    run = run_cli("build", "--matrix", str(matrix), "--report", str(tmp / "r"), "--no-push", "--no-smoke")
    assert run.code == 0, run.text[-6000:]
    nodes = {n["node"].rsplit("/", 1)[1]: n for n in report(tmp / "r")["nodes"]}
    (leaf,) = [n for n in nodes.values() if n["leaf"]]
    smoke = run_cli("smoke", str(leaf["image"]), "--only", DEV_CHECKS)
    assert smoke.code == 0, smoke.text[-6000:]
    leaf["smoke_report"] = json.loads(smoke.out)
    yield nodes
    for image in engine.api.images(name=f"{REGISTRY}/itest/{repository}"):
        for ref in image.get("RepoTags") or []:
            engine.untag(ref)


def checks(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in node["smoke_report"]["checks"]}


def test_the_devel_image_builds_and_loads_a_cpp_extension(dev_images: dict[str, Any]) -> None:
    assert [name for name, node in dev_images.items() if node["leaf"]] == ["ssh"]
    got = checks(dev_images["ssh"])
    assert got["toolchain.cc"]["status"] == "pass", got["toolchain.cc"]
    assert got["toolchain.cpp_extension"]["status"] == "pass", got["toolchain.cpp_extension"]
    assert "toolchain.nvcc" not in got  # a CPU image has no CUDA toolkit to check
    assert (got["health.user"]["status"], got["health.user"]["value"]) == ("pass", "1000:1000")
    assert got["health.home"]["status"] == got["health.workdir"]["status"] == "pass"
    assert got["health.home"]["value"] == "/home/ml" and got["health.workdir"]["value"] == "/workspace"
    for layer in ("jupyter", "ssh"):  # the checks of every layer of the leaf's line ran, and passed
        layer_checks = [c for name, c in got.items() if name.startswith(f"layer.{layer}.")]
        assert layer_checks and all(c["status"] == "pass" for c in layer_checks), layer_checks


def test_every_image_runs_as_the_user_not_root(engine: DockerEngine, dev_images: dict[str, Any]) -> None:
    for node in dev_images.values():
        config = engine.inspect(node["image"])["Config"]
        assert config["User"] == "1000:1000", node["node"]
        out = engine.run(node["image"], ["sh", "-c", "id -u; id -g; id -un; echo $HOME; pwd"], timeout=60)
        assert out.logs.split() == ["1000", "1000", "ml", "/home/ml", "/workspace"], node["node"]


def test_a_file_written_to_a_bind_mount_has_the_configured_uid(engine: DockerEngine, registry: str, base_image: str,
                                                               repository: str, tmp_path: Path,
                                                               cli: Callable[..., CliRun]) -> None:
    layers = tmp_path / "layers" / "tiny"
    layers.mkdir(parents=True)
    (layers / "Dockerfile.j2").write_text(textwrap.dedent("""
        FROM {{ parent_image }}
        RUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*
        """).lstrip())
    matrix = itest_matrix(tmp_path, repository, layers="[tiny]", body="""
        layers_path: [layers]
        user: {name: researcher, uid: 4242, gid: 4343, workdir: /work}
        matrix: {torch: ["2.13.0"], accelerator: [cpu], python: ["3.11"]}
        """)
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-push", "--no-smoke")
    assert run.code == 0, run.text[-3000:]
    (node,) = report(tmp_path / "r")["nodes"]
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    out = engine.run(node["image"], ["sh", "-c", "touch /data/made-here && id -un && echo $HOME && pwd"],
                     timeout=60, host_config={"binds": {str(shared): {"bind": "/data", "mode": "rw"}}})
    assert out.exit_code == 0, out.logs
    assert out.logs.split() == ["researcher", "/home/researcher", "/work"]
    made = (shared / "made-here").stat()
    assert (made.st_uid, made.st_gid) == (4242, 4343)


# -- running services ------------------------------------------------------------------------------------

@contextmanager
def service(engine: DockerEngine, image: str, port: int, *, env: dict[str, str] | None = None,
            binds: dict[str, dict[str, str]] | None = None) -> Iterator[tuple[str, int]]:
    """A container of `image` serving `port`, published on a free port of 127.0.0.1; always removed. It carries the
    session's labels, so the check after every test (conftest `_no_container_left`) fails the test that left one,
    whatever order the tests run in."""
    host_config = engine.api.create_host_config(port_bindings={port: ("127.0.0.1", None)}, binds=binds or {},
                                                shm_size="1g")
    cid = engine.api.create_container(image, environment=env or {}, ports=[port], host_config=host_config,
                                      labels={MANAGED_LABEL: "1", "io.imagebuilder.test": "dev-images",
                                              **engine.run_labels})["Id"]
    try:
        engine.api.start(cid)
        published = engine.api.port(cid, port)
        assert published, engine.api.logs(cid).decode(errors="replace")
        yield cid, int(published[0]["HostPort"])
    finally:
        engine.api.remove_container(cid, force=True, v=True)


def logs(engine: DockerEngine, cid: str) -> str:
    return str(engine.api.logs(cid).decode(errors="replace"))


def wait_for(probe: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except (OSError, requests.RequestException, paramiko.SSHException, EOFError):
            pass
        time.sleep(0.25)  # a poll interval: the loop waits on the probe, not on the clock
    raise AssertionError(f"{what} did not come up in {timeout:.0f} s")


def health(engine: DockerEngine, cid: str) -> str:
    return str(engine.api.inspect_container(cid)["State"].get("Health", {}).get("Status"))


# -- JupyterLab -----------------------------------------------------------------------------------------

def test_jupyter_does_not_start_without_credentials(engine: DockerEngine, dev_images: dict[str, Any]) -> None:
    image = dev_images["jupyter"]["image"]
    out = engine.run(image, ["jupyter", "lab"], timeout=120)
    assert out.exit_code == 64, out.logs[-2000:]
    assert "no credentials: set JUPYTER_TOKEN" in out.logs
    assert "token=" not in out.logs  # nothing generated, nothing printed
    short = engine.run(image, ["jupyter", "lab"], env={"JUPYTER_TOKEN": "short"}, timeout=120)
    assert short.exit_code == 64 and "use at least 16" in short.logs
    root = engine.run(image, ["jupyter", "lab"], env={"JUPYTER_TOKEN": secrets.token_hex(16)}, user="0",
                      timeout=120)
    assert root.exit_code == 64 and "refusing to run as root" in root.logs


def test_jupyter_answers_only_with_its_token(engine: DockerEngine, dev_images: dict[str, Any]) -> None:
    token = secrets.token_hex(24)
    with service(engine, dev_images["jupyter"]["image"], 8888, env={"JUPYTER_TOKEN": token}) as (cid, port):
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: requests.get(f"{base}/api", timeout=5).status_code == 200, "JupyterLab")
        anonymous = requests.get(f"{base}/api/status", timeout=10)
        assert anonymous.status_code == 403
        lab = requests.get(f"{base}/lab", timeout=10, allow_redirects=False)
        assert lab.status_code == 302 and "/login" in lab.headers["Location"]
        wrong = requests.get(f"{base}/api/status", headers={"Authorization": "token " + "0" * 48}, timeout=10)
        assert wrong.status_code == 403
        good = requests.get(f"{base}/api/status", headers={"Authorization": f"token {token}"}, timeout=10)
        assert good.status_code == 200 and "started" in good.json()
        wait_for(lambda: health(engine, cid) == "healthy", "the HEALTHCHECK", timeout=90)
        top = engine.api.top(cid, ps_args="-o pid,uid,comm")["Processes"]
        assert top and all(p[1] == "1000" for p in top), top
        assert token not in logs(engine, cid)  # the token is never printed


def test_jupyter_takes_its_token_from_a_mounted_secret(engine: DockerEngine, dev_images: dict[str, Any],
                                                       tmp_path: Path) -> None:
    token = secrets.token_hex(24)
    secret = tmp_path / "jupyter_token"
    secret.write_text(token + "\n")
    secret.chmod(0o644)
    binds = {str(secret): {"bind": "/run/secrets/jupyter_token", "mode": "ro"}}
    env = {"JUPYTER_TOKEN_FILE": "/run/secrets/jupyter_token"}
    with service(engine, dev_images["jupyter"]["image"], 8888, env=env, binds=binds) as (cid, port):
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: requests.get(f"{base}/api", timeout=5).status_code == 200, "JupyterLab")
        assert requests.get(f"{base}/api/status", timeout=10).status_code == 403
        got = requests.get(f"{base}/api/status", headers={"Authorization": f"token {token}"}, timeout=10)
        assert got.status_code == 200
        assert token not in logs(engine, cid)


# -- SSH ------------------------------------------------------------------------------------------------

def client_key() -> tuple[paramiko.PKey, str]:
    key = paramiko.ECDSAKey.generate(bits=256)
    return key, f"{key.get_name()} {key.get_base64()} itest"


def host_key(port: int) -> paramiko.PKey:
    with paramiko.Transport(("127.0.0.1", port)) as transport:
        transport.start_client(timeout=15)
        return transport.get_remote_server_key()


def ssh_run(port: int, user: str, key: paramiko.PKey, command: str) -> str:
    with paramiko.SSHClient() as client:
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # a test container's fresh key
        client.connect("127.0.0.1", port=port, username=user, pkey=key, allow_agent=False, look_for_keys=False,
                       timeout=15, auth_timeout=15)
        _, stdout, _ = client.exec_command(command, timeout=30)
        return str(stdout.read().decode())


def banner(port: int) -> bool:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        return sock.recv(4) == b"SSH-"


def test_ssh_takes_keys_only_and_never_root(engine: DockerEngine, dev_images: dict[str, Any]) -> None:
    key, public = client_key()
    with service(engine, dev_images["ssh"]["image"], 2222, env={"SSH_AUTHORIZED_KEYS": public}) as (cid, port):
        wait_for(lambda: banner(port), "sshd")
        assert ssh_run(port, "ml", key, "id -un; id -u; pwd").split() == ["ml", "1000", "/home/ml"]
        # Passwords and keyboard-interactive are not offered at all: the server lists publickey only.
        with paramiko.Transport(("127.0.0.1", port)) as transport:
            transport.start_client(timeout=15)
            with pytest.raises(paramiko.BadAuthenticationType) as refused:
                transport.auth_password("ml", "ml")
            assert refused.value.allowed_types == ["publickey"]
        # root with the very key that logs the user in is refused.
        with pytest.raises(paramiko.AuthenticationException):
            ssh_run(port, "root", key, "id")
        # another key is refused too.
        with pytest.raises(paramiko.AuthenticationException):
            ssh_run(port, "ml", paramiko.ECDSAKey.generate(bits=256), "id")
        top = engine.api.top(cid, ps_args="-o pid,uid,comm")["Processes"]
        assert top and all(p[1] == "1000" for p in top), top  # sshd itself runs as the user
        wait_for(lambda: health(engine, cid) == "healthy", "the HEALTHCHECK", timeout=90)


def test_ssh_containers_make_their_own_host_keys(engine: DockerEngine, dev_images: dict[str, Any],
                                                 tmp_path: Path) -> None:
    key, public = client_key()
    keys_file = tmp_path / "authorized_keys"
    keys_file.write_text(public + "\n")
    keys_file.chmod(0o644)
    binds = {str(keys_file): {"bind": "/run/secrets/authorized_keys", "mode": "ro"}}  # keys from a mounted file
    image = dev_images["ssh"]["image"]
    with service(engine, image, 2222, binds=binds) as (_, first), \
            service(engine, image, 2222, binds=binds) as (_, second):
        for port in (first, second):
            wait_for(lambda port=port: banner(port), "sshd")  # type: ignore[misc]
            assert ssh_run(port, "ml", key, "echo ok").strip() == "ok"
        assert host_key(first).get_fingerprint() != host_key(second).get_fingerprint()


def test_ssh_does_not_start_without_keys(engine: DockerEngine, dev_images: dict[str, Any]) -> None:
    out = engine.run(dev_images["ssh"]["image"], ["start-sshd"], timeout=60)
    assert out.exit_code == 64 and "no authorized keys" in out.logs, out.logs
    root = engine.run(dev_images["ssh"]["image"], ["start-sshd"], env={"SSH_AUTHORIZED_KEYS": client_key()[1]},
                      user="0", timeout=60)
    assert root.exit_code == 64 and "refusing to run as root" in root.logs, root.logs

