"""The shared CUDA node's guards, each seen refusing: a wheel built for one Python in the shared prefix
(`cuda_prefix.py seal`), a distribution of the prefix installed a second time on a Python's path
(`cuda_prefix.py single`, run by the torch layer), and a library present twice in an image (the suite's
`versions.single_copy`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from imagebuilder.smoke import suite

HELPER = Path(__file__).resolve().parents[2] / "imagebuilder" / "data" / "cuda_prefix.py"


def dist(folder: Path, name: str, version: str, tag: str = "py3-none-manylinux_2_27_x86_64") -> None:
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {tag}\n")


def helper(*args: str, path: list[Path] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in path or [])}
    return subprocess.run([sys.executable, "-S", str(HELPER), *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_seal_refuses_a_wheel_built_for_one_python(tmp_path: Path) -> None:
    dist(tmp_path, "nvidia-nccl-cu13", "2.28.9")
    dist(tmp_path, "cuda-bindings", "13.0.3", tag="cp311-cp311-manylinux_2_28_x86_64")
    run = helper("seal", str(tmp_path))
    assert run.returncode == 1
    assert "cuda_bindings-13.0.3.dist-info (cp311-cp311-manylinux_2_28_x86_64)" in run.stderr
    assert "nvidia_nccl" not in run.stderr


def test_single_refuses_a_second_copy_and_passes_one(tmp_path: Path) -> None:
    prefix, venv = tmp_path / "cuda", tmp_path / "site-packages"
    dist(prefix, "nvidia-nccl-cu13", "2.28.9")
    dist(prefix, "nvidia-cudnn-cu13", "9.19.0.56")
    venv.mkdir()
    assert helper("single", str(prefix), path=[venv, prefix]).returncode == 0
    dist(venv, "nvidia-nccl-cu13", "2.28.9")  # what pip leaves when it does not see the shared prefix
    run = helper("single", str(prefix), path=[venv, prefix])
    assert run.returncode == 1
    assert "a second copy of the shared CUDA libraries: nvidia-nccl-cu13" in run.stderr
    assert "cudnn" not in run.stderr


def test_the_suite_finds_a_library_twice(tmp_path: Path) -> None:
    for folder, name in (("cuda/nvidia/cu13/lib", "libnccl.so.2"), ("venv/nvidia/cu13/lib", "libnccl.so.2"),
                         ("cuda/nvidia/cu13/lib", "libcudnn.so.9.19.0"), ("numpy.libs", "libcublas-040039e1.so.5"),
                         ("scipy.libs", "libcublas-040039e1.so.5"), ("venv/torch/lib", "libgomp.so.1"),
                         ("cuda/gomp", "libgomp.so.1"), ("venv/pyarrow", "libarrow_python.so.2600"),
                         ("venv/pyarrow", "libarrow_python.so.2600.1.0"), ("venv/pandas", "lib.cpython-311.so"),
                         ("venv/pyarrow", "lib.cpython-311.so"), ("venv/torch/lib", "libc10.so"),
                         ("venv/torch/lib", "libtorch_cuda.so")):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / name).write_bytes(b"\x7fELF")
    (tmp_path / "cuda/nvidia/cu13/lib/libcudnn.so.9").symlink_to("libcudnn.so.9.19.0")  # one file, two names
    twice = suite.library_copies([], [tmp_path / "cuda", tmp_path / "venv", tmp_path / "numpy.libs",
                                      tmp_path / "scipy.libs"])  # type: ignore[list-item]
    # auditwheel's hashed private copies are one content by name; vendored OS libraries, one library under two
    # names in one folder and Python extensions are not torch's or CUDA's libraries twice
    assert list(twice) == ["libnccl.so.2"]
    (tmp_path / "cuda/torch/lib").mkdir(parents=True)
    (tmp_path / "cuda/torch/lib/libc10.so").write_bytes(b"\x7fELF")  # a second torch
    assert list(suite.library_copies([], [tmp_path / "cuda", tmp_path / "venv"])) == [  # type: ignore[list-item]
        "libc10.so", "libnccl.so.2"]
    verdict = suite.single_copy_verdict(twice)
    assert verdict["status"] == "fail" and "libnccl.so.2: " in verdict["reason"]
    assert suite.single_copy_verdict({})["status"] == "pass"


def test_the_loader_paths_follow_ld_so_conf_includes(tmp_path: Path) -> None:
    (tmp_path / "ld.so.conf.d").mkdir()
    (tmp_path / "ld.so.conf").write_text("include ld.so.conf.d/*.conf\n/usr/local/lib # comment\n")
    (tmp_path / "ld.so.conf.d" / "imagebuilder-cuda.conf").write_text("/opt/imagebuilder/cuda/nvidia/cu13/lib\n")
    found = suite.loader_dirs(str(tmp_path / "ld.so.conf"))
    assert found[:2] == ["/opt/imagebuilder/cuda/nvidia/cu13/lib", "/usr/local/lib"] or \
        found[1:3] == ["/opt/imagebuilder/cuda/nvidia/cu13/lib", "/usr/local/lib"]
    assert "/usr/lib/x86_64-linux-gnu" in found
