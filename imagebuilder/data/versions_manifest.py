"""Writes the versions manifest of an image (run inside it, as each layer's last build step).

Standard library only, and torch is not imported: the Python packages come from their metadata, the
OS packages from dpkg's status file, and the CUDA/cuDNN/NCCL versions from torch's version.py and the
nvidia-* wheels' metadata.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import sys


def dpkg_packages(path: str = "/var/lib/dpkg/status") -> dict[str, str]:
    packages: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            blocks = f.read().split("\n\n")
    except OSError:
        return packages
    for block in blocks:
        fields = dict(re.findall(r"^([A-Za-z-]+): (.*)$", block, re.MULTILINE))
        if fields.get("Status", "").endswith(" installed") and "Package" in fields:
            packages[fields["Package"]] = fields.get("Version", "")
    return dict(sorted(packages.items()))


def python_packages() -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[name.lower()] = dist.version
    return dict(sorted(found.items()))


def torch_cuda() -> str | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        with open(os.path.join(next(iter(spec.submodule_search_locations)), "version.py"), encoding="utf-8") as f:
            match = re.search(r"^cuda\s*(?::\s*\S+)?\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.MULTILINE)
    except OSError:
        return None
    return match.group(1) if match else None


def first(packages: dict[str, str], prefix: str) -> str | None:
    return next((v for k, v in packages.items() if k.startswith(prefix)), None)


def main() -> None:
    pip = python_packages()
    manifest = {
        "python": ".".join(str(v) for v in sys.version_info[:3]),
        "torch": pip.get("torch"),
        "cuda": torch_cuda(),
        "cudnn": first(pip, "nvidia-cudnn-cu"),
        "nccl": first(pip, "nvidia-nccl-cu"),
        "pip": pip,
        "dpkg": dpkg_packages(),
    }
    json.dump(manifest, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
