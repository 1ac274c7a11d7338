"""The wheelhouses a plan's builds take wheels from (`build.wheelhouse`), held to the lock beside the matrix.

A wheelhouse serves each regular file of its folder (`served_files`: what the run's server lists as pip's
find-links). With a lock, the lock is the input: every file the folder serves must be pinned, by name, with the
sha256 of its bytes, and be that file. `locked` checks this when the plan is loaded, before anything is built or
pushed: a file replaced under the same name (a re-uploaded wheel, a tampered mirror), a new file, or a pinned file
that is gone is an input error naming the lock file and line, the file, and the expected and found hashes. The
plan then carries the pins (`Plan.wheelhouses`): each node's key names them (`keys`), and the run's server lists
only the pinned files, each link with its `#sha256=` (`run/loopback.py`), so pip itself refuses bytes that changed
between this check and the build.

`pins` reads a folder as `imagebuilder lock` writes it.

The wheels an index serves are held by the lock's installs (`plan/installs.py`): `installs_locked` checks that the
lock pins every install the plan's nodes make (one it does not: the matrix, a layer or a wheel below it changed since
the lock was written, and the error says to run `imagebuilder lock`), and that each wheel an install took from a
wheelhouse is the file the wheelhouse's pins name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Set
from pathlib import Path

from ..errors import InputError, Where
from ..input.lock import Lock
from .bases import RUN_LOCK
from .installs import WHEELHOUSE_SOURCE, raw_installs
from .plan import Node, PinnedWheelhouse, Plan

RUN_INSTALLS = ("run `imagebuilder lock` to pin it (it resolves what the lock does not pin yet and keeps what it "
                "does); review and commit {file}")
UPDATE = ("if the change is meant, `imagebuilder lock --update {name}` takes it (the nodes that take wheels from "
          "this wheelhouse rebuild); review and commit {file}")


RAW_INSTALL = ("list it under the layer's `pip:` and install it with {{ m.pip_install(build, layer.pip) }} "
               "(macros.j2), which the lock pins; a command that checks hashes itself (pip install --require-hashes "
               "-r FILE) is taken as it is")


def served(entry: Path) -> bool:
    """Whether a wheelhouse serves this entry of its folder: a regular file (or a link to one) whose name is UTF-8,
    printable and not hidden (`.DS_Store`, an editor's swap file: never a wheel)."""
    try:
        entry.name.encode()
        return entry.name.isprintable() and not entry.name.startswith(".") and entry.is_file()
    except (OSError, UnicodeEncodeError):
        return False


def served_files(folder: Path) -> list[str]:
    """The names of the files a wheelhouse serves (`served`), sorted."""
    try:
        return sorted(entry.name for entry in folder.iterdir() if served(entry))
    except OSError:
        return []


def file_hash(path: Path) -> str:
    """`sha256:<hex>` of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def takers(plan: Plan, folder: Path) -> tuple[str, ...]:
    """The nodes that take wheels from a wheelhouse folder: what a change of one of its pins rebuilds."""
    return tuple(n.id for n in plan.nodes if n.entry.build.wheelhouse == folder)


def pins(folder: Path) -> tuple[tuple[str, str], ...]:
    """Each file the folder serves, with its hash: what `imagebuilder lock` writes for it."""
    return tuple((name, file_hash(folder / name)) for name in served_files(folder))


def locked(plan: Plan, lock: Lock | None, *, check: bool = True, hashed: Set[Path | None] | None = None) -> Plan:
    """The plan with its wheelhouses pinned by `lock` (None: no lock file, the plan as it is). Each entry's
    wheelhouse must be the one the lock gives it, and (`check`) each of its files the file the lock pins (see
    above); `check=False`: the pins as the lock gives them, files unread (`outdated`, which compares them).
    `hashed`: only these wheelhouses' files are read (a run of some nodes: the wheelhouses they take)."""
    if lock is None:
        return plan
    file = str(lock.file)
    pinned: dict[Path, PinnedWheelhouse] = {}
    for entry in plan.entries():
        folder, given = entry.build.wheelhouse, lock.entry(entry.id)
        if given is None:  # (an entry the lock does not cover: `bases.locked` refuses it)
            continue
        want = lock.path_in(folder) if folder is not None else None
        if given.wheelhouse != want and not check:  # (`outdated`: a wheelhouse the lock does not pin is not watched)
            continue
        if given.wheelhouse != want:
            said = f"takes wheels from the wheelhouse {want!r}" if want else "takes no wheelhouse"
            pins_ = f"gives it {given.wheelhouse!r}" if given.wheelhouse else "pins no wheelhouse for it"
            raise InputError(f"entry {entry.id} {said}; the lock file {file} {pins_}", where=entry.where,
                             hint=RUN_LOCK.format(file=file))
        if folder is None or want is None or folder in pinned:
            continue
        house = lock.wheelhouse(want)
        if house is None:  # (`input/lock.py` refuses a lock whose entry names a wheelhouse it does not pin)
            raise InputError(f"wheelhouse {want} (entry {entry.id}) is not pinned by the lock file {file}",
                             where=entry.where, hint=RUN_LOCK.format(file=file))
        where = Where(file, lock.line(f"wheelhouses.{want}"), key=f"wheelhouses.{want}")
        if check and (hashed is None or folder in hashed):
            _check(folder, house.files, file, want, lock, where)
        pinned[folder] = PinnedWheelhouse(folder, want, house.files, where)
    return plan.with_wheelhouses(tuple(pinned[f] for f in sorted(pinned)))


def _check(folder: Path, files: tuple[tuple[str, str], ...], file: str, name: str, lock: Lock, house: Where) -> None:
    """Every file the wheelhouse serves is the file its pins name (else an input error, above)."""
    here = served_files(folder)
    for wheel, pin in files:
        where = Where(file, lock.line(f"wheelhouses.{name}.{wheel}"), key=f"wheelhouses.{name}.{wheel}")
        if wheel not in here:
            raise InputError(f"wheelhouse {folder}: {wheel}, which the lock file pins ({pin}), is gone",
                             where=where, hint=UPDATE.format(name=wheel, file=file))
        found = file_hash(folder / wheel)
        if found != pin:
            raise InputError(f"wheelhouse {folder}: {wheel} is not the file the lock pins: expected {pin}, found "
                             f"{found} (a file replaced under the same name is never built from)", where=where,
                             hint=UPDATE.format(name=wheel, file=file))
    known = {wheel for wheel, _ in files}
    for wheel in here:
        if wheel not in known:
            raise InputError(f"wheelhouse {folder}: {wheel} ({file_hash(folder / wheel)}) is not in the lock file "
                             f"{file} (it is new since the lock was written; builds take only what the lock names)",
                             where=house, hint=UPDATE.format(name=wheel, file=file))


def _no_raw_installs(node: Node, file: str) -> None:
    """A node's template installs nothing by a command the lock cannot pin (`installs.raw_installs`), else an input
    error naming the layer's template, the line and the command."""
    for raw in raw_installs(node.rendered.dockerfile):
        template = node.layer.template
        try:  # (the template's own line, where the rendered line is written there as it is)
            lines = [n for n, text in enumerate(template.read_text(encoding="utf-8").splitlines(), 1)
                     if text.strip() == raw.text]
        except OSError:
            lines = []
        where = Where(str(template), lines[0]) if len(lines) == 1 else Where(str(template))
        raise InputError(f"node {node.id}: its layer {node.layer.name!r} runs `{raw.command}` (rendered Dockerfile "
                         f"line {raw.line}), an install the lock file {file} cannot pin: under the lock every "
                         "package comes from a file it names by hash", where=where, hint=RAW_INSTALL)


def installs_locked(plan: Plan, lock: Lock | None) -> Plan:
    """The plan as it is, once the lock pins every install its nodes make and each wheel an install took from a
    wheelhouse is the file that wheelhouse's pins name (else an input error naming the node, the install and the lock
    file). A lock of version 1 or 2 pins no installs (index wheels were not locked then): the plan installs by version,
    as `docs/guide/locking.md` says, until `imagebuilder lock` writes this version."""
    if lock is None or lock.installs is None:
        return plan
    file = str(lock.file)
    where = Where(file, lock.line("installs"), key="installs")
    for node in plan.nodes:
        pinned = plan.pinned(node.entry.build.wheelhouse)
        for install in node.rendered.installs:
            locked_ = lock.install(install.key)
            if locked_ is None:
                raise InputError(f"node {node.id}: {install.said()} (install {install.key}) is not pinned by the "
                                 f"lock file {file}: the matrix, a layer or a wheel below it changed since the lock "
                                 "was written", where=where, hint=RUN_INSTALLS.format(file=file))
            for wheel in locked_.wheels:
                if wheel.source != WHEELHOUSE_SOURCE or pinned is None:
                    continue
                pin = dict(pinned.files).get(wheel.file)
                if pin != f"sha256:{wheel.sha256}":
                    raise InputError(f"node {node.id}: install {install.key} takes {wheel.file} "
                                     f"(sha256:{wheel.sha256}) from the wheelhouse, which pins {pin or 'no such file'}",
                                     where=Where(file, lock.line(f"installs.{install.key}"),
                                                 key=f"installs.{install.key}"),
                                     hint=RUN_INSTALLS.format(file=file))
        _no_raw_installs(node, file)  # (once its own are pinned, what the macros render checks hashes)
    return plan
