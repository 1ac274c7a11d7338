"""`smoke IMAGE`: the smoke suite in an image that is already on the engine, outside any run."""

from __future__ import annotations

import json

import click

from ..declarations import grammar
from ..declarations import schema as schema_mod
from ..errors import RunFailed
from ..smoke.runner import CHECK_KINDS
from .context import Context
from .options import checked, parse_expect
from .root import cli


@cli.command()
@click.argument("image")
@click.option("--expect", multiple=True, metavar="KEY=VALUE", help="Expected value, e.g. torch=2.6.0, cuda=12.4, "
              "nccl=2.21.5, python=3.11, accelerator=cpu.")
@click.option("--timeout", default=schema_mod.value("smoke.timeout"), show_default=True,
              help="Seconds before the container is killed.")
@click.option("--shm-size", default=schema_mod.value("smoke.shm_size"), show_default=True,
              help="The size of the container's /dev/shm.",
              callback=checked(lambda size: None if grammar.matches("size", size) else
                               f"not a size: {grammar.hint('size')}"))
@click.option("--gpus", type=click.Choice(grammar.PATTERNS["gpus"].split("|")), default=schema_mod.value("smoke.gpus"),
              show_default=True, help="auto: the NVIDIA toolkit if present, else raw /dev/nvidia* devices, else none.")
@click.option("--driver-dir", default=schema_mod.value("smoke.driver_dir"), show_default=True,
              help="With raw devices: the host's driver folder, mounted read-only and put on the library path.")
@click.option("--only", "only", metavar="KINDS", default="",
              help=f"Run only these kinds of checks, comma-separated ({', '.join(CHECK_KINDS)}): a diagnostic run; "
              "its report says `only` and it is never a pass of the whole suite.")
@click.option("--allow-skip", "allow_skip", metavar="CHECKS", default="",
              help="Comma-separated checks (names, prefixes or globs) whose skip on a GPU run is accepted; any "
              "other skip on a GPU run fails the run (a skip is not a pass), as in `build`.")
@click.pass_obj
def smoke(ctx: Context, image: str, expect: tuple[str, ...], timeout: int, shm_size: str, gpus: str,
          driver_dir: str, only: str, allow_skip: str) -> int:
    """Run the smoke suite in an existing IMAGE and print its JSON report. What it checks comes from the
    image's own labels (an image imagebuilder built carries its versions, user and layer checks); --expect
    adds to them or overrides them, and may raise a floor, never lower it."""
    from ..commands import smoke_image as smoke_cmd

    kinds = smoke_cmd.kinds_of(only)
    given = parse_expect(expect)
    smoked = smoke_cmd.smoke_image(ctx.engine(), ctx.table, image, given, kinds,
                                   smoke_cmd.Settings(timeout, shm_size, gpus, driver_dir, allow_skip))
    click.echo(json.dumps(smoked.document, indent=2))
    if smoked.failure is not None:
        raise RunFailed(smoked.failure)
    return 0
