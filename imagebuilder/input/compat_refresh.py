"""Refresh the PyTorch / CUDA compatibility table from a Python package index.

The table records, for every stable ``torch`` release on an index, which CUDA
runtime the default (PyPI) Linux x86_64 wheel is built against, the exact
``nvidia-*`` / ``cuda-*`` / ``triton`` pins it requires, the CPython versions
and glibc floor of its wheels, and the ``torchvision`` / ``torchaudio`` releases
that pin it.

Two kinds of index are understood (see :func:`index_kind`): PyPI, whose one
Linux wheel per release is the default CUDA build, and PyTorch's
per-accelerator indexes (``https://download.pytorch.org/whl/cu126``,
``.../cpu``), whose wheels carry a local version label naming their
accelerator (``torch-2.6.0+cu126-...whl``).  Tables built from several indexes
are combined with :func:`merge_tables`.

Everything is read from a PEP 691 JSON simple index (or a PEP 503 HTML one,
such as ``python -m http.server`` serving a folder) plus the PEP 658
``<wheel url>.metadata`` files next to each wheel.  When an index serves no
``.metadata`` file for any wheel of a release, the ``METADATA`` member is read
out of the wheel itself with HTTP range requests (a few hundred KiB, never the
whole wheel).

One module per noun: the index (HTTP, pages, kinds) is ``input/pkg_index.py``, a
wheel and its METADATA ``input/wheel.py``, the table as a document (written,
compared, merged) ``input/compat_tables.py``; this module derives the variants
and builds the table, and is the refresher's public face (``__all__``).

Only the standard library and ``packaging`` are used.
"""

from __future__ import annotations

import datetime
import re
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .compat_tables import SCHEMA_VERSION, diff_tables, fmt, merge_tables, write_table
from .pkg_index import (
    DEFAULT_INDEX,
    KINDS,
    Http,
    IndexFile,
    IndexKind,
    IndexUnreachable,
    default_cafile,
    index_kind,
    project_files,
    project_versions,
)
from .wheel import (
    Metadata,
    Wheel,
    applies,
    by_release,
    exact_pin,
    fetch_metadata,
    glibc_floor,
    parse_metadata,
    python_versions,
)

__all__ = [
    "IndexUnreachable",
    "diff_tables",
    "driver_floor",
    "fetch_table",
    "index_kind",
    "merge_tables",
    "project_versions",
    "write_table",
]


_WORKERS = 8
_CU_SUFFIX = re.compile(r"-cu(\d+)$")
_CUDA_LABEL = re.compile(r"^cu(\d+)(\d)$")  # cu126 -> CUDA 12.6, cu118 -> 11.8, cu130 -> 13.0


def driver_floor() -> dict[str, dict[str, str]]:
    """Minimum NVIDIA Linux driver per CUDA ``major.minor``.

    ``toolkit`` is the driver shipped with / required for the full toolkit
    feature set; ``compat`` is the floor under CUDA minor-version
    compatibility.  Source: NVIDIA CUDA Toolkit release notes, table
    "CUDA Toolkit and Corresponding Driver Versions".
    """
    return {
        "11.8": {"toolkit": "520.61.05", "compat": "450.80.02"},
        "12.1": {"toolkit": "530.30.02", "compat": "525.60.13"},
        "12.4": {"toolkit": "550.54.14", "compat": "525.60.13"},
        "12.6": {"toolkit": "560.28.03", "compat": "525.60.13"},
        "12.8": {"toolkit": "570.26", "compat": "525.60.13"},
        "12.9": {"toolkit": "575.51.03", "compat": "525.60.13"},
        "13.0": {"toolkit": "580.65.06", "compat": "580.65.06"},
    }


# --------------------------------------------------------------------------- variants


def _gpu_package(name: str) -> bool:
    return name == "triton" or name.startswith(("nvidia-", "cuda-", "pytorch-triton"))


def _first(packages: Mapping[str, str], *names: str, suffixed: str | None = None) -> str | None:
    for name in names:
        if name in packages:
            return packages[name]
    if suffixed is not None:
        for name in sorted(packages):
            if _CU_SUFFIX.sub("", name) == suffixed:
                return packages[name]
    return None


def _major_minor(version: str) -> str:
    parts = Version(version).release
    return f"{parts[0]}.{parts[1] if len(parts) > 1 else 0}"


def _derive_variant(
    meta: Metadata, pythons: Sequence[str], release: str, index: IndexKind
) -> tuple[str, dict[str, object]]:
    """(accelerator, variant) of a wheel from its METADATA pins: the CUDA runtime (or cuda-toolkit) pin names it."""
    packages: dict[str, str] = {}
    extras: dict[str, list[str]] = {}
    constraints: dict[str, str] = {}
    for req in meta.requirements:
        name = canonicalize_name(req.name)
        if not _gpu_package(name) or not applies(req, pythons):
            continue
        pin = exact_pin(req)
        if pin is not None:
            packages[name] = pin
            if req.extras:  # cuda-toolkit[cublas,cudart,...]: the extras name the libraries it brings
                extras[name] = sorted(req.extras)
        elif str(req.specifier):
            constraints[name] = str(req.specifier)

    runtime = _first(packages, "nvidia-cuda-runtime", suffixed="nvidia-cuda-runtime")
    if runtime is None:
        runtime = _first(packages, "cuda-toolkit", "cuda-runtime", "nvidia-cuda-nvrtc", suffixed="nvidia-cuda-nvrtc")
    cuda: str | None
    if runtime is not None:
        cuda = _major_minor(runtime)
        accelerator = "cu" + cuda.replace(".", "")
    else:
        majors = sorted({m.group(1) for n in packages if (m := _CU_SUFFIX.search(n))})
        if majors:
            warnings.warn(f"torch {release}: no CUDA runtime pin; using -cu{majors[-1]} suffix", stacklevel=2)
            cuda, accelerator = majors[-1], f"cu{majors[-1]}"
        else:
            cuda, accelerator = None, "cpu"
    variant: dict[str, object] = {
        "cuda": cuda,
        "index": index,
        "cudnn": _first(packages, "nvidia-cudnn", suffixed="nvidia-cudnn"),
        "nccl": _first(packages, "nvidia-nccl", suffixed="nvidia-nccl"),
        "triton": _first(packages, "triton", "pytorch-triton"),
        "packages": dict(sorted(packages.items())),
        "extras": dict(sorted(extras.items())),
        "constraints": dict(sorted(constraints.items())),
        "verified": True,
    }
    return accelerator, variant


def _labelled_variant(
    meta: Metadata, pythons: Sequence[str], release: str, label: str
) -> tuple[str, dict[str, object]] | None:
    """The variant of a PyTorch-index wheel whose local label is ``label`` (``cpu``, ``cu126``).

    The variant is derived from the METADATA pins exactly as for PyPI, then
    checked against the label; a wheel that pins no CUDA runtime under a
    ``cuNNN`` label bundles its CUDA, whose version the label gives.  A label
    that contradicts the pins yields None (with a warning): the table's key for
    a PyTorch variant is the name of the index that serves it.
    """
    accelerator, variant = _derive_variant(meta, pythons, release, "pytorch")
    if accelerator == label:
        return accelerator, variant
    m = _CUDA_LABEL.match(label)
    cuda = variant["cuda"]
    if m is not None:
        label_cuda = f"{int(m.group(1))}.{m.group(2)}"
        if cuda is None or (isinstance(cuda, str) and "." not in cuda and label_cuda.startswith(f"{cuda}.")):
            variant["cuda"] = label_cuda  # no runtime pin (bundled CUDA, or only a -cuNN suffix): trust the label
            return label, variant
    warnings.warn(
        f"torch {release}+{label}: its METADATA pins {accelerator} (CUDA {fmt(cuda)}), not {label}; variant omitted",
        stacklevel=2,
    )
    return None


def _cpu_variant() -> dict[str, object]:
    return {
        "cuda": None,
        "index": "pytorch",
        "cudnn": None,
        "nccl": None,
        "triton": None,
        "packages": {},
        "extras": {},
        "constraints": {},
        "verified": False,
    }


# --------------------------------------------------------------------------- companions


def _torch_pin(meta_text: str | None, pythons: Sequence[str]) -> Version | None:
    """The public version of the torch release ``meta_text`` pins exactly (``==2.6.0+cu126`` -> 2.6.0)."""
    if meta_text is None:
        return None
    for req in parse_metadata(meta_text).requirements:
        if canonicalize_name(req.name) == "torch" and applies(req, pythons):
            pin = exact_pin(req)
            if pin is not None:
                try:
                    return Version(Version(pin).public)
                except InvalidVersion:
                    return None
    return None


def _companion_map(
    pool: ThreadPoolExecutor,
    http: Http,
    files: list[IndexFile] | None,
    project: str,
    wanted: set[Version],
    min_torch: Version,
    *,
    local: bool = False,
) -> dict[Version, Version]:
    """torch release -> newest ``project`` release whose METADATA pins it exactly.

    Releases on both sides are public versions: with ``local``, companion wheels
    with local labels count too, and ``torchvision 0.21.0+cu126`` pinning
    ``torch==2.6.0+cu126`` maps torch 2.6.0 to torchvision 0.21.0.
    Companion releases are read newest first, in batches of the pool size;
    the scan stops once a whole batch pins torch below ``min_torch``.
    """
    if not files:
        return {}
    releases = by_release(files, project, local=local)
    order = sorted(releases, reverse=True)
    found: dict[Version, Version] = {}
    for start in range(0, len(order), _WORKERS):
        batch = order[start : start + _WORKERS]
        futures = {v: pool.submit(fetch_metadata, http, releases[v], project) for v in batch}
        pins: list[Version | None] = []
        for v in batch:
            pin = _torch_pin(futures[v].result(), python_versions(releases[v]))
            pins.append(pin)
            if pin is not None and pin in wanted and pin not in found:
                found[pin] = v  # newest first, so the first hit wins
        if wanted <= found.keys():
            break
        if pins and all(p is not None and p < min_torch for p in pins):
            break
    return found


# --------------------------------------------------------------------------- table


def fetch_table(
    index_url: str = DEFAULT_INDEX,
    *,
    min_torch: str = "2.4",
    timeout: float = 60.0,
    cafile: str | None = None,
    kind: IndexKind | None = None,
) -> dict[str, object]:
    """Build the compatibility table from ``index_url`` (a PEP 503/691 simple index).

    ``kind`` says how the index lays out its wheels; None (the default) decides
    with :func:`index_kind`: ``"pypi"`` for ``https://pypi.org/simple`` or an
    index whose ``torch`` wheels carry no local version label, else ``"pytorch"``.

    * ``"pypi"``: one default wheel build per release; wheels with a local label
      are ignored.  Its variant (named by the CUDA runtime / cuda-toolkit pin)
      gets ``"index": "pypi"``, and each release also gets an unverified ``cpu``
      placeholder (``"index": "pytorch", "verified": false``) unless the default
      build is itself the CPU one.
    * ``"pytorch"``: a PyTorch-style index (``https://download.pytorch.org/whl/cu126``)
      whose wheels carry local labels (``torch-2.6.0+cu126``).  Wheels are grouped
      by public version (release ``"2.6.0"``), then by label; each ``cpu`` or
      ``cuNNN`` label gives one verified variant (``"index": "pytorch"``) derived
      from that label's own wheels' METADATA only, named by the label.  Other
      labels (``rocm6.2``, ``cpu.cxx11.abi``, ...) and unlabelled wheels give no
      variant, but still count for the release's python / glibc / companions, so a
      release that only exists with such labels is still listed.  No placeholder
      is added.  torchvision / torchaudio are matched on public versions too.

    Raises :class:`IndexUnreachable` when the index or its files cannot be fetched,
    :class:`ValueError` for an unknown ``kind``.
    """
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown index kind {kind!r}: expected one of {', '.join(KINDS)}")
    floor = Version(min_torch)
    with (
        Http(timeout=timeout, cafile=default_cafile(cafile)) as http,
        ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="compat") as pool,
    ):
        pages = {
            p: pool.submit(project_files, http, index_url, p, required=(p == "torch"))
            for p in ("torch", "torchvision", "torchaudio")
        }
        torch_files = pages["torch"].result()
        assert torch_files is not None  # required=True never returns None
        resolved: IndexKind = kind or index_kind(index_url, (f.filename for f in torch_files))
        local = resolved == "pytorch"
        releases = {v: ws for v, ws in by_release(torch_files, "torch", local=local).items() if v >= floor}
        groups = {v: _variant_groups(ws, local=local) for v, ws in releases.items()}
        meta_futures: dict[tuple[Version, str | None], Future[str | None]] = {
            (v, label): pool.submit(fetch_metadata, http, ws, "torch")
            for v, by_label in groups.items()
            for label, ws in by_label.items()
        }
        wanted = set(releases)
        # The two companion scans submit batches to ``pool`` and wait on them; run them side by side.
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="compat-scan") as scans:
            scan_futures = {
                p: scans.submit(_companion_map, pool, http, pages[p].result(), p, wanted, floor, local=local)
                for p in ("torchvision", "torchaudio")
            }
            companions = {p: fut.result() for p, fut in scan_futures.items()}
        metas = {key: fut.result() for key, fut in meta_futures.items()}

    if local:
        ignored = sorted(
            {w.version.local or "(none)" for ws in releases.values() for w in ws if not _variant_label(w.version.local)}
        )
        if ignored:
            warnings.warn(
                f"torch wheels on {index_url} with local labels {', '.join(ignored)} give no variant", stacklevel=2
            )
    table_releases: dict[str, object] = {}
    for version in sorted(releases):
        release_metas = {label: metas[(version, label)] for label in groups[version]}
        table_releases[str(version)] = _release_entry(
            str(version), releases[version], groups[version], release_metas, companions, resolved
        )
    return {
        "schema": SCHEMA_VERSION,
        "generated": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "source": index_url,
        "driver_floor": driver_floor(),
        "releases": table_releases,
    }


def _variant_label(label: str | None) -> bool:
    return label == "cpu" or (label is not None and _CUDA_LABEL.match(label) is not None)


def _variant_groups(wheels: Sequence[Wheel], *, local: bool) -> dict[str | None, list[Wheel]]:
    """The wheels each variant is read from: all of them (key None) unless ``local``, else by cpu/cuNNN label."""
    if not local:
        return {None: list(wheels)}
    groups: dict[str | None, list[Wheel]] = {}
    for wheel in wheels:
        label = wheel.version.local
        if _variant_label(label):
            groups.setdefault(label, []).append(wheel)
    return dict(sorted(groups.items(), key=lambda kv: kv[0] or ""))


def _release_entry(
    release: str,
    wheels: Sequence[Wheel],
    groups: Mapping[str | None, Sequence[Wheel]],
    metas: Mapping[str | None, str | None],
    companions: Mapping[str, Mapping[Version, Version]],
    kind: IndexKind,
) -> dict[str, object]:
    pythons = python_versions(wheels)
    floors = [f for w in wheels for t in w.tags if (f := glibc_floor(t.platform)) is not None]
    glibc = "{}.{}".format(*min(floors)) if floors else None
    variants: dict[str, object] = {}
    parsed: list[Metadata] = []
    for label, meta_text in metas.items():
        if meta_text is None:
            what = "PyPI variant" if label is None else f"{label} variant"
            warnings.warn(f"torch {release}: no METADATA available; {what} omitted", stacklevel=2)
            continue
        meta = parse_metadata(meta_text)
        parsed.append(meta)
        group_pythons = python_versions(groups[label])
        found: tuple[str, dict[str, object]] | None
        if label is None:
            found = _derive_variant(meta, group_pythons, release, kind)
        else:
            found = _labelled_variant(meta, group_pythons, release, label)
        if found is None:
            continue
        accelerator, variant = found
        variants[accelerator] = variant
        cuda = variant["cuda"]
        if isinstance(cuda, str) and "." in cuda and cuda not in driver_floor():
            warnings.warn(f"torch {release}: CUDA {cuda} has no driver_floor entry", stacklevel=2)
    if parsed:
        requires_python = parsed[0].requires_python
    else:
        index_rp = sorted({w.file.requires_python for w in wheels if w.file.requires_python})
        requires_python = index_rp[0] if index_rp else None
    if kind == "pypi" and "cpu" not in variants:
        variants["cpu"] = _cpu_variant()
    version = Version(release)
    tv = companions.get("torchvision", {}).get(version)
    ta = companions.get("torchaudio", {}).get(version)
    return {
        "requires_python": requires_python,
        "python": pythons,
        "glibc": glibc,
        "torchvision": str(tv) if tv is not None else None,
        "torchaudio": str(ta) if ta is not None else None,
        "variants": dict(sorted(variants.items())),
    }


