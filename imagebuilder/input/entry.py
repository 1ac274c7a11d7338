"""What a matrix resolves to: frozen `Entry` objects (one point of the matrix: its versions, settings, layer tree
and where each value was written) and the `Matrix` that holds them. Made by the resolver (`input/resolver.py`) from
what the reader (`input/reader.py`) read; nothing mutates them after `matrix.load()`. Pure; no I/O.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..declarations import schema
from ..declarations.vulnerabilities import Policy
from ..errors import Where
from ..ports.reference import Reference, parse
from . import lookups
from .compat import Variant


@dataclass(frozen=True)
class LayerSpec:
    """One node of an entry's layer tree: `name` is unique in the tree, `layer` is the folder."""

    name: str
    layer: str
    parent: str | None
    when: tuple[tuple[str, tuple[str, ...]], ...] = ()  # entry field -> globs: the node exists only where one matches

    def applies(self, fields: Mapping[str, str | None]) -> bool:
        return all(any(fnmatch.fnmatchcase(fields.get(name) or "", glob) for glob in globs)
                   for name, globs in self.when)


WHEN_FIELDS = ("torch", "accelerator", "python", "flavor", "cuda")


def for_entry(specs: tuple[LayerSpec, ...], fields: Mapping[str, str | None]) -> tuple[LayerSpec, ...]:
    """An entry's own tree: the nodes whose `when:` it matches; a node left out hands its children to its
    parent (`{layer: devel, when: {flavor: devel}}` sits between torch and business only in devel entries)."""
    kept: list[LayerSpec] = []
    up: dict[str, str | None] = {}  # a left-out node -> the nearest kept ancestor
    for spec in specs:  # parents come first (_tree_order)
        parent = spec.parent
        while parent is not None and parent in up:
            parent = up[parent]
        if spec.applies(fields):
            kept.append(spec if parent == spec.parent else dataclasses.replace(spec, parent=parent))
        else:
            up[spec.name] = parent
    return tuple(kept)


@dataclass(frozen=True)
class BuildSettings:
    """`build:` how an entry's images are built: the CA bundle (PEM certificates, checked when read) and the wheelhouse
    (a folder that exists), torch's index for the entry's variant and the index for the rest, the build network, and
    where a devel image's nvcc comes from."""

    ca_bundle: Path | None
    wheelhouse: Path | None
    torch_index_url: str
    index_url: str
    network: str
    cuda_toolkit: str = schema.value("build.cuda_toolkit")  # devel: nvcc from NVIDIA wheels (pip) or the base (image)


@dataclass(frozen=True)
class UserSpec:
    """The non-root user every image runs as (matrix `user:`): created in the root layer, with a writable
    home and workdir, and set as each layer's final `USER uid:gid`."""

    name: str = schema.value("user.name")
    uid: int = schema.value("user.uid")
    gid: int = schema.value("user.gid")
    workdir: str = schema.value("user.workdir")

    @property
    def home(self) -> str:
        return f"/home/{self.name}"

    def settings(self) -> dict[str, Any]:
        return {"name": self.name, "uid": self.uid, "gid": self.gid, "home": self.home, "workdir": self.workdir}


@dataclass(frozen=True)
class RunnerSettings:
    """`runners:` where an engine runs an entry's jobs (`emit.graph`): builds on a CPU queue, a CUDA leaf's verify
    on `gpus` GPUs of model `gpu` (`any`: no model asked) from the GPU queue."""

    build: str = schema.value("runners.build")
    gpu_queue: str = schema.value("runners.gpu_queue")
    gpu: str = schema.value("runners.gpu")
    gpus: int = schema.value("runners.gpus")


@dataclass(frozen=True)
class SmokeSettings:
    """`smoke:` how the suite runs on an entry's leaves; each value of its kind and within the schema's bounds."""

    timeout: int
    shm_size: str
    gpus: str  # auto | all (NVIDIA toolkit) | cdi | devices (raw /dev/nvidia* + driver_dir) | none
    driver_dir: str = schema.value("smoke.driver_dir")
    throughput_floor: float = schema.value("smoke.throughput_floor")  # fraction of the GPU model's dense bf16 peak
    cpu_gflops_floor: float = schema.value("smoke.cpu_gflops_floor")  # fp32, one thread, best of 10 (cpu_floor.py)
    env: tuple[tuple[str, str], ...] = ()  # extra environment for the smoke container
    allow_skip: tuple[str, ...] = ()  # checks (names or globs) whose skip does not block publishing on a GPU run
    gpu_floors: tuple[tuple[str, float], ...] = ()  # GPU name (substring) -> bf16 TFLOP/s floor, for unlisted GPUs
    history_window: int = schema.value("smoke.history_window")  # the passes whose median is the baseline


# The resolved versions of an entry (Entry.versions): labels, expectations, and what a template may depend on.
SHOWN_VERSIONS = ("torch", "cuda", "cudnn", "nccl", "python", "triton")  # what a report or the plan says of an entry


def versions_line(versions: Mapping[str, Any]) -> str:
    """An entry's versions in one line (`torch 2.11.0 · cuda 13.0 · ...`), the ones it has, from `Entry.versions()`
    or a report's copy of it."""
    return " · ".join(f"{name} {versions[name]}" for name in SHOWN_VERSIONS if versions.get(name))


VERSION_FIELDS = ("torch", "accelerator", "python", "flavor", "cuda", "cudnn", "nccl", "triton", "torchvision",
                  "torchaudio")


@dataclass(frozen=True)
class VulnerabilitySettings:
    """`vulnerabilities:`: where the advisories are (OSV) and the gate's policy (`declarations.vulnerabilities`)."""

    data: tuple[Path, ...] = ()
    policy: Policy = field(default_factory=Policy)


@dataclass(frozen=True)
class Entry:
    """One resolved point of the matrix. Nothing mutates it after `matrix.load()`."""

    id: str
    torch: str
    accelerator: str
    python: str
    flavor: str
    cuda: str | None
    cudnn: str | None
    nccl: str | None
    triton: str | None
    torchvision: str | None
    torchaudio: str | None
    pins: tuple[tuple[str, str], ...]
    base_image: str
    registry: str
    repository: str
    layers: tuple[LayerSpec, ...]
    layers_path: tuple[Path, ...]
    build: BuildSettings
    smoke: SmokeSettings
    tags: tuple[str, ...]
    vars: tuple[tuple[str, str], ...]
    where: Where
    overrides: tuple[tuple[str, str], ...] = ()  # (wheel, version) installed over torch's own pin
    driver_floor: str | None = None  # the minimum NVIDIA driver for this CUDA
    aliases: tuple[str, ...] = tuple(schema.value("aliases"))  # floating tag templates
    user: UserSpec = UserSpec()
    toolkit: tuple[str, ...] = ()  # devel flavor of a CUDA entry: nvcc and CUDA headers as pip requirements
    cuda_libs: tuple[str, ...] = ()  # torch's CUDA library wheels (compat.Variant.cuda_libs): the shared CUDA node
    origins: tuple[tuple[str, str], ...] = ()  # key -> where its value was written (`file:line`) or `default`
    vulnerabilities: VulnerabilitySettings = field(default_factory=VulnerabilitySettings)
    runners: RunnerSettings = RunnerSettings()

    @functools.cached_property
    def target(self) -> Reference:
        """Where this entry's images go: its registry and repository as one reference, parsed once (every tag and
        key tag of the entry is made from it)."""
        return parse(f"{self.registry.rstrip('/')}/{self.repository}")

    def versions(self) -> dict[str, str | None]:
        """The resolved versions: what the plan promises and the smoke suite checks."""
        return {name: getattr(self, name) for name in VERSION_FIELDS}

    def leaves(self) -> tuple[LayerSpec, ...]:
        parents = {spec.parent for spec in self.layers}
        return tuple(spec for spec in self.layers if spec.name not in parents)


@dataclass(frozen=True)
class Matrix:
    """A matrix file resolved: its entries in the file's order (no two with one id), what `exclude:` removed and why,
    the warnings, and what a first load needs answered before the entries left out can be resolved."""

    file: Path
    entries: tuple[Entry, ...]
    excluded: tuple[tuple[str, str], ...] = ()  # (combination, why)
    warnings: tuple[str, ...] = field(default=())
    questions: lookups.Questions = field(default_factory=lookups.Questions)  # what a first load needs answered
    registry: str | None = None  # the file's own `registry:` (or --registry): whose host gets the env's credentials
    attestations: str = schema.value("attestations")  # `attestations:` (`evidence.sigstore` layouts)


TOOLKIT_EXTRAS = "cccl,crt,nvcc,nvvm"  # cuda-toolkit's extras that make a working nvcc with CUDA C++ headers


def cuda_toolkit(variant: Variant, source: str) -> tuple[str, ...]:
    """What the devel flavor of a CUDA entry installs to build extensions, as pip requirements.

    `pip`: NVIDIA's `cuda-toolkit` wheels with nvcc, its front end (crt), NVVM and the CUDA C++ headers, at
    the exact toolkit version torch pins (else the entry's CUDA minor). NVIDIA ships the nvcc driver in
    wheels from CUDA 13 on; CUDA 12's nvidia-cuda-nvcc-cu12 holds only ptxas, so CUDA 12 entries need
    `image` (a base image that already has nvcc, such as nvidia/cuda:*-devel): nothing is installed and
    the build checks that the image's nvcc is the entry's CUDA."""
    if not variant.cuda or source == "image":
        return ()
    pins = dict(variant.packages)
    version = pins.get("cuda-toolkit") or ".".join(variant.cuda.split(".")[:2]) + ".*"
    return (f"cuda-toolkit[{TOOLKIT_EXTRAS}]=={version}",)

