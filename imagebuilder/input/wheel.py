"""A ``torch`` (or companion) wheel on an index, as the compatibility refresher reads it: what its file name says
(release, build, tags: the Linux x86_64 glibc floor, the CPython versions) and its METADATA, from the PEP 658
``<wheel url>.metadata`` file beside it, else read out of the wheel itself with HTTP range requests (a few hundred
KiB, never the whole wheel); which of its requirements apply to a Linux x86_64 CPython, and which are exact pins.
"""

from __future__ import annotations

import io
import re
import warnings
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from email.parser import HeaderParser
from typing import TYPE_CHECKING

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from .pkg_index import Http, IndexFile, MetadataAbsent

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_RANGE_BLOCK = 512 * 1024
_RANGE_TAIL = 1024 * 1024
_METADATA_TRIES = 4  # .metadata files tried per release before reading the wheel itself
_RANGE_BUDGET = 64 * 1024 * 1024
_WHOLE_FILE_LIMIT = 32 * 1024 * 1024
_MANYLINUX_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_MANYLINUX_PEP600 = re.compile(r"^manylinux_(\d+)_(\d+)_(.+)$")
_MANYLINUX_LEGACY_RE = re.compile(r"^(manylinux1|manylinux2010|manylinux2014)_(.+)$")
_CPYTHON = re.compile(r"^cp(\d)(\d+)$")


@dataclass(frozen=True)
class Wheel:
    """A wheel file of an index, as its file name describes it."""

    file: IndexFile
    version: Version
    build: tuple[int, str] | tuple[()]
    tags: frozenset[Tag]

    @property
    def linux_x86_64(self) -> bool:
        return any(glibc_floor(t.platform) is not None for t in self.tags)

    @property
    def free_threaded(self) -> bool:
        cp_abis = [t.abi for t in self.tags if t.abi.startswith("cp")]
        return bool(cp_abis) and all(abi.endswith("t") for abi in cp_abis)


def glibc_floor(platform: str) -> tuple[int, int] | None:
    """glibc floor of a manylinux x86_64 platform tag, None for anything else."""
    m = _MANYLINUX_PEP600.match(platform)
    if m:
        return (int(m.group(1)), int(m.group(2))) if m.group(3) == "x86_64" else None
    m = _MANYLINUX_LEGACY_RE.match(platform)
    if m and m.group(2) == "x86_64":
        return _MANYLINUX_LEGACY[m.group(1)]
    return None


def _python_of(tag: Tag) -> str | None:
    m = _CPYTHON.match(tag.interpreter)
    if not m or tag.abi.endswith("t"):
        return None
    return f"{m.group(1)}.{m.group(2)}"


def by_release(files: Iterable[IndexFile], project: str, *, local: bool = False) -> dict[Version, list[Wheel]]:
    """Stable, non-yanked manylinux x86_64 wheels, by release (public version).

    Wheels with a local version label (``2.6.0+cu126``) are skipped unless
    ``local``; then they are kept (``Wheel.version`` keeps the label) and
    grouped under their public version (``2.6.0``).
    """
    out: dict[Version, list[Wheel]] = {}
    want = canonicalize_name(project)
    for f in files:
        if f.yanked or not f.filename.endswith(".whl"):
            continue
        try:
            name, version, build, tags = parse_wheel_filename(f.filename)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if name != want or version.is_prerelease or (version.local is not None and not local):
            continue
        wheel = Wheel(f, version, build, tags)
        if wheel.linux_x86_64:
            out.setdefault(Version(version.public), []).append(wheel)
    return out


def _preference(wheel: Wheel) -> tuple[object, ...]:
    """Sort key: the wheel pip would most likely install first."""
    pythons = sorted((_python_of(t) or "0.0" for t in wheel.tags), key=_pyver_key)
    return (wheel.build, not wheel.free_threaded, _pyver_key(pythons[-1]) if pythons else (0, 0))


def _pyver_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


class _RangeFile(io.RawIOBase):
    """Read-only seekable view of a remote file through HTTP range requests."""

    def __init__(self, http: Http, url: str) -> None:
        super().__init__()
        self._http = http
        self._url = url
        self._pos = 0
        self._chunks: list[tuple[int, bytes]] = []
        self._fetched = 0
        status, headers, body = http.get(url, {"Range": f"bytes=-{_RANGE_TAIL}"})
        if status == 206:
            total = headers.get("content-range", "").rpartition("/")[2]
            if not total.isdigit():
                raise MetadataAbsent(f"{url}: server sent no usable Content-Range")
            self._size = int(total)
            self._chunks.append((self._size - len(body), body))
        else:
            if len(body) > _WHOLE_FILE_LIMIT:  # pragma: no cover - defensive
                raise MetadataAbsent(f"{url}: server ignores Range requests")
            self._size = len(body)
            self._chunks.append((0, body))
        self._fetched += len(body)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def _cached(self, start: int, length: int) -> bytes | None:
        for cstart, data in self._chunks:
            if cstart <= start and start + length <= cstart + len(data):
                return data[start - cstart : start - cstart + length]
        return None

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        length = min(len(view), max(0, self._size - self._pos))
        if length == 0:
            return 0
        data = self._cached(self._pos, length)
        if data is None:
            end = min(self._size, self._pos + max(length, _RANGE_BLOCK)) - 1
            if self._fetched + (end - self._pos + 1) > _RANGE_BUDGET:
                raise MetadataAbsent(f"{self._url}: METADATA not found within {_RANGE_BUDGET} bytes")
            status, _headers, body = self._http.get(self._url, {"Range": f"bytes={self._pos}-{end}"})
            if status != 206:
                raise MetadataAbsent(f"{self._url}: server ignores Range requests")
            self._fetched += len(body)
            self._chunks.append((self._pos, body))
            data = body[:length]
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)


def _metadata_from_wheel(http: Http, url: str, project: str) -> str:
    try:
        with zipfile.ZipFile(_RangeFile(http, url)) as zf:
            want = canonicalize_name(project)
            for name in zf.namelist():
                top, _, member = name.partition("/")
                if (
                    member == "METADATA"
                    and top.endswith(".dist-info")
                    and canonicalize_name(top[: -len(".dist-info")].split("-")[0]) == want
                ):
                    return zf.read(name).decode("utf-8", errors="replace")
    except zipfile.BadZipFile as exc:
        raise MetadataAbsent(f"{url}: not a readable wheel ({exc})") from exc
    raise MetadataAbsent(f"{url}: no .dist-info/METADATA member")


def fetch_metadata(http: Http, wheels: Sequence[Wheel], project: str) -> str | None:
    """METADATA text for the first of ``wheels`` that has one, or None."""
    ordered = sorted(wheels, key=_preference, reverse=True)
    candidates = [w for w in ordered if w.file.core_metadata is not False]
    for wheel in candidates[:_METADATA_TRIES]:
        try:
            return http.get(wheel.file.url + ".metadata")[2].decode("utf-8", errors="replace")
        except MetadataAbsent:
            continue
    for wheel in ordered[:2]:
        try:
            return _metadata_from_wheel(http, wheel.file.url, project)
        except MetadataAbsent:
            continue
    return None


@dataclass
class Metadata:
    """What the refresher reads of a wheel's METADATA: its Requires-Python and its requirements."""

    requires_python: str | None
    requirements: list[Requirement] = field(default_factory=list)


def parse_metadata(text: str) -> Metadata:
    """METADATA text parsed; an unparsable Requires-Dist is warned about and left out."""
    msg = HeaderParser().parsestr(text)
    reqs: list[Requirement] = []
    for line in msg.get_all("Requires-Dist") or []:
        try:
            reqs.append(Requirement(str(line)))
        except InvalidRequirement:
            warnings.warn(f"unparsable Requires-Dist {line!r}", stacklevel=2)
    rp = msg.get("Requires-Python")
    return Metadata(str(rp).strip() if rp else None, reqs)


def applies(req: Requirement, pythons: Sequence[str]) -> bool:
    """Does ``req`` apply to a Linux x86_64 CPython install of any of ``pythons``?"""
    if req.marker is None:
        return True
    for py in pythons or ["3.12"]:
        env = {
            "platform_system": "Linux",
            "platform_machine": "x86_64",
            "sys_platform": "linux",
            "os_name": "posix",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "python_version": py,
            "python_full_version": f"{py}.0",
            "extra": "",
        }
        try:
            if Marker(str(req.marker)).evaluate(env):
                return True
        except InvalidMarker:  # pragma: no cover - Requirement already validated it
            return False
    return False


def exact_pin(req: Requirement) -> str | None:
    """The version a requirement pins exactly (`==x`, no wildcard), else None."""
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def python_versions(wheels: Iterable[Wheel]) -> list[str]:
    """The CPython versions (`3.12`) the wheels are built for, in version order (free-threaded builds aside)."""
    return sorted({p for w in wheels for t in w.tags if (p := _python_of(t))}, key=_pyver_key)


