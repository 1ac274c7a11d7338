from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.input.compat import CompatTable

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden from the current templates")


# Each folder's tests carry its marker, so `-m integration` (or `-m "not integration"`, `-m gpu`, `-m browser`) selects
# exactly them: a `pytestmark` in a conftest.py marks nothing.
FOLDER_MARKERS = {"integration": "integration", "gpu": "gpu", "browser": "browser"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.path)).resolve().relative_to(ROOT).parts[1:2]
        marker = FOLDER_MARKERS.get(folder[0]) if folder else None
        if marker is not None:
            item.add_marker(marker)


# Under pytest-xdist (`make test` runs `-n 2`) the integration tests keep to two workers, as two units of
# work: the CUDA images (bound by the disk: gigabytes of wheels unpacked and committed) build on one while
# every other integration test (bound by the CPU, sharing one session chain) runs on the other; each unit
# test is a unit of its own and goes to whichever worker is free. The modules that need no session chain (the
# development images, with their own devel chain; the registry faults; the three-machine steps; the gate's own
# builds; the reliability tests) join the CUDA unit, so that both workers end at about the same time
# (ci_time.json, fresh clone of 180110b: 1747 s of no-chain integration against 1855 s of the chain's, 145 s of
# unit tests; since then the CUDA module builds one entry, not two, the development images one leaf, and three
# chain tests smoke nothing, so test_reliability's 63 s moved over; fresh clone of 40d1f35: 1510 s against 1648 s,
# so test_lock's ~45 s, which needs no chain either, joins them). (A scheduler of our own: xdist's `loadgroup`
# marks do not survive pytest 9's node ids.)
WORK_UNITS = (("tests/integration/test_cuda_image.py", "no-chain"),
              ("tests/integration/test_dev_images.py", "no-chain"),
              ("tests/integration/test_registry_faults.py", "no-chain"),
              ("tests/integration/test_steps.py", "no-chain"),
              ("tests/integration/test_gate.py", "no-chain"),
              ("tests/integration/test_reliability.py", "no-chain"),
              ("tests/integration/test_lock.py", "no-chain"),
              ("tests/integration/", "integration"))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return next((unit for prefix, unit in WORK_UNITS if nodeid.startswith(prefix)), nodeid)

    return ByWorkUnit(config, log)


CHROMIUM = Path("/usr/bin/chromium")  # Debian's (.ci/browser.sh installs it); playwright never downloads one
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def chromium() -> Any:
    """Headless Chromium through playwright, one per worker. Missing is a failure, not a skip: `make test`
    installs it."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `bash .ci/browser.sh` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def _variant(cuda: str | None, cudnn: str | None, nccl: str | None, index: str) -> dict[str, object]:
    pkgs = {}
    if cudnn:
        pkgs["nvidia-cudnn-cu12"] = cudnn
    if nccl:
        pkgs["nvidia-nccl-cu12"] = nccl
    return {"cuda": cuda, "cudnn": cudnn, "nccl": nccl, "triton": "3.2.0" if cuda else None, "index": index,
            "packages": pkgs, "verified": True}


@pytest.fixture
def table() -> CompatTable:
    """A small, explicit table for unit tests (the packaged one is tested on its own)."""
    return CompatTable.from_dict({
        "schema": 1,
        "driver_floor": {"12.4": {"toolkit": "550.54.14"}},
        "releases": {
            "2.6.0": {"requires_python": ">=3.9", "python": ["3.9", "3.10", "3.11", "3.12", "3.13"],
                      "torchvision": "0.21.0", "torchaudio": "2.6.0",
                      "variants": {"cu124": _variant("12.4", "9.1.0.70", "2.21.5", "pypi"),
                                   "cpu": _variant(None, None, None, "pytorch")}},
            "2.7.1": {"requires_python": ">=3.9", "python": ["3.9", "3.10", "3.11", "3.12", "3.13"],
                      "torchvision": "0.22.1", "torchaudio": "2.7.1",
                      "variants": {"cu126": _variant("12.6", "9.5.1.17", "2.26.2", "pypi"),
                                   "cpu": _variant(None, None, None, "pytorch")}},
            "2.9.0": {"requires_python": ">=3.10", "python": ["3.10", "3.11", "3.12", "3.13"],
                      "torchvision": "0.24.0", "torchaudio": "2.9.0",
                      "variants": {"cu128": _variant("12.8", "9.10.2.21", "2.27.5", "pypi"),
                                   "cpu": _variant(None, None, None, "pytorch")}},
        },
    })


MatrixWriter = Callable[..., Path]


@pytest.fixture
def write_matrix(tmp_path: Path) -> MatrixWriter:
    """Write a matrix file (dedented) into tmp_path and return its path."""
    def write(text: str, name: str = "matrix.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return path
    return write


HEADER = """
version: 1
base_image: debian:bookworm
registry: 127.0.0.1:5000/ml
repository: pytorch
layers: [base, business, task]
"""


@pytest.fixture
def header() -> str:
    return textwrap.dedent(HEADER).lstrip()
