"""Real CUDA images: PyPI's torch 2.11.0 with its CUDA 13.0 nvidia-* wheels, in the project's split tree
(os -> cuda -> torch -> devel). Without a GPU, the CUDA, cuDNN and NCCL libraries still load, so the versions
inside the image are checked against the plan's. Every test of this module builds one entry, the one with an
NCCL override (the path with the most to get wrong: a pin of its own in the CUDA node, torch's own pin kept out
of the venv), so the runtime and devel images share the os, cuda and torch nodes (one image each, built once)
and the wheels are unpacked and committed once. No CUDA library is in any image twice."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.ports.engine import DockerEngine

from .conftest import ROOT, CliRun, dockerfile_context, itest_matrix, registry_tags, report, wait_until

pytestmark = pytest.mark.cuda


CUDA_WHEELHOUSE = ROOT / ".wheelhouse-cuda"
CUDA_BASE = "itest/debian:bookworm-cuda"  # debian:bookworm under one more label: another image ID


@pytest.fixture(scope="module", autouse=True)
def _cuda_base(engine: DockerEngine, base_image: str) -> None:
    """The CUDA images build on a base of their own. Their `os` steps are the CPU `base` layer's to the letter and
    run while the session chain builds on the other worker: on debian:bookworm itself they would be a second line
    of cached steps beside the chain's, and the legacy builder, which follows the newest matching child and never
    backs up, then left the chain's line for them when a later test built the stock `base`, reinstalling torch and
    pushing a new torch layer (about 80 s of one test or another, by order; seen in CI's runs)."""
    if engine.image_id(CUDA_BASE) is None:
        dockerfile = f"FROM {base_image}\nLABEL io.imagebuilder.itest=cuda-base\n"
        engine.tag(engine.build(dockerfile_context(dockerfile), network="none", sink=lambda line: None), CUDA_BASE)


@pytest.fixture(scope="module")
def cuda_wheelhouse() -> Path | None:
    """The CUDA wheels, downloaded by `.ci/cuda-wheels.sh` (which `make test` starts in the background before
    anything else): wait for it to finish, or download them now when nothing did. The builds read them from
    this wheelhouse over loopback (pip prefers a find-links file to the index's copy of the same wheel).
    If the download failed, None: the builds take every wheel from PyPI, as users' builds do."""
    def state() -> str | None:
        for name in (".complete", ".failed"):
            if (CUDA_WHEELHOUSE / name).exists():
                return name
        return None

    if state() is None and not _download_running():
        subprocess.run(["bash", str(ROOT / ".ci" / "cuda-wheels.sh"), str(CUDA_WHEELHOUSE)], check=False)
    wait_until(state, "the CUDA wheels' download (.ci/cuda-wheels.sh)", timeout=1800, every=2)
    return CUDA_WHEELHOUSE if state() == ".complete" else None


def _download_running() -> bool:
    try:
        os.kill(int((CUDA_WHEELHOUSE / ".pid").read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


@pytest.fixture(scope="module", autouse=True)
def _remove_cuda_images(engine: DockerEngine) -> Iterator[None]:
    """The CUDA images are several GB each and nothing after this module builds on them: remove them."""
    yield
    for image in engine.images_with_label("io.imagebuilder.version.cuda", every=True):
        engine.remove_image(image["Id"])


def test_cuda_image_versions_equal_the_plan(engine: DockerEngine, registry: str, base_image: str, repository: str,
                                            tmp_path: Path, cuda_wheelhouse: Path | None,
                                            cli: Callable[..., CliRun]) -> None:
    # torch 2.11.0 pins nvidia-nccl-cu13==2.28.9 (what an entry without an override gets); the module's entry asks
    # for 2.29.7 instead (same major).
    (tmp_path / "stock").mkdir()
    stock = cuda_matrix(tmp_path / "stock", repository, cuda_wheelhouse, nccl=None)
    planned = json.loads(cli("plan", "--matrix", str(stock), "--json").out)[0]["entry"]
    assert (planned["cuda"], planned["cudnn"], planned["nccl"]) == ("13.0", "9.19.0.56", "2.28.9")
    matrix = cuda_matrix(tmp_path, repository, cuda_wheelhouse)
    planned = json.loads(cli("plan", "--matrix", str(matrix), "--json").out)[0]["entry"]
    assert (planned["cuda"], planned["cudnn"], planned["nccl"]) == ("13.0", "9.19.0.56", NCCL_OVERRIDE)

    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-push")
    assert run.code == 0, run.text[-4000:]
    node = leaf(tmp_path / "r")
    checks = {c["name"]: c for c in node["smoke_report"]["checks"]}
    assert not [c for c in checks.values() if c["status"] == "fail"], checks
    assert checks["versions.cuda"]["value"] == planned["cuda"]
    assert checks["versions.cudnn"]["value"] == "9.19.0"  # the runtime reports major.minor.patch
    assert planned["cudnn"].startswith(checks["versions.cudnn"]["value"] + ".")
    assert checks["versions.nccl"]["value"] == NCCL_OVERRIDE  # the library loaded at run time is the override
    assert checks["versions.triton"]["value"] == planned["triton"]
    assert checks["versions.accelerator"]["value"] == "cu130"

    # The installed nvidia wheels are exactly the pins of the plan, and nothing was cached on the way.
    out = engine.run(node["image"], ["sh", "-c", "pip freeze | grep -E '^nvidia-(cudnn|nccl)-cu13=='; "
                     "find / -xdev \\( -name '*.whl' -o -path /root/.cache/pip \\) "
                     "-not -path '/usr/share/python-wheels/*' -print 2>/dev/null"], timeout=120)
    assert sorted(out.logs.split()) == ["nvidia-cudnn-cu13==9.19.0.56", f"nvidia-nccl-cu13=={NCCL_OVERRIDE}"]

    # Once, in the shared CUDA node's prefix (for every Python), and not again in the venv: pip found torch's CUDA
    # requirements satisfied (torch's own NCCL pin included: it did not bring 2.28.9 back). The suite's
    # single-copy check saw no library twice.
    where = engine.run(node["image"], ["python", "-c", "import importlib.metadata as m, os; print('\\n'.join(sorted("
                       "{os.path.dirname(str(d.locate_file('x'))) for d in m.distributions() "
                       "if (d.metadata['Name'] or '').startswith(('nvidia', 'cuda-toolkit'))})))"], timeout=120)
    assert where.logs.split() == ["/opt/imagebuilder/cuda"], where.logs
    venv = engine.run(node["image"], ["sh", "-c", "ls /opt/venv/lib/python3.11/site-packages | grep -ci nvidia || :"],
                      timeout=60)
    assert venv.logs.strip() == "0", venv.logs
    assert checks["versions.single_copy"]["status"] == "pass", checks["versions.single_copy"]

    # The versions manifest inside the image, at the path its label names.
    path = engine.inspect(node["image"])["Config"]["Labels"]["io.imagebuilder.versions"]
    manifest = json.loads(engine.run(node["image"], ["cat", path], timeout=60).logs)
    assert (manifest["torch"], manifest["cuda"], manifest["cudnn"], manifest["nccl"]) == (
        "2.11.0", "13.0", "9.19.0.56", NCCL_OVERRIDE)
    assert manifest["pip"]["nvidia-cudnn-cu13"] == "9.19.0.56" and "python3" in manifest["dpkg"]

    # Another NCCL cannot be swapped in by a flag (only the matrix says what an image holds): an input error.
    bad = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "bad"), "--expect", "nccl=2.0.0")
    assert bad.code == 2 and "--expect nccl=2.0.0: only floors may be given" in bad.err, bad.text[-2000:]
    assert registry_tags(registry, f"itest/{repository}") == []


def leaf(folder: Path) -> dict[str, Any]:
    (node,) = [n for n in report(folder)["nodes"] if n["leaf"]]
    return dict(node)


TREE = '[os, {layer: cuda, when: {accelerator: "cu*"}}, torch, {layer: devel, when: {flavor: devel}}]'


def wheelhouse_setting(wheelhouse: Path | None) -> str:
    return f"build: {{wheelhouse: {wheelhouse}}}\n" if wheelhouse else ""


NCCL_OVERRIDE = "2.29.7"


def cuda_matrix(tmp_path: Path, repository: str, wheelhouse: Path | None, flavor: str = "runtime",
                nccl: str | None = NCCL_OVERRIDE) -> Path:
    """torch 2.11.0 with PyPI's CUDA 13.0 wheels, the project's tree up to torch (and devel), without
    torchvision/torchaudio, NCCL overridden by `nccl` (None: torch's own pin): one CUDA and one torch node that
    every image of this module shares."""
    include = f"include:\n  - {{accelerator: cu130, nccl: \"{nccl}\"}}\n" if nccl else ""
    return itest_matrix(tmp_path, repository, layers=TREE, extra=include + wheelhouse_setting(wheelhouse),
                        base=CUDA_BASE, body=f"""
        torch_extras: []
        matrix:
          torch: ["2.11.0"]
          accelerator: [cu130]
          python: ["3.11"]
          flavor: [{flavor}]
        """)


def test_cuda_image_without_a_gpu_is_not_pushed(engine: DockerEngine, registry: str, base_image: str, repository: str,
                                                tmp_path: Path, cuda_wheelhouse: Path | None,
                                                cli: Callable[..., CliRun]) -> None:
    matrix = cuda_matrix(tmp_path, repository, cuda_wheelhouse)
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"))
    assert run.code == 1, run.text[-3000:]
    node = leaf(tmp_path / "r")
    # The image and its smoke pass may come from the first test of this module (one image, one key).
    assert (node["smoke"] in ("passed", "cached"), node["publish"], node["gpu_verified"]) == (True, "held", False)
    assert "not GPU-verified" in node["error"] and "--allow-untested-gpu" in node["error"]
    checks = {c["name"]: c for c in node["smoke_report"]["checks"]}
    for name in ("distributed.nccl_init", "fsdp.compiled_step_cuda", "throughput.cuda"):
        assert (checks[name]["status"], checks[name]["reason"]) == ("skip", "no GPU visible in this container")
    # What needs no GPU still ran: the versions, and the CPU paths of the same torch build.
    assert checks["versions.nccl"]["status"] == "pass"
    assert checks["distributed.all_reduce"]["status"] == "pass"
    assert checks["fsdp.compiled_step_cpu"]["status"] == "pass"
    assert registry_tags(registry, f"itest/{repository}") == []


def test_cuda_devel_image_builds_a_cuda_extension(engine: DockerEngine, base_image: str, repository: str,
                                                  tmp_path: Path,
                                                  cuda_wheelhouse: Path | None,
                                                  cli: Callable[..., CliRun]) -> None:
    """The devel flavor of a CUDA 13 entry: nvcc and the CUDA headers from NVIDIA's cuda-toolkit wheels (at the
    version torch pins), gathered under CUDA_HOME; without a GPU the kernel is built and loaded, not run. The
    subject is the toolchain: the whole suite on this torch build ran in the versions test (its CPU paths cost
    ~90 s here), so the image is built without it and the toolchain checks run on it alone (`smoke --only`),
    from the image's own labels as in a build."""
    matrix = cuda_matrix(tmp_path, repository, cuda_wheelhouse, flavor="devel")
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-push", "--no-smoke")
    assert run.code == 0, run.text[-4000:]
    node = leaf(tmp_path / "r")
    smoke = cli("smoke", node["image"], "--only", "toolchain")
    checks = {c["name"]: c for c in json.loads(smoke.out)["checks"]}
    assert (checks["toolchain.nvcc"]["status"], checks["toolchain.nvcc"]["value"]) == ("pass", "13.0")
    assert checks["toolchain.cpp_extension"]["status"] == "pass"
    assert checks["toolchain.cuda_extension"]["status"] == "pass", checks["toolchain.cuda_extension"]
    assert (checks["toolchain.cuda_kernel"]["status"], checks["toolchain.cuda_kernel"]["reason"]) == (
        "skip", "no GPU visible in this container")
    env = engine.inspect(node["image"])["Config"]["Env"]
    assert "CUDA_HOME=/usr/local/cuda" in env
    out = engine.run(node["image"], ["sh", "-c", "pip freeze | grep -E '^(cuda-toolkit|nvidia-cuda-nvcc)=='"],
                     timeout=120)
    assert "cuda-toolkit==13.0.2" in out.logs.split(), out.logs


def test_a_missing_cuda_library_is_caught_without_a_gpu(engine: DockerEngine, base_image: str, repository: str,
                                                        tmp_path: Path, cuda_wheelhouse: Path | None,
                                                        cli: Callable[..., CliRun]) -> None:
    """The cuda_lib_missing mutant (cuDNN's engines deleted by a later layer) on the runtime image: the wheels'
    RECORD says they were installed, so versions.cuda_libraries fails, GPU or not. The lib_twice mutant (a
    second libnccl in the venv, as a pip install of nvidia-nccl over the shared CUDA node would leave): caught by
    versions.single_copy."""
    from ..mutants import image as mutants

    matrix = cuda_matrix(tmp_path, repository, cuda_wheelhouse)
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-push", "--no-smoke")
    assert run.code == 0, run.text[-3000:]
    node = leaf(tmp_path / "r")
    engine.tag(node["image"], f"itest/{repository}:clean")  # kept when its mutant is removed
    for name in ("cuda_lib_missing", "lib_twice"):  # lib_twice: a second NCCL in the venv, beside the shared one
        (mutant,) = [m for m in mutants.load("gpu") if m.name == name]
        image = mutants.build(engine, node["image"], mutant)
        try:
            outcome = mutants.judge(mutant, "gpu", image)
        finally:
            engine.remove_image(image)
        assert outcome.caught, outcome.row()
