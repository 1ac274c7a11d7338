"""A registry that goes away in the middle of a push: retried, then a clean failure, and no tag of the
entry applied. The registry sits behind a TCP proxy of the test's own, which stops forwarding (and
then refuses connections) once some megabytes have passed."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from imagebuilder.evidence import attestation
from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.registry import Registry

from .conftest import REGISTRY, SESSION, CliRun, Processes, cpu_matrix, registry_tags, report


class CuttingProxy:
    """Forwards 127.0.0.1:<port> to the registry until `limit` bytes went upstream, then closes every
    connection and stops listening (a registry that died mid-push); with `stall`, it stops forwarding
    instead and keeps every connection open (a push that hangs), and sets `stalled`."""

    def __init__(self, upstream: tuple[str, int], limit: int, stall: bool = False) -> None:
        self.upstream, self.limit, self.sent, self.stall = upstream, limit, 0, stall
        self.stalled = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.cut = threading.Event()
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while not self.cut.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            with self.lock:
                self.sockets += [client, upstream]
            threading.Thread(target=self.pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self.pipe, args=(upstream, client, False), daemon=True).start()

    def pipe(self, src: socket.socket, dst: socket.socket, counted: bool) -> None:
        try:
            while not self.cut.is_set():
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                if counted:
                    with self.lock:
                        self.sent += len(data)
                        if self.sent > self.limit and self.stall:
                            self.stalled.set()
                        elif self.sent > self.limit:
                            self.stop()
                            return
                while self.stalled.is_set() and not self.cut.is_set():
                    self.cut.wait(0.5)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self.cut.set()
        self.server.close()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.close()


@pytest.fixture
def dying_registry(registry: str) -> Iterator[CuttingProxy]:
    host, port = registry.split(":")
    proxy = CuttingProxy((host, int(port)), limit=40 * 2**20)
    yield proxy
    proxy.stop()


def base_and_child(tmp_path: Path, repository: str, wheelhouse: Path) -> Path:
    """The stock base, whose push the proxy cuts or stalls, and a thin child of it, which waits for its parent's
    push and so is held. (Not the business layer: no other test of this worker builds it, and its pip install of
    transformers, datasets and their dependencies cost about a minute of CPU for a node that is never pushed.)"""
    child = tmp_path / "layers" / "child"
    child.mkdir(parents=True)
    (child / "Dockerfile.j2").write_text("FROM {{ parent_image }}\nRUN echo child > /opt/child\n")
    return cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, child]", extra="layers_path: [layers]\n")


def test_a_registry_that_dies_mid_push_is_retried_and_leaves_no_tag(
        engine: DockerEngine, dying_registry: CuttingProxy, wheelhouse: Path, base_image: str, repository: str,
        tmp_path: Path, cli: Callable[..., CliRun]) -> None:
    matrix = base_and_child(tmp_path, repository, wheelhouse)
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-smoke",
              "--registry", f"127.0.0.1:{dying_registry.port}/itest")
    assert run.code == 1, run.text[-3000:]
    assert dying_registry.cut.is_set() and dying_registry.sent > 40 * 2**20  # it died mid-push
    assert "retrying push" in run.text  # the push was retried with backoff before giving up
    assert "Traceback" not in run.text
    nodes = {n["layer"]: n for n in report(tmp_path / "r")["nodes"]}
    assert nodes["base"]["publish"] == "failed" and nodes["base"]["digest"] is None
    assert nodes["child"]["publish"] == "held"
    assert "no tag of this entry was applied" in run.out
    # Straight to the registry: not one tag of this repository, key tags included.
    assert registry_tags(REGISTRY, f"itest/{repository}", cache=True) == []


@pytest.fixture
def hanging_registry(registry: str) -> Iterator[CuttingProxy]:
    host, port = registry.split(":")
    proxy = CuttingProxy((host, int(port)), limit=8 * 2**20, stall=True)
    yield proxy
    proxy.stop()


@pytest.mark.interrupt
def test_ctrl_c_during_a_push_exits_130_and_applies_no_tag(
        engine: DockerEngine, hanging_registry: CuttingProxy, wheelhouse: Path, base_image: str, repository: str,
        tmp_path: Path, processes: Processes) -> None:
    matrix = base_and_child(tmp_path, repository, wheelhouse)
    proc = processes.start("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-smoke",
                           "--registry", f"127.0.0.1:{hanging_registry.port}/itest", ignore_sigint=True)
    err = processes.interrupt(proc, hanging_registry.stalled.is_set, "the push to hang", wait=900)
    assert "interrupted" in err
    data = report(tmp_path / "r")
    assert data["interrupted"] is True
    assert all(n["publish"] in ("held", "failed") and n["tags"] == [] for n in data["nodes"]), data["nodes"]
    # Straight to the registry: no tag of this repository but perhaps a key tag (content-addressed, never public)
    # and its build record.
    assert [t for t in registry_tags(REGISTRY, f"itest/{repository}", cache=True)
            if not t.startswith("cache-") and not attestation.is_evidence_tag(t)] == []
    assert engine.managed_containers(SESSION) == []


@pytest.fixture
def undeleting_registry(tmp_path: Path) -> Iterator[str]:
    """Debian's registry as Distribution 2.x ships by default: deletion turned off."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    config = tmp_path / "config.yml"
    config.write_text(f"version: 0.1\nlog: {{level: error}}\n"
                      f"storage: {{filesystem: {{rootdirectory: {tmp_path}/data}}}}\n"
                      f"http: {{addr: 127.0.0.1:{port}}}\n", encoding="utf-8")
    proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_registry_that_deletes_nothing_keeps_the_tag_as_it_was(undeleting_registry: str) -> None:
    """Undoing a half-tagged entry where nothing can be deleted: the tag is not left on the throwaway manifest
    (it would block every later publish of that immutable tag), it names what it named before."""
    reg = Registry.for_host(undeleting_registry)
    data = b'{"architecture": "amd64", "os": "linux"}'
    config = reg.put_blob("itest/undeleting", data)
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config,
                                  "size": len(data)}, "layers": []}).encode()
    digest = reg.put_manifest("itest/undeleting", "v1", body, "application/vnd.oci.image.manifest.v1+json")
    assert reg.untag("itest/undeleting", "v1") is False
    assert reg.manifest_digest("itest/undeleting", "v1") == digest
