"""The base images a plan builds on, resolved in this one place: the roots' keys start from their IDs
(`keys.assign`), a root's build names its FROM, a run records what it built on, a build record names its parent,
`lock` pins them and `outdated` compares them, all from what `resolve` (and `locked`) said.

With a lock file beside the matrix (`input/lock.py`), the lock is the input: a base is the image the lock pins,
whatever its name names today (a tag that moves upstream changes no key and no build until `lock --update` takes
it). A run first makes sure the engine holds that image (pulled by its locked manifest digest when it is not) and
builds FROM it; where it cannot, nothing is built. Without a lock, a base is what the engine's image of its name
is when the command starts (pulled first when a run needs it and the engine has none), as it always was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from rich.markup import escape

from ..errors import EngineError, InputError, Where
from ..input.lock import Lock, LockedBase
from ..ports import Engine, LineSink
from ..ports.reference import parse
from ..ports.registry import Registries
from . import keys
from .plan import Base, Plan

RUN_LOCK = "run `imagebuilder lock` to pin it, then review and commit {file}"


def locked(plan: Plan, lock: Lock | None) -> Plan:
    """The plan with its bases pinned by `lock` (None: no lock file, the plan as it is). Every base image and every
    entry of the plan must be in the lock, on the base the matrix gives it: a matrix change the lock does not
    cover is an input error that says to run `imagebuilder lock`."""
    if lock is None:
        return plan
    file = str(lock.file)
    for name in plan.base_names():
        if lock.base(name) is None:
            entry = next(n.entry for n in plan.nodes if n.base_image == name)
            raise InputError(f"base image {name!r} (entry {entry.id}) is not pinned by the lock file {file}",
                             where=entry.where, hint=RUN_LOCK.format(file=file))
    for entry in plan.entries():
        pinned = lock.entry(entry.id)
        if pinned is None:
            raise InputError(f"entry {entry.id} is not in the lock file {file} (it is new since the lock was "
                             "written)", where=entry.where, hint=RUN_LOCK.format(file=file))
        if pinned.base_image != entry.base_image:
            raise InputError(f"entry {entry.id} builds on {entry.base_image!r}; the lock file {file} says "
                             f"{pinned.base_image!r}", where=entry.where, hint=RUN_LOCK.format(file=file))
    names = set(plan.base_names())
    return plan.with_bases(tuple(Base(b.name, b.id, b.digest, Where(file, lock.line(f"bases.{b.name}"),
                                                                     key=f"bases.{b.name}"))
                                 for b in lock.bases if b.name in names))


def resolve(plan: Plan, engine: Engine, *, pull: bool = False, say: LineSink | None = None,
            known: Mapping[str, str] | None = None) -> Plan:
    """The plan with each base resolved. Locked: as the lock pins it; with `pull` (a run, before anything builds)
    the engine must hold the locked image, pulled by its locked digest when it does not, else an input error naming
    the lock file, the image, and the expected and found IDs. Not locked: the engine's image of each name (`pull`:
    pulled when there is none, else an input error). `known` (`--base-image-id`, a command without an engine): those
    bases' IDs as a machine with an engine resolved them."""
    known = known or {}
    if plan.locked:
        if not pull:
            return plan
        return plan.with_bases(tuple(_confirm(engine, b, say, known.get(b.name)) for b in plan.bases))
    found = []
    for name in plan.base_names():
        image = known.get(name) or engine.image_id(name)
        if image is None and pull:
            if say is not None:
                say(f"[dim]pulling base image {escape(name)}[/]")
            image = _pulled(plan, engine, name)
        if image is not None:
            found.append(Base(name, image))
    return plan.with_bases(tuple(found))


def keyed(plan: Plan) -> Plan:
    """The plan with every node's key, its roots' from their resolved bases (`keys.assign`)."""
    return keys.assign(plan, {b.name: b.id for b in plan.bases})


def rebuilds(plan: Plan, name: str, image: str) -> tuple[str, ...]:
    """The nodes whose keys change when the base `name` is `image` instead of what the plan resolved it to (any
    stand-in for an image not known yet gives the same nodes): what taking it would rebuild, in plan order."""
    ids = {b.name: b.id for b in plan.bases}
    before, after = keys.assign(plan, ids), keys.assign(plan, {**ids, name: image})
    return tuple(a.id for a, b in zip(before.nodes, after.nodes, strict=True) if a.key != b.key)


def on_engine(engine: Engine, name: str) -> LockedBase | None:
    """What the engine's image of `name` is now: its ID, and the manifest digest its registry gave it (the one of
    the name's own repository among the image's repo digests; none for an image imported or built here). None when
    the engine has no image of that name."""
    image = engine.image_id(name)
    if image is None:
        return None
    wanted = parse(name)
    digests = [str(d) for d in engine.inspect(image).get("RepoDigests") or []]
    mine = [d for d in digests if (parse(d).host, parse(d).repository) == (wanted.host, wanted.repository)]
    return LockedBase(name, image, sorted(mine)[0] if mine else None)


def in_registry(registries: Registries, name: str) -> tuple[str | None, str | None]:
    """(the manifest digest `repo@sha256:…` the registry's tag names now, that manifest's image ID when it is one
    image's manifest rather than a list of platforms' (None: not known without pulling)). Raises `EngineError` when
    the registry cannot be asked; (None, None) when it has no such tag."""
    client, ref = registries.at(name)
    digest = client.manifest_digest(ref.repository, ref.reference)
    if digest is None:
        return None, None
    try:
        body, _ = client.manifest(ref.repository, digest)
        config = json.loads(body).get("config") or {}
        image = str(config["digest"]) if isinstance(config, dict) and "digest" in config else None
    except (EngineError, ValueError, KeyError, TypeError):
        image = None
    return ref.at(digest), image


def pull(engine: Engine, name: str, where: Where | None = None) -> str:
    """The image ID of `name` once pulled; an input error naming it when it cannot be."""
    try:
        return engine.pull(name)
    except EngineError as exc:
        raise InputError(f"base image {name!r} is not present and cannot be pulled ({exc.message})",
                         where=where, hint="pull or import it first (`make base-image` seeds debian:bookworm from "
                                           "Debian's mirror)") from None


def _pulled(plan: Plan, engine: Engine, name: str) -> str:
    return pull(engine, name, next(n.entry for n in plan.nodes if n.base_image == name).where)


def _confirm(engine: Engine, base: Base, say: LineSink | None, known: str | None) -> Base:
    """The locked base as this engine holds it, FROM its locked digest when the engine has the locked image under
    it, else FROM its image ID; pulled by the locked digest when the engine has neither. An input error when the
    locked image cannot be had (or a pull by the locked digest gives another image)."""
    where = base.lock or Where("?")
    lock = where.file
    if known is not None:  # (no engine: a judge told the IDs; it builds nothing)
        if known != base.id:
            raise InputError(f"base image {base.name!r}: the lock pins image {base.id}; --base-image-id says "
                             f"{known}", where=where)
        return base
    now = engine.image_id(base.name)
    under = engine.image_id(base.digest) if base.digest else None
    if under is None and engine.image_id(base.id) is None and base.digest:
        if say is not None:
            say(f"[dim]pulling the locked base image {escape(base.digest)}[/]")
        try:
            under = engine.pull(base.digest)
        except EngineError as exc:
            raise _missing(base, now, where, f"and cannot be pulled by its locked digest ({exc.message})") from None
    if under is not None and under != base.id:
        raise InputError(f"base image {base.name!r}: the lock pins image {base.id}, but its locked digest "
                         f"{base.digest} is image {under} here", where=where,
                         hint="the lock file was edited by hand, or the registry's manifest differs: write it again "
                              "with `imagebuilder lock --update " + base.name + "`")
    if under is None and engine.image_id(base.id) is None:
        raise _missing(base, now, where, "and has no registry digest to pull it by" if not base.digest else "")
    if now != base.id and say is not None:
        said = f"image {now}" if now else "no image"
        say(f"[yellow]{escape(base.name)} names {said} on this engine; the lock ({escape(lock)}) keeps image "
            f"{base.id} and the build uses it (`imagebuilder outdated` says what taking the new one rebuilds)[/]")
    return Base(base.name, base.id, base.digest, base.lock, base.digest if base.digest and under == base.id else "")


def _missing(base: Base, now: str | None, where: Where, why: str) -> InputError:
    found = f"its image here is {now}" if now else "this engine has no image of that name"
    pinned = f"{base.id} ({base.digest})" if base.digest else base.id
    return InputError(f"base image {base.name!r}: the lock pins image {pinned}, which is not on this engine"
                      f"{' ' + why if why else ''}; {found}. Nothing was built",
                      where=where, hint=f"load the locked image on this engine, or review what taking the new one "
                                        f"rebuilds (`imagebuilder outdated`) and pin it with `imagebuilder lock "
                                        f"--update {base.name}`")
