"""`imagebuilder lock` and `imagebuilder outdated`: the lock file beside the matrix written (each base image pinned by
its image ID and, when a registry knows it, its manifest digest), and each locked base compared with what its name
names upstream now, with the exact nodes a change would rebuild. What a name resolves to is `plan/bases.py`'s;
these flows return what they found and print nothing.

What cannot be asked (no engine, `--offline`, a registry that does not answer) is `unknown`, never `current`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ..errors import EngineError, ImageBuilderError, InputError, Where, did_you_mean
from ..input import lock as lock_mod
from ..input.lock import Lock, LockedBase, LockedEntry, LockedInstall, LockedWheel, LockedWheelhouse
from ..input.pkg_index import IndexUnreachable
from ..plan import bases, wheels
from ..plan.installs import PLATFORM, WHEELHOUSE_SOURCE, Install
from ..plan.plan import Base, Node, Plan
from ..ports import Engine
from ..ports.registry import Registries
from ..ports.resolver import Ask, ResolveFailed, Resolver

CURRENT, MOVED, UNKNOWN = "current", "moved", "unknown"


@dataclass(frozen=True)
class Change:
    """What `lock` did to one base: pinned it anew (`was` None), kept it, took a new image, or dropped it (`now`
    None); `rebuilds`: the nodes whose keys the new image changes."""

    name: str
    was: LockedBase | None
    now: LockedBase | None
    rebuilds: tuple[str, ...] = ()

    def line(self) -> str:
        if self.was is None and self.now is not None:
            return f"pinned   {self.name}: {_said(self.now)}"
        if self.now is None:
            return f"dropped  {self.name} (the matrix no longer names it)"
        if self.was == self.now:
            return f"kept     {self.name}: {_said(self.now)}"
        assert self.was is not None
        return (f"updated  {self.name}: {_said(self.was)} -> {_said(self.now)}; rebuilds {len(self.rebuilds)} "
                f"node(s): {', '.join(self.rebuilds) or 'none'}")


@dataclass(frozen=True)
class WheelChange:
    """What `lock` did to one file of a wheelhouse: pinned it anew (`was` None), kept it, took its new bytes, or
    dropped it (`now` None: gone from the folder); `rebuilds`: the nodes whose keys the new pin changes."""

    wheelhouse: str
    name: str
    was: str | None
    now: str | None
    rebuilds: tuple[str, ...] = ()

    def line(self) -> str:
        said = f"{self.name} (wheelhouse {self.wheelhouse})"
        if self.was is None:
            return f"pinned   {said}: {_sha(self.now)}"
        if self.now is None:
            return f"dropped  {said} (gone from the folder)"
        if self.was == self.now:
            return f"kept     {said}: {_sha(self.now)}"
        return (f"updated  {said}: {_sha(self.was)} -> {_sha(self.now)}; rebuilds {len(self.rebuilds)} node(s): "
                f"{', '.join(self.rebuilds) or 'none'}")


@dataclass(frozen=True)
class InstallChange:
    """What `lock` did to one pip install (`plan/installs.py`): pinned it anew (`was` None), kept it, resolved it again
    to other wheels, or dropped it (`now` None: no node makes it now); `nodes`: the nodes that make it; `rebuilds`: the
    nodes whose keys the new wheels change (those and every node above them)."""

    key: str
    said: str
    was: LockedInstall | None
    now: LockedInstall | None
    nodes: tuple[str, ...] = ()
    rebuilds: tuple[str, ...] = ()

    def line(self) -> str:
        head = f"install {self.key} ({self.said})"
        if self.now is None:
            return f"dropped  {head} (no node makes it now)"
        wheels_ = ", ".join(f"{w.name}=={w.version}" for w in self.now.wheels[:6]) + (
            f" and {len(self.now.wheels) - 6} more" if len(self.now.wheels) > 6 else "")
        if self.was is None:
            return f"pinned   {head}: {len(self.now.wheels)} wheel(s): {wheels_ or 'none (its requirements are met)'}"
        if self.was.wheels == self.now.wheels:
            return f"kept     {head}: {len(self.now.wheels)} wheel(s)"
        was = {(w.name, w.version, w.sha256) for w in self.was.wheels}
        moved = ", ".join(f"{w.name}=={w.version}" for w in self.now.wheels if (w.name, w.version, w.sha256) not in was)
        return (f"updated  {head}: {moved or 'wheels dropped'}; rebuilds {len(self.rebuilds)} node(s): "
                f"{', '.join(self.rebuilds) or 'none'}")


@dataclass(frozen=True)
class Locking:
    """What `lock` wrote: the lock, each base's, each wheelhouse file's and each install's change, and whether the
    file's bytes changed."""

    lock: Lock
    changes: tuple[Change | WheelChange | InstallChange, ...]
    changed: bool


def lock(plan: Plan, matrix_file: Path, engine: Engine, *, update: tuple[str, ...] | None,
         offline: bool, resolver: Resolver | None = None) -> Locking:
    """Write the lock file of `matrix_file` for `plan` (the whole matrix, as loaded without its lock). A base the lock
    pins already is kept; one it does not pin is pinned as the engine has it (pulled when it has none). `update`:
    re-resolve these bases (empty: every base): an image a registry gave is pulled again by its name first (not
    with `offline`: then the engine's image is taken as it is). A name to update that the matrix does not name is an
    input error; so is a base that cannot be had, and a lock file it cannot read (but with `--update` of every base,
    which writes one anew)."""
    path = lock_mod.beside(matrix_file)
    try:
        old = lock_mod.read(path)
    except InputError:
        if update != ():  # (`--update` of every base needs nothing of the old file: it writes one anew)
            raise
        old = None
    names = plan.base_names()
    folders = sorted({e.build.wheelhouse for e in plan.entries() if e.build.wheelhouse})
    files = {name for folder in folders for name in wheels.served_files(folder)} | {
        name for house in (old.wheelhouses if old else ()) for name, _ in house.files}
    distributions = {w.name for i in ((old.installs or ()) if old else ()) for w in i.wheels}
    wanted = set(names) | files | distributions if update == () else set(update or ())
    stranger = sorted(wanted - set(names) - files - distributions)
    if stranger:
        listed = f"its base images: {', '.join(names)}" + (f"; its wheelhouses' files: {', '.join(sorted(files))}"
                                                           if files else "")
        raise InputError(f"lock --update {stranger[0]}: the matrix names no base image, wheelhouse file or locked "
                         f"wheel {stranger[0]!r}", where=_where(plan),
                         hint=did_you_mean(stranger[0], [*names, *files, *distributions]) or listed)
    was = {b.name: b for b in (old.bases if old else ())}
    now = {name: (was[name] if name in was and name not in wanted else
                  _pin(engine, name, refresh=name in wanted and not offline)) for name in names}
    before = plan.with_bases(tuple(Base(b.name, b.id) for b in was.values() if b.name in now))
    changes: list[Change | WheelChange | InstallChange] = [Change(name, was.get(name), now[name],
                      bases.rebuilds(before, name, now[name].id) if name in was and was[name] != now[name] else ())
               for name in names]
    changes += [Change(name, was[name], None) for name in sorted(set(was) - set(now))]
    houses = tuple(_house(path, folder, old, wanted) for folder in folders)
    for folder, house in zip(folders, houses, strict=True):
        changes += _wheel_changes(plan, old, house, folder)
    installs, install_changes = pin_installs(plan, old, houses, resolver, wanted=wanted, offline=offline,
                                             home=Lock(path))
    changes += install_changes
    home = Lock(path)
    new = Lock(path, tuple(now.values()), tuple(LockedEntry(e.id, e.base_image, home.path_in(e.build.wheelhouse)
                                                            if e.build.wheelhouse else None) for e in plan.entries()),
               (), houses, installs)
    text = new.text(matrix_file.name)
    changed = not path.exists() or path.read_text(encoding="utf-8") != text
    if changed:
        lock_mod.write(new, matrix_file.name)
    return Locking(new, tuple(changes), changed)


def pin_installs(plan: Plan, old: Lock | None, houses: tuple[LockedWheelhouse, ...], resolver: Resolver | None, *,
                 wanted: set[str], offline: bool, home: Lock) -> tuple[tuple[LockedInstall, ...],
                                                                      list[InstallChange]]:
    """Every pip install the plan's nodes make, pinned (`plan/installs.py`), in plan order (a node's chain first). One
    the old lock pins is kept, unless it must be resolved again: `wanted` names a wheel it locks, it took a wheelhouse
    file whose pin is new, or an install below it in a chain was resolved again (what it adds follows what is below
    it). Resolving asks `resolver` for the install's requirements, constrained by the entry's pins and by every wheel
    the chain below it installs into the venv, and keeps the wheels it adds. `offline`: uv asks no network (its cache,
    the wheelhouse and a file:// index answer)."""
    before = {i.key: i for i in ((old.installs or ()) if old else ())}
    pins = {Path(h.path): dict(h.files) for h in houses}
    done: dict[str, LockedInstall] = {}
    again: set[str] = set()  # the installs resolved anew in this run
    makers: dict[str, list[str]] = {}
    said: dict[str, str] = {}
    prior: dict[str, dict[str, str]] = {}  # node id -> name -> version: what its chain has installed
    for node in plan.nodes:
        have = dict(prior.get(node.parent, {})) if node.parent else {}
        for install in node.rendered.installs:
            makers.setdefault(install.key, []).append(node.id)
            said.setdefault(install.key, install.said())
            if install.key not in done:
                kept = before.get(install.key)
                folder = node.entry.build.wheelhouse
                house = pins.get(Path(home.path_in(folder))) if folder else None
                if kept is not None and not _stale(kept, wanted, again, install, house):
                    done[install.key] = kept
                else:
                    done[install.key] = _resolve(node, install, have, resolver, offline=offline)
                    if kept is None or kept.wheels != done[install.key].wheels:
                        again.add(install.key)
            have.update({w.name: w.version for w in done[install.key].wheels})
        prior[node.id] = have
    out: list[InstallChange] = []
    for key, now in done.items():
        was = before.get(key)
        nodes = tuple(makers[key])
        rebuilds = _above(plan, nodes) if key in again and was is not None else ()
        out.append(InstallChange(key, said[key], was, now, nodes, rebuilds))
    out += [InstallChange(key, "; ".join(str(v) for k, v in was.asked if k == "requirements"), was, None)
            for key, was in sorted(before.items()) if key not in done]
    return tuple(done.values()), out


def _stale(kept: LockedInstall, wanted: set[str], again: set[str], install: Install,
           house: dict[str, str] | None) -> bool:
    """Whether a pinned install must be resolved again (see `pin_installs`)."""
    if install.after in again or any(w.name in wanted for w in kept.wheels):
        return True
    return any(w.source == WHEELHOUSE_SOURCE and (house or {}).get(w.file) != f"sha256:{w.sha256}"
               for w in kept.wheels)


def _resolve(node: Node, install: Install, have: dict[str, str], resolver: Resolver | None, *,
             offline: bool) -> LockedInstall:
    """One install resolved: the wheels it adds to what its chain has (`have`)."""
    if resolver is None:
        raise InputError(f"node {node.id}: {install.said()} is not pinned by the lock, and nothing here resolves it",
                         where=node.entry.where, hint="run `imagebuilder lock` (it resolves with uv)")
    venv = install.kind == "venv"
    constraints = (*install.constraints, *(f"{name}=={version}" for name, version in sorted(have.items()))) \
        if venv else ()
    folder = node.entry.build.wheelhouse
    ask = Ask(install.requirements, install.index, install.python, PLATFORM, constraints, install.overrides, folder,
              offline=offline)
    try:
        found = resolver.resolve(ask)
    except ResolveFailed as exc:
        raise InputError(f"node {node.id}: {install.said()} cannot be resolved: {exc}", where=node.entry.where,
                         hint="check the requirements and that the index answers" + (
                             " (--offline: uv's cache, the wheelhouse and file:// indexes only)" if offline else "")
                         ) from None
    adds = [r for r in found if not (venv and r.name in have)]
    in_house = folder.resolve().as_uri() + "/" if folder else None
    locked = tuple(LockedWheel(r.name, r.version, r.file,
                               WHEELHOUSE_SOURCE if in_house and r.url.startswith(in_house) else r.url, r.sha256)
                   for r in adds)
    asked = tuple((k, v) for k, v in (("kind", install.kind), ("requirements", list(install.requirements)),
                                      ("index", install.index), ("python", install.python), ("platform", PLATFORM),
                                      ("constraints", list(install.constraints)),
                                      ("overrides", list(install.overrides)), ("wheelhouse", install.wheelhouse),
                                      ("after", install.after)) if v not in ((), [], None))
    return LockedInstall(install.key, asked, tuple(sorted(locked, key=lambda w: w.name)))


def _above(plan: Plan, nodes: tuple[str, ...]) -> tuple[str, ...]:
    """The nodes and every node built on them: what a change of what they install rebuilds."""
    out = set(nodes)
    for node in plan.nodes:  # (parents first)
        if node.parent in out:
            out.add(node.id)
    return tuple(n.id for n in plan.nodes if n.id in out)


def _house(path: Path, folder: Path, old: Lock | None, wanted: set[str]) -> LockedWheelhouse:
    """A wheelhouse as the lock will pin it. New to the lock: every file it serves. Pinned already: `lock` alone
    changes nothing (a file with new bytes keeps its pin, a new file is not taken, a gone one stays pinned: each
    is refused until `--update` names it, or `--update` alone takes everything)."""
    name = Lock(path).path_in(folder)
    before = old.wheelhouse(name) if old else None
    if before is None:
        return LockedWheelhouse(name, wheels.pins(folder))
    kept, here = dict(before.files), set(wheels.served_files(folder))
    files = {file: pin for file, pin in kept.items() if file not in wanted or file in here}
    files.update({file: wheels.file_hash(folder / file) for file in here if file in wanted})
    return LockedWheelhouse(name, tuple(sorted(files.items())))


def _wheel_changes(plan: Plan, old: Lock | None, house: LockedWheelhouse, folder: Path) -> list[WheelChange]:
    """Each file's change against the old lock; a new pin names the nodes that take wheels from the folder."""
    pinned = old.wheelhouse(house.path) if old else None
    before = dict(pinned.files) if pinned else {}
    takers = wheels.takers(plan, folder)
    now = dict(house.files)
    out = [WheelChange(house.path, name, before.get(name), pin,
                       takers if name in before and before[name] != pin else ()) for name, pin in house.files]
    return out + [WheelChange(house.path, name, pin, None) for name, pin in sorted(before.items()) if name not in now]


def _pin(engine: Engine, name: str, *, refresh: bool) -> LockedBase:
    """The base as the engine has it now: pulled first when the engine has none, or, with `refresh`, when a registry
    gave it (its repo digest): what its name names there now."""
    seen = bases.on_engine(engine, name)
    if seen is None or (refresh and seen.digest):
        try:
            engine.pull(name)
        except EngineError as exc:
            if seen is None:
                raise InputError(f"base image {name!r} is not on this engine and cannot be pulled ({exc.message})",
                                 hint="pull or import it first") from None
            raise InputError(f"lock --update {name}: its registry cannot be asked ({exc.message}); nothing was "
                             "written", hint="with --offline, the image this engine has is pinned as it is") from None
        seen = bases.on_engine(engine, name)
    if seen is None:
        raise InputError(f"base image {name!r}: pulled, but the engine has no image of that name")
    return seen


@dataclass(frozen=True)
class Drift:
    """One locked base against what its name names now: on this engine (`engine`), and in its registry when the
    lock has a registry digest (`registry`: the digest its tag names there now). `status`: `current` when every
    place asked says the locked image, `moved` when one says another, `unknown` when the one that counts (the
    registry for a registry image, the engine for a local one) could not be asked (`why`). `nodes`: every node whose
    key starts from this base: what taking a new image rebuilds (exactly those, `bases.rebuilds`)."""

    name: str
    locked: LockedBase
    engine: LockedBase | None
    registry: str | None
    status: str
    why: str
    nodes: tuple[str, ...]
    new_id: str | None = None  # the new image's ID, when it is known without pulling it

    @property
    def rebuilds(self) -> tuple[str, ...]:
        return self.nodes if self.status == MOVED else ()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "why": self.why,
                "locked": {"id": self.locked.id, "digest": self.locked.digest, "source": self.locked.source},
                "engine": None if self.engine is None else {"id": self.engine.id, "digest": self.engine.digest},
                "registry": None if self.registry is None else {"digest": self.registry},
                "new_id": self.new_id, "rebuilds": list(self.rebuilds), "nodes": list(self.nodes)}


def outdated(plan: Plan, engine: Engine | None, registries: Registries | None) -> tuple[Drift, ...]:
    """Each base the plan's lock pins, compared with what its name names now (`Drift`). `engine` None: no engine
    answers; `registries` None: registries are not asked (`--offline`). A plan without a lock is an input error."""
    if not plan.locked:
        raise InputError("there is no lock file beside the matrix: nothing is pinned, so nothing can be outdated",
                         hint="write one with `imagebuilder lock`")
    return tuple(_drift(plan, base, engine, registries) for base in plan.bases)


def _drift(plan: Plan, base: Base, engine: Engine | None, registries: Registries | None) -> Drift:
    locked = LockedBase(base.name, base.id, base.digest)
    seen, engine_why = None, "no engine answers"
    if engine is not None:
        try:
            seen = bases.on_engine(engine, base.name)
            engine_why = f"this engine has no image {base.name}"
        except ImageBuilderError as exc:  # (no answer is an answer: unknown)
            engine_why = f"the engine did not answer ({exc.message})"
    if locked.digest is not None:  # a registry's image: its registry says whether it moved
        status, why, digest, new_id = _registry(locked, registries)
        if status == CURRENT and seen is not None and seen.id != locked.id:
            why = f"this engine's {base.name} is image {seen.id}, not the locked one; builds use the lock"
        if status == MOVED and new_id is None and seen is not None and _sha(seen.digest) == _sha(digest):
            new_id = seen.id
    elif seen is None:
        status, why, digest, new_id = UNKNOWN, f"{engine_why}: a local image is known to this engine alone", None, None
    elif seen.id == locked.id:
        status, why, digest, new_id = CURRENT, "", None, None
    else:
        status, why, digest, new_id = MOVED, f"this engine's {base.name} is now image {seen.id}", None, seen.id
    nodes = bases.rebuilds(plan, base.name, new_id or f"moved {base.name}")
    return Drift(base.name, locked, seen, digest, status, why, nodes, new_id)


def _registry(locked: LockedBase, registries: Registries | None) -> tuple[str, str, str | None, str | None]:
    """(status, why, the digest the registry's tag names now, that image's ID when known) for a registry image."""
    if registries is None:
        return UNKNOWN, "--offline: its registry was not asked", None, None
    try:
        digest, image = bases.in_registry(registries, locked.name)
    except ImageBuilderError as exc:  # (no answer is an answer: unknown)
        return UNKNOWN, f"its registry did not answer ({exc.message})", None, None
    if digest is None:
        return UNKNOWN, f"its registry has no {locked.name} (the tag is gone)", None, None
    if _sha(digest) == _sha(locked.digest):
        return CURRENT, "", digest, None
    return MOVED, f"its registry's {locked.name} is now {digest}", digest, image


def _sha(digest: str | None) -> str:
    return (digest or "").rpartition("@")[2]


def _said(base: LockedBase) -> str:
    return f"image {base.id[:19]}" + (f" ({base.digest.rpartition('@')[2][:19]})" if base.digest else " (local)")


def _where(plan: Plan) -> Where | None:
    """Where the matrix is (its first entry), for an error about a name given on the command line."""
    return plan.nodes[0].entry.where if plan.nodes else None


@dataclass(frozen=True)
class WheelDrift:
    """One file of a locked wheelhouse against the folder now: `current` (the pinned bytes), `moved` (other bytes:
    `now` its hash; a new file: `locked` None; a gone one: `now` None). `nodes`: the nodes that take wheels from the
    wheelhouse: what taking it rebuilds."""

    wheelhouse: str
    name: str
    locked: str | None
    now: str | None
    nodes: tuple[str, ...]

    @property
    def status(self) -> str:
        return CURRENT if self.locked == self.now else MOVED

    @property
    def rebuilds(self) -> tuple[str, ...]:
        return self.nodes if self.status == MOVED else ()

    def to_json(self) -> dict[str, Any]:
        return {"wheelhouse": self.wheelhouse, "file": self.name, "status": self.status, "locked": self.locked,
                "now": self.now, "rebuilds": list(self.rebuilds), "nodes": list(self.nodes)}


def wheel_drift(plan: Plan) -> tuple[WheelDrift, ...]:
    """Each file of each wheelhouse the plan's lock pins (and each new one), against the folder's bytes now."""
    out: list[WheelDrift] = []
    for house in plan.wheelhouses:
        takers = wheels.takers(plan, house.folder)
        here, pins = set(wheels.served_files(house.folder)), dict(house.files)
        for file in sorted(here | set(pins)):
            out.append(WheelDrift(house.name, file, pins.get(file),
                                  wheels.file_hash(house.folder / file) if file in here else None, takers))
    return tuple(out)


def wheel_lines(files: tuple[WheelDrift, ...]) -> list[str]:
    """`outdated`'s wheelhouse lines: a count, then each moved file and the nodes taking it rebuilds."""
    if not files:
        return []
    moved = [f for f in files if f.status == MOVED]
    out = [f"wheelhouse files: {len(moved)} moved, {len(files) - len(moved)} current"]
    for f in moved:
        said = "new (not in the lock)" if f.locked is None else "gone" if f.now is None else \
            f"locked {_sha(f.locked)[:19]}, now {_sha(f.now)[:19]}"
        out.append(f"{MOVED:<8} {f.name} (wheelhouse {f.wheelhouse}): {said}")
        out.append(f"         rebuilds {len(f.nodes)} node(s): {', '.join(f.nodes) or 'none'}")
    return out


def lines(drift: tuple[Drift, ...], lock_file: str) -> list[str]:
    """`outdated` for a person: a count, then a line per base and, under a move, the nodes it rebuilds."""
    counts = {s: sum(d.status == s for d in drift) for s in (MOVED, UNKNOWN, CURRENT)}
    out = [f"{lock_file}: " + ", ".join(f"{n} {s}" for s, n in counts.items())]
    for d in drift:
        out.append(f"{d.status:<8} {d.name}  locked {_said(d.locked)}" + (f"; {d.why}" if d.why else ""))
        if d.status == MOVED:
            out.append(f"         rebuilds {len(d.nodes)} node(s): {', '.join(d.nodes) or 'none'}")
        elif d.status == UNKNOWN:
            out.append(f"         not known to be current; if it moved, {len(d.nodes)} node(s) rebuild")
    return out


NEWER = "newer"
# The releases a matrix pins that an index may have patched: torch (the entry's `torch`), and NCCL and cuDNN as
# torch's pins or an entry's overrides name them (their wheel's name, prefix -> the entry field that scopes them)
RELEASED_FIELDS = (("nvidia-nccl-", "nccl"), ("nvidia-cudnn-", "cudnn"))
Versions = Callable[[str, str], "list[str] | None"]  # (index URL, project) -> its versions, None: it has none;
# raises IndexUnreachable when the index does not answer (`input.pkg_index.project_versions`)


@dataclass(frozen=True)
class Release:
    """A release the matrix pins (torch, an NCCL or cuDNN wheel), against what its index serves now: `current` (no
    later patch release of its major.minor), `newer` (the later ones, oldest first), or `unknown` (the index was not
    asked or did not answer, and why). A newer release is the matrix's to take (its `torch` axis, an override), not
    the lock's; `nodes`: what taking it would rebuild, the nodes of the entries that pin it whose chains read it."""

    project: str
    pinned: str
    index: str
    status: str
    newer: tuple[str, ...]
    why: str
    nodes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"project": self.project, "pinned": self.pinned, "index": self.index, "status": self.status,
                "newer": list(self.newer), "why": self.why, "rebuilds": list(self.nodes)}


def pinned_releases(plan: Plan) -> dict[tuple[str, str, str], tuple[str, set[str]]]:
    """(project, pinned version, index URL) -> (the entry field that scopes it, the entries that pin it), for every
    release the plan's entries pin that an index could patch."""
    out: dict[tuple[str, str, str], tuple[str, set[str]]] = {}
    for entry in {n.entry.id: n.entry for n in plan.nodes}.values():
        index = entry.build.torch_index_url
        out.setdefault(("torch", entry.torch, index), ("torch", set()))[1].add(entry.id)
        for text in (*entry.cuda_libs, *(f"{wheel}=={version}" for wheel, version in entry.overrides)):
            name, _, version = text.partition("==")
            field = next((f for prefix, f in RELEASED_FIELDS if name.startswith(prefix)), None)
            if field is not None and version:
                out.setdefault((name, version.split(";")[0].strip(), index), (field, set()))[1].add(entry.id)
    return out


def releases(plan: Plan, versions: Versions | None) -> tuple[Release, ...]:
    """Each pinned release (`pinned_releases`) against its index's versions (`versions` None: `--offline`, not
    asked), sorted by project and version."""
    out = []
    for (project, pinned, index), (field, entries) in sorted(pinned_releases(plan).items()):
        nodes = tuple(n.id for n in plan.nodes if n.entry.id in entries and (n.scope is None or field in n.scope))
        if versions is None:
            out.append(Release(project, pinned, index, UNKNOWN, (), "--offline: its index was not asked", nodes))
            continue
        try:
            served = versions(index, project)
        except IndexUnreachable as exc:  # (no answer is an answer: unknown)
            out.append(Release(project, pinned, index, UNKNOWN, (), f"its index did not answer ({exc})", nodes))
            continue
        later = _patches(pinned, served or [])
        out.append(Release(project, pinned, index, NEWER if later else CURRENT, later,
                           "" if served else f"its index serves no {project}", nodes))
    return tuple(out)


def _patches(pinned: str, served: list[str]) -> tuple[str, ...]:
    """The releases of `served` after `pinned` with its major.minor, oldest first, as the index spells them (a
    local label such as `+cu130` kept apart from the comparison; pre-releases and dev releases left out)."""
    try:
        base = Version(pinned)
    except InvalidVersion:
        return ()
    later: dict[Version, str] = {}
    for text in served:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        public = Version(version.public)
        if public.release[:2] == base.release[:2] and public > Version(base.public) and not public.is_prerelease:
            later.setdefault(public, str(public))
    return tuple(later[v] for v in sorted(later))


def release_lines(found: tuple[Release, ...]) -> list[str]:
    """`outdated`'s release lines: a count, then each newer or unknown release and what taking it rebuilds."""
    if not found:
        return []
    newer = [r for r in found if r.status == NEWER]
    unknown = [r for r in found if r.status == UNKNOWN]
    out = [f"releases the matrix pins: {len(newer)} newer, {len(unknown)} unknown, "
           f"{len(found) - len(newer) - len(unknown)} current"]
    for r in newer:
        out.append(f"{NEWER:<8} {r.project} {r.pinned} -> {', '.join(r.newer)} ({r.index}): the matrix's to take")
        out.append(f"         rebuilds {len(r.nodes)} node(s): {', '.join(r.nodes) or 'none'}")
    out += [f"{UNKNOWN:<8} {r.project} {r.pinned} ({r.index}): {r.why}" for r in unknown]
    return out


@dataclass(frozen=True)
class InstallDrift:
    """One install the lock pins against what its index serves now, resolved as `lock` would (its requirements, the
    entry's pins and the wheels the chain below it locks): `current` (the same files), `moved` (`now`: the wheels it
    would take; each difference is a newer or older version, a file replaced under the same version, a wheel added or
    no longer needed), `unknown` (`why`: not asked, or no answer). `rebuilds`: the nodes that make it and those above
    them, what taking a move rebuilds."""

    key: str
    said: str
    locked: LockedInstall
    now: tuple[LockedWheel, ...] | None
    nodes: tuple[str, ...]
    above: tuple[str, ...]
    why: str = ""

    @property
    def status(self) -> str:
        return UNKNOWN if self.now is None else CURRENT if not self.changes() else MOVED

    @property
    def rebuilds(self) -> tuple[str, ...]:
        return self.above if self.status == MOVED else ()

    def changes(self) -> list[dict[str, str | None]]:
        """Each wheel that differs: its name, what the lock pins (`version sha256:…`) and what is served now (none
        when it was not asked)."""
        if self.now is None:
            return []
        was = {w.name: w for w in self.locked.wheels}
        now = {w.name: w for w in self.now or ()}
        out: list[dict[str, str | None]] = []
        for name in sorted(set(was) | set(now)):  # (by name, version and bytes: a file's URL may move with a mirror)
            a, b = was.get(name), now.get(name)
            if a is not None and b is not None and (a.version, a.sha256) == (b.version, b.sha256):
                continue
            kind = "added" if a is None else "gone" if b is None else "replaced" if a.version == b.version else (
                "newer" if _newer(b.version, a.version) else "other")
            out.append({"name": name, "change": kind, "locked": _said_wheel(a), "now": _said_wheel(b)})
        return out

    def to_json(self) -> dict[str, Any]:
        return {"install": self.key, "said": self.said, "status": self.status, "why": self.why or None,
                "changes": self.changes(), "nodes": list(self.nodes), "rebuilds": list(self.rebuilds)}


def _said_wheel(wheel: LockedWheel | None) -> str | None:
    return None if wheel is None else f"{wheel.version} sha256:{wheel.sha256}"


def _newer(a: str, b: str) -> bool:
    try:
        return Version(a) > Version(b)
    except InvalidVersion:
        return a > b


def install_drift(plan: Plan, lock: Lock | None, resolver: Resolver | None, *, offline: bool) -> tuple[InstallDrift,
                                                                                                        ...]:
    """Each install the plan's nodes make that `lock` pins, resolved again against its index now, in plan order. The
    chain below an install counts as the lock pins it, so each install is judged on its own: one that cannot be
    resolved is `unknown` and the others are still asked. `offline` (or no `resolver`) asks no network: an install
    from a `file://` index or a wheelhouse alone is still resolved (uv offline); any other is `unknown`, never taken
    as current from uv's cache."""
    pinned = {i.key: i for i in ((lock.installs or ()) if lock else ())}
    makers: dict[str, list[str]] = {}
    first: dict[str, tuple[Node, Install, dict[str, str]]] = {}
    prior: dict[str, dict[str, str]] = {}
    for node in plan.nodes:
        have = dict(prior.get(node.parent, {})) if node.parent else {}
        for install in node.rendered.installs:
            makers.setdefault(install.key, []).append(node.id)
            locked = pinned.get(install.key)
            if locked is None:  # (`wheels.installs_locked` refuses a plan with one the lock does not pin)
                continue
            first.setdefault(install.key, (node, install, dict(have)))
            have.update({w.name: w.version for w in locked.wheels})
        prior[node.id] = have
    out: list[InstallDrift] = []
    for key, (node, install, have) in first.items():
        nodes = tuple(makers[key])
        drift = InstallDrift(key, install.said(), pinned[key], None, nodes, _above(plan, nodes))
        local = install.index.startswith("file:")
        if resolver is None or (offline and not local):
            why = "not asked (--offline)" if offline else "nothing here resolves it"
            out.append(replace(drift, why=why))
            continue
        try:
            now = _resolve(node, install, have, resolver, offline=offline).wheels
        except InputError as exc:
            out.append(replace(drift, why=f"no answer: {exc.args[0] if exc.args else exc}"))
            continue
        out.append(replace(drift, now=now))
    return tuple(out)


def install_lines(found: tuple[InstallDrift, ...]) -> list[str]:
    """`outdated`'s install lines: a count, then each moved install's wheels and the nodes taking it rebuilds, and
    each unknown one with why."""
    if not found:
        return []
    counts = {s: sum(d.status == s for d in found) for s in (MOVED, UNKNOWN, CURRENT)}
    out = ["installs: " + ", ".join(f"{n} {s}" for s, n in counts.items())]
    for d in found:
        if d.status == CURRENT:
            continue
        out.append(f"{d.status:<8} install {d.key} ({d.said})" + (f"; {d.why}" if d.why else ""))
        for c in d.changes():
            out.append(f"         {c['change']:<8} {c['name']}: locked {_short(c['locked'])}, now {_short(c['now'])}")
        if d.status == MOVED:
            # (`lock --update` takes a wheel the lock names: a new dependency comes with the one that pulls it)
            names = " ".join(sorted({str(c["name"]) for c in d.changes() if c["locked"] is not None}))
            out.append(f"         rebuilds {len(d.rebuilds)} node(s): {', '.join(d.rebuilds) or 'none'}; take it: "
                       f"imagebuilder lock --update {names or ' '.join(sorted(w.name for w in d.locked.wheels))}")
        else:
            out.append(f"         not known to be current; if it moved, {len(d.above)} node(s) rebuild")
    return out


def _short(said: str | None) -> str:
    return "none" if said is None else said[:len(said.split(" ")[0]) + 20]


@dataclass(frozen=True)
class Outdated:
    """What `outdated` found: each locked base (`Drift`), each wheelhouse file (`WheelDrift`), each release the
    matrix pins (`Release`). `current`: nothing for `lock --update` to take (every base and file known current)."""

    lock: str
    bases: tuple[Drift, ...]
    files: tuple[WheelDrift, ...]
    releases: tuple[Release, ...] = ()
    installs: tuple[InstallDrift, ...] = ()

    @property
    def current(self) -> bool:
        return all(d.status == CURRENT for d in self.bases) and all(f.status == CURRENT for f in self.files) \
            and all(i.status == CURRENT for i in self.installs)

    def to_json(self) -> dict[str, Any]:
        return {"lock": self.lock or None, "bases": [d.to_json() for d in self.bases],
                "wheelhouses": [f.to_json() for f in self.files], "installs": [i.to_json() for i in self.installs],
                "releases": [r.to_json() for r in self.releases]}

    def lines(self) -> list[str]:
        """For a person: the bases, the wheelhouse files, the installs, the releases; `nothing to do` when the lock
        is current."""
        out = [*lines(self.bases, self.lock), *wheel_lines(self.files), *install_lines(self.installs),
               *release_lines(self.releases)]
        if self.current:
            what = ", ".join(w for w, there in (("wheelhouse file", self.files), ("install", self.installs)) if there)
            out.append("nothing to do: every locked base image " + (f"and {what} " if what else "") + "is current")
        return out
