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

Only the standard library and ``packaging`` are used.
"""

from __future__ import annotations

import copy
import datetime
import html.parser
import http.client
import io
import json
import os
import re
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from ..ports.reference import is_loopback

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

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

SCHEMA_VERSION = 1
DEFAULT_INDEX = "https://pypi.org/simple"
IndexKind = Literal["pypi", "pytorch"]
_KINDS: tuple[IndexKind, ...] = ("pypi", "pytorch")
_PYPI_HOSTS = frozenset({"pypi.org", "www.pypi.org"})
_WORKERS = 8
_JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
_ACCEPT = f"{_JSON_ACCEPT}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
_USER_AGENT = "imagebuilder-compat-refresh/1"
_ABSENT_STATUSES = frozenset({403, 404, 410})
_RANGE_BLOCK = 512 * 1024
_RANGE_TAIL = 1024 * 1024
_METADATA_TRIES = 4  # .metadata files tried per release before reading the wheel itself
_RANGE_BUDGET = 64 * 1024 * 1024
_WHOLE_FILE_LIMIT = 32 * 1024 * 1024
_CU_SUFFIX = re.compile(r"-cu(\d+)$")
_MANYLINUX_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_MANYLINUX_PEP600 = re.compile(r"^manylinux_(\d+)_(\d+)_(.+)$")
_MANYLINUX_LEGACY_RE = re.compile(r"^(manylinux1|manylinux2010|manylinux2014)_(.+)$")
_CPYTHON = re.compile(r"^cp(\d)(\d+)$")
_CUDA_LABEL = re.compile(r"^cu(\d+)(\d)$")  # cu126 -> CUDA 12.6, cu118 -> 11.8, cu130 -> 13.0


class IndexUnreachable(Exception):
    """The package index (or a file on it) could not be fetched."""


class _MetadataAbsent(Exception):
    """A metadata source answered, but has no metadata for this file."""


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


# --------------------------------------------------------------------------- HTTP


class _Http:
    """Tiny HTTP client: one TLS context, kept-alive connections per thread, retries.

    Connections are reused (HTTP/1.1 keep-alive) because opening a fresh TLS
    connection per file is what makes a refresh slow.  When a proxy is
    configured in the environment for a URL, urllib is used instead so that
    the usual ``*_proxy`` / ``no_proxy`` variables keep working.
    """

    def __init__(self, timeout: float, cafile: str | None, retries: int = 3) -> None:
        self.timeout = timeout
        self.retries = retries
        self._context = ssl.create_default_context(cafile=cafile) if cafile else ssl.create_default_context()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: list[http.client.HTTPConnection] = []

    def __enter__(self) -> _Http:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            conns, self._open = self._open, []
        for conn in conns:
            conn.close()

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """GET ``url``; return (status, lower-cased headers, body) for a 2xx answer.

        HTTP 403/404/410 raise :class:`_MetadataAbsent`; any other failure
        (after retries for transient errors) raises :class:`IndexUnreachable`.
        """
        hdrs = {"User-Agent": _USER_AGENT, **(headers or {})}
        last = "no attempt made"
        for attempt in range(self.retries):
            if attempt:
                time.sleep(0.3 * attempt)
            try:
                if _proxied(url):
                    status, got, body = self._get_urllib(url, hdrs)
                else:
                    status, got, body = self._get_direct(url, hdrs)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                reason = getattr(exc, "reason", None) or exc
                last = f"{type(exc).__name__}: {reason}"
                continue
            if 200 <= status < 300:
                return status, got, body
            if status in _ABSENT_STATUSES:
                raise _MetadataAbsent(f"HTTP {status} for {url}")
            last = f"HTTP {status}"
            if status < 500 and status != 429:
                break
        raise IndexUnreachable(f"cannot fetch {url}: {last}")

    # -- transports ---------------------------------------------------------

    def _connection(self, key: tuple[str, str, int]) -> tuple[http.client.HTTPConnection, bool]:
        conns: dict[tuple[str, str, int], http.client.HTTPConnection] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = {}
            self._local.conns = conns
        conn = conns.get(key)
        if conn is not None:
            return conn, True
        scheme, host, port = key
        if scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self._context)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
        conns[key] = conn
        with self._lock:
            self._open.append(conn)
        return conn, False

    def _drop(self, key: tuple[str, str, int]) -> None:
        conns: dict[tuple[str, str, int], http.client.HTTPConnection] = getattr(self._local, "conns", {})
        conn = conns.pop(key, None)
        if conn is not None:
            conn.close()

    def _get_direct(self, url: str, hdrs: Mapping[str, str]) -> tuple[int, dict[str, str], bytes]:
        for _hop in range(6):
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"unsupported URL {url!r}")
            key = (parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            for fresh_try in (False, True):
                conn, reused = self._connection(key)
                try:
                    conn.request("GET", target, headers=dict(hdrs))
                    resp = conn.getresponse()
                    body = resp.read()
                except (OSError, http.client.HTTPException):
                    self._drop(key)
                    if reused and not fresh_try:
                        continue  # the server closed an idle kept-alive connection
                    raise
                break
            if resp.will_close:
                self._drop(key)
            got = {k.lower(): v for k, v in resp.getheaders()}
            location = got.get("location")
            if resp.status in (301, 302, 303, 307, 308) and location:
                url = urllib.parse.urljoin(url, location)
                continue
            return resp.status, got, body
        raise IndexUnreachable(f"too many redirects fetching {url}")

    def _get_urllib(self, url: str, hdrs: Mapping[str, str]) -> tuple[int, dict[str, str], bytes]:
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self._context))
        try:
            with opener.open(urllib.request.Request(url, headers=dict(hdrs)), timeout=self.timeout) as resp:
                return int(resp.status), {k.lower(): v for k, v in resp.headers.items()}, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, b""


def _proxied(url: str) -> bool:
    """Would urllib send ``url`` through a proxy from the environment?"""
    parts = urllib.parse.urlsplit(url)
    if is_loopback(parts.netloc) or parts.scheme not in urllib.request.getproxies():
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


def _default_cafile(cafile: str | None) -> str | None:
    if cafile:
        return cafile
    for var in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        value = os.environ.get(var)
        if value and os.path.isfile(value):
            return value
    fallback = "/etc/ssl/certs/ca-certificates.crt"
    return fallback if os.path.isfile(fallback) else None


# --------------------------------------------------------------------------- index pages


@dataclass(frozen=True)
class _File:
    filename: str
    url: str  # without fragment
    yanked: bool
    requires_python: str | None
    core_metadata: bool | None  # None: the index did not say


class _AnchorParser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = dict(attrs)
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.anchors.append((self._open, "".join(self._text).strip()))
            self._open = None


def _core_metadata_flag(value: object) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, (dict, str)):
        return value != "false"
    return None


def _parse_json_page(body: bytes, page_url: str) -> list[_File]:
    data = json.loads(body)
    files = data.get("files", []) if isinstance(data, dict) else []
    out: list[_File] = []
    for entry in files:
        if not isinstance(entry, dict):
            continue
        name = entry.get("filename")
        href = entry.get("url")
        if not isinstance(name, str) or not isinstance(href, str):
            continue
        meta = entry.get("core-metadata", entry.get("dist-info-metadata"))
        rp = entry.get("requires-python")
        out.append(
            _File(
                filename=name,
                url=urllib.parse.urldefrag(urllib.parse.urljoin(page_url, href))[0],
                yanked=bool(entry.get("yanked", False)),
                requires_python=rp if isinstance(rp, str) and rp else None,
                core_metadata=_core_metadata_flag(meta),
            )
        )
    return out


def _parse_html_page(body: bytes, page_url: str) -> list[_File]:
    parser = _AnchorParser()
    parser.feed(body.decode("utf-8", errors="replace"))
    parser.close()
    out: list[_File] = []
    for attrs, text in parser.anchors:
        href = attrs.get("href")
        if not href:
            continue
        url = urllib.parse.urldefrag(urllib.parse.urljoin(page_url, href))[0]
        name = text or urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        meta_attr = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))
        declared = "data-core-metadata" in attrs or "data-dist-info-metadata" in attrs
        has_meta = (meta_attr != "false") if declared else None
        out.append(
            _File(
                filename=name,
                url=url,
                yanked="data-yanked" in attrs,
                requires_python=attrs.get("data-requires-python") or None,
                core_metadata=has_meta,
            )
        )
    return out


def _project_files(http: _Http, index_url: str, project: str, *, required: bool) -> list[_File] | None:
    """Files of ``project``; None when the index does not have it (and not ``required``)."""
    page = f"{index_url.rstrip('/')}/{canonicalize_name(project)}/"
    try:
        _status, headers, body = http.get(page, {"Accept": _ACCEPT})
    except _MetadataAbsent as exc:
        if required:
            raise IndexUnreachable(f"{page}: project {project!r} not found on the index ({exc})") from exc
        return None
    ctype = headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == _JSON_ACCEPT or (ctype.endswith("json") and body.lstrip()[:1] == b"{"):
        try:
            return _parse_json_page(body, page)
        except ValueError as exc:
            raise IndexUnreachable(f"{page}: unparsable JSON simple page: {exc}") from exc
    return _parse_html_page(body, page)


# --------------------------------------------------------------------------- wheels


@dataclass(frozen=True)
class _Wheel:
    file: _File
    version: Version
    build: tuple[int, str] | tuple[()]
    tags: frozenset[Tag]

    @property
    def linux_x86_64(self) -> bool:
        return any(_glibc_floor(t.platform) is not None for t in self.tags)

    @property
    def free_threaded(self) -> bool:
        cp_abis = [t.abi for t in self.tags if t.abi.startswith("cp")]
        return bool(cp_abis) and all(abi.endswith("t") for abi in cp_abis)


def _glibc_floor(platform: str) -> tuple[int, int] | None:
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


def _wheels(files: Iterable[_File], project: str, *, local: bool = False) -> dict[Version, list[_Wheel]]:
    """Stable, non-yanked manylinux x86_64 wheels, by release (public version).

    Wheels with a local version label (``2.6.0+cu126``) are skipped unless
    ``local``; then they are kept (``_Wheel.version`` keeps the label) and
    grouped under their public version (``2.6.0``).
    """
    out: dict[Version, list[_Wheel]] = {}
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
        wheel = _Wheel(f, version, build, tags)
        if wheel.linux_x86_64:
            out.setdefault(Version(version.public), []).append(wheel)
    return out


def _local_label(filename: str) -> str | None:
    """The local version label of a wheel file name (``cu126``), None without one or for a non-wheel."""
    if not filename.endswith(".whl"):
        return None
    try:
        return parse_wheel_filename(filename)[1].local
    except (InvalidWheelFilename, InvalidVersion):
        return None


def _is_pypi_url(index_url: str) -> bool:
    parts = urllib.parse.urlsplit(index_url.strip())
    return (
        parts.scheme in ("https", "http")
        and (parts.hostname or "").lower() in _PYPI_HOSTS
        and parts.path.rstrip("/") == "/simple"
    )


def index_kind(index_url: str, wheel_filenames: Iterable[str] = ()) -> IndexKind:
    """Which kind of index ``index_url`` is, given the file names its ``torch`` page lists.

    ``"pypi"`` when ``index_url`` is PyPI's simple index (``https://pypi.org/simple``,
    with or without a trailing slash) or when none of ``wheel_filenames`` carries a
    local version label; ``"pytorch"`` (a PyTorch-style per-accelerator index) when
    any of them does (``torch-2.6.0+cu126-cp311-cp311-manylinux_2_28_x86_64.whl``).
    """
    if _is_pypi_url(index_url):
        return "pypi"
    return "pytorch" if any(_local_label(name) for name in wheel_filenames) else "pypi"


def _preference(wheel: _Wheel) -> tuple[object, ...]:
    """Sort key: the wheel pip would most likely install first."""
    pythons = sorted((_python_of(t) or "0.0" for t in wheel.tags), key=_pyver_key)
    return (wheel.build, not wheel.free_threaded, _pyver_key(pythons[-1]) if pythons else (0, 0))


def _pyver_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


# --------------------------------------------------------------------------- metadata


class _RangeFile(io.RawIOBase):
    """Read-only seekable view of a remote file through HTTP range requests."""

    def __init__(self, http: _Http, url: str) -> None:
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
                raise _MetadataAbsent(f"{url}: server sent no usable Content-Range")
            self._size = int(total)
            self._chunks.append((self._size - len(body), body))
        else:
            if len(body) > _WHOLE_FILE_LIMIT:  # pragma: no cover - defensive
                raise _MetadataAbsent(f"{url}: server ignores Range requests")
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
                raise _MetadataAbsent(f"{self._url}: METADATA not found within {_RANGE_BUDGET} bytes")
            status, _headers, body = self._http.get(self._url, {"Range": f"bytes={self._pos}-{end}"})
            if status != 206:
                raise _MetadataAbsent(f"{self._url}: server ignores Range requests")
            self._fetched += len(body)
            self._chunks.append((self._pos, body))
            data = body[:length]
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)


def _metadata_from_wheel(http: _Http, url: str, project: str) -> str:
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
        raise _MetadataAbsent(f"{url}: not a readable wheel ({exc})") from exc
    raise _MetadataAbsent(f"{url}: no .dist-info/METADATA member")


def _fetch_metadata(http: _Http, wheels: Sequence[_Wheel], project: str) -> str | None:
    """METADATA text for the first of ``wheels`` that has one, or None."""
    ordered = sorted(wheels, key=_preference, reverse=True)
    candidates = [w for w in ordered if w.file.core_metadata is not False]
    for wheel in candidates[:_METADATA_TRIES]:
        try:
            return http.get(wheel.file.url + ".metadata")[2].decode("utf-8", errors="replace")
        except _MetadataAbsent:
            continue
    for wheel in ordered[:2]:
        try:
            return _metadata_from_wheel(http, wheel.file.url, project)
        except _MetadataAbsent:
            continue
    return None


@dataclass
class _Metadata:
    requires_python: str | None
    requirements: list[Requirement] = field(default_factory=list)


def _parse_metadata(text: str) -> _Metadata:
    msg = HeaderParser().parsestr(text)
    reqs: list[Requirement] = []
    for line in msg.get_all("Requires-Dist") or []:
        try:
            reqs.append(Requirement(str(line)))
        except InvalidRequirement:
            warnings.warn(f"unparsable Requires-Dist {line!r}", stacklevel=2)
    rp = msg.get("Requires-Python")
    return _Metadata(str(rp).strip() if rp else None, reqs)


def _applies(req: Requirement, pythons: Sequence[str]) -> bool:
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


def _gpu_package(name: str) -> bool:
    return name == "triton" or name.startswith(("nvidia-", "cuda-", "pytorch-triton"))


def _exact_pin(req: Requirement) -> str | None:
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


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
    meta: _Metadata, pythons: Sequence[str], release: str, index: IndexKind
) -> tuple[str, dict[str, object]]:
    """(accelerator, variant) of a wheel from its METADATA pins: the CUDA runtime (or cuda-toolkit) pin names it."""
    packages: dict[str, str] = {}
    extras: dict[str, list[str]] = {}
    constraints: dict[str, str] = {}
    for req in meta.requirements:
        name = canonicalize_name(req.name)
        if not _gpu_package(name) or not _applies(req, pythons):
            continue
        pin = _exact_pin(req)
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
    meta: _Metadata, pythons: Sequence[str], release: str, label: str
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
        f"torch {release}+{label}: its METADATA pins {accelerator} (CUDA {_fmt(cuda)}), not {label}; variant omitted",
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
    for req in _parse_metadata(meta_text).requirements:
        if canonicalize_name(req.name) == "torch" and _applies(req, pythons):
            pin = _exact_pin(req)
            if pin is not None:
                try:
                    return Version(Version(pin).public)
                except InvalidVersion:
                    return None
    return None


def _companion_map(
    pool: ThreadPoolExecutor,
    http: _Http,
    files: list[_File] | None,
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
    releases = _wheels(files, project, local=local)
    order = sorted(releases, reverse=True)
    found: dict[Version, Version] = {}
    for start in range(0, len(order), _WORKERS):
        batch = order[start : start + _WORKERS]
        futures = {v: pool.submit(_fetch_metadata, http, releases[v], project) for v in batch}
        pins: list[Version | None] = []
        for v in batch:
            pin = _torch_pin(futures[v].result(), _pythons(releases[v]))
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
    if kind is not None and kind not in _KINDS:
        raise ValueError(f"unknown index kind {kind!r}: expected one of {', '.join(_KINDS)}")
    floor = Version(min_torch)
    with (
        _Http(timeout=timeout, cafile=_default_cafile(cafile)) as http,
        ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="compat") as pool,
    ):
        pages = {
            p: pool.submit(_project_files, http, index_url, p, required=(p == "torch"))
            for p in ("torch", "torchvision", "torchaudio")
        }
        torch_files = pages["torch"].result()
        assert torch_files is not None  # required=True never returns None
        resolved: IndexKind = kind or index_kind(index_url, (f.filename for f in torch_files))
        local = resolved == "pytorch"
        releases = {v: ws for v, ws in _wheels(torch_files, "torch", local=local).items() if v >= floor}
        groups = {v: _variant_groups(ws, local=local) for v, ws in releases.items()}
        meta_futures: dict[tuple[Version, str | None], Future[str | None]] = {
            (v, label): pool.submit(_fetch_metadata, http, ws, "torch")
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


def _variant_groups(wheels: Sequence[_Wheel], *, local: bool) -> dict[str | None, list[_Wheel]]:
    """The wheels each variant is read from: all of them (key None) unless ``local``, else by cpu/cuNNN label."""
    if not local:
        return {None: list(wheels)}
    groups: dict[str | None, list[_Wheel]] = {}
    for wheel in wheels:
        label = wheel.version.local
        if _variant_label(label):
            groups.setdefault(label, []).append(wheel)
    return dict(sorted(groups.items(), key=lambda kv: kv[0] or ""))


def _pythons(wheels: Iterable[_Wheel]) -> list[str]:
    return sorted({p for w in wheels for t in w.tags if (p := _python_of(t))}, key=_pyver_key)


def _release_entry(
    release: str,
    wheels: Sequence[_Wheel],
    groups: Mapping[str | None, Sequence[_Wheel]],
    metas: Mapping[str | None, str | None],
    companions: Mapping[str, Mapping[Version, Version]],
    kind: IndexKind,
) -> dict[str, object]:
    pythons = _pythons(wheels)
    floors = [f for w in wheels for t in w.tags if (f := _glibc_floor(t.platform)) is not None]
    glibc = "{}.{}".format(*min(floors)) if floors else None
    variants: dict[str, object] = {}
    parsed: list[_Metadata] = []
    for label, meta_text in metas.items():
        if meta_text is None:
            what = "PyPI variant" if label is None else f"{label} variant"
            warnings.warn(f"torch {release}: no METADATA available; {what} omitted", stacklevel=2)
            continue
        meta = _parse_metadata(meta_text)
        parsed.append(meta)
        group_pythons = _pythons(groups[label])
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


def write_table(table: Mapping[str, object], path: str | os.PathLike[str]) -> None:
    """Write ``table`` as JSON (indent=1, sorted keys, trailing newline)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(target)


# --------------------------------------------------------------------------- diff


def _as_dict(value: object) -> dict[str, object]:
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    return {}


def _fmt(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _version_sort(keys: Iterable[str]) -> list[str]:
    def key(k: str) -> tuple[int, Version | str]:
        try:
            return (0, Version(k))
        except InvalidVersion:
            return (1, k)

    return sorted(keys, key=key)


def _diff_mapping(prefix: str, old: Mapping[str, object], new: Mapping[str, object], what: str) -> list[str]:
    lines: list[str] = []
    for key in sorted(old.keys() | new.keys()):
        if key not in new:
            lines.append(f"{prefix}: {what} {key} removed (was {_fmt(old[key])})")
        elif key not in old:
            lines.append(f"{prefix}: {what} {key} added ({_fmt(new[key])})")
        elif old[key] != new[key]:
            lines.append(f"{prefix}: {what} {key} {_fmt(old[key])} -> {_fmt(new[key])}")
    return lines


def diff_tables(old: dict[str, object], new: dict[str, object]) -> list[str]:
    """Human-readable lines describing how ``new`` differs from ``old``."""
    lines: list[str] = []
    for key in ("schema", "source"):
        if old.get(key) != new.get(key):
            lines.append(f"{key}: {_fmt(old.get(key))} -> {_fmt(new.get(key))}")
    old_floor, new_floor = _as_dict(old.get("driver_floor")), _as_dict(new.get("driver_floor"))
    for cuda in _version_sort(old_floor.keys() | new_floor.keys()):
        if cuda not in new_floor:
            lines.append(f"driver_floor: CUDA {cuda} removed")
        elif cuda not in old_floor:
            lines.append(f"driver_floor: CUDA {cuda} added ({_fmt(new_floor[cuda])})")
        else:
            lines += _diff_mapping(
                f"driver_floor {cuda}", _as_dict(old_floor[cuda]), _as_dict(new_floor[cuda]), "driver"
            )

    old_rel, new_rel = _as_dict(old.get("releases")), _as_dict(new.get("releases"))
    for release in _version_sort(old_rel.keys() | new_rel.keys()):
        if release not in new_rel:
            lines.append(f"removed release {release}")
            continue
        o, n = _as_dict(old_rel.get(release)), _as_dict(new_rel[release])
        if release not in old_rel:
            accels = ", ".join(sorted(_as_dict(n.get("variants"))))
            lines.append(f"added release {release} (variants: {accels or 'none'})")
            continue
        for key in sorted((o.keys() | n.keys()) - {"variants"}):
            if o.get(key) != n.get(key):
                lines.append(f"{release}: {key} {_fmt(o.get(key))} -> {_fmt(n.get(key))}")
        ov, nv = _as_dict(o.get("variants")), _as_dict(n.get("variants"))
        for accel in sorted(ov.keys() | nv.keys()):
            if accel not in nv:
                lines.append(f"{release}: variant {accel} removed")
                continue
            if accel not in ov:
                lines.append(f"{release}: variant {accel} added (cuda {_fmt(_as_dict(nv[accel]).get('cuda'))})")
                continue
            ova, nva = _as_dict(ov[accel]), _as_dict(nv[accel])
            where = f"{release} {accel}"
            for key in sorted((ova.keys() | nva.keys()) - {"packages", "constraints"}):
                if ova.get(key) != nva.get(key):
                    lines.append(f"{where}: {key} {_fmt(ova.get(key))} -> {_fmt(nva.get(key))}")
            lines += _diff_mapping(where, _as_dict(ova.get("packages")), _as_dict(nva.get("packages")), "pin")
            lines += _diff_mapping(
                where, _as_dict(ova.get("constraints")), _as_dict(nva.get("constraints")), "constraint"
            )
    return lines


# --------------------------------------------------------------------------- merge


def _verified(variant: Mapping[str, object]) -> bool:
    return bool(variant.get("verified", True))  # what compat.CompatTable assumes for a missing flag


def _merge_release(merged: dict[str, object], entry: Mapping[str, object]) -> None:
    """Fold the release-level fields of ``entry`` into ``merged`` (variants aside)."""
    for key, value in entry.items():
        if key == "variants":
            continue
        current = merged.get(key)
        if key == "python":
            merged[key] = _version_sort({str(p) for seq in (current, value) if isinstance(seq, list) for p in seq})
        elif key == "glibc":
            floors = {str(g) for g in (current, value) if g is not None}
            merged[key] = _version_sort(floors)[0] if floors else None
        elif current is None:
            merged[key] = copy.deepcopy(value)


def merge_tables(tables: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """Merge tables built from several indexes (PyPI's first, then PyTorch's) into one.

    * releases: the union; per release, the variants' union.  A verified variant
      replaces an unverified one of the same accelerator (PyPI's ``cpu``
      placeholder gives way to a verified ``cpu`` from PyTorch's index); of two
      verified ones the earlier table's wins.  When those disagree on anything
      but ``index`` (the same build served by two indexes is no conflict), a
      record ``{"release", "accelerator", "kept", "dropped", "fields"}`` (the
      sources of the kept and dropped variant, and the keys they differ on) is
      appended to the result's ``"conflicts"`` list; the key is left out when
      there are none.  Conflicts recorded in the input tables are carried over.
    * per release: ``python`` is the union sorted by version, ``glibc`` the lowest
      floor, every other field (``torchvision``, ``torchaudio``,
      ``requires_python``) the first non-null value.
    * ``source``: the tables' distinct sources joined by ``", "``; ``generated``
      and ``driver_floor`` come from the first table; ``schema`` is 1.

    The input tables are not modified.  Raises :class:`ValueError` for no tables.
    """
    if not tables:
        raise ValueError("merge_tables needs at least one table")
    releases: dict[str, dict[str, object]] = {}
    variants: dict[str, dict[str, dict[str, object]]] = {}
    owner: dict[tuple[str, str], str] = {}  # (release, accelerator) -> source of the variant kept
    conflicts: list[object] = []
    sources: list[str] = []
    for table in tables:
        source = str(table.get("source") or "")
        if source and source not in sources:
            sources.append(source)
        previous = table.get("conflicts")
        if isinstance(previous, list):
            conflicts.extend(copy.deepcopy(previous))
        for release, raw in _as_dict(table.get("releases")).items():
            entry = _as_dict(raw)
            if release not in releases:
                releases[release] = {}
                variants[release] = {}
            _merge_release(releases[release], entry)
            kept = variants[release]
            for accel, raw_variant in _as_dict(entry.get("variants")).items():
                new = copy.deepcopy(_as_dict(raw_variant))
                old = kept.get(accel)
                if old is None or (_verified(new) and not _verified(old)):
                    kept[accel] = new
                    owner[(release, accel)] = source
                elif _verified(new) and _verified(old):
                    differ = sorted(k for k in (old.keys() | new.keys()) - {"index"} if old.get(k) != new.get(k))
                    if differ:
                        conflicts.append(
                            {
                                "release": release,
                                "accelerator": accel,
                                "kept": owner[(release, accel)],
                                "dropped": source,
                                "fields": differ,
                            }
                        )
    merged_releases: dict[str, object] = {}
    for release in _version_sort(releases):
        entry = releases[release]
        entry["variants"] = dict(sorted(variants[release].items()))
        merged_releases[release] = entry
    first = tables[0]
    merged: dict[str, object] = {
        "schema": SCHEMA_VERSION,
        "generated": first.get("generated"),
        "source": ", ".join(sources),
        "driver_floor": copy.deepcopy(first.get("driver_floor")),
        "releases": merged_releases,
    }
    if conflicts:
        merged["conflicts"] = conflicts
    return merged


def project_versions(
    index_url: str, project: str, *, timeout: float = 30.0, cafile: str | None = None
) -> list[str] | None:
    """The release versions an index serves for ``project`` (from its files), or None if it has none.

    Raises :class:`IndexUnreachable` when the index cannot be reached.
    """
    with _Http(timeout=timeout, cafile=_default_cafile(cafile)) as http:
        files = _project_files(http, index_url, project, required=False)
    if files is None:
        return None
    versions: set[Version] = set()
    for f in files:
        if f.yanked:
            continue
        try:
            if f.filename.endswith(".whl"):
                versions.add(parse_wheel_filename(f.filename)[1])
        except InvalidWheelFilename:
            continue
    return [str(v) for v in sorted(versions)]
