"""The commands about evidence already in a registry or a report folder: promote, sbom, check, history, report.
Each calls one flow of `commands` and prints what it returns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..choices import POLICIES
from ..errors import InputError, RunFailed
from .context import Context, load_plan
from .options import PLAN_OPTIONS, TrustedKey, checked, matrix_option, options, writable_file
from .root import cli

if TYPE_CHECKING:
    from rich.table import Table

    from ..commands import history as history_cmd
    from ..commands import promote as promote_cmd


def _template_problem(template: str) -> str | None:
    """`promote --to`'s check (`commands.promote.template_problem`), imported when the option is given."""
    from ..commands import promote as promote_cmd

    return promote_cmd.template_problem(template)


@cli.command()
@click.option("--from", "pattern", required=True, metavar="REPO:GLOB",
              help="Source tags, e.g. 127.0.0.1:5000/ml/pytorch:nightly-* (key tags cache-* are never promoted).")
@click.option("--to", "template", required=True, metavar="TEMPLATE",
              callback=checked(_template_problem),
              help="The new tag: a template over {tag}, {match} (what the glob's * matched) and {repository}, "
                   "e.g. 'stable-{match}'; or a whole reference in the same registry, e.g. "
                   "127.0.0.1:5000/ml/pytorch-stable:{tag}.")
@matrix_option
@click.option("--dry-run", is_flag=True, help="Say what would move; change nothing.")
@click.option("--allow-untested", is_flag=True, help="Move tags whose digest has no pass record of the current "
              "suite. Loud: an `untested` record is written beside each such digest in the target.")
@click.pass_obj
def promote(ctx: Context, pattern: str, template: str, matrix_file: Path, dry_run: bool, allow_untested: bool) -> int:
    """Point tags at manifests already in the registry, by digest, without a build (e.g. nightly -> stable).
    Only digests with a trusted pass record of the spec the current matrix expects of them move, unless
    --allow-untested."""
    from rich.markup import escape

    from ..commands import promote as promote_cmd
    from ..ports.reference import parse
    from ..steps.supply import SupplyChain

    _, the_plan = load_plan(ctx, matrix_file)  # (first: its registry is where the environment's credentials go)
    registry = ctx.registry(parse(pattern).host)
    promotion = promote_cmd.prepare(registry, ctx.keys, the_plan, pattern, template, SupplyChain(), dry_run=dry_run,
                                    allow_untested=allow_untested)
    for line in _promotion_lines(promotion):
        ctx.out.print(line, highlight=False, soft_wrap=True)
    failure = promotion.failure()
    if failure is not None:
        raise RunFailed(failure)
    if not dry_run:
        for move in promote_cmd.carry_out(promotion):
            ctx.out.print(f"[yellow]  {escape(move.target)}: no SBOM that counts beside {move.digest} (published "
                          "before imagebuilder wrote SBOMs, or signed by a key not trusted here)[/]",
                          highlight=False, soft_wrap=True)
    ctx.out.print(promotion.summary(), highlight=False)
    return 0


def _promotion_lines(promotion: promote_cmd.Promotion) -> list[str]:
    """What the gate keeps back, when it keeps back anything; else each move, with its evidence."""
    from rich.markup import escape

    if promotion.blocked:
        return [f"[bold red]refused: {escape(target)}: {escape(why)}[/]" for target, why in promotion.blocked.items()]
    lines = []
    for move, proof in zip(promotion.moves, promotion.proofs, strict=True):
        mark = "" if proof.passed else ("[bold yellow]UNTESTED, moved anyway: [/]" if promotion.allow_untested
                                        else "[bold red]refused: [/]")
        lines.append(f"{'would promote' if promotion.dry_run else 'promote'} {escape(move.source)} -> "
                     f"{escape(move.target)} @{move.digest} ({move.state}) {mark}[dim]{escape(proof.why)}[/]")
    return lines


@cli.command()
@click.argument("image", metavar="IMAGE@DIGEST")
@click.option("--out", "out_file", type=click.Path(path_type=Path), callback=writable_file,
              help="Write the CycloneDX JSON here (default: print it).")
@click.pass_obj
def sbom(ctx: Context, image: str, out_file: Path | None) -> int:
    """The signed CycloneDX SBOM beside an image in its registry, verified: signed by a trusted key (this
    machine's own, or --trust-key) and about this very digest. A tag is looked up to its digest first (and
    said). Exit 1 when there is none that counts, saying why."""
    from rich.markup import escape

    from ..commands import sbom as sbom_cmd
    from ..ports.reference import parse

    ref = parse(image)
    registry = ctx.registry(ref.host)
    digest = sbom_cmd.digest_of(registry, ref)
    if not ref.reference.startswith("sha256:"):
        ctx.err.print(f"{escape(image)} is {digest}", highlight=False)
    found = sbom_cmd.find(registry, ctx.keys().trust, ref, digest)
    if found.failure is not None:
        raise RunFailed(found.failure)
    if out_file is None:
        click.echo(found.text, nl=False)
        ctx.err.print(f"SBOM of {escape(found.where)}: {escape(found.said)}", highlight=False)
    else:
        out_file.write_text(found.text, encoding="utf-8")
        ctx.err.print(f"wrote {out_file}: {escape(found.said)}", highlight=False)
    return 0


@cli.command()
@click.argument("image", metavar="IMAGE@DIGEST")
@click.option("--trust-key", "keys_named", multiple=True, required=True, type=TrustedKey(),
              metavar="[ROLE,...=]FILE", help="A PEM public key whose signed evidence counts, for the roles named "
              "before '=' (build, gpu, cpu, publish; none named: every role); repeatable; only these count.")
@click.option("--gpu", "gpu_model", metavar="MODEL", help="Require a pass on this GPU model (e.g. H100); its "
              "failed verdict refuses.")
@click.option("--policy", "policy", multiple=True, type=click.Choice(POLICIES), default=("pass",),
              show_default=True, help="What must stand beside the digest (repeatable): a pass, a pass on GPUs, a "
              "build record by a build key, a signed SBOM, a VSA that says PASSED. A deploy gate should ask "
              "--policy build --policy pass --policy gpu (a CUDA image).")
@click.option("--spec", metavar="KEY", help="Count only passes of this spec (a prefix of its key).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@click.pass_obj
def check(ctx: Context, image: str, keys_named: tuple[str, ...], gpu_model: str | None, policy: tuple[str, ...],
          spec: str | None, as_json: bool) -> int:
    """May this digest run? For a deploy pipeline, without a matrix: verifies the evidence beside IMAGE@DIGEST in
    its registry (passes by runner, failed verdicts, SBOM, VSA) with exactly the keys named, and prints a
    verdict. Exit 0 admitted, 1 refused, 2 undecided (bad input, registry unreachable)."""
    from rich.markup import escape

    from ..evidence import admission
    from ..evidence.signing import Trust
    from ..ports.reference import parse

    ref = parse(image)
    if not ref.reference.startswith("sha256:"):
        raise InputError(f"{image}: name the image by digest (IMAGE@sha256:...): a tag may move after the check")
    verdict = admission.check(ctx.registry(ref.host), ref.repository, ref.reference, Trust.of(None, keys_named),
                              policy=policy, gpu_model=gpu_model, spec=spec)
    if as_json:
        click.echo(json.dumps(verdict.to_json(), indent=1))
    else:
        for line in verdict.lines():
            ctx.out.print(escape(line), highlight=False, soft_wrap=True)
    return 0 if verdict.admitted else 1


@cli.command()
@options(*PLAN_OPTIONS)
@click.option("--json", "as_json", is_flag=True, help="Print every lineage, its points and the gate's finding "
              "for each, as JSON.")
@click.pass_obj
def history(ctx: Context, matrix_file: Path, strict: bool, only: str | None, registry: str | None,
            as_json: bool) -> int:
    """The performance history of each leaf of the matrix, read from the signed pass records in its registry:
    one lineage per leaf and runner (GPU model, count and driver; or CPU), oldest first, each image with its
    metrics, its change against the baseline the gate used (the median of the passes before it) and the pins
    that changed. Builds and runs nothing."""
    from ..commands import history as history_cmd
    from ..evidence.regression import Thresholds

    _, the_plan = load_plan(ctx, matrix_file, registry, strict, only)
    trust, thresholds = ctx.keys().trust, Thresholds.measured()
    lineages = history_cmd.lineages(the_plan, ctx.registry, trust, thresholds)
    if as_json:
        click.echo(json.dumps([lineage.to_json() for lineage in lineages], indent=2))
        return 0
    if not lineages:
        ctx.out.print("no performance history: no signed pass record with metrics beside these leaves' images",
                      highlight=False)
        return 0
    for lineage in lineages:
        ctx.out.print(_lineage_table(lineage))
        ctx.out.print("  thresholds (MDR): " + "; ".join(lineage.limits_text()), highlight=False)
    ctx.out.print(f"thresholds: {thresholds.source} (a metric's threshold is in report.json's `performance`); the "
                  "baseline is the median of the last smoke.history_window passes before each image", highlight=False)
    return 0


def _lineage_table(lineage: history_cmd.Lineage) -> Table:
    from rich.markup import escape
    from rich.table import Table

    names = sorted({name for p in lineage.points for name in p.metrics})
    table = Table(title=f"{lineage.cell} · {lineage.runner.label()} · {lineage.ref.host}/{lineage.ref.repository}",
                  box=None, pad_edge=False, title_justify="left")
    for col in ("date", "image", "gate", *names, "what changed"):
        table.add_column(col, overflow="fold")
    for point, finding in zip(lineage.points, lineage.judged, strict=True):
        rows = {r.metric: r for r in finding.rows}
        cells = []
        for name in names:
            metric, row = point.metrics.get(name), rows.get(name)
            text = f"{metric.value:.4g}" if metric else "-"
            if row is not None and row.change is not None:
                text += f" ({row.change:+.1%})"
            cells.append(f"[bold red]{text}[/]" if row is not None and row.regressed else text)
        style = {"regressed": "bold red", "accepted": "yellow", "first": "cyan"}.get(finding.verdict, "green")
        table.add_row(point.date[:16], point.manifest[7:19], f"[{style}]{finding.verdict}[/]", *cells,
                      escape(finding.summary()) or "-")
    return table


@cli.command("report")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False))
@click.pass_obj
def report_command(ctx: Context, folder: Path) -> int:
    """Remake FOLDER/report.html from FOLDER/report.json (a report folder a run wrote, e.g. one downloaded from
    a nightly's artifacts): one self-contained page, nothing fetched when it opens."""
    from ..report import document as report_document
    from ..report import html as report_html

    doc = report_document.load(folder)
    out = folder / "report.html"
    try:
        out.write_text(report_html.render(doc), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{out}: cannot be written ({exc.strerror})") from None
    ctx.out.print(f"{out}: {len(doc['nodes'])} nodes", highlight=False)
    return 0
