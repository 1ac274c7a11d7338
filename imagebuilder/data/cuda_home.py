"""Gather a CUDA toolkit under one CUDA_HOME for torch.utils.cpp_extension (devel flavor, CUDA entries).

    python3 cuda_home.py CUDA_VERSION DEST

NVIDIA's wheels spread the toolkit over site-packages/nvidia/<part>/{bin,include,lib,nvvm} (CUDA 13 puts
every part under nvidia/cu13/). DEST gets bin/, include/, nvvm/ and lib64/ made of links into them, plus
the unversioned library names (libcudart.so) the linker asks for. A base image that brings its own
toolkit (nvidia/cuda:*-devel) keeps it: DEST must then already be there. Either way nvcc must report
CUDA_VERSION, or this exits 1 and the build fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig


def wheel_roots() -> list[str]:
    """Every nvidia/<part> folder on this Python's path: the venv's own and the shared CUDA node's
    (/opt/imagebuilder/cuda, through a .pth file)."""
    roots: list[str] = []
    for entry in [sysconfig.get_paths()["purelib"], *sys.path]:
        base = os.path.join(entry, "nvidia")
        if os.path.isdir(base):
            roots += [os.path.join(base, d) for d in sorted(os.listdir(base))
                      if os.path.isdir(os.path.join(base, d)) and os.path.join(base, d) not in roots]
    return roots


def link_tree(roots: list[str], dest: str) -> None:
    for sub, target in (("bin", "bin"), ("include", "include"), ("nvvm", "nvvm"), ("lib", "lib64")):
        for root in roots:
            src = os.path.join(root, sub)
            if not os.path.isdir(src):
                continue
            os.makedirs(os.path.join(dest, target), exist_ok=True)
            for name in os.listdir(src):
                link = os.path.join(dest, target, name)
                if not os.path.lexists(link):  # the first part that has a file wins
                    os.symlink(os.path.join(src, name), link)
    # nvcc finds its tools, NVVM and headers relative to the folder it is called from (nvcc.profile's TOP,
    # with headers under targets/<arch>/include), so DEST mirrors that layout too.
    target = os.path.join(dest, "targets", "x86_64-linux")
    os.makedirs(target, exist_ok=True)
    for name, to in (("include", "../../include"), ("lib", "../../lib64")):
        if not os.path.lexists(os.path.join(target, name)):
            os.symlink(to, os.path.join(target, name))
    lib64 = os.path.join(dest, "lib64")
    for name in sorted(os.listdir(lib64)) if os.path.isdir(lib64) else []:
        match = re.fullmatch(r"(lib.+\.so)\.\d+(?:\.\d+)*", name)
        if match and not os.path.lexists(os.path.join(lib64, match.group(1))):
            os.symlink(name, os.path.join(lib64, match.group(1)))


def nvcc_version(dest: str) -> str | None:
    try:
        out = subprocess.run([os.path.join(dest, "bin", "nvcc"), "--version"], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    match = re.search(r"release (\d+\.\d+)", out)
    return match.group(1) if match else None


def main(cuda: str, dest: str) -> int:
    if not os.path.exists(os.path.join(dest, "bin", "nvcc")):
        link_tree(wheel_roots(), dest)
    found = nvcc_version(dest)
    if found != ".".join(cuda.split(".")[:2]):
        print(f"imagebuilder: devel needs nvcc for CUDA {cuda} in {dest}/bin; found "
              f"{'CUDA ' + found if found else 'no working nvcc'}", file=sys.stderr)
        return 1
    print(f"CUDA_HOME={dest}: nvcc {found}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
