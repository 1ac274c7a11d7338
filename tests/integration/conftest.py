"""Integration tests run on the real engine and the real registry that `make test` starts."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.errors import EngineUnavailable
from imagebuilder.evidence import attestation
from imagebuilder.evidence.signing import Keys, Signer, Trust
from imagebuilder.ports.engine import MANAGED_LABEL, DockerEngine

from .secure_registry import (  # noqa: F401 - the secure registry's fixtures (and pytest-docker's, set for it)
    docker_cleanup,
    docker_compose_command,
    docker_compose_file,
    docker_setup,
    registry_services,
    secure_registry,
)

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = os.environ.get("IMAGEBUILDER_TEST_REGISTRY", "127.0.0.1:5000")
WHEELHOUSE = Path(os.environ.get("IMAGEBUILDER_TEST_WHEELHOUSE", ROOT / ".wheelhouse"))
# Every container this test process starts, and every imagebuilder it runs starts, carries this label: the
# checks for containers left behind look at this session's own, so test processes running side by side
# (pytest-xdist workers share one engine) never see, or remove, each other's.
SESSION = f"itest.session={uuid.uuid4().hex[:12]}-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
os.environ["IMAGEBUILDER_CONTAINER_LABELS"] = SESSION
SESSION_STARTED = int(time.time())


def _need(what: str, how: str) -> None:
    if os.environ.get("IMAGEBUILDER_SKIP_INTEGRATION"):
        pytest.skip(f"{what} not available (IMAGEBUILDER_SKIP_INTEGRATION is set)")
    pytest.fail(f"{what} is not available: {how}", pytrace=False)


@pytest.fixture(scope="session")
def engine() -> DockerEngine:
    try:
        connected = DockerEngine.connect()
    except EngineUnavailable:
        _need("a Docker engine", "run `make engine`")
        raise
    key, _, value = SESSION.partition("=")
    connected.run_labels[key] = value
    return connected


@pytest.fixture(scope="session")
def registry(engine: DockerEngine) -> str:
    try:
        urllib.request.urlopen(f"http://{REGISTRY}/v2/", timeout=5).close()
    except OSError:
        _need(f"a registry on {REGISTRY}", "run `make registry`")
    return REGISTRY


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    """The CPU wheelhouse, one folder for every pytest-xdist worker: a run gives its builds the folder's stable
    address whoever holds its port (`run/loopback.py`), so the workers' runs share the engine's build cache (a
    torch layer built on one worker is a cached step on the other)."""
    if not list(WHEELHOUSE.glob("torch-*+cpu-*.whl")):
        _need(f"torch's CPU wheel in {WHEELHOUSE}", "run `make wheelhouse`")
    return WHEELHOUSE


@pytest.fixture(autouse=True)
def _no_container_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every test, no container that imagebuilder (or a test, with its label) started is left. One
    that is left fails this test and is removed, so the next test starts clean: one defect, one failure."""
    yield
    if "engine" in request.fixturenames:
        engine: DockerEngine = request.getfixturevalue("engine")
        left = engine.managed_containers(SESSION)
        if left:
            removed = engine.remove_containers(SESSION)
            pytest.fail(f"{len(left)} container(s) of imagebuilder's were left behind ({removed} removed now)",
                        pytrace=False)


class Processes:
    """imagebuilder processes a test starts. Whatever still runs when the test ends is killed with its
    whole process group, so a test that fails half-way cannot leave a build running into the next test."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []
        self.logs: list[Path] = []

    def output(self, proc: subprocess.Popen[str]) -> str:
        """What a started process printed on stdout so far."""
        return self.logs[self.started.index(proc)].read_text(errors="replace")

    def start(self, *args: str, env: dict[str, str] | None = None,
              ignore_sigint: bool = False) -> subprocess.Popen[str]:
        """`python -m imagebuilder ARGS` with output piped. `ignore_sigint`: started with SIGINT ignored, as a
        background job of a non-interactive shell (CI) is; imagebuilder must still stop on SIGINT."""
        def prepare() -> None:
            signal.signal(signal.SIGINT, signal.SIG_IGN if ignore_sigint else signal.SIG_DFL)

        # stdout (the live build log, megabytes) goes to a file: a pipe nobody reads would fill and stall the
        # run. stderr (warnings, the lock, the last words) stays a pipe for the test to read.
        log = tempfile.NamedTemporaryFile("w", prefix="imagebuilder-proc-", suffix=".log", delete=False)  # noqa: SIM115
        self.logs.append(Path(log.name))
        proc = subprocess.Popen([sys.executable, "-m", "imagebuilder", *args], cwd=ROOT, stdout=log,
                                stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=prepare,
                                env={"IMAGEBUILDER_CACHE_DIR": str(_CACHE_DIR), **os.environ, "COLUMNS": "200",
                                     "NO_COLOR": "1", **(env or {})})
        self.started.append(proc)
        return proc

    def interrupt(self, proc: subprocess.Popen[str], started: Callable[[], Any], what: str, *, wait: float,
                  signum: int = signal.SIGINT, stop_within: float = 120) -> str:
        """Once `started()` holds (the moment to hit), send `signum` to the still running `proc`; it must stop
        within `stop_within` s with 128 + signum and no traceback. Its stderr."""
        wait_until(lambda: started() or proc.poll() is not None, what, wait)
        assert proc.poll() is None, (proc.communicate(), self.output(proc)[-3000:])
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=stop_within)
        assert proc.returncode == 128 + signum, err[-2000:]
        assert "Traceback" not in err
        return str(err)

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=30)
        for log in self.logs:
            log.unlink(missing_ok=True)


@pytest.fixture
def processes() -> Iterator[Processes]:
    procs = Processes()
    try:
        yield procs
    finally:
        procs.kill_all()


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 300, every: float = 0.2) -> Any:
    """Poll `condition` until it returns something true (and return that), or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(every)


class Gate:
    """An HTTP gate on a free loopback port: 404 until `open()`, then 200. A layer step that waits on it
    (`gate.step()`) runs exactly as long as the test wants, so no test sleeps for a fixed time (builds use
    the host's network)."""

    def __init__(self) -> None:
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200 if gate.opened.is_set() else 404)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass

        self.opened = threading.Event()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def step(self) -> str:
        """A Dockerfile RUN line that waits until the gate opens (the image's own python3)."""
        return (f"RUN until python3 -c \"import urllib.request as u; u.urlopen('http://127.0.0.1:{self.port}/gate', "
                "timeout=5)\" 2>/dev/null; do sleep 0.2; done")

    def open(self) -> None:
        self.opened.set()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    try:
        yield g
    finally:
        g.close()


def running_containers(engine: DockerEngine, label: str = SESSION) -> list[dict[str, Any]]:
    """This session's running containers (imagebuilder's and the tests' own)."""
    return [dict(c) for c in engine.api.containers(filters={"label": [MANAGED_LABEL, label], "status": "running"})]


CUDA_TEST_SPACE = 25 * 2**30  # a CUDA base layer is ~6 GB, written twice while it is committed, plus its wheels


@pytest.fixture(autouse=True)
def _room_for_cuda_images(request: pytest.FixtureRequest) -> None:
    """A test that builds a CUDA image needs room on the engine's disk: first the images other tests left
    untagged are pruned, and if that is not enough the test is skipped, saying how much was free (a full
    disk would fail it for a reason that has nothing to do with the code)."""
    if request.node.get_closest_marker("cuda") is None:
        return
    engine: DockerEngine = request.getfixturevalue("engine")
    root, free = engine.storage()
    if free is not None and free < CUDA_TEST_SPACE:
        # only what was left before this session began: a test running beside this one may hold an
        # untagged image it has just built
        engine.api.prune_images(filters={"dangling": True, "until": str(SESSION_STARTED)})
        engine.api.prune_builds()
        root, free = engine.storage()
    if free is not None and free < CUDA_TEST_SPACE:
        pytest.skip(f"building a CUDA image needs {CUDA_TEST_SPACE / 2**30:.0f} GiB free in {root}; "
                    f"{free / 2**30:.1f} GiB are free")


@pytest.fixture(scope="session")
def base_image(engine: DockerEngine) -> str:
    if engine.image_id("debian:bookworm") is None:
        _need("the base image debian:bookworm", "run `make base-image`")
    return "debian:bookworm"


def dockerfile_context(dockerfile: str) -> bytes:
    """A build context of one file, the Dockerfile: what `engine.build` takes for a thin image a test makes."""
    import io
    import tarfile

    data, text = io.BytesIO(), dockerfile.encode()
    with tarfile.open(fileobj=data, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    return data.getvalue()


def registry_tags(registry: str, repository: str, *, cache: bool = False) -> list[str]:
    """The repository's public tags; key tags (`cache-<key12>`) and pass records (`sha256-<hex>.pass-<spec16>`)
    too with cache=True."""
    try:
        with urllib.request.urlopen(f"http://{registry}/v2/{repository}/tags/list", timeout=10) as resp:
            tags = sorted(json.load(resp).get("tags") or [])
            return [t for t in tags if cache or not (t.startswith("cache-") or attestation.is_evidence_tag(t))]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise


@dataclass
class CliRun:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


_CACHE_DIR = Path(tempfile.mkdtemp(prefix="imagebuilder-itest-cache-"))  # smoke results of this test session


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 3000, env: dict[str, str] | None = None) -> CliRun:
    env = {"IMAGEBUILDER_CACHE_DIR": str(_CACHE_DIR), **os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "imagebuilder", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=env, timeout=timeout)
    return CliRun(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli() -> Callable[..., CliRun]:
    return run_cli


def session_trust() -> Trust:
    """What this session's machine trusts: its own key (the one every run of the session signs with)."""
    return Keys.load(_CACHE_DIR / "keys", {}).trust


def public_key(out: Path, cache_dir: Path | None = None) -> Path:
    """The public key a machine (its cache folder; default: this session's) signs pass records with, written to
    `out`: what another machine names in --trust-key."""
    run = run_cli(*(["--cache-dir", str(cache_dir)] if cache_dir else []), "keys", "public", "--out", str(out))
    assert run.code == 0, run.text
    return out


def job_key(folder: Path) -> dict[str, str]:
    """The environment of a job that names the keys it trusts and writes records (in CI: the publish job, given a
    key of its own): IMAGEBUILDER_SIGNING_KEY, a private key made once in `folder` (mode 0600). Once keys are
    named, this machine's own key counts for nothing, so such a job needs one."""
    path = folder / "job-key.pem"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(Signer.generate().private_pem())
    return {"IMAGEBUILDER_SIGNING_KEY": str(path)}


@pytest.fixture
def repository() -> str:
    """A repository name of this test's own. Its local tags stay: removing an image's last tag deletes the
    image, and a later test whose node has the same key (keys name no repository) would build it again
    and, as a new image, run its smoke suite again."""
    return f"itest-{uuid.uuid4().hex[:8]}"


def itest_matrix(tmp: Path, repository: str, *, layers: str, body: str, extra: str = "",
                 base: str = "debian:bookworm") -> Path:
    """A matrix file pushing to this test's own repository under the test registry."""
    path = tmp / "matrix.yaml"
    path.write_text(textwrap.dedent(f"""
        version: 1
        base_image: {base}
        registry: {REGISTRY}/itest
        repository: {repository}
        layers: {layers}
        """).lstrip() + textwrap.dedent(body).lstrip() + textwrap.dedent(extra), encoding="utf-8")
    return path


def cpu_matrix(tmp: Path, repository: str, wheelhouse: Path, *, layers: str, extra: str = "",
               flavor: str = "runtime", base_images: tuple[str, ...] = ()) -> Path:
    """torch 2.13.0 for the CPU, from the wheelhouse (its dependencies from PyPI); `base_images`: an axis of
    base images (an entry on each)."""
    axis = f"base_image: [{', '.join(base_images)}]" if base_images else ""
    return itest_matrix(tmp, repository, layers=layers, extra=extra, body=f"""
        torch_extras: []
        build:
          wheelhouse: {wheelhouse}
          pip_index_url: {{cpu: "https://pypi.org/simple"}}
        matrix:
          torch: ["2.13.0"]
          accelerator: [cpu]
          python: ["3.11"]
          flavor: [{flavor}]
          {axis}
        """)


def report(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "report.json").read_text()))


def salted_layers(folder: Path, names: list[str], salt: str) -> Path:
    """Copies of the project's layers whose description carries `salt`. The description is a label, so it
    enters every key while the Dockerfile text stays the same: imagebuilder builds them anew (its key is
    new) but the engine's build cache serves every RUN step, so a "first build" costs seconds once the
    stock layers were built anywhere in the session. The folder goes into `layers_path`."""
    import yaml

    for name in names:
        target = folder / name
        shutil.copytree(ROOT / "layers" / name, target)
        meta = yaml.safe_load((target / "layer.yaml").read_text(encoding="utf-8")) or {}
        meta["description"] = f"{meta.get('description') or name} [{salt}]"
        (target / "layer.yaml").write_text(yaml.safe_dump(meta, sort_keys=False), encoding="utf-8")
    return folder


@dataclass(frozen=True)
class Chain:
    """The CPU chain (base -> business -> task) built, smoke-tested and pushed once per test session."""

    repository: str
    folder: Path  # its matrix, layers and report
    run: CliRun
    planned: dict[str, str]  # node -> what `plan` said before the build (`build` or `cached`)

    @property
    def report(self) -> dict[str, Any]:
        return report(self.folder / "report")

    @property
    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n["layer"]: n for n in self.report["nodes"]}

    @property
    def matrix(self) -> Path:
        return self.folder / "matrix.yaml"

    def image(self, engine: DockerEngine, layer: str) -> str:
        """The layer's image on the engine: pulled back by digest if a test removed it (they may)."""
        node = self.nodes[layer]
        if engine.image_id(node["image"]) is None:
            engine.pull(f"{REGISTRY}/itest/{self.repository}@{node['digest']}")
        return str(node["image"])


@pytest.fixture(scope="session")
def cpu_chain(engine: DockerEngine, registry: str, wheelhouse: Path, base_image: str,
              tmp_path_factory: pytest.TempPathFactory) -> Chain:
    """The widest-scope build: every test that only needs "a built, smoke-tested, pushed CPU image" takes it
    from here. Its layers are salted with this session's id, so it is a real first build on every run (on a
    warm engine its RUN steps come from the build cache); tests that build the stock layers afterwards find
    the engine's cache warm, and their smoke passes are shared through the session's cache folder."""
    folder = tmp_path_factory.mktemp("cpu-chain")
    repository = f"itest-chain-{uuid.uuid4().hex[:8]}"
    salted_layers(folder / "layers", ["base", "business", "task"], f"itest session {repository}")
    matrix = cpu_matrix(folder, repository, wheelhouse, layers="[base, business, task]",
                        extra="layers_path: [layers]\n")
    plan = run_cli("plan", "--matrix", str(matrix), "--json")
    assert plan.code == 0, plan.text[-3000:]
    planned = {n["layer"]: n["status"] for n in json.loads(plan.out)}
    run = run_cli("build", "--matrix", str(matrix), "--report", str(folder / "report"))
    assert run.code == 0, run.text[-3000:]
    return Chain(repository, folder, run, planned)
