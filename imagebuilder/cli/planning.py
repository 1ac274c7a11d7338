"""The commands that read the matrix and build nothing: plan, schema, render, export bake."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..choices import CPU_RUNNER, EMIT_FORMATS, GPU_RUNNER, MAX_JOBS
from ..errors import EngineUnavailable
from .context import Context, decide, load_plan
from .options import (
    PLAN_OPTIONS,
    checked,
    matrix_option,
    only_option,
    options,
    strict_option,
    writable_file,
    writable_folder,
)
from .root import cli

if TYPE_CHECKING:
    from rich.console import Console

    from ..input.compat import CompatTable
    from ..input.matrix import Matrix
    from ..plan.plan import Plan


@cli.command()
@options(*PLAN_OPTIONS)
@click.option("--json", "as_json", is_flag=True, help="Print the nodes as JSON (same as --format json).")
@click.option("--format", "fmt", type=click.Choice(["tree", "table", "json", "github-matrix", *EMIT_FORMATS]),
              default="tree", show_default=True, help="tree: each image once, as the layers stack (fits the "
              "terminal's width); table: a row per node; github-matrix: a GitHub Actions strategy matrix, one job "
              "per entry (JSON); graph: the node jobs every engine runs (JSON); github-actions, buildkite, argo, "
              "k8s-jobs: that engine's documents (YAML; docs/guide/engines/).")
@click.option("--part", type=click.IntRange(1), default=None, help="With an engine's format: only its Nth document "
              "(Buildkite: the Nth upload).")
@click.option("--tool-image", metavar="IMAGE@DIGEST", help="With argo and k8s-jobs: the image with imagebuilder, "
              "this matrix and its layers that pods run, pinned by digest.")
@click.option("--kueue-queue", metavar="NAME", help="With k8s-jobs: the Kueue LocalQueue the Jobs are queued in.")
@click.option("--gpu-runner", default=",".join(GPU_RUNNER), show_default=True, metavar="LABELS",
              help="With github-matrix: runs-on labels (comma-separated) for CUDA entries.")
@click.option("--cpu-runner", default=",".join(CPU_RUNNER), show_default=True, metavar="LABELS",
              help="With github-matrix: runs-on labels (comma-separated) for CPU entries.")
@click.option("--wave", type=int, default=None,
              callback=checked(lambda wave: "a wave is 0 or more" if wave < 0 else None),
              help="With github-matrix: only the entries of this stage wave (entries that share a node with an "
                   "earlier one wait for its wave; past the last wave: none).")
@click.option("--max-jobs", type=click.IntRange(2, MAX_JOBS), default=MAX_JOBS, show_default=True,
              help="With github-matrix: jobs per strategy matrix (entries past it share jobs); with github-actions: "
                   "jobs per workflow run (a longer graph is chained over several runs).")
@click.option("--verify-on", type=click.Choice(["gpu", "cpu"]), default=None,
              help="With github-matrix: only the entries verified on GPU runners (CUDA entries) or on CPU runners.")
@click.option("--explain", is_flag=True, help="Also say how each entry was resolved and what `exclude:` removed.")
@click.option("--no-cache", is_flag=True, help="Plan as `build --no-cache` would: every node builds.")
@click.pass_obj
def plan(ctx: Context, matrix_file: Path, strict: bool, only: str | None, registry: str | None,
         as_json: bool, fmt: str, gpu_runner: str, cpu_runner: str, wave: int | None, explain: bool,
         no_cache: bool, part: int | None, tool_image: str | None, kueue_queue: str | None,
         verify_on: str | None, max_jobs: int) -> int:
    """Print the build nodes (entry x layer) in build order: key, and whether each is cached or must build
    (and why). Without a reachable engine, keys and statuses are unknown."""
    from rich.markup import escape

    from ..commands import plan as plan_cmd

    matrix, the_plan = load_plan(ctx, matrix_file, registry, strict, only)
    registries = None
    try:
        the_plan, registries = decide(ctx, the_plan, rebuild=no_cache)
    except EngineUnavailable as exc:
        unknown = "cache statuses are unknown (keys from the lock)" if the_plan.locked else \
            "keys and cache statuses are unknown"
        ctx.err.print(f"[yellow]warning:[/] {escape(exc.message)}: {unknown}", highlight=False)
        the_plan = plan_cmd.undecided(the_plan)
    fmt = "json" if as_json else fmt
    if explain:
        explain_plan(ctx.err if fmt in ("json", "github-matrix") else ctx.out, matrix, ctx.table())
    how = plan_cmd.Formatting(matrix_file, registry, only, gpu_runner, cpu_runner, wave=wave, part=part,
                              verify_on=verify_on, max_jobs=max_jobs, tool_image=tool_image, kueue_queue=kueue_queue,
                              global_args=ctx.global_args(), base_ids=ctx.base_ids)
    text = plan_cmd.document(the_plan, fmt, how, registries)
    if text is not None:
        click.echo(text, nl=False)
        return 0
    _show(ctx.out, the_plan, fmt)
    return 0


def _show(console: Console, the_plan: Plan, fmt: str) -> None:
    """The formats a person reads: a row per node (table), or each image once, as the layers stack (tree)."""
    from ..plan import view as plan_view

    if fmt == "table":
        console.print(plan_view.table(the_plan))
    else:
        width = shutil.get_terminal_size((console.width, 24)).columns  # COLUMNS, else the terminal's, else 160
        for line in plan_view.tree(the_plan, width):
            console.print(line.rich(), soft_wrap=True, highlight=False)
    console.print(plan_view.summary(the_plan), highlight=False)


def explain_plan(console: Console, matrix: Matrix, table: CompatTable) -> None:
    from rich.markup import escape

    console.print("[bold]entries[/]", highlight=False)
    for e in matrix.entries:
        release = table.release(e.torch)
        variant = release.variant(e.accelerator) if release else None
        source = "PyPI's default variant" if variant and variant.index == "pypi" else "PyTorch's per-accelerator index"
        verified = "" if variant is None or variant.verified else " (variant not verified against its index)"
        console.print(f"  {escape(e.id)}: torch {e.torch} {e.accelerator} from {source}{verified} "
                      f"({escape(e.build.torch_index_url)}); Python {e.python} in "
                      f"{', '.join(release.python) if release else '?'}", highlight=False)
        if e.cuda:
            floor = table.min_driver(e.cuda) or "unknown"
            console.print(f"    cuda {e.cuda} (driver >= {floor}), cudnn {e.cudnn}, nccl {e.nccl}, triton {e.triton}",
                          highlight=False)
        for package, version in e.overrides:
            pin = dict(e.pins).get(package)
            console.print(f"    override: {package}=={version} instead of torch's pin {pin}", highlight=False)
        written = [f"{key} {where}" for key, where in e.origins if where != "default"]
        defaults = [key for key, where in e.origins if where == "default"]
        console.print(f"    from: {escape(', '.join(written))}", highlight=False)
        console.print(f"    defaults: {escape(', '.join(defaults))}", highlight=False)
    console.print("[bold]excluded[/]" + ("" if matrix.excluded else ": none"), highlight=False)
    for combo, why in matrix.excluded:
        console.print(f"  {escape(combo)}  <- {escape(why)}", highlight=False)


@cli.command("schema")
@click.option("--format", "fmt", type=click.Choice(["json", "markdown"]), default="json", show_default=True,
              help="A JSON Schema of matrix.yaml (for editors), or the docs' table of keys "
                   "(docs/reference/matrix-keys.md).")
@click.pass_obj
def schema_command(ctx: Context, fmt: str) -> None:
    """The matrix file's keys: their kinds, defaults and where they may appear (declarations/schema.py)."""
    from ..declarations import schema as schema_mod

    if fmt == "json":
        print(json.dumps(schema_mod.json_schema(), indent=2))
    else:
        print(schema_mod.markdown(), end="")


@cli.command()
@matrix_option
@strict_option
@only_option
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, callback=writable_folder,
              help="Folder to write into.")
@click.pass_obj
def render(ctx: Context, matrix_file: Path, strict: bool, only: str | None, out_dir: Path) -> int:
    """Write each node's Dockerfile and build context under OUT/<node id>/; build nothing."""
    _, the_plan = load_plan(ctx, matrix_file, None, strict, only)
    for n in the_plan.nodes:
        folder = out_dir / n.id
        if folder.exists():
            shutil.rmtree(folder)
        n.rendered.write(folder)
        ctx.out.print(f"rendered {folder}", highlight=False)
    return 0


@cli.group()
def export() -> None:
    """The plan in other tools' formats."""


@export.command("bake")
@options(*PLAN_OPTIONS)
@click.option("-o", "--output", "out_file", type=click.Path(path_type=Path), callback=writable_file,
              help="Write docker-bake.json here (default: print it).")
@click.option("--contexts", "contexts_dir", type=click.Path(path_type=Path), callback=writable_folder,
              help="Where the rendered build contexts go (default: bake-contexts/ next to the output, or in the "
                   "working folder).")
@click.option("--public-tags", is_flag=True, help="Also give targets their public tags and aliases (bake tests "
              "nothing: by default a target carries only its key tag, and `imagebuilder verify` and `publish` "
              "name what passed).")
@click.pass_obj
def export_bake(ctx: Context, matrix_file: Path, strict: bool, only: str | None, registry: str | None,
                out_file: Path | None, contexts_dir: Path | None, public_tags: bool) -> int:
    """A docker-bake.json for `docker buildx bake`: one target per node, chained through named contexts."""
    from rich.markup import escape

    from ..plan import bake, bases

    _, the_plan = load_plan(ctx, matrix_file, registry, strict, only)
    try:
        the_plan = bases.keyed(the_plan if the_plan.locked else bases.resolve(the_plan, ctx.engine()))
    except EngineUnavailable as exc:
        ctx.err.print(f"[yellow]warning:[/] {escape(exc.message)}: keys are unknown, so targets carry no key tag",
                      highlight=False)
    base = out_file.parent if out_file else Path(".")
    contexts = contexts_dir or base / "bake-contexts"
    for node in the_plan.nodes:
        folder = contexts / node.id
        if folder.exists():
            shutil.rmtree(folder)
        node.rendered.write(folder)
    text = json.dumps(bake.bake_file(the_plan, contexts, base, public=public_tags), indent=2) + "\n"
    if out_file:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(text, encoding="utf-8")
        ctx.err.print(f"wrote {out_file} ({len(the_plan.nodes)} targets; contexts in {contexts})", highlight=False)
    else:
        click.echo(text, nl=False)
    return 0
