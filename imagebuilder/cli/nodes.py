"""One job of an engine's graph at a time (`node stage`, `node verify`), and `execute`, which runs a whole graph's
jobs on this machine."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import NOTHING_TO_DO, InputError, RunFailed
from .context import Context
from .options import (
    NODE_OPTIONS,
    accept_regression_option,
    checked,
    expect_option,
    matrix_option,
    nothing_to_do_option,
    options,
    parse_expect,
    registry_option,
    strict_option,
    writable_file,
)
from .root import cli
from .running import Common, failed, run_steps


@cli.group("node")
def node_group() -> None:
    """One job of an engine's graph (`plan --format graph|github-actions|buildkite|argo|k8s-jobs`): stage one node
    or one entry, verify one leaf on this runner (`publish` publishes the matrix). Each is idempotent by key tag
    and trusted pass: with nothing to do it says so and exits 0 (3 with --exit-code-nothing-to-do)."""


@node_group.command("stage")
@options(*NODE_OPTIONS, nothing_to_do_option)
@click.option("--digest-file", type=click.Path(path_type=Path), callback=writable_file,
              help="Write the staged digest of NODE (an entry: its last leaf) here: the job's output for the next.")
@click.argument("name", metavar="NODE|ENTRY")
@click.pass_obj
def node_stage(ctx: Context, /, name: str, digest_file: Path | None, nothing_to_do_code: bool,
               **common: Any) -> int:
    """Stage NODE (ENTRY/LAYER, its parents staged before) or every node of ENTRY that is not staged: build and
    push under key tags only. Nothing to do when every key tag is in the registry."""
    from ..run.cosign import Cosign
    from ..run.handoff import Handoff, selector
    from ..steps.stage import KeyTags, Stage

    handoff = Handoff(name)
    records = run_steps(ctx, Common(only=selector(name), jobs=1, **common), (Stage(), KeyTags()),
                        meta={"smoke": False, "signing": Cosign.from_env(True, os.environ).meta()},
                        before=handoff.staged)
    failed(records)
    digest = handoff.digest({r.node: r.digest for r in records if r.digest})
    if digest_file is not None and digest is not None:
        digest_file.parent.mkdir(parents=True, exist_ok=True)
        digest_file.write_text(digest + "\n", encoding="utf-8")
    return NOTHING_TO_DO if handoff.done and nothing_to_do_code else 0


@node_group.command("verify")
@options(*NODE_OPTIONS, nothing_to_do_option)
@expect_option
@accept_regression_option
@click.option("--digest", callback=checked(lambda d: None if re.fullmatch(r"sha256:[0-9a-f]{64}", d) else
                                           "not a sha256:<64 hex> digest"),
              help="The digest the stage job handed over: the leaf's key tag must still name it.")
@click.option("--suite-ran-in", "folder", type=click.Path(file_okay=False, path_type=Path),
              help="A verify pod's judge: the suite ran in the pod's leaf container, which left its report in this "
                   "folder (`node prepare-suite` wrote what it ran); judge, sign and record it here, with no "
                   "container engine.")
@click.option("--requested-gpus", type=click.IntRange(0), default=0, show_default=True,
              help="With --suite-ran-in: the GPUs the pod requested for the suite (this container requests the "
                   "same; what it sees must be that many).")
@click.option("--requested-model", metavar="PRODUCT",
              help="With --suite-ran-in: the GPU model the pod's node selector names (nvidia.com/gpu.product).")
@click.argument("leaf", metavar="LEAF")
@click.pass_obj
def node_verify(ctx: Context, /, leaf: str, digest: str | None, expect: tuple[str, ...], accept_regression: bool,
                folder: Path | None, requested_gpus: int, requested_model: str | None, nothing_to_do_code: bool,
                **common: Any) -> int:
    """Verify LEAF (ENTRY/LAYER) on this runner: its staged digest's suite, unless a trusted pass of this suite on
    this runner's GPU model is beside it already (nothing to do). In a verify pod (--suite-ran-in), the suite ran
    in the pod's own container of the leaf image, and this command judges what it left."""
    from ..ledger import VerifyStatus
    from ..ports.engine import NoEngine
    from ..run.cosign import Cosign
    from ..run.handoff import Handoff, selector
    from ..smoke.pod import Requested
    from ..smoke.runner import GpuHost
    from ..steps.stage import Staged
    from ..steps.verify import Verify

    if "/" not in leaf:
        raise InputError(f"{leaf!r} is not a node id", hint="node verify takes one leaf, ENTRY/LAYER")
    if folder is None and (requested_gpus or requested_model):
        raise InputError("--requested-gpus and --requested-model describe a verify pod: they need --suite-ran-in")
    if folder is not None and digest is None:
        raise InputError("--suite-ran-in needs --digest: the digest the pod's leaf container was pinned to")
    pod = Requested(str(folder), requested_gpus, requested_model) if folder is not None else None
    handoff, staged = Handoff(leaf), Staged("node verify")
    steps = (staged, Verify(same_gpu_model=True, record=True, host=GpuHost.probe(),
                            accept_regression=accept_regression, pod=pod, resmoke=pod is not None))
    records = run_steps(ctx, Common(only=selector(leaf), jobs=1, **common), steps, expect=parse_expect(expect),
                        require=staged, meta={"signing": Cosign.from_env(True, os.environ).meta()},
                        before=lambda plan, registries: handoff.handed(plan, registries, digest),
                        engine=NoEngine("this is a verify pod's judge (--suite-ran-in)") if pod else None)
    failed(records)
    if all(r.verify == VerifyStatus.FOUND for r in records if r.node == leaf):
        return nothing_to_do(ctx, f"nothing to do: {leaf} ({handoff.digests.get(leaf)}) has a trusted pass of this "
                             "suite on this runner; no suite ran", nothing_to_do_code)
    return 0


def nothing_to_do(ctx: Context, said: str, asked: bool) -> int:
    """Say that a node command's work was done already; its exit code: NOTHING_TO_DO when the caller asked
    (--exit-code-nothing-to-do), else 0."""
    from rich.markup import escape

    ctx.out.print(escape(said), highlight=False, soft_wrap=True)
    return NOTHING_TO_DO if asked else 0


@node_group.command("prepare-suite")
@options(matrix_option, strict_option, registry_option)
@click.option("--into", "folder", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The folder the pod's containers share: the suite, what it is told and its environment go here.")
@click.argument("leaf", metavar="LEAF")
@click.pass_obj
def node_prepare_suite(ctx: Context, /, leaf: str, folder: Path, matrix_file: Path, strict: bool,
                       registry: str | None) -> int:
    """A verify pod's first step, from the tool image: write LEAF's suite, what it is told (its expectations and
    layer checks) and its environment into FOLDER, for the pod's container of the leaf image to run
    (`plan --format argo|k8s-jobs`). Needs no engine and no registry."""
    from rich.markup import escape

    from ..commands.pod_suite import prepare
    from ..run.handoff import selector
    from .context import load_plan

    _, plan = load_plan(ctx, matrix_file, registry, strict, selector(leaf))
    written = prepare(plan, leaf, folder, os.environ)
    ctx.out.print(f"{escape(leaf)}: {len(written)} file(s) in {escape(str(folder))} ({', '.join(written)})",
                  highlight=False, soft_wrap=True)
    return 0


@cli.command("execute")
@click.argument("graph_file", metavar="GRAPH", type=click.File("r", encoding="utf-8"))
@click.option("--events", "events_file", type=click.Path(path_type=Path), callback=writable_file,
              help="Append each job's start and outcome here, as JSON lines.")
@click.pass_obj
def execute_command(ctx: Context, graph_file: Any, events_file: Path | None) -> int:
    """Run GRAPH (`plan --format graph`, a file or -) on this machine: each job's node command in dependency
    order, each verify given its stage job's digest. Run it again after a crash: what finished says "nothing to
    do". Exit 1 when a job failed or was blocked."""
    from rich.markup import escape

    from ..emit import local
    from ..emit.graph import Graph

    try:
        graph = Graph.of_json(json.load(graph_file))
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{graph_file.name}: not a graph of `plan --format graph` ({exc})") from None
    graph.check_options(ctx.global_args(), graph_file.name)
    env = {**os.environ, "IMAGEBUILDER_CACHE_DIR": str(ctx.cache_dir),
           **({"DOCKER_HOST": ctx.engine_url} if ctx.engine_url else {}),
           **({"IMAGEBUILDER_TRUST_KEYS": " ".join(map(str, ctx.trust_keys))} if ctx.trust_keys else {}),
           **({"IMAGEBUILDER_TRUST_BUILD_KEYS": " ".join(map(str, ctx.trust_build_keys))}
              if ctx.trust_build_keys else {}),
           **({"IMAGEBUILDER_COMPAT": str(ctx.compat_file)} if ctx.compat_file else {}),
           **({} if ctx.check_index else {"IMAGEBUILDER_OFFLINE": "1"})}
    with contextlib.ExitStack() as stack:
        events = stack.enter_context(events_file.open("a", encoding="utf-8")) if events_file else None
        executor = local.Executor(graph, (sys.executable, "-m", "imagebuilder"), env,
                                  lambda line: ctx.out.print(escape(line), highlight=False, soft_wrap=True), events,
                                  state=ctx.cache_dir / "executor")
        outcome = executor.run()
    ctx.out.print(local.summary(outcome, graph), highlight=False)
    if any(v in (local.FAILED, local.BLOCKED) for v in outcome.values()):
        raise RunFailed(local.summary(outcome, graph))
    return 0
