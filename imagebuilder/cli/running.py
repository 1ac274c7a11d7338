"""The commands that run steps over the matrix (`steps.run`, which only the command line imports): build, stage,
verify, publish. Each composes its steps and hands them to `run_steps`."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..choices import LOG_MODES
from ..errors import NOTHING_TO_DO, RunFailed
from .context import Context, decide, load_plan
from .options import (
    RUN_OPTIONS,
    accept_regression_option,
    expect_option,
    no_cache_option,
    nothing_to_do_option,
    options,
    parse_expect,
    resmoke_option,
    untested_gpu_option,
)
from .root import cli

if TYPE_CHECKING:  # the steps and the run are imported by the commands that run them, when they run
    from ..ledger import NodeRecord
    from ..plan.plan import Plan
    from ..ports import Engine
    from ..ports.registry import Registries
    from ..run.context import Step
    from ..steps.stage import Staged


@dataclass(frozen=True)
class Common:
    """The options every command that runs steps takes (`RUN_OPTIONS`)."""

    matrix_file: Path
    strict: bool
    only: str | None
    registry: str | None
    report_dir: Path
    quiet: bool
    jobs: int
    attestations: str | None = None  # --attestations (else the matrix's)


def run_steps(ctx: Context, common: Common, steps: Sequence[Step], *, expect: tuple[tuple[str, str], ...] = (),
              no_cache: bool = False, fail_fast: bool = False, logs: str = "stream",
              meta: dict[str, Any] | None = None, require: Staged | None = None,
              before: Callable[[Plan, Registries], str | None] | None = None,
              engine: Engine | None = None) -> list[NodeRecord]:
    """Load the plan (every input error before anything builds), then, holding the build lock of every
    repository it pushes to, decide it (what a run before this one left is cached) and run the steps.
    `before`: a node command's check of the decided plan; what it returns is said ("nothing to do: ...") and
    nothing runs (no records). `engine`: instead of the invocation's (a pod's judge: `NoEngine`)."""
    from rich.markup import escape

    from .. import __version__
    from ..evidence import spec as spec_mod
    from ..evidence.sigstore import Layouts
    from ..plan import bases
    from ..plan.plan import State
    from ..run import lock
    from ..steps.run import RunOptions, execute

    matrix, the_plan = load_plan(ctx, common.matrix_file, common.registry, common.strict, common.only)
    specs = spec_mod.Specs(the_plan, expect)  # --expect may only raise floors
    keys = ctx.keys()
    engine = engine or ctx.engine()
    targets = [e.target.name for e in the_plan.entries()]
    with lock.hold(ctx.cache_dir / "locks", targets, lambda line: ctx.err.print(escape(line), highlight=False)):
        the_plan = bases.resolve(the_plan, engine, pull=True, known=ctx.known_bases(engine),
                                 say=lambda line: None if common.quiet else ctx.out.print(line, highlight=False))
        the_plan, registries = decide(ctx, the_plan, rebuild=no_cache, builds=require is None, engine=engine)
        if require is not None:
            require.require(the_plan, registries)
        said = before(the_plan, registries) if before is not None else None
        if said is not None:
            ctx.out.print(escape(said), highlight=False, soft_wrap=True)
            return []
        if not common.quiet:
            counts = {s.value: sum(n.status == s for n in the_plan.nodes) for s in State}
            ctx.out.print(f"[bold]{len(the_plan.nodes)} nodes[/]: {counts['build']} to build, {counts['cached']} "
                          "cached", highlight=False)
        options = RunOptions(report_dir=common.report_dir, cache_dir=ctx.cache_dir, jobs=common.jobs,
                             fail_fast=fail_fast, logs="none" if common.quiet else logs,
                             layouts=Layouts(common.attestations or matrix.attestations),
                             meta={"tool": "imagebuilder", "version": __version__,
                                   "command": click.get_current_context().info_name, "matrix": str(common.matrix_file),
                                   "registry": common.registry, "only": common.only, "allow_untested": False,
                                   "smoke": True, **(meta or {})})
        return execute(engine, the_plan, registries, specs, keys, steps, ctx.out, options)


def failed(records: list[NodeRecord]) -> None:
    if not all(r.ok for r in records):
        raise RunFailed(f"{sum(not r.ok for r in records)} of {len(records)} nodes did not pass")


@cli.command()
@options(*RUN_OPTIONS)
@click.option("--push/--no-push", default=True, help="Push what passed (default) or only tag it locally.")
@click.option("--smoke/--no-smoke", default=True, help="Run the smoke suite in each entry's leaf images.")
@expect_option
@no_cache_option
@untested_gpu_option
@click.option("--allow-untested", is_flag=True, help="Publish tags for images without a pass record (e.g. with "
              "--no-smoke). Loud: each such node says `untested` in report.json and an `untested` record is "
              "written beside its digest.")
@click.option("--fail-fast", is_flag=True, help="Start nothing new after the first failure (default: keep going; "
              "a failure blocks only what builds on it).")
@resmoke_option
@accept_regression_option
@click.option("--logs", type=click.Choice(LOG_MODES), default="stream", show_default=True,
              help="stream: every build line, prefixed by node id; tail: only a progress row per running step "
              "with its latest line (full logs under the report folder, and on the terminal when a step fails).")
@click.pass_obj
def build(ctx: Context, /, push: bool, smoke: bool, expect: tuple[str, ...], no_cache: bool,
          allow_untested_gpu: bool, allow_untested: bool, fail_fast: bool, resmoke: bool, accept_regression: bool,
          logs: str, **common: Any) -> int:
    """Render, build what is not cached, smoke-test, tag and push the matrix: stage + verify + publish."""
    from ..run.cosign import Cosign
    from ..smoke.runner import GpuHost
    from ..steps.publish import Publish
    from ..steps.stage import Stage
    from ..steps.supply import SupplyChain
    from ..steps.verify import Verify

    signing = Cosign.from_env(push, os.environ)
    steps = (Stage(no_cache=no_cache), Verify(run_suite=smoke, resmoke=resmoke, host=GpuHost.probe(),
                                              accept_regression=accept_regression),
             Publish(push=push, allow_untested=allow_untested, allow_untested_gpu=allow_untested_gpu, signing=signing,
                     supply=SupplyChain()))
    failed(run_steps(ctx, Common(**common), steps, expect=parse_expect(expect), no_cache=no_cache,
                     fail_fast=fail_fast, logs=logs, meta={"allow_untested": allow_untested, "smoke": smoke,
                                                          "signing": signing.meta()}))
    return 0


@cli.command()
@options(*RUN_OPTIONS)
@no_cache_option
@click.pass_obj
def stage(ctx: Context, /, no_cache: bool, **common: Any) -> int:
    """Build every node that is not cached and push it under its key tag only (content-addressed, never a
    public tag); no suite runs, no GPU is needed. Children build on their parents' staged images."""
    from ..run.cosign import Cosign
    from ..steps.stage import KeyTags, Stage

    failed(run_steps(ctx, Common(**common), (Stage(no_cache=no_cache), KeyTags()), no_cache=no_cache,
                     meta={"smoke": False, "signing": Cosign.from_env(True, os.environ).meta()}))
    return 0


@cli.command()
@options(*RUN_OPTIONS)
@expect_option
@resmoke_option
@accept_regression_option
@click.pass_obj
def verify(ctx: Context, /, expect: tuple[str, ...], resmoke: bool, accept_regression: bool, **common: Any) -> int:
    """On a GPU host: pull each staged leaf by digest, run the smoke suite, and write its pass record beside the
    digest. Builds nothing. A leaf whose digest has a pass of this suite on this host's GPU model is skipped
    (and said); an unstaged node is an input error naming its key tag."""
    from ..run.cosign import Cosign
    from ..smoke.runner import GpuHost
    from ..steps.stage import Staged
    from ..steps.verify import Verify

    staged = Staged("verify")
    steps = (staged, Verify(resmoke=resmoke, same_gpu_model=True, record=True, host=GpuHost.probe(),
                            accept_regression=accept_regression))
    failed(run_steps(ctx, Common(**common), steps, expect=parse_expect(expect), require=staged,
                     meta={"signing": Cosign.from_env(True, os.environ).meta()}))
    return 0


@cli.command()
@options(*RUN_OPTIONS)
@click.option("--dry-run", is_flag=True, help="Say what would be written and moved; change nothing.")
@untested_gpu_option
@nothing_to_do_option
@click.pass_obj
def publish(ctx: Context, /, dry_run: bool, allow_untested_gpu: bool, nothing_to_do_code: bool,
            **common: Any) -> int:
    """Over the whole matrix, all or nothing per entry: point immutable tags and aliases at the staged digests
    that have pass records (ancestors' records are written `via` their leaf). Builds and tests nothing;
    idempotent: a second run changes nothing and says so."""
    from ..ledger import PublishStatus, VerifyStatus
    from ..run.cosign import Cosign
    from ..smoke.runner import GpuHost
    from ..steps.publish import Publish
    from ..steps.stage import Staged
    from ..steps.supply import SupplyChain
    from ..steps.verify import Verify

    staged, signing = Staged("publish"), Cosign.from_env(True, os.environ)
    steps = (staged, Verify(run_suite=False, host=GpuHost.probe()),
             Publish(allow_untested_gpu=allow_untested_gpu, dry_run=dry_run, stage_untested=False, signing=signing,
                     supply=SupplyChain()))
    records = run_steps(ctx, Common(**common), steps, require=staged, meta={"signing": signing.meta()})
    lacking = sorted({r.entry for r in records if r.leaf and r.verify == VerifyStatus.SKIPPED})
    if lacking:
        raise RunFailed(f"{len(lacking)} entries have no pass record, nothing of them moved: {', '.join(lacking)}")
    nothing = all(r.publish == PublishStatus.CURRENT for r in records) and not dry_run
    if nothing:
        ctx.out.print("nothing to do: publish: every tag already named its digest; nothing changed", highlight=False,
                      soft_wrap=True)
    failed(records)
    return NOTHING_TO_DO if nothing and nothing_to_do_code else 0
