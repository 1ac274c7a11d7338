"""The commands of the lock file beside the matrix: `lock` writes it, `outdated` says what moved upstream since."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import NOTHING_TO_DO, EngineUnavailable, InputError
from .context import Context, load_plan
from .options import matrix_option, nothing_to_do_option, strict_option
from .root import cli


@cli.command("lock")
@matrix_option
@strict_option
@click.option("--update", is_flag=True, help="Resolve the named base images and wheelhouse files (default: every "
              "one) again: an image a registry gave is pulled again by its name (with --offline: the image this "
              "engine has is pinned); a wheelhouse file is hashed again.")
@click.argument("names", nargs=-1, metavar="[NAME...]")
@click.pass_obj
def lock_command(ctx: Context, matrix_file: Path, strict: bool, update: bool, names: tuple[str, ...]) -> int:
    """Write the lock file beside the matrix (matrix.lock.yaml for matrix.yaml): each base image the matrix names,
    pinned by its image ID and, when a registry gave it, its manifest digest; each file of each wheelhouse, by its
    sha256; and the base and wheelhouse of each entry. What the lock pins already is kept (`--update` takes what the
    names name now); review the file and commit it. While it is there, every command builds on what it pins, a
    matrix it does not cover is refused, and so is a wheelhouse file that is not the file it pins."""
    from ..commands import lock as lock_cmd

    if names and not update:
        raise InputError(f"lock {' '.join(names)}: names are the base images and wheelhouse files to update; add "
                         "--update")
    _, plan = load_plan(ctx, matrix_file, strict=strict, locked=False)
    done = lock_cmd.lock(plan, matrix_file, ctx.engine(), update=names if update else None,
                         offline=not ctx.check_index, resolver=ctx.resolver())
    for change in done.changes:  # (names from registries and folders: printed as they are, never as markup)
        ctx.out.print(change.line(), highlight=False, soft_wrap=True, markup=False)
    said = "wrote" if done.changed else "unchanged:"
    files = sum(len(w.files) for w in done.lock.wheelhouses)
    installs = done.lock.installs or ()
    ctx.out.print(f"{said} {done.lock.file} ({len(done.lock.bases)} base image(s), {files} wheelhouse file(s), "
                  f"{len(installs)} install(s) of {sum(len(i.wheels) for i in installs)} wheel(s), "
                  f"{len(done.lock.entries)} entries)", highlight=False, soft_wrap=True)
    return 0


@cli.command()
@matrix_option
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON ({lock, bases: [...], "
              "wheelhouses: [...], releases: [...]}).")
@nothing_to_do_option
@click.pass_obj
def outdated(ctx: Context, matrix_file: Path, strict: bool, as_json: bool, nothing_to_do_code: bool) -> int:
    """For each base image the lock file pins, what its name names now (on this engine; in its registry, for an image
    a registry gave) and the exact nodes taking it would rebuild. `moved`, `current`, or `unknown` when it could not
    be asked (no engine, no answer, or --offline, which asks no registry): never taken as current. The same for each
    wheelhouse file (its bytes now against its pin, a new file and a gone one) and each pip install the lock pins
    (resolved again as `lock` would: a newer version, a file replaced under its version). Changes nothing:
    `imagebuilder lock --update NAME` takes a move. And each release the matrix pins (torch; NCCL and cuDNN, as
    torch or an override pins them): `newer` when its index serves a later patch release of it (the matrix's to
    take, not the lock's), with what taking it would rebuild. Nothing to do: every base, wheelhouse file and install
    current."""
    from ..commands import lock as lock_cmd
    from ..input import lock as lock_mod
    from ..ports.registry import Registries

    _, plan = load_plan(ctx, matrix_file, strict=strict, wheel_files=False)
    try:
        engine = ctx.engine()
    except EngineUnavailable:
        engine = None
    registries = Registries.of_engine(engine.insecure_registries if engine else tuple, ctx.registry_trust,
                                      scope=ctx.registry_hosts) if ctx.check_index else None
    lock = lock_mod.read(lock_mod.beside(matrix_file))
    found = lock_cmd.Outdated(plan.locked or "", lock_cmd.outdated(plan, engine, registries),
                              lock_cmd.wheel_drift(plan), lock_cmd.releases(plan, ctx.index_versions if ctx.check_index
                                                                            else None),
                              lock_cmd.install_drift(plan, lock, ctx.resolver(), offline=not ctx.check_index))
    if as_json:
        click.echo(json.dumps(found.to_json(), indent=2))
    else:
        for line in found.lines():
            ctx.out.print(line, highlight=False, soft_wrap=True, markup=False)
    return NOTHING_TO_DO if found.current and nothing_to_do_code else 0
