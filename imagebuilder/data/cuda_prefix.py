"""The shared CUDA node's prefix: NVIDIA's library wheels installed once for every Python of an image.

    python3 cuda_prefix.py seal PREFIX     # in the CUDA node, after `pip install --target PREFIX`
    python cuda_prefix.py single PREFIX    # in a node that installs Python packages on top (its venv's Python)

`seal`: every wheel in PREFIX must be Python-independent (a `py3-none` tag), or one Python's build would be
shared with another; the folders that hold the libraries go to the loader's path (ld.so.conf.d), so a
library loads from PREFIX whatever asks for it. `single`: no distribution of PREFIX is installed a second
time elsewhere on this Python's path (pip put a second copy of a library in the venv): exit 1, naming it.
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys

CONF = "/etc/ld.so.conf.d/imagebuilder-cuda.conf"


def seal(prefix: str) -> int:
    bad = []
    for wheel in sorted(glob.glob(os.path.join(prefix, "*.dist-info", "WHEEL"))):
        with open(wheel, encoding="utf-8") as f:
            tags = [line.split(":", 1)[1].strip() for line in f if line.startswith("Tag:")]
        if not tags or not all(re.match(r"(py\d+\.)*py\d+-none-", tag) for tag in tags):
            bad.append(f"{os.path.basename(os.path.dirname(wheel))} ({', '.join(tags) or 'no tag'})")
    if bad:
        print("imagebuilder: the CUDA node takes Python-independent wheels only (py3-none); these are built for "
              "one Python and would be shared with every other: " + "; ".join(bad), file=sys.stderr)
        return 1
    folders = sorted({os.path.dirname(p) for p in glob.glob(os.path.join(prefix, "nvidia", "**", "lib*.so*"),
                                                            recursive=True)})
    os.makedirs(os.path.dirname(CONF), exist_ok=True)
    with open(CONF, "w", encoding="utf-8") as f:
        f.write("".join(folder + "\n" for folder in folders))
    ldconfig = shutil.which("ldconfig", path=os.pathsep.join([os.environ.get("PATH", ""), "/sbin", "/usr/sbin"]))
    if ldconfig is None:
        print("imagebuilder: no ldconfig in this image: the loader's cache cannot name the CUDA libraries' folders",
              file=sys.stderr)
        return 1
    subprocess.run([ldconfig], check=True)
    print(f"CUDA libraries in {prefix}: {len(glob.glob(os.path.join(prefix, '*.dist-info')))} wheels, "
          f"{len(folders)} library folders on the loader's path")
    return 0


def single(prefix: str) -> int:
    shared = {os.path.realpath(prefix)}
    where: dict[str, set[str]] = {}
    for dist in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        where.setdefault(name, set()).add(os.path.realpath(str(dist.locate_file(""))))
    twice = sorted(f"{name} ({', '.join(sorted(paths))})" for name, paths in where.items()
                   if len(paths) > 1 and paths & shared)
    if twice:
        print("imagebuilder: a second copy of the shared CUDA libraries: " + "; ".join(twice), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    command, folder = sys.argv[1], sys.argv[2]
    sys.exit(seal(folder) if command == "seal" else single(folder))
