"""What an image holds, read from its layers' own files (never from what a plan intended): every Debian package
(dpkg's database, /var/lib/dpkg/status) and every Python distribution of every environment (each `*.dist-info`
directory with a METADATA file and each `*.egg-info`, a directory with PKG-INFO or a file of its own, wherever it
lies: the system Python's dist-packages, venvs, `pip install --target` prefixes), and which layer brought each.

A layer is read once, as a stream (`read_layer`), into its `LayerFacts`: the few files that say what is installed,
and its whiteouts. Facts hold no layer below them, so the caller can keep them per layer digest. An `Inventory` is
the state of an image after a sequence of layers: `Inventory.empty().apply(facts, label, digest)` layer by layer,
the way the OCI image spec stacks them (a whiteout `dir/.wh.name` deletes `dir/name` of the layers below, an
opaque `dir/.wh..wh..opq` everything below under `dir`). A package keeps the layer that brought it until a layer
changes it: a dpkg package whose name, architecture and version stay is still its first layer's; a Python
distribution belongs to the newest layer that wrote its metadata file."""

from __future__ import annotations

import email.message
import email.parser
import email.policy
import errno
import functools
import hashlib
import io
import os
import posixpath
import re
import shlex
import stat
import tarfile
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import IO, Any, BinaryIO

from packaging.utils import canonicalize_name

DPKG_STATUS = "/var/lib/dpkg/status"
OS_RELEASE = ("/etc/os-release", "/usr/lib/os-release")  # the first one there counts (os-release(5))
FORMAT = 2  # of the JSON of LayerFacts and Inventory: another one is no cache hit (2: RECORD hashes)

HEADER_LIMIT = 1 << 20  # the most read of a METADATA/PKG-INFO file: its headers (the body is its description)
SMALL_LIMIT = 64 << 10  # INSTALLER, os-release
STATUS_LIMIT = 256 << 20  # a dpkg status file larger than this is no status file
_DPKG_DIR = posixpath.dirname(DPKG_STATUS)
_STATUS_NAMES = ("status", "status-old", "status-new")  # what a hard-linked status file may point at
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"
_BLANK_LINE = re.compile(rb"\r?\n\r?\n")
_SOURCE = re.compile(r"(\S+)(?:\s*\(\s*(\S+)\s*\))?")
_LICENSE_CLASSIFIER = "License ::"


def _normal(name: str) -> str:
    """A tar member's name as an absolute path: `./usr/x`, `usr/x/` and `/usr/x` are all `/usr/x`."""
    return posixpath.normpath("/" + name.lstrip("/"))


def _hidden(path: str, whiteouts: AbstractSet[str], opaques: AbstractSet[str]) -> bool:
    """Whether a lower layer's `path` is gone under these whiteouts (the path or a folder above it) and opaque
    directories (a folder above it)."""
    if path in whiteouts:
        return True
    parent = path
    while parent != "/":
        parent = posixpath.dirname(parent)
        if parent in whiteouts or parent in opaques:
            return True
    return False


@dataclass(frozen=True)
class Deb:
    """One installed package of a dpkg status file."""

    name: str
    version: str
    arch: str | None
    source: str
    source_version: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "arch": self.arch, "source": self.source,
                "source_version": self.source_version}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Deb:
        return cls(str(doc["name"]), str(doc["version"]), _opt(doc.get("arch")), str(doc["source"]),
                   str(doc["source_version"]))


@dataclass(frozen=True)
class Dist:
    """One Python distribution's metadata, as a layer wrote it. `metadata` is the file read: a dist-info's
    METADATA, an egg-info directory's PKG-INFO, or an egg-info file."""

    metadata: str
    name: str
    version: str
    license_expression: str | None = None
    license: str | None = None
    classifiers: tuple[str, ...] = ()  # the `License ::` ones
    installer: str | None = None
    record: str | None = None  # the sha256 (hex) of its dist-info's RECORD: every file it installed, by hash

    @property
    def info_dir(self) -> str:
        """The dist-info/egg-info directory (or the egg-info file)."""
        return self.metadata if self.metadata.endswith(".egg-info") else posixpath.dirname(self.metadata)

    @property
    def site(self) -> str:
        """The directory the distribution is installed in (what `sys.path` names)."""
        return posixpath.dirname(self.info_dir)

    @property
    def licenses(self) -> tuple[str, ...]:
        """License-Expression, else a short one-line License, else the last parts of the License classifiers."""
        if self.license_expression:
            return (self.license_expression,)
        if self.license and self.license.upper() != "UNKNOWN":
            return (self.license,)
        parts = (c.split("::")[-1].strip() for c in self.classifiers if c.replace(" ", "") != "License::OSIApproved")
        return tuple(dict.fromkeys(p for p in parts if p))

    def to_json(self) -> dict[str, Any]:
        return {"metadata": self.metadata, "name": self.name, "version": self.version,
                "license_expression": self.license_expression, "license": self.license,
                "classifiers": list(self.classifiers), "installer": self.installer, "record": self.record}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Dist:
        return cls(str(doc["metadata"]), str(doc["name"]), str(doc["version"]), _opt(doc.get("license_expression")),
                   _opt(doc.get("license")), tuple(str(c) for c in doc.get("classifiers") or ()),
                   _opt(doc.get("installer")), _opt(doc.get("record")))


@dataclass(frozen=True)
class OsRelease:
    """An os-release file's ID and VERSION_ID."""

    path: str
    id: str | None
    version_id: str | None

    @property
    def distro(self) -> str | None:
        """`debian-12`, `ubuntu-22.04`: the `distro` of a deb purl (the ID alone without a VERSION_ID)."""
        if self.id and self.version_id:
            return f"{self.id}-{self.version_id}"
        return self.id

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "id": self.id, "version_id": self.version_id}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> OsRelease:
        return cls(str(doc["path"]), _opt(doc.get("id")), _opt(doc.get("version_id")))


@dataclass(frozen=True)
class LayerFacts:
    """What one layer says about the image: its dpkg status file's installed packages (None when the layer has no
    status file), the Python metadata files it writes, its os-release files, whiteouts and opaque directories."""

    dpkg: tuple[Deb, ...] | None = None
    dists: tuple[Dist, ...] = ()
    os_release: tuple[OsRelease, ...] = ()
    whiteouts: tuple[str, ...] = ()  # paths deleted from the layers below
    opaques: tuple[str, ...] = ()  # directories whose lower content is gone

    def hides(self, path: str) -> bool:
        """Whether this layer deletes a lower layer's `path`."""
        return self.hider()(path)

    def hider(self) -> Callable[[str], bool]:
        """`hides`, for many paths."""
        whiteouts, opaques = frozenset(self.whiteouts), frozenset(self.opaques)
        return lambda path: _hidden(path, whiteouts, opaques)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "dpkg": None if self.dpkg is None else [d.to_json() for d in self.dpkg],
                "dists": [d.to_json() for d in self.dists], "os_release": [o.to_json() for o in self.os_release],
                "whiteouts": list(self.whiteouts), "opaques": list(self.opaques)}

    @classmethod
    def from_json(cls, doc: Any) -> LayerFacts:
        """Raises ValueError for anything but `to_json`'s document of this FORMAT."""
        try:
            if doc["format"] != FORMAT:
                raise ValueError(f"layer facts of format {doc['format']!r}, not {FORMAT}")
            dpkg = doc.get("dpkg")
            return cls(None if dpkg is None else tuple(Deb.from_json(d) for d in dpkg),
                       tuple(Dist.from_json(d) for d in doc["dists"]),
                       tuple(OsRelease.from_json(o) for o in doc["os_release"]),
                       tuple(str(w) for w in doc["whiteouts"]), tuple(str(o) for o in doc["opaques"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not layer facts: {exc!r}") from exc


def _opt(value: Any) -> str | None:
    return None if value is None else str(value)


# region reading a layer


def _parse_status(stream: IO[bytes]) -> tuple[Deb, ...]:
    """The installed packages (Status `... ... installed`) of a dpkg status file, read line by line."""
    debs: list[Deb] = []
    from debian import deb822  # (imported when a status file is read)

    for para in deb822.Deb822.iter_paragraphs(stream, use_apt_pkg=False):
        status = para.get("Status", "").split()
        name, version = para.get("Package", "").strip(), para.get("Version", "").strip()
        if len(status) < 3 or status[2] != "installed" or not name or not version:
            continue
        source, source_version = name, version
        match = _SOURCE.fullmatch(para.get("Source", "").strip())
        if match:
            source, source_version = match.group(1), match.group(2) or version
        debs.append(Deb(name, version, para.get("Architecture", "").strip() or None, source, source_version))
    return tuple(sorted(debs, key=lambda d: (d.name, d.arch or "", d.version)))


def _headers(stream: IO[bytes]) -> email.message.Message:
    """A METADATA/PKG-INFO file's headers: what comes before its first blank line, of its first HEADER_LIMIT bytes."""
    data = stream.read(HEADER_LIMIT)
    blank = _BLANK_LINE.search(data)
    text = (data[:blank.start()] if blank else data).decode("utf-8", "replace")
    return email.parser.Parser(policy=email.policy.compat32).parsestr(text, headersonly=True)


def _header(msg: email.message.Message, name: str) -> str | None:
    value = msg.get(name)
    return (str(value).strip() or None) if value is not None else None


@dataclass(frozen=True)
class _Meta:
    name: str | None
    version: str | None
    license_expression: str | None
    license: str | None
    classifiers: tuple[str, ...]


def _meta(stream: IO[bytes]) -> _Meta:
    msg = _headers(stream)
    license_ = _header(msg, "License")
    if license_ and ("\n" in license_ or len(license_) >= 100):
        license_ = None  # a license's text, not its name
    classifiers = tuple(str(c).strip() for c in msg.get_all("Classifier") or ()
                        if str(c).strip().startswith(_LICENSE_CLASSIFIER))
    return _Meta(_header(msg, "Name"), _header(msg, "Version"), _header(msg, "License-Expression"), license_,
                 classifiers)


def _from_dir_name(info: str) -> tuple[str | None, str | None]:
    """(name, version) from `name-version.dist-info`, `name-version-py3.11.egg-info`, `name.egg-info`."""
    stem = posixpath.basename(info).rsplit(".", 1)[0]
    name, _, rest = stem.partition("-")
    version = rest.split("-")[0] if rest else None
    return name or None, version or None


def _os_release(stream: IO[bytes], path: str) -> OsRelease:
    values: dict[str, str] = {}
    for line in stream.read(SMALL_LIMIT).decode("utf-8", "replace").splitlines():
        key, sep, value = line.strip().partition("=")
        if not sep or key.startswith("#"):
            continue
        try:
            words = shlex.split(value)
        except ValueError:
            words = [value.strip("\"'")]
        values[key.strip()] = " ".join(words)
    return OsRelease(path, values.get("ID") or None, values.get("VERSION_ID") or None)


def _metadata_file(path: str) -> bool:
    """Whether the file `path` is a distribution's metadata: dist-info/METADATA, egg-info/PKG-INFO, *.egg-info."""
    parent, base = posixpath.split(path)
    return ((base == "METADATA" and parent.endswith(".dist-info"))
            or (base == "PKG-INFO" and parent.endswith(".egg-info"))
            or base.endswith(".egg-info"))


class _LayerReader:
    """The state of one pass over a layer's members."""

    def __init__(self) -> None:
        self.statuses: dict[str, tuple[Deb, ...]] = {}  # dpkg status files (and those a hard link may name)
        self.metas: dict[str, _Meta] = {}  # by metadata file
        self.installers: dict[str, str] = {}  # by INSTALLER file
        self.records: dict[str, str] = {}  # by RECORD file: its sha256
        self.os_release: dict[str, OsRelease] = {}
        self.whiteouts: set[str] = set()
        self.opaques: set[str] = set()

    def take(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        """One member of a layer tar, in order."""
        path = _normal(member.name)
        parent, base = posixpath.split(path)
        if base.startswith(_WHITEOUT):
            if base == _OPAQUE:
                self.opaques.add(parent)
            elif not base.startswith(_WHITEOUT + _WHITEOUT):  # other .wh..wh. names are aufs' own
                self.whiteouts.add(posixpath.join(parent, base[len(_WHITEOUT):]))
            return
        if member.islnk():
            self._link(path, _normal(member.linkname))
        elif member.isreg():
            self.file(path, member.size, lambda: self._open(tar, member))

    def file(self, path: str, size: int, open_: Callable[[], IO[bytes]]) -> None:
        """A regular file of the layer: read when it says what is installed."""
        parent, base = posixpath.split(path)
        if parent == _DPKG_DIR and base in _STATUS_NAMES:
            if size <= STATUS_LIMIT:
                self.statuses[path] = _parse_status(open_())
        elif _metadata_file(path):
            self.metas[path] = _meta(open_())
        elif base == "INSTALLER" and parent.endswith(".dist-info"):
            self.installers[path] = open_().read(SMALL_LIMIT).decode("utf-8", "replace").strip()
        elif base == "RECORD" and parent.endswith(".dist-info") and size <= STATUS_LIMIT:
            self.records[path] = _sha256(open_())
        elif path in OS_RELEASE:
            self.os_release[path] = _os_release(open_(), path)

    def folder(self, root: str) -> None:
        """A layer as a folder of the engine's own storage (overlay2's diff folder): whiteouts are character
        devices 0/0, an opaque folder carries the `trusted.overlay.opaque` attribute. Symbolic links are not
        followed (a link is no file of the layer's)."""
        stack = [""]
        while stack:
            rel = stack.pop()
            with os.scandir(root + rel or "/") as entries:
                for entry in entries:
                    path = f"{rel}/{entry.name}"
                    if entry.is_dir(follow_symlinks=False):
                        if _opaque(entry.path):
                            self.opaques.add(path)
                        stack.append(path)
                        continue
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                        self.whiteouts.add(path)
                    elif stat.S_ISREG(st.st_mode) and _wanted(path):
                        self.file(path, st.st_size, functools.partial(_contents, entry.path))

    @staticmethod
    def _open(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
        stream = tar.extractfile(member)
        if stream is None:  # a regular file always has one
            raise tarfile.ReadError(f"no data for {member.name}")
        return stream

    def _link(self, path: str, target: str) -> None:
        """A hard link is its target's content, a member read earlier in this layer: known if it was kept."""
        if target in self.statuses and path == DPKG_STATUS:
            self.statuses[path] = self.statuses[target]
        elif target in self.metas and _metadata_file(path):
            self.metas[path] = self.metas[target]
        elif target in self.installers and posixpath.basename(path) == "INSTALLER":
            self.installers[path] = self.installers[target]
        elif target in self.records and posixpath.basename(path) == "RECORD":
            self.records[path] = self.records[target]
        elif target in self.os_release and path in OS_RELEASE:
            self.os_release[path] = replace(self.os_release[target], path=path)

    def facts(self) -> LayerFacts:
        dists: list[Dist] = []
        for path, meta in self.metas.items():
            info = path if path.endswith(".egg-info") else posixpath.dirname(path)
            dir_name, dir_version = _from_dir_name(info)
            name, version = meta.name or dir_name, meta.version or dir_version
            if not name or not version:
                continue
            installer = self.installers.get(posixpath.join(info, "INSTALLER")) or None
            dists.append(Dist(path, name, version, meta.license_expression, meta.license, meta.classifiers,
                              installer, self.records.get(posixpath.join(info, "RECORD"))))
        return LayerFacts(self.statuses.get(DPKG_STATUS), tuple(sorted(dists, key=lambda d: d.metadata)),
                          tuple(self.os_release[p] for p in sorted(self.os_release)),
                          tuple(sorted(self.whiteouts)), tuple(sorted(self.opaques)))


def _sha256(stream: IO[bytes]) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: stream.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def _contents(path: str) -> IO[bytes]:
    """A file of a layer folder, read whole (the files `_wanted` names are small) and closed."""
    with open(path, "rb") as f:
        return io.BytesIO(f.read(STATUS_LIMIT))


def _opaque(path: str) -> bool:
    """Whether overlayfs marks the folder opaque (as root sees it: `trusted.`; `user.` where overlayfs was
    mounted with userxattr). An attribute that cannot be read at all is an error: the folder is no layer to read."""
    for name in ("trusted.overlay.opaque", "user.overlay.opaque"):
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError as exc:
            if exc.errno not in (errno.ENODATA, errno.ENOTSUP):
                raise
    return False


def _wanted(path: str) -> bool:
    """Whether a file may say what is installed (the files `_LayerReader.file` reads)."""
    parent, base = posixpath.split(path)
    return (parent == _DPKG_DIR and base in _STATUS_NAMES) or _metadata_file(path) or path in OS_RELEASE or \
        (base in ("INSTALLER", "RECORD") and parent.endswith(".dist-info"))


def read_folder(root: str) -> LayerFacts:
    """The facts of one layer from its folder in the engine's storage (what `read_layer` reads from its tar),
    without decompressing anything: seconds less per GB of layer."""
    reader = _LayerReader()
    reader.folder(root.rstrip("/"))
    return reader.facts()


def read_layer(stream: BinaryIO) -> LayerFacts:
    """The facts of one layer tar (uncompressed, or compressed in a way tarfile knows), in one pass over its
    members in order: `stream` need not seek (an HTTP body will do). Holds no file's content but the few it keeps
    (the dpkg status file's packages, each metadata file's headers, INSTALLER and os-release files).
    Raises tarfile.TarError for what is not a tar stream."""
    reader = _LayerReader()
    with tarfile.open(fileobj=stream, mode="r|*") as tar:  # (its default buffer: larger ones copy more per read)
        for member in tar:
            reader.take(tar, member)
    return reader.facts()


# endregion


@dataclass(frozen=True)
class Component:
    """One package of an image. `path` is dpkg's status file for a deb, the site directory (the one holding the
    dist-info) for a Python distribution; `metadata` the file it was read from; `layer` the caller's label of the
    layer that brought it (a node's name, "base image debian:bookworm"), `layer_digest` that layer's diff_id."""

    kind: str  # deb | python
    name: str  # as the metadata writes it: dpkg's Package, METADATA's Name
    version: str
    path: str
    layer: str
    layer_digest: str
    metadata: str
    arch: str | None = None  # deb: Architecture
    source: str | None = None  # deb: the source package's name
    source_version: str | None = None  # deb: the source package's version
    licenses: tuple[str, ...] = ()
    installer: str | None = None  # python: the INSTALLER file (pip, uv, debian)
    record: str | None = None  # python: the sha256 of its RECORD (the hash of every file it installed)
    distro: str | None = None  # deb: the image's distribution, `debian-12` (set by Inventory)

    @property
    def canonical_name(self) -> str:
        """PEP 503's name of a Python distribution; a deb's own name."""
        return str(canonicalize_name(self.name)) if self.kind == "python" else self.name

    @property
    def purl(self) -> str:
        """`pkg:deb/debian/libc6@2.36-9?arch=amd64&distro=debian-12`, `pkg:pypi/torch@2.4.0%2Bcu121`."""
        from packageurl import PackageURL  # (imported when an SBOM is made)

        if self.kind == "deb":
            qualifiers = {k: v for k, v in (("arch", self.arch), ("distro", self.distro)) if v}
            namespace = (self.distro or "debian").split("-")[0]  # the os-release ID (deb-based IDs have no "-")
            return str(PackageURL(type="deb", namespace=namespace, name=self.name, version=self.version,
                                  qualifiers=qualifiers).to_string())
        return str(PackageURL(type="pypi", name=self.canonical_name, version=self.version).to_string())

    @property
    def bom_ref(self) -> str:
        """Unique within an image: dpkg knows a package once per architecture; a metadata file is one package."""
        if self.kind == "deb":
            return f"deb:{self.name}:{self.arch or ''}@{self.version}"
        info = self.metadata if self.metadata.endswith(".egg-info") else posixpath.dirname(self.metadata)
        return f"python:{info}"

    def sort_key(self) -> tuple[str, str, str, str, str]:
        return self.kind, self.path, self.canonical_name, self.version, self.bom_ref

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "version": self.version, "path": self.path,
                "layer": self.layer, "layer_digest": self.layer_digest, "metadata": self.metadata, "arch": self.arch,
                "source": self.source, "source_version": self.source_version, "licenses": list(self.licenses),
                "installer": self.installer, "record": self.record}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Component:
        return cls(str(doc["kind"]), str(doc["name"]), str(doc["version"]), str(doc["path"]), str(doc["layer"]),
                   str(doc["layer_digest"]), str(doc["metadata"]), _opt(doc.get("arch")), _opt(doc.get("source")),
                   _opt(doc.get("source_version")), tuple(str(x) for x in doc.get("licenses") or ()),
                   _opt(doc.get("installer")), _opt(doc.get("record")))


def _deb_component(deb: Deb, layer: str, layer_digest: str) -> Component:
    return Component("deb", deb.name, deb.version, DPKG_STATUS, layer, layer_digest, DPKG_STATUS, deb.arch,
                     deb.source, deb.source_version)


def _python_component(dist: Dist, layer: str, layer_digest: str) -> Component:
    return Component("python", dist.name, dist.version, dist.site, layer, layer_digest, dist.metadata,
                     licenses=dist.licenses, installer=dist.installer, record=dist.record)


@dataclass(frozen=True)
class Inventory:
    """An image's packages after a sequence of layers (`apply`, lowest first). Pure: `apply` returns a new one,
    so a shared parent's inventory is computed once and every child's starts from it (`to_json`/`from_json`)."""

    deb_entries: tuple[Component, ...] = ()
    python_entries: tuple[Component, ...] = ()  # one per metadata file
    os_releases: tuple[OsRelease, ...] = ()

    @classmethod
    def empty(cls) -> Inventory:
        return cls()

    def apply(self, facts: LayerFacts, layer: str, layer_digest: str) -> Inventory:
        """This inventory with one more layer on top, labelled `layer` (diff_id `layer_digest`)."""
        hides = facts.hider()
        if facts.dpkg is not None:  # the layer's status file is the whole package set
            before = {(c.name, c.arch, c.version): c for c in self.deb_entries}
            debs = []
            for deb in facts.dpkg:
                kept = before.get((deb.name, deb.arch, deb.version))
                debs.append(_deb_component(deb, kept.layer if kept else layer,
                                           kept.layer_digest if kept else layer_digest))
            deb_entries = tuple(debs)
        elif hides(DPKG_STATUS):
            deb_entries = ()
        else:
            deb_entries = self.deb_entries
        pythons = {c.metadata: c for c in self.python_entries if not hides(c.metadata)}
        pythons.update((d.metadata, _python_component(d, layer, layer_digest)) for d in facts.dists)
        releases = {o.path: o for o in self.os_releases if not hides(o.path)}
        releases.update((o.path, o) for o in facts.os_release)
        return Inventory(tuple(sorted(deb_entries, key=Component.sort_key)),
                         tuple(sorted(pythons.values(), key=Component.sort_key)),
                         tuple(releases[p] for p in sorted(releases)))

    @property
    def os_release(self) -> OsRelease | None:
        """/etc/os-release, else /usr/lib/os-release (os-release(5)'s order)."""
        by_path = {o.path: o for o in self.os_releases}
        return next((by_path[p] for p in OS_RELEASE if p in by_path), None)

    @property
    def distro(self) -> str | None:
        """`debian-12`: os-release's ID and VERSION_ID; None when the image has no os-release file."""
        release = self.os_release
        return release.distro if release else None

    def debs(self) -> tuple[Component, ...]:
        distro = self.distro
        return tuple(replace(c, distro=distro) for c in self.deb_entries)

    def pythons(self) -> tuple[Component, ...]:
        return self.python_entries

    @property
    def components(self) -> tuple[Component, ...]:
        """Every package, sorted by kind, path, canonical name, version."""
        return tuple(sorted(self.debs() + self.pythons(), key=Component.sort_key))

    def python_paths(self) -> tuple[str, ...]:
        """The site directories that hold distributions, sorted."""
        return tuple(sorted({c.path for c in self.python_entries}))

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "debs": [c.to_json() for c in self.deb_entries],
                "pythons": [c.to_json() for c in self.python_entries],
                "os_release": [o.to_json() for o in self.os_releases]}

    @classmethod
    def from_json(cls, doc: Any) -> Inventory:
        """Raises ValueError for anything but `to_json`'s document of this FORMAT."""
        try:
            if doc["format"] != FORMAT:
                raise ValueError(f"an inventory of format {doc['format']!r}, not {FORMAT}")
            return cls(tuple(Component.from_json(c) for c in doc["debs"]),
                       tuple(Component.from_json(c) for c in doc["pythons"]),
                       tuple(OsRelease.from_json(o) for o in doc["os_release"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not an inventory: {exc!r}") from exc
