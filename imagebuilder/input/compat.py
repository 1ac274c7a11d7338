"""The compatibility model: which torch release ships which accelerator variants, and with what pins.

The table is a packaged data file (`imagebuilder/data/compat.json`) generated from the wheels' own
METADATA by `compat_refresh`; nothing here is hand-typed. This module only reads it and answers
questions about it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

PYPI_SIMPLE = "https://pypi.org/simple"
PYTORCH_INDEX = "https://download.pytorch.org/whl/{accelerator}"


@dataclass(frozen=True)
class Variant:
    """One accelerator build of one torch release, as its wheel pins it."""

    torch: str
    accelerator: str
    cuda: str | None
    cudnn: str | None
    nccl: str | None
    triton: str | None
    index: str  # "pypi" (PyPI's default variant) or "pytorch" (PyTorch's per-accelerator index)
    packages: tuple[tuple[str, str], ...]
    verified: bool
    extras: tuple[tuple[str, tuple[str, ...]], ...] = ()  # cuda-toolkit -> the extras torch asks for
    constraints: tuple[tuple[str, str], ...] = ()  # what torch requires without an exact pin (name, specifier)

    def cuda_libs(self, overrides: tuple[tuple[str, str], ...] = ()) -> tuple[str, ...]:
        """The requirements of this variant's CUDA libraries, the way torch's wheel asks for them: every
        nvidia-* and cuda-toolkit pin with its extras (an override's version instead of torch's pin), and
        the ranges torch gives for the libraries it does not pin. Python-independent wheels only: triton and
        cuda-bindings are built per Python and install with torch."""
        pins = {**dict(self.packages), **dict(overrides)}
        extras = dict(self.extras)
        out = [f"{name}{'[' + ','.join(extras[name]) + ']' if extras.get(name) else ''}=={version}"
               for name, version in sorted(pins.items()) if cuda_lib(name)]
        out += [f"{name}{spec}" for name, spec in sorted(self.constraints) if cuda_lib(name) and name not in pins]
        return tuple(out)


def cuda_lib(name: str) -> bool:
    """A wheel of NVIDIA's CUDA libraries (Python-independent, py3-none): nvidia-* and the cuda-toolkit
    metapackage; not triton, cuda-bindings or cuda-python (one build per Python)."""
    return name.startswith("nvidia-") or name == "cuda-toolkit"


@dataclass(frozen=True)
class Release:
    torch: str
    requires_python: str | None
    python: tuple[str, ...]
    glibc: str | None
    torchvision: str | None
    torchaudio: str | None
    variants: tuple[Variant, ...]

    def variant(self, accelerator: str) -> Variant | None:
        return next((v for v in self.variants if v.accelerator == accelerator), None)

    def supports_python(self, python: str) -> bool:
        if self.python:
            return python in self.python
        if self.requires_python:
            try:
                return Version(python) in SpecifierSet(self.requires_python)
            except (InvalidSpecifier, InvalidVersion):
                return True
        return True


@dataclass(frozen=True)
class CompatTable:
    releases: tuple[Release, ...]
    driver_floor: tuple[tuple[str, str], ...]
    source: str
    generated: str

    @classmethod
    def load(cls, path: Path | None = None) -> CompatTable:
        if path is None:
            text = resources.files("imagebuilder").joinpath("data/compat.json").read_text(encoding="utf-8")
        else:
            text = path.read_text(encoding="utf-8")
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CompatTable:
        releases = []
        for torch, rel in raw.get("releases", {}).items():
            variants = tuple(
                Variant(
                    torch=torch,
                    accelerator=acc,
                    cuda=v.get("cuda"),
                    cudnn=v.get("cudnn"),
                    nccl=v.get("nccl"),
                    triton=v.get("triton"),
                    index=v.get("index", "pytorch"),
                    packages=tuple(sorted((v.get("packages") or {}).items())),
                    verified=bool(v.get("verified", True)),
                    extras=tuple(sorted((k, tuple(x)) for k, x in (v.get("extras") or {}).items())),
                    constraints=tuple(sorted((v.get("constraints") or {}).items())),
                )
                for acc, v in sorted(rel.get("variants", {}).items())
            )
            releases.append(
                Release(
                    torch=torch,
                    requires_python=rel.get("requires_python"),
                    python=tuple(rel.get("python") or ()),
                    glibc=rel.get("glibc"),
                    torchvision=rel.get("torchvision"),
                    torchaudio=rel.get("torchaudio"),
                    variants=variants,
                )
            )
        releases.sort(key=lambda r: Version(r.torch))
        floors = raw.get("driver_floor", {})
        driver = tuple(sorted((k, str(v.get("toolkit") if isinstance(v, dict) else v)) for k, v in floors.items()))
        return cls(tuple(releases), driver, str(raw.get("source", "")), str(raw.get("generated", "")))

    def release(self, torch: str) -> Release | None:
        return next((r for r in self.releases if r.torch == torch), None)

    def newest(self) -> str | None:
        return self.releases[-1].torch if self.releases else None

    def min_driver(self, cuda: str) -> str | None:
        return dict(self.driver_floor).get(cuda)

    def nearest(self, torch: str, accelerator: str, limit: int = 3) -> list[str]:
        """Supported (torch, accelerator) pairs closest to the asked one, as 'torch/accelerator'."""
        try:
            want = Version(torch)
        except InvalidVersion:
            want = Version("0")
        pairs = [(r, v) for r in self.releases for v in r.variants if v.accelerator == accelerator]
        if not pairs:
            rel = self.release(torch)
            pairs = [(rel, v) for v in rel.variants] if rel else []
        pairs.sort(key=lambda rv: (abs(_ordinal(Version(rv[0].torch)) - _ordinal(want)), rv[1].accelerator))
        return [f"{r.torch}/{v.accelerator}" for r, v in pairs[:limit]]


def _ordinal(v: Version) -> int:
    parts = ([*list(v.release), 0, 0, 0])[:3]
    return parts[0] * 10000 + parts[1] * 100 + parts[2]


def torch_index_url(variant: Variant) -> str:
    """Where a variant's wheel is served by default: PyPI for its default variant, else PyTorch's index."""
    if variant.index == "pypi":
        return PYPI_SIMPLE
    return PYTORCH_INDEX.format(accelerator=variant.accelerator)


def os_python(base_image: str) -> str | None:
    """The Python that a well-known base image's OS ships (what `python3` is after apt-get install)."""
    name = base_image.split("@", 1)[0].rsplit("/", 1)[-1]
    known = {
        "debian:bookworm": "3.11", "debian:12": "3.11", "debian:trixie": "3.13", "debian:13": "3.13",
        "ubuntu:22.04": "3.10", "ubuntu:jammy": "3.10", "ubuntu:24.04": "3.12", "ubuntu:noble": "3.12",
    }
    for prefix, python in known.items():
        repo, tag = prefix.split(":")
        if name == prefix or name.startswith(prefix + "-") or (name.startswith(repo + ":") and tag in name
                                                                 and name.split(":")[1].startswith(tag)):
            return python
    return None
