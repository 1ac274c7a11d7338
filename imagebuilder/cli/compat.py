"""`compat show` and `compat refresh`: the compatibility table, printed or read again from the indexes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .context import Context
from .options import writable_file
from .root import cli

if TYPE_CHECKING:
    from rich.table import Table

    from ..input.compat import CompatTable, Release


@cli.group()
def compat() -> None:
    """The torch / CUDA / cuDNN / NCCL / Python / driver compatibility table."""


@compat.command("show")
@click.option("--torch", "torch_version", help="Only this torch release.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def compat_show(ctx: Context, torch_version: str | None, as_json: bool) -> int:
    """Print the table: per release and accelerator, CUDA, cuDNN, NCCL, triton, Python and glibc."""
    from ..commands import compat as compat_cmd

    table = ctx.table()
    releases = compat_cmd.releases(table, torch_version)
    if as_json:
        click.echo(json.dumps(compat_cmd.document(table, releases), indent=2))
        return 0
    ctx.out.print(_grid(table, releases))
    ctx.out.print("* not verified against its index", highlight=False)
    return 0


def _grid(table: CompatTable, releases: list[Release]) -> Table:
    from rich.table import Table

    grid = Table(title=f"compatibility table ({table.source}, {table.generated})")
    for col in ("torch", "variant", "cuda", "cudnn", "nccl", "triton", "driver ≥", "python", "glibc",
                "vision", "audio", "index"):
        grid.add_column(col)
    for r in releases:
        for v in r.variants:
            grid.add_row(r.torch, v.accelerator, v.cuda or "-", v.cudnn or "-", v.nccl or "-", v.triton or "-",
                         (table.min_driver(v.cuda) or "?") if v.cuda else "-",
                         f"{r.python[0]}–{r.python[-1]}" if r.python else (r.requires_python or "?"),
                         r.glibc or "?", r.torchvision or "-", r.torchaudio or "-",
                         v.index + ("" if v.verified else "*"))
    return grid


@compat.command("refresh")
@click.option("--index", "index_urls", multiple=True, metavar="URL",
              help="A PEP 691/503 simple index serving torch's wheels (and their PEP 658 metadata). Repeat it to "
                   "merge PyPI with PyTorch's per-accelerator indexes, e.g. --index https://pypi.org/simple "
                   "--index https://download.pytorch.org/whl/cu126 (PyPI first: it wins conflicts). "
                   "Default: PyPI.")
@click.option("--min-torch", default="2.4", show_default=True)
@click.option("--out", "out_file", type=click.Path(path_type=Path), callback=writable_file,
              help="Where to write the table (default: the --compat file, else the packaged data/compat.json).")
@click.option("--dry-run", is_flag=True, help="Print what would change; write nothing.")
@click.pass_obj
def compat_refresh_cmd(ctx: Context, index_urls: tuple[str, ...], min_torch: str, out_file: Path | None,
                       dry_run: bool) -> int:
    """Regenerate the table from the wheels' METADATA on one or more indexes and print what changed."""
    from rich.markup import escape

    from ..commands import compat as compat_cmd
    from ..input import compat as compat_mod
    from ..input import compat_refresh

    out = out_file or ctx.compat_file or Path(compat_mod.__file__).resolve().parents[1] / "data" / "compat.json"
    urls = index_urls or (compat_mod.PYPI_SIMPLE,)
    refreshed = compat_cmd.refresh(urls, out, min_torch)
    for conflict in refreshed.conflicts:
        ctx.err.print(f"[yellow]conflict:[/] {escape(json.dumps(conflict))}", highlight=False)
    for line in refreshed.changes:
        ctx.out.print(escape(line), highlight=False)
    if not refreshed.changes:
        ctx.out.print(f"no changes ({refreshed.releases} releases)", highlight=False)
    if dry_run:
        ctx.out.print(f"dry run: {out} not written", highlight=False)
        return 0
    compat_refresh.write_table(refreshed.table, out)
    ctx.out.print(f"wrote {out} ({refreshed.releases} releases from {', '.join(urls)})", highlight=False)
    return 0
