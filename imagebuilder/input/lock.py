"""The lock file: a matrix's inputs pinned, in a reviewed, committed text file beside it (`matrix.yaml` →
`matrix.lock.yaml`).

What it pins (version 2): every base image the matrix names, by its image ID (the config digest, what the roots'
keys start from) and, when a registry knows it, its manifest digest `repo@sha256:…` (what a root's FROM names);
every wheelhouse an entry takes wheels from (`build.wheelhouse`), each file it serves by name and sha256; and, per
entry, the base it builds on and the wheelhouse it takes wheels from. An image imported or built on an engine (no
registry has it) has an ID only: its `source` says `local`. The document is sorted and stable: the same inputs
write the same bytes. A wheelhouse is named as the matrix's folder resolves, relative to the lock's folder when it
lies under it.

Version 3 adds `installs`: each pip install a template makes (`plan/installs.py`), by key, with each wheel it
adds (name, version, file, source, sha256). Version 1 (bases and entries' bases only) is read as a lock that pins no
wheelhouse, versions 1 and 2 as locks that pin no installs (`Lock.installs` None). Room for what later versions pin
(OS packages): a later version adds keys, and a reader of this version refuses a file it does not understand (its
`version`), never half-reads one.

This module reads and writes the document; what an image name resolves to is `plan/bases.py`'s to say.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError, unknown_key
from .source import Document, load

FORMAT = 3
READS = ("1", "2", "3")  # the versions this imagebuilder reads (1: no wheelhouses; 1 and 2: no installs)
SUFFIX = ".lock.yaml"
IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")
FILE_HASH = IMAGE_ID  # a wheelhouse file's pin: sha256:<64 hex> of its bytes
DIGEST_REF = re.compile(r"[^\s@]+@sha256:[0-9a-f]{64}")
ANEW = "`imagebuilder lock --update` writes it anew (every base resolved again)"
TOP = ("version", "bases", "wheelhouses", "installs", "entries")
INSTALL_FIELDS = ("kind", "requirements", "index", "python", "platform", "constraints", "overrides", "wheelhouse",
                  "after", "wheels")
WHEEL_FIELDS = ("name", "version", "file", "source", "sha256")
HEX64 = re.compile(r"[0-9a-f]{64}")
SOURCES = ("registry", "local")  # registry: the ID and the manifest digest; local: the engine's image ID alone
HEADER = ("# imagebuilder lock file for {matrix}: its inputs, pinned. Written by `imagebuilder lock`; review it and\n"
          "# commit it beside the matrix. `imagebuilder outdated` says what moved upstream and what that rebuilds;\n"
          "# `imagebuilder lock --update [NAME...]` takes it. docs/guide/locking.md says what each field means.\n")


@dataclass(frozen=True)
class LockedBase:
    """A base image as the lock pins it: the name as the matrix writes it, its image ID, and its registry manifest
    digest (`repo@sha256:…`) when one is known. Without one (`source: local`) it is an image this engine has, by ID
    alone: another machine must load the same image to build from this lock."""

    name: str
    id: str
    digest: str | None = None

    @property
    def source(self) -> str:
        return "registry" if self.digest else "local"

    def to_doc(self) -> dict[str, Any]:
        return {"id": self.id, "digest": self.digest, "source": self.source}


@dataclass(frozen=True)
class LockedWheelhouse:
    """A wheelhouse folder as the lock pins it: its path as the lock writes it (`path_in`) and each file it serves,
    by name, with the sha256 of its bytes (`sha256:<hex>`), sorted by name."""

    path: str
    files: tuple[tuple[str, str], ...] = ()

    def pin(self, name: str) -> str | None:
        return dict(self.files).get(name)

    def to_doc(self) -> dict[str, str]:
        return dict(self.files)


@dataclass(frozen=True)
class LockedWheel:
    """A wheel an install adds, as the lock pins it: the distribution's name and version, the file's name, where it was
    found (the index's URL of it, or `wheelhouse <name>`), and the sha256 of its bytes (hex)."""

    name: str
    version: str
    file: str
    source: str
    sha256: str

    def to_doc(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "file": self.file, "source": self.source,
                "sha256": self.sha256}


@dataclass(frozen=True)
class LockedInstall:
    """One pip install of a node's template as the lock pins it (`plan/installs.py` names it by `key`): what it asks
    (kept for the reader: the key already says it) and the wheels it adds, sorted by name."""

    key: str
    asked: tuple[tuple[str, Any], ...]  # kind, requirements, index, python, platform, ... as the document gives them
    wheels: tuple[LockedWheel, ...] = ()

    def to_doc(self) -> dict[str, Any]:
        return {**dict(self.asked), "wheels": [w.to_doc() for w in self.wheels]}


@dataclass(frozen=True)
class LockedEntry:
    """An entry as the lock pins it: the base image it builds on, and the wheelhouse it takes wheels from (as
    `Lock.wheelhouses` names it; None: none). Wheels an index serves and OS packages: a later version."""

    id: str
    base_image: str
    wheelhouse: str | None = None

    def to_doc(self) -> dict[str, Any]:
        return {"base_image": self.base_image, **({"wheelhouse": self.wheelhouse} if self.wheelhouse else {})}


@dataclass(frozen=True)
class Lock:
    """A lock file: its path, its bases by name and its entries by id (each sorted)."""

    file: Path
    bases: tuple[LockedBase, ...] = ()
    entries: tuple[LockedEntry, ...] = ()
    lines: tuple[tuple[str, int], ...] = ()  # (dotted key, line) as read: where an error about a key points
    wheelhouses: tuple[LockedWheelhouse, ...] = ()
    installs: tuple[LockedInstall, ...] | None = ()  # None: a lock of version 1 or 2, which pins no installs

    def install(self, key: str) -> LockedInstall | None:
        return next((i for i in self.installs or () if i.key == key), None)

    def base(self, name: str) -> LockedBase | None:
        return next((b for b in self.bases if b.name == name), None)

    def entry(self, entry_id: str) -> LockedEntry | None:
        return next((e for e in self.entries if e.id == entry_id), None)

    def wheelhouse(self, path: str) -> LockedWheelhouse | None:
        return next((w for w in self.wheelhouses if w.path == path), None)

    def path_in(self, folder: Path) -> str:
        """How this lock names a folder: relative to the lock's own folder (`..` included, links not followed), so
        the file means the same in any checkout; absolute only where no relative path leads there."""
        try:
            return os.path.relpath(os.path.abspath(folder), os.path.abspath(self.file.parent))
        except ValueError:  # (another drive)
            return os.path.abspath(folder)

    def line(self, key: str) -> int | None:
        """The line `key` (dotted: `bases.<name>`) was read from; None for a lock not read from a file."""
        return dict(self.lines).get(key)

    def text(self, matrix_name: str) -> str:
        """The document: a header, then version, bases and entries, each sorted by name (stable bytes)."""
        doc = {"version": FORMAT,
               "bases": {b.name: b.to_doc() for b in sorted(self.bases, key=lambda b: b.name)},
               **({"wheelhouses": {w.path: w.to_doc() for w in sorted(self.wheelhouses, key=lambda w: w.path)}}
                  if self.wheelhouses else {}),
               **({"installs": {i.key: i.to_doc() for i in sorted(self.installs, key=lambda i: i.key)}}
                  if self.installs else {}),
               "entries": {e.id: e.to_doc() for e in sorted(self.entries, key=lambda e: e.id)}}
        body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=200, allow_unicode=True)
        return HEADER.format(matrix=matrix_name) + body


def beside(matrix_file: Path) -> Path:
    """The lock file of a matrix: `<name>.lock.yaml` in its folder."""
    return matrix_file.with_name(matrix_file.stem + SUFFIX)


def read(path: Path) -> Lock | None:
    """The lock file at `path`, checked: None when there is none. Anything it does not understand (another version,
    an unknown key, an ID that is not `sha256:<64 hex>`) is an input error naming the file, line and key."""
    if not path.exists() and not path.is_symlink():
        return None
    doc = load(path)
    value = doc.value
    if not isinstance(value, dict):
        raise InputError("a lock file is a mapping (version, bases, wheelhouses, entries)", where=doc.where(()),
                         hint=ANEW)
    for key in value:
        if key not in TOP:
            raise unknown_key(key, TOP, doc.where((key,)))
    if str(value.get("version")) not in READS:
        raise InputError(f"lock file version {value.get('version')!r}: this imagebuilder reads versions "
                         f"{', '.join(READS)}",
                         where=doc.where(("version",)), hint=ANEW + ", or use the "
                         "imagebuilder that wrote it")
    bases = tuple(_base(doc, name, one) for name, one in _mapping(doc, "bases").items())
    entries = tuple(_entry(doc, name, one) for name, one in _mapping(doc, "entries").items())
    houses = tuple(_wheelhouse(doc, str(name), one) for name, one in _mapping(doc, "wheelhouses").items())
    installs = (tuple(_install(doc, str(key), one) for key, one in _mapping(doc, "installs").items())
                if str(value.get("version")) == str(FORMAT) else None)
    named = {b.name for b in bases}
    for entry in entries:
        if entry.base_image not in named:
            raise InputError(f"entry {entry.id} builds on {entry.base_image!r}, which `bases` does not pin",
                             where=doc.where(("entries", entry.id, "base_image")),
                             hint=ANEW)
        if entry.wheelhouse is not None and entry.wheelhouse not in {w.path for w in houses}:
            raise InputError(f"entry {entry.id} takes wheels from {entry.wheelhouse!r}, which `wheelhouses` does not "
                             "pin", where=doc.where(("entries", entry.id, "wheelhouse")), hint=ANEW)
    lines = tuple((".".join(str(p) for p in path_), mark[0]) for path_, mark in doc.marks.items()
                  if len(path_) <= 2 or (len(path_) == 3 and path_[0] == "wheelhouses"))
    return Lock(path, bases, entries, lines, houses, installs)


def write(lock: Lock, matrix_name: str) -> None:
    """Write the lock file whole (a temporary file renamed over it: a reader never sees half of one)."""
    text = lock.text(matrix_name)
    folder = lock.file.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{lock.file.name}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, lock.file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _mapping(doc: Document, key: str) -> dict[str, Any]:
    value = doc.value.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{key} is a mapping (name: what is pinned)", where=doc.where((key,)))
    return value


def _fields(doc: Document, path: tuple[str, str], value: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"expected a mapping of {', '.join(allowed)}", where=doc.where(path), hint=ANEW)
    for key in value:
        if key not in allowed:
            raise unknown_key(key, allowed, doc.where((*path, key)))
    return value


def _base(doc: Document, name: str, value: Any) -> LockedBase:
    path = ("bases", name)
    one = _fields(doc, path, value, ("id", "digest", "source"))
    image_id, digest, source = one.get("id"), one.get("digest"), one.get("source")
    if not isinstance(image_id, str) or not IMAGE_ID.fullmatch(image_id):
        raise InputError(f"id {image_id!r} is not an image ID (sha256:<64 hex>)", where=doc.where((*path, "id")),
                         hint=ANEW)
    if digest is not None and (not isinstance(digest, str) or not DIGEST_REF.fullmatch(digest)):
        raise InputError(f"digest {digest!r} is not a manifest digest (repository@sha256:<64 hex>), nor null",
                         where=doc.where((*path, "digest")), hint=ANEW)
    locked = LockedBase(name, image_id, digest)
    if source is not None and source != locked.source:
        raise InputError(f"source {source!r} does not agree with the digest (a base with a registry digest is "
                         f"`registry`; one without is `local`)", where=doc.where((*path, "source")),
                         hint=ANEW)
    return locked


def _entry(doc: Document, name: str, value: Any) -> LockedEntry:
    path = ("entries", name)
    one = _fields(doc, path, value, ("base_image", "wheelhouse"))
    base, house = one.get("base_image"), one.get("wheelhouse")
    if not isinstance(base, str) or not base:
        raise InputError("base_image is the name of a base image under `bases`",
                         where=doc.where((*path, "base_image")), hint=ANEW)
    if house is not None and (not isinstance(house, str) or not house):
        raise InputError("wheelhouse is the name of a wheelhouse under `wheelhouses`, or absent",
                         where=doc.where((*path, "wheelhouse")), hint=ANEW)
    return LockedEntry(name, base, house)


def _wheelhouse(doc: Document, name: str, value: Any) -> LockedWheelhouse:
    path = ("wheelhouses", name)
    if not isinstance(value, dict):
        raise InputError("a wheelhouse is a mapping of file name: sha256:<64 hex>", where=doc.where(path), hint=ANEW)
    for file, pin in value.items():
        if not isinstance(file, str) or "/" in file or file in ("", ".", ".."):
            raise InputError(f"{file!r} is not a file name", where=doc.where((*path, file)), hint=ANEW)
        if not isinstance(pin, str) or not FILE_HASH.fullmatch(pin):
            raise InputError(f"{file}: {pin!r} is not a file's hash (sha256:<64 hex>)",
                             where=doc.where((*path, file)), hint=ANEW)
    return LockedWheelhouse(name, tuple(sorted(value.items())))


def _install(doc: Document, key: str, value: Any) -> LockedInstall:
    path = ("installs", key)
    if not re.fullmatch(r"[0-9a-f]{16}", key):
        raise InputError(f"{key!r} is not an install's key (16 hex digits)", where=doc.where(path), hint=ANEW)
    one = _fields(doc, path, value, INSTALL_FIELDS)
    listed = one.get("wheels") or []
    if not isinstance(listed, list):
        raise InputError("wheels is a list of {name, version, file, source, sha256}",
                         where=doc.where((*path, "wheels")), hint=ANEW)
    found = []
    for number, wheel in enumerate(listed):
        where = doc.where((*path, "wheels", number))
        if not isinstance(wheel, dict) or set(wheel) != set(WHEEL_FIELDS) or not all(
                isinstance(wheel[f], str) and wheel[f] for f in WHEEL_FIELDS):
            raise InputError(f"a wheel is a mapping of {', '.join(WHEEL_FIELDS)}, each a string", where=where,
                             hint=ANEW)
        if not HEX64.fullmatch(wheel["sha256"]):
            raise InputError(f"{wheel['file']}: sha256 {wheel['sha256']!r} is not 64 hex digits", where=where,
                             hint=ANEW)
        found.append(LockedWheel(**{f: wheel[f] for f in WHEEL_FIELDS}))
    asked = tuple((k, one[k]) for k in INSTALL_FIELDS if k in one and k != "wheels")
    return LockedInstall(key, asked, tuple(sorted(found, key=lambda w: w.name)))
