"""The torch stack is checked before GPU time (issue 42): a layer above the torch node that replaces, downgrades,
removes or adds a second copy of torch, triton or an nvidia-* library fails in `stage`, naming the package, both
versions and the layer; a new library (nvcc's wheels in devel) is no change. Each rule was seen failing with it
removed."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from rich.console import Console

from imagebuilder.evidence.signing import Keys
from imagebuilder.evidence.spec import Specs
from imagebuilder.ledger import BuildStatus
from imagebuilder.steps.run import RunOptions, execute
from imagebuilder.steps.stage import Stage
from imagebuilder.supply.torch_stack import Dist, changes, parse

from .fakes import FakeEngine, FakeRegistry
from .test_steps import chain, decided  # noqa: F401 - the chain fixture

TORCH = {"name": "torch", "version": "2.13.0+cpu", "path": "/opt/venv/lib/python3.11/site-packages/torch-2.13.0+cpu"
         ".dist-info", "record": "a" * 64, "libs": [["torch/lib/libtorch_cpu.so", 400_000_000]]}
TRITON = {"name": "triton", "version": "3.5.0", "path": "/opt/venv/x/triton-3.5.0.dist-info", "record": "b" * 64,
          "libs": []}
NCCL = {"name": "nvidia-nccl-cu13", "version": "2.27.7", "path": "/opt/venv/x/nvidia_nccl.dist-info",
        "record": "c" * 64, "libs": [["nvidia/nccl/lib/libnccl.so.2", 300_000_000]]}


def stack(*docs: dict[str, Any]) -> tuple[Dist, ...]:
    return tuple(Dist.from_json(d) for d in docs)


BELOW = stack(TORCH, TRITON, NCCL)


def test_an_unchanged_stack_and_a_new_library_pass() -> None:
    assert changes(BELOW, BELOW, "team", "e/torch") == []
    nvcc = {"name": "nvidia-cuda-nvcc", "version": "13.0.88", "path": "/p", "record": "d" * 64, "libs": []}
    assert changes(BELOW, stack(TORCH, TRITON, NCCL, nvcc), "devel", "e/torch") == []
    assert changes(stack(NCCL), stack({**NCCL, "version": "2.28.9"}), "torch", "e/cuda") == []  # the torch node


def test_a_layer_that_replaces_downgrades_duplicates_or_removes_fails_naming_both_versions() -> None:
    assert changes(BELOW, stack({**TORCH, "version": "2.12.0"}, TRITON, NCCL), "team", "e/business") == [
        "layer team downgrades torch 2.13.0+cpu (installed by e/business) with 2.12.0"]
    assert changes(BELOW, stack(TORCH, TRITON, {**NCCL, "version": "2.28.9"}), "team", "e/business") == [
        "layer team replaces nvidia-nccl-cu13 2.27.7 (installed by e/business) with 2.28.9"]
    second = {**TORCH, "version": "2.12.0", "path": "/usr/local/lib/python3.11/dist-packages/torch-2.12.0.dist-info"}
    assert changes(BELOW, stack(TORCH, second, TRITON, NCCL), "team", "e/business") == [
        "layer team adds a second copy of torch: 2.13.0+cpu in /opt/venv/lib/python3.11/site-packages/torch-2.13.0+"
        "cpu.dist-info and 2.12.0 in /usr/local/lib/python3.11/dist-packages/torch-2.12.0.dist-info (e/business has "
        "2.13.0+cpu)"]
    assert changes(BELOW, stack(TORCH, NCCL), "team", "e/business") == [
        "layer team removes triton 3.5.0 (installed by e/business)"]
    rebuilt = {**NCCL, "libs": [["nvidia/nccl/lib/libnccl.so.2", 1234]]}  # the same version, other files
    assert changes(BELOW, stack(TORCH, TRITON, rebuilt), "team", "e/business") == [
        "layer team replaces nvidia-nccl-cu13 2.27.7 (installed by e/business) with another build of 2.27.7: its "
        "files differ"]


def test_a_layer_that_edits_a_file_of_the_stack_fails_naming_the_file() -> None:
    """issue 48: the files, not the list. Version and RECORD untouched, one file's content changed."""
    patched = {**TORCH, "edited": ["torch/functional.py"], "edited_count": 1}
    assert changes(BELOW, stack(patched, TRITON, NCCL), "team", "e/business") == [
        "layer team edits torch/functional.py of torch 2.13.0+cpu in /opt/venv/lib/python3.11/site-packages/torch-"
        "2.13.0+cpu.dist-info: the content no longer matches the sha256 its RECORD gives (version and RECORD "
        "untouched); install a patched build instead, or patch in a layer of your own on purpose with a new version"]
    many = {**NCCL, "edited": ["nvidia/nccl/lib/libnccl.so.2 (gone)"], "edited_count": 31}
    (line,) = changes(BELOW, stack(TORCH, TRITON, many), "slim", "e/business")
    assert line.startswith("layer slim edits nvidia/nccl/lib/libnccl.so.2 (gone) and 30 more file(s) of "
                           "nvidia-nccl-cu13 2.27.7")
    # what was edited below the layer is the layer below's finding, not this one's
    assert changes(stack(patched, TRITON, NCCL), stack(patched, TRITON, NCCL), "task", "e/team") == []


def test_the_probe_output_is_read_from_its_last_line() -> None:
    assert parse('warning: x\n[{"name": "torch", "version": "1", "path": "p", "record": "r", "libs": []}]\n') == (
        Dist("torch", "1", "p", "r", ()),)
    assert parse('[{"name": "torch", "version": "1", "path": "p", "record": "r", "libs": [], "edited": ["a.py"], '
                 '"edited_count": 3}]') == (Dist("torch", "1", "p", "r", (), ("a.py",), 3),)
    assert parse("no python here") == () and parse("[not json") == ()


def test_stage_fails_the_layer_that_changes_the_torch_stack(chain: Any, tmp_path: Path) -> None:  # noqa: F811
    engine = FakeEngine(FakeRegistry())
    engine.add({"config": {"Labels": {"os": "debian"}}}, "debian:bookworm")
    engine.stacks = {"base": [TORCH, TRITON], "business": [TORCH, TRITON],
                     "task": [{**TORCH, "version": "2.12.0"}, TRITON]}
    plan, pool = decided(chain, engine)
    records = {r.layer: r for r in execute(
        engine, plan, pool, Specs(plan), Keys.load(tmp_path / "keys", {}), (Stage(),), Console(file=io.StringIO()),
        RunOptions(report_dir=tmp_path / "report", cache_dir=tmp_path / "cache", logs="none"))}
    assert records["business"].build == BuildStatus.BUILT
    task = records["task"]
    assert task.build == BuildStatus.FAILED and task.image is None
    assert str(task.error).startswith(
        "the torch stack changed above the torch node (the image was removed): layer task downgrades torch "
        "2.13.0+cpu (installed by 2.6.0-cpu-py3.11-runtime/business) with 2.12.0")
    assert engine.runs == []  # the probes are no suite runs


def test_the_probe_finds_a_file_edited_after_install(tmp_path: Path) -> None:
    """The probe itself, with this Python, on a `torch` distribution laid out as pip installs one: a file whose
    content no longer matches its RECORD hash is named, a removed one too; compiled .pyc files are not."""
    import base64
    import hashlib
    import subprocess
    import sys

    from imagebuilder.supply.torch_stack import PROBE

    files = {"torch/__init__.py": "__version__ = '9.9.9'\n", "torch/functional.py": "def f():\n    return 1\n",
             "torch/lib/libtorch_cpu.so": "ELF", "torch/__pycache__/functional.cpython-311.pyc": "pyc"}
    info = tmp_path / "torch-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 9.9.9\n")
    rows = []
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(text)}")
    (info / "RECORD").write_text("\n".join([*rows, "torch-9.9.9.dist-info/RECORD,,"]) + "\n")

    def probe() -> Dist:
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                             env={"PYTHONPATH": str(tmp_path)}).stdout
        (found,) = [d for d in parse(out) if d.path == str(info)]
        return found

    assert (probe().edited, probe().edited_count) == ((), 0)
    with (tmp_path / "torch/functional.py").open("a") as patch:
        patch.write("f = lambda: 2\n")
    (tmp_path / "torch/lib/libtorch_cpu.so").unlink()
    (tmp_path / "torch/__pycache__/functional.cpython-311.pyc").write_text("recompiled")
    assert probe().edited == ("torch/functional.py", "torch/lib/libtorch_cpu.so (gone)")
