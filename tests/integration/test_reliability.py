"""How imagebuilder fails, on the real engine and registries: secrets never reach an image, a log or a
report; a full disk says so; SIGTERM stops a build cleanly and a re-run goes on from the cache; two runs on
the same matrix serialize on a lock; every image names its base by digest."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import bcrypt
import pytest

from imagebuilder.ports.engine import DockerEngine

from .conftest import REGISTRY, SESSION, CliRun, Gate, Processes, cpu_matrix, registry_tags, report, wait_until


def layer(tmp_path: Path, name: str, template: str) -> None:
    folder = tmp_path / "layers" / name
    folder.mkdir(parents=True)
    (folder / "Dockerfile.j2").write_text(textwrap.dedent(template).lstrip(), encoding="utf-8")


def every_file_text(*folders: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for f in folders for p in f.rglob("*") if p.is_file())


# -- secrets ---------------------------------------------------------------------------------------------

SECRET = "s3cr3t-v4lue-8231"


def test_a_secret_baked_into_an_image_fails_the_node_and_is_never_printed(
        engine: DockerEngine, registry: str, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun], monkeypatch: pytest.MonkeyPatch) -> None:
    layer(tmp_path, "leaky", """
        FROM {{ parent_image }}
        ENV BUILD_NOTE={{ vars.note }}
        """)
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, leaky]",
                        extra=f"layers_path: [layers]\nvars: {{note: {SECRET}}}\n")
    monkeypatch.setenv("ITEST_API_TOKEN", SECRET)  # a secret of this host that a template copied in
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-smoke")
    assert run.code == 1, run.text[-3000:]
    nodes = {n["node"].rsplit("/", 1)[1]: n for n in report(tmp_path / "r")["nodes"]}
    assert nodes["leaky"]["build"] == "failed"
    assert "a secret was baked into the image (it was removed): $ITEST_API_TOKEN appears in the image's " \
           "environment (BUILD_NOTE)" in nodes["leaky"]["error"]
    assert engine.images_with_label(f"io.imagebuilder.key={nodes['leaky']['key']}") == []  # no run reuses it
    assert nodes["base"]["publish"] == "held"  # nothing of the entry is published
    assert registry_tags(registry, f"itest/{repository}") == []
    assert SECRET not in run.text and SECRET not in every_file_text(tmp_path / "r")  # masked everywhere
    assert "***" in (tmp_path / "r" / "logs" / nodes["leaky"]["log"].rsplit("/", 1)[1]).read_text()


@pytest.fixture
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """Debian's docker-registry with htpasswd auth on a free loopback port: (host, user, password)."""
    folder = tmp_path_factory.mktemp("auth-registry")
    user, password = "itest", "pw-" + os.urandom(9).hex()
    (folder / "htpasswd").write_text(f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(5)).decode()}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (folder / "config.yml").write_text(textwrap.dedent(f"""
        version: 0.1
        log: {{level: warn}}
        storage: {{filesystem: {{rootdirectory: {folder}/data}}, delete: {{enabled: true}}}}
        http: {{addr: 127.0.0.1:{port}}}
        auth: {{htpasswd: {{realm: itest, path: {folder}/htpasswd}}}}
        """))
    proc = subprocess.Popen(["docker-registry", "serve", str(folder / "config.yml")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", user, password
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_registry_credentials_are_used_and_never_shown(
        engine: DockerEngine, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun], auth_registry: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    host, user, password = auth_registry
    # A small image (a root layer of the test's own on Debian, with the python3 every layer's versions manifest
    # needs): what is pushed does not matter here, and this registry shares no blob with the others, so a torch
    # layer would be uploaded whole.
    layer(tmp_path, "small", """
        FROM {{ parent_image }}
        RUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*
        """)
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[small]", extra="layers_path: [layers]\n")
    denied = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "denied"), "--no-smoke",
                 "--registry", f"{host}/itest")
    # Without credentials: refused before anything is built (the registry's 401 to a push, said as such).
    assert denied.code == 2 and "Traceback" not in denied.text, denied.text[-2000:]
    assert f"publishing needs push to {host}/itest/{repository}: anonymous (no credentials) may not push" in denied.err
    assert "▶ build" not in denied.out
    monkeypatch.setenv("IMAGEBUILDER_REGISTRY_USER", user)
    monkeypatch.setenv("IMAGEBUILDER_REGISTRY_PASSWORD", password)
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-smoke", "--allow-untested",
              "--registry", f"{host}/itest")
    assert run.code == 0, run.text[-3000:]
    (node,) = report(tmp_path / "r")["nodes"]
    assert node["publish"] == "pushed" and node["digest"].startswith("sha256:")
    shown = run.text + denied.text + every_file_text(tmp_path / "r", tmp_path / "denied")
    assert password not in shown
    for ref in [t for image in engine.api.images() for t in image.get("RepoTags") or [] if t.startswith(host)]:
        engine.untag(ref)


# -- faults ----------------------------------------------------------------------------------------------

def test_a_full_disk_during_a_build_says_so(engine: DockerEngine, wheelhouse: Path, base_image: str, repository: str,
                                           tmp_path: Path, cli: Callable[..., CliRun]) -> None:
    # A build container's /dev/shm is 64 MB: writing more fills it, and the step fails with ENOSPC as it
    # would on a full /var/lib/docker.
    layer(tmp_path, "filler", """
        FROM {{ parent_image }}
        RUN dd if=/dev/zero of=/dev/shm/fill bs=1M count=256
        """)
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, filler]", extra="layers_path: [layers]\n")
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-push", "--no-smoke")
    assert run.code == 1
    nodes = {n["node"].rsplit("/", 1)[1]: n for n in report(tmp_path / "r")["nodes"]}
    assert nodes["filler"]["error"].startswith("out of disk space: the engine's storage (/var/lib/docker, ")
    assert "docker image prune" in nodes["filler"]["error"] and "No space left on device" in run.text
    assert "Traceback" not in run.text


def test_an_unreachable_engine_is_an_input_error(tmp_path: Path, wheelhouse: Path, repository: str,
                                                 cli: Callable[..., CliRun]) -> None:
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base]")
    run = cli("--engine", "unix:///nonexistent/docker.sock", "build", "--matrix", str(matrix),
              "--report", str(tmp_path / "r"))
    assert run.code == 2
    assert run.err.strip().startswith("error: ") and "Traceback" not in run.text
    assert "engine" in run.err.lower() and len(run.err.strip().splitlines()) <= 2


# -- interruption ----------------------------------------------------------------------------------------

def wait_for_text(stream: IO[str], text: str, timeout: float = 600) -> list[str]:
    """Read a process's output until a line contains `text`; the lines read."""
    seen: list[str] = []

    def read() -> None:
        for line in stream:
            seen.append(line)
            if text in line:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if not any(text in line for line in seen):
        raise AssertionError(f"{text!r} never came within {timeout:.0f} s: {''.join(seen[-20:])}")
    return seen


def step_containers(engine: DockerEngine, gate: Gate) -> list[str]:
    """The builder's containers running the gated step (they carry no label of ours)."""
    return [c["Id"] for c in engine.api.containers(all=True) if f"127.0.0.1:{gate.port}/gate" in str(c.get("Command"))]


@pytest.mark.interrupt
def test_sigterm_stops_a_build_cleanly_and_a_rerun_continues_from_the_cache(
        engine: DockerEngine, registry: str, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun], processes: Processes, gate: Gate) -> None:
    layer(tmp_path, "slow", f"""
        FROM {{{{ parent_image }}}}
        {gate.step()}
        RUN echo {repository} > /tmp/slow
        """)  # the test's own step: never in the cache before it
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, slow]", extra="layers_path: [layers]\n")
    proc = processes.start("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"))
    err = processes.interrupt(proc, lambda: step_containers(engine, gate), "the gated step to run", wait=600,
                              signum=signal.SIGTERM)
    assert "interrupted" in err
    data = report(tmp_path / "r")
    assert data["interrupted"] is True
    nodes = {n["node"].rsplit("/", 1)[1]: n for n in data["nodes"]}
    assert nodes["base"]["build"] in ("built", "cached") and nodes["base"]["publish"] == "held"
    assert nodes["slow"]["build"] == "interrupted" and "interrupted" in nodes["slow"]["error"]
    assert registry_tags(registry, f"itest/{repository}", cache=True) == []  # nothing pushed, nothing tagged
    assert engine.managed_containers(SESSION) == []
    # The engine cancels the build step the closed connection asked for.
    wait_until(lambda: not step_containers(engine, gate), "the engine to drop the interrupted step", 60)

    gate.open()
    again = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "again"), "--no-smoke")
    assert again.code == 0, again.text[-3000:]
    nodes = {n["node"].rsplit("/", 1)[1]: n for n in report(tmp_path / "again")["nodes"]}
    assert nodes["base"]["build"] == "cached" and nodes["slow"]["build"] == "built"


# -- concurrency -----------------------------------------------------------------------------------------

def test_two_builds_of_one_matrix_serialize_on_a_lock(engine: DockerEngine, registry: str, wheelhouse: Path,
                                                      base_image: str, repository: str, tmp_path: Path,
                                                      processes: Processes, gate: Gate) -> None:
    layer(tmp_path, "slow", f"""
        FROM {{{{ parent_image }}}}
        {gate.step()}
        RUN echo {repository} > /tmp/slow
        """)
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, slow]", extra="layers_path: [layers]\n")
    first = processes.start("build", "--matrix", str(matrix), "--report", str(tmp_path / "first"), "--no-smoke")
    # The first run holds the lock from before its first build, and waits at the gate inside it.
    wait_until(lambda: step_containers(engine, gate) or first.poll() is not None, "the first run's gated step", 600)
    second = processes.start("build", "--matrix", str(matrix), "--report", str(tmp_path / "second"), "--no-smoke")
    assert second.stderr is not None
    waited = wait_for_text(second.stderr, "waiting for lock", 120)
    gate.open()
    _, err1 = first.communicate(timeout=900)
    _, err2 = second.communicate(timeout=900)
    err2 = "".join(waited) + err2
    assert first.returncode == 0, (processes.output(first) + err1)[-3000:]
    assert second.returncode == 0, (processes.output(second) + err2)[-3000:]
    assert f"waiting for lock on {REGISTRY}/itest/{repository} held by PID {first.pid} on " in err2
    second_nodes = report(tmp_path / "second")["nodes"]
    assert all(n["build"] == "cached" for n in second_nodes)  # it went on from what the first one built
    first_nodes = {n["node"]: n for n in report(tmp_path / "first")["nodes"]}
    for node in second_nodes:  # both runs agree on every digest: the registry was never left in between
        assert node["digest"] == first_nodes[node["node"]]["digest"]


# -- supply chain ----------------------------------------------------------------------------------------

def test_images_name_their_base_by_digest(engine: DockerEngine, wheelhouse: Path, base_image: str, repository: str,
                                          tmp_path: Path, cli: Callable[..., CliRun]) -> None:
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base]")
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-push", "--no-smoke")
    assert run.code == 0, run.text[-3000:]
    data = report(tmp_path / "r")
    (node,) = data["nodes"]
    base_id = engine.image_id(base_image)
    assert node["base"] == {"name": base_image, "id": base_id,
                            "repo_digests": engine.inspect(base_image).get("RepoDigests") or []}
    labels = engine.inspect(node["image"])["Config"]["Labels"]
    assert labels["org.opencontainers.image.base.name"] == base_image
    assert labels["org.opencontainers.image.base.digest"] == base_id
    assert data["signing"]["status"] in ("skipped", "on")  # cosign where installed and keyed, a note otherwise
    assert json.dumps(data["signing"])
