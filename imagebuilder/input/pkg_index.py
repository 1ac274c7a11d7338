"""A Python package index as the compatibility refresher reads it (`input/compat_refresh.py`): its HTTP (one TLS
context, kept-alive connections per thread, retries; the environment's proxies honoured), a project's page (a PEP
691 JSON or PEP 503 HTML simple page) as its files, the versions a project has, and which kind of index it is
(`index_kind`: PyPI, or PyTorch's per-accelerator indexes whose wheels carry a local version label).

Only the standard library and ``packaging`` are used.
"""

from __future__ import annotations

import html.parser
import http.client
import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from ..ports.reference import is_loopback

DEFAULT_INDEX = "https://pypi.org/simple"
IndexKind = Literal["pypi", "pytorch"]
KINDS: tuple[IndexKind, ...] = ("pypi", "pytorch")
_PYPI_HOSTS = frozenset({"pypi.org", "www.pypi.org"})
_JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
_ACCEPT = f"{_JSON_ACCEPT}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
_USER_AGENT = "imagebuilder-compat-refresh/1"
_ABSENT_STATUSES = frozenset({403, 404, 410})


class IndexUnreachable(Exception):
    """The package index (or a file on it) could not be fetched."""


class MetadataAbsent(Exception):
    """A metadata source answered, but has no metadata for this file."""


# --------------------------------------------------------------------------- HTTP


class Http:
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

    def __enter__(self) -> Http:
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

        HTTP 403/404/410 raise :class:`MetadataAbsent`; any other failure
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
                raise MetadataAbsent(f"HTTP {status} for {url}")
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


def default_cafile(cafile: str | None) -> str | None:
    """The CA file given, else the first readable one the environment names, else the system's bundle."""
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
class IndexFile:
    """One file a project's page lists, with what the index says of it."""

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


def _parse_json_page(body: bytes, page_url: str) -> list[IndexFile]:
    data = json.loads(body)
    files = data.get("files", []) if isinstance(data, dict) else []
    out: list[IndexFile] = []
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
            IndexFile(
                filename=name,
                url=urllib.parse.urldefrag(urllib.parse.urljoin(page_url, href))[0],
                yanked=bool(entry.get("yanked", False)),
                requires_python=rp if isinstance(rp, str) and rp else None,
                core_metadata=_core_metadata_flag(meta),
            )
        )
    return out


def _parse_html_page(body: bytes, page_url: str) -> list[IndexFile]:
    parser = _AnchorParser()
    parser.feed(body.decode("utf-8", errors="replace"))
    parser.close()
    out: list[IndexFile] = []
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
            IndexFile(
                filename=name,
                url=url,
                yanked="data-yanked" in attrs,
                requires_python=attrs.get("data-requires-python") or None,
                core_metadata=has_meta,
            )
        )
    return out


def project_files(http: Http, index_url: str, project: str, *, required: bool) -> list[IndexFile] | None:
    """Files of ``project``; None when the index does not have it (and not ``required``)."""
    page = f"{index_url.rstrip('/')}/{canonicalize_name(project)}/"
    try:
        _status, headers, body = http.get(page, {"Accept": _ACCEPT})
    except MetadataAbsent as exc:
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


def project_versions(
    index_url: str, project: str, *, timeout: float = 30.0, cafile: str | None = None
) -> list[str] | None:
    """The release versions an index serves for ``project`` (from its files), or None if it has none.

    Raises :class:`IndexUnreachable` when the index cannot be reached.
    """
    with Http(timeout=timeout, cafile=default_cafile(cafile)) as http:
        files = project_files(http, index_url, project, required=False)
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
