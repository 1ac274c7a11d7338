"""Integration tests run on the real engine and the real registry that `make test` starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.engine import Engine
from imagebuilder.errors import EngineUnavailable

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = os.environ.get("IMAGEBUILDER_TEST_REGISTRY", "127.0.0.1:5000")
WHEELHOUSE = Path(os.environ.get("IMAGEBUILDER_TEST_WHEELHOUSE", ROOT / ".wheelhouse"))

pytestmark = pytest.mark.integration


def _need(what: str, how: str) -> None:
    if os.environ.get("IMAGEBUILDER_SKIP_INTEGRATION"):
        pytest.skip(f"{what} not available (IMAGEBUILDER_SKIP_INTEGRATION is set)")
    pytest.fail(f"{what} is not available: {how}", pytrace=False)


@pytest.fixture(scope="session")
def engine() -> Engine:
    try:
        return Engine.connect()
    except EngineUnavailable:
        _need("a Docker engine", "run `make engine`")
        raise


@pytest.fixture(scope="session")
def registry(engine: Engine) -> str:
    try:
        urllib.request.urlopen(f"http://{REGISTRY}/v2/", timeout=5).close()
    except OSError:
        _need(f"a registry on {REGISTRY}", "run `make registry`")
    return REGISTRY


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    if not list(WHEELHOUSE.glob("torch-*+cpu-*.whl")):
        _need(f"torch's CPU wheel in {WHEELHOUSE}", "run `make wheelhouse`")
    return WHEELHOUSE


@pytest.fixture(autouse=True)
def _no_container_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every test, no container that imagebuilder (or a test, with its label) started is left."""
    yield
    if "engine" in request.fixturenames:
        engine: Engine = request.getfixturevalue("engine")
        assert engine.managed_containers() == [], "a container of imagebuilder's was left behind"


CUDA_TEST_SPACE = 25 * 2**30  # a CUDA base layer is ~6 GB, written twice while it is committed, plus its wheels


@pytest.fixture(autouse=True)
def _room_for_cuda_images(request: pytest.FixtureRequest) -> None:
    """A test that builds a CUDA image needs room on the engine's disk: first the images other tests left
    untagged are pruned, and if that is not enough the test is skipped, saying how much was free (a full
    disk would fail it for a reason that has nothing to do with the code)."""
    if request.node.get_closest_marker("cuda") is None:
        return
    engine: Engine = request.getfixturevalue("engine")
    root, free = engine.storage()
    if free is not None and free < CUDA_TEST_SPACE:
        engine.api.prune_images(filters={"dangling": True})
        engine.api.prune_builds()
        root, free = engine.storage()
    if free is not None and free < CUDA_TEST_SPACE:
        pytest.skip(f"building a CUDA image needs {CUDA_TEST_SPACE / 2**30:.0f} GiB free in {root}; "
                    f"{free / 2**30:.1f} GiB are free")


@pytest.fixture(scope="session")
def base_image(engine: Engine) -> str:
    if engine.image_id("debian:bookworm") is None:
        _need("the base image debian:bookworm", "run `make base-image`")
    return "debian:bookworm"


def registry_tags(registry: str, repository: str, *, cache: bool = False) -> list[str]:
    """The repository's tags; key tags (`cache-<key12>`) only with cache=True."""
    try:
        with urllib.request.urlopen(f"http://{registry}/v2/{repository}/tags/list", timeout=10) as resp:
            tags = sorted(json.load(resp).get("tags") or [])
            return [t for t in tags if cache or not t.startswith("cache-")]
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


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 3000) -> CliRun:
    env = {"IMAGEBUILDER_CACHE_DIR": str(_CACHE_DIR), **os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-m", "imagebuilder", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=env, timeout=timeout)
    return CliRun(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli() -> Callable[..., CliRun]:
    return run_cli


@pytest.fixture
def repository(engine: Engine) -> Iterator[str]:
    """A repository name of this test's own; its local tags are removed afterwards (layers stay cached)."""
    name = f"itest-{uuid.uuid4().hex[:8]}"
    yield name
    for image in engine.api.images(name=f"{REGISTRY}/itest/{name}"):
        for ref in image.get("RepoTags") or []:
            engine.untag(ref)


def itest_matrix(tmp: Path, repository: str, *, layers: str, body: str, extra: str = "") -> Path:
    """A matrix file pushing to this test's own repository under the test registry."""
    path = tmp / "matrix.yaml"
    path.write_text(textwrap.dedent(f"""
        version: 1
        base_image: debian:bookworm
        registry: {REGISTRY}/itest
        repository: {repository}
        layers: {layers}
        """).lstrip() + textwrap.dedent(body).lstrip() + textwrap.dedent(extra), encoding="utf-8")
    return path


def cpu_matrix(tmp: Path, repository: str, wheelhouse: Path, *, layers: str, extra: str = "",
               flavor: str = "runtime") -> Path:
    """torch 2.13.0 for the CPU, from the wheelhouse (its dependencies from PyPI)."""
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
        """)


def report(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "report.json").read_text()))
