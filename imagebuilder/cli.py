"""The command line. Parses flags into one options object per command; maps errors to exit codes in
one place (`main`)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__
from .commands import promote as promote_mod
from .emit.formats import FORMATS as EMIT_FORMATS
from .errors import (
    EngineUnavailable,
    ImageBuilderError,
    IndexUnavailable,
    InputError,
    RunFailed,
    did_you_mean,
)
from .evidence import admission
from .evidence import spec as spec_mod
from .evidence.history import cell_of, point_of, series
from .evidence.provenance import BuildTrust
from .evidence.signing import Keys, Signer, Trust
from .evidence.sigstore import KINDS as LAYOUT_KINDS
from .evidence.sigstore import Layouts
from .input import certs, compat_refresh, grammar, lookups
from .input import compat as compat_mod
from .input import matrix as matrix_mod
from .input import schema as schema_mod
from .interrupts import Interrupts
from .ledger import NodeRecord, PublishStatus, VerifyStatus
from .plan import cache as cache_mod
from .plan import keys
from .plan import plan as plan_mod
from .plan import tags as tagging
from .plan import view as plan_view
from .plan import waves as waves_mod
from .plan.render import Renderer
from .ports.engine import DockerEngine
from .ports.registry import Registries, Registry
from .ports.tls import RegistryTrust
from .report import document as report_document
from .report import html as report_html
from .run import lock
from .run.context import Step
from .run.cosign import Cosign
from .run.display import LOG_MODES
from .smoke.judge import judge
from .smoke.runner import CHECK_KINDS, GpuHost, run_smoke
from .steps.publish import Publish
from .steps.run import RunOptions, execute
from .steps.stage import KeyTags, Stage, Staged, check_bases
from .steps.supply import SupplyChain
from .steps.verify import Verify


def default_cache_dir() -> Path:
    """Where pass records are mirrored and build locks are kept, unless --cache-dir says otherwise."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imagebuilder"


@dataclass
class Context:
    """Shared state of one invocation: consoles and a lazily connected engine."""

    out: Console
    err: Console
    engine_url: str | None = None
    compat_file: Path | None = None
    check_index: bool = True
    cache_dir: Path = dataclasses.field(default_factory=default_cache_dir)
    container_labels: tuple[tuple[str, str], ...] = ()  # put on every container a command starts
    trust_keys: tuple[Path, ...] = ()  # public keys whose signed passes count (then this machine's own does not)
    trust_build_keys: tuple[Path, ...] = ()  # public keys whose signed build provenance counts
    max_entries: int = matrix_mod.MAX_ENTRIES  # a larger matrix is refused before its product is built
    registry_trust: RegistryTrust = dataclasses.field(default_factory=RegistryTrust)  # CAs of registries' TLS
    registry_hosts: tuple[str, ...] = ()  # the matrix's registry host: where the env's credentials go by default
    _engine: DockerEngine | None = None
    _table: compat_mod.CompatTable | None = None

    def table(self) -> compat_mod.CompatTable:
        if self._table is None:
            path = self.compat_file
            if path is not None and not path.is_file():
                raise InputError(f"compatibility table {path} does not exist")
            try:
                self._table = compat_mod.CompatTable.load(path)
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"compatibility table {path or 'data/compat.json'} is unreadable: {exc}") from None
        return self._table

    def keys(self) -> Keys:
        """Who signs this command's evidence and whose evidence counts (`evidence.signing`)."""
        return Keys.load(self.cache_dir / "keys", os.environ, self.trust_keys, self.trust_build_keys)

    def registry(self, host: str) -> Registry:
        """A registry outside a run (promote, history): plain HTTP where the engine would speak it and the registry
        speaks no TLS; without an engine, loopback registries only."""
        insecure: tuple[str, ...] = ()
        with contextlib.suppress(EngineUnavailable):
            insecure = self.engine().insecure_registries()
        return Registry.for_host(host, insecure, self.registry_trust, self.registry_hosts)

    def index_versions(self, index_url: str, project: str) -> list[str] | None:
        return compat_refresh.project_versions(index_url, project, timeout=20)

    def engine(self) -> DockerEngine:
        if self._engine is None:
            self._engine = DockerEngine.connect(self.engine_url)
            if self.container_labels:
                self._engine.run_labels.update(self.container_labels)
        return self._engine

    def base_python(self, image: str) -> str | None:
        known = compat_mod.os_python(image)
        if known:
            return known
        engine = self.engine()
        if engine.image_id(image) is None:
            return None
        result = engine.run(image, ["sh", "-c", "python3 -c 'import sys;print(\"%d.%d\" % sys.version_info[:2])'"],
                            timeout=60)
        text = result.logs.strip().splitlines()[-1:] if result.exit_code == 0 else []
        return text[0] if text else None


def load_plan(ctx: Context, matrix_file: Path, registry: str | None = None, strict: bool = False,
              only: str | None = None, renderer: Renderer | None = None) -> tuple[matrix_mod.Matrix, plan_mod.Plan]:
    def load(facts: lookups.Facts | None) -> matrix_mod.Matrix:
        return matrix_mod.load(matrix_file, ctx.table(), registry=registry, strict=strict,
                               max_entries=ctx.max_entries, facts=facts)

    matrix = load(None)  # reads only
    if matrix.registry:  # (the environment's registry credentials are for its host, `ports.credentials`)
        ctx.registry_hosts = (matrix.registry.split("/", 1)[0],)
    if matrix.questions:  # the engine and the indexes, asked what the file needs, then read again
        matrix = load(lookups.answer(matrix.questions, base_python=ctx.base_python,
                                     index_versions=ctx.index_versions if ctx.check_index else None))
    for warning in matrix.warnings:
        ctx.err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    plan = plan_mod.make(matrix, renderer or Renderer()).only(only)
    return matrix, plan


def decide(ctx: Context, plan: plan_mod.Plan, *, rebuild: bool = False,
           builds: bool = True) -> tuple[plan_mod.Plan, Registries]:
    """Keys for every node (base images resolved on the engine), then what each node needs: the cache
    is looked up locally and in the registry. A run that `builds` builds on a key tag's image only when a trusted
    build key vouches for it (`provenance`); verify and publish take each node as its key tag names it (they test,
    or publish, exactly that digest, and build on nothing)."""
    engine = ctx.engine()
    plan = keys.assign(plan, cache_mod.base_ids(plan, engine))
    registries = Registries.of_engine(engine.insecure_registries, ctx.registry_trust, scope=ctx.registry_hosts)
    # a lookup's retries are said on stderr (once a run starts, its log says them)
    registries.on_retry = lambda line: ctx.err.print(f"[yellow]  {escape(line)}[/]", highlight=False)
    cache = cache_mod.Cache(engine, registries, BuildTrust(ctx.keys().build_trust) if builds else None)
    plan = cache_mod.decide(plan, cache, rebuild=rebuild)
    for warning in cache.warnings:
        ctx.err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    return plan, registries


T = TypeVar("T")


def checked(problem: Callable[[T], str | None]) -> Callable[[click.Context, click.Parameter, T | None], T | None]:
    """A click callback: an option's value is checked as it is parsed, before anything slow starts; `problem`
    says what is wrong with a bad one, which is an input error naming the option (and the environment variable,
    when the value came from one) and the value."""
    def callback(click_ctx: click.Context, param: click.Parameter, value: T | None) -> T | None:
        why = None if value is None else problem(value)
        if why is not None:
            name = max(param.opts, key=len) if isinstance(param, click.Option) else (param.name or "").upper()
            if click_ctx.get_parameter_source(param.name or "") == click.core.ParameterSource.ENVIRONMENT \
                    and isinstance(param.envvar, str):
                name += f" (from ${param.envvar})"
            shown = " ".join(map(str, value)) if isinstance(value, tuple) else value if isinstance(value, Path) \
                else repr(value)
            raise InputError(f"{name} {shown}: {why}")
        return value
    return callback


def write_problem(path: Path, *, folder: bool) -> str | None:
    """Why this command could not write `path`: a folder it writes into (`folder`), or a file it writes; None
    when it can. Leaves nothing behind: a path that is not there yet must be creatable, its nearest existing
    ancestor a folder a file can be made in. Folders are tried (a folder made and removed), not asked with
    os.access, which answers yes to root for /proc and /sys."""
    try:
        if path.exists():
            if folder != path.is_dir():
                return "exists and is not a folder" if folder else "is a folder, not a file"
            if not os.access(path, os.W_OK | (os.X_OK if folder else 0)):
                return "is not writable"
            return _tried(path) if folder else None
        if path.is_symlink():
            return "is a symbolic link to nothing"
        for parent in path.absolute().parents:
            if parent.exists():
                if not parent.is_dir():
                    return f"cannot be created: {parent} is not a folder"
                if not os.access(parent, os.W_OK | os.X_OK) or _tried(parent) is not None:
                    return f"cannot be created: {parent} is not writable"
                return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def _tried(folder: Path) -> str | None:
    """Why nothing can be made in `folder` (a folder is made there and removed); None when it can."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".imagebuilder-probe-", dir=folder))
    except OSError as exc:
        return f"is not writable ({exc.strerror or type(exc).__name__})"
    return None


def ca_problem(paths: tuple[Path, ...]) -> str | None:
    """Why one of `paths` is not a CA bundle a registry's certificate may chain to (PEM certificates and nothing
    else, `input.certs`), naming it; None when all are."""
    for path in paths:
        named = f"{path}: " if len(paths) > 1 else ""
        try:
            with path.open("rb") as handle:
                certs.certificates(handle.read(certs.MAX_BYTES + 1))
        except OSError as exc:
            return f"{named}{exc.strerror or type(exc).__name__}"
        except certs.NotABundle as exc:
            return f"{named}{exc}"
    return None


writable_folder = checked(functools.partial(write_problem, folder=True))  # a folder a command writes into
writable_file = checked(functools.partial(write_problem, folder=False))  # a file a command writes


matrix_option = click.option("--matrix", "matrix_file", type=click.Path(path_type=Path), default=Path("matrix.yaml"),
                             show_default=True, help="The matrix file.")
strict_option = click.option("--strict", is_flag=True, help="Treat warnings (e.g. an exclude that matches "
                             "nothing) as errors.")
only_option = click.option("--only", metavar="GLOB", help="Only nodes whose id matches (plus their parents), "
                           "e.g. '2.6.0-cu124-*/task'.")
registry_option = click.option("--registry", help="Override the registry (host[:port][/namespace]).")
report_option = click.option("--report", "report_dir", type=click.Path(path_type=Path), callback=writable_folder,
                             default=Path("imagebuilder-report"), show_default=True,
                             help="Folder for report.json and per-node logs.")
quiet_option = click.option("--quiet", is_flag=True, help="No live log; summary only.")
jobs_option = click.option("--jobs", "-j", default=1, show_default=True, type=click.IntRange(1, 64),
                           help="Up to N independent nodes at once (smoke suites still run one at a time).")
expect_option = click.option("--expect", multiple=True, metavar="FLOOR=VALUE",
                             help=f"Raise a floor of the smoke suite ({', '.join(spec_mod.FLOORS)}), never lower it; "
                                  "what an image must contain is the matrix's to say.")
resmoke_option = click.option("--resmoke", is_flag=True, help="Run the smoke suite even where this very image (by "
                              "ID or digest) has a pass record.")
accept_regression_option = click.option(
    "--accept-regression", is_flag=True, help="A leaf whose performance falls below its lineage's baseline passes, "
    "its pass record saying `accepted` (the lineage's new normal); without it the regression fails it.")
no_cache_option = click.option("--no-cache", is_flag=True, help="Ignore the engine's build cache (a cold build).")
untested_gpu_option = click.option("--allow-untested-gpu", is_flag=True,
                                   help="Publish CUDA images even when no GPU was there to test them.")
attestations_option = click.option("--attestations", type=click.Choice(LAYOUT_KINDS), default=None,
                                   help="Where cosign-compatible copies of the evidence go (default: the matrix's "
                                        "`attestations:`, else both): Sigstore bundle referrers, cosign's .att tag, "
                                        "both, or off.")
PLAN_OPTIONS = (matrix_option, strict_option, only_option, registry_option)
RUN_OPTIONS = (*PLAN_OPTIONS, report_option, quiet_option, jobs_option, attestations_option)


def options(*stack: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Apply a stack of click options (declared once above) to a command."""
    def apply(func: Any) -> Any:
        for option in reversed(stack):
            func = option(func)
        return func
    return apply


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--engine", "engine_url", envvar="DOCKER_HOST", help="Docker engine URL (default: DOCKER_HOST or "
              "the local socket).")
@click.option("--compat", "compat_file", type=click.Path(path_type=Path), envvar="IMAGEBUILDER_COMPAT",
              help="A compatibility table to use instead of the packaged one (see `compat refresh --out`).")
@click.option("--offline", is_flag=True, envvar="IMAGEBUILDER_OFFLINE",
              help="Do not ask package indexes whether nccl/cudnn overrides exist.")
@click.option("--cache-dir", type=click.Path(path_type=Path), envvar="IMAGEBUILDER_CACHE_DIR",
              callback=writable_folder,
              help="Where pass records are mirrored, by image ID, and build locks kept (default: "
                   "$XDG_CACHE_HOME/imagebuilder, else ~/.cache/imagebuilder).")
@click.option("--trust-key", "trust_keys", multiple=True, type=click.Path(path_type=Path), metavar="FILE",
              envvar="IMAGEBUILDER_TRUST_KEYS",
              help="A public key (PEM, Ed25519) whose signed pass records (and build provenance) count; repeatable, "
                   "or space-separated in IMAGEBUILDER_TRUST_KEYS. Once any key is named, exactly the named keys "
                   "and IMAGEBUILDER_SIGNING_KEY count, and this machine's own key does not; with none named, this "
                   "machine's own key (made on first use in the cache folder) signs and counts.")
@click.option("--trust-build-key", "trust_build_keys", multiple=True, type=click.Path(path_type=Path),
              metavar="FILE", envvar="IMAGEBUILDER_TRUST_BUILD_KEYS",
              help="A public key whose signed build provenance counts: an image under a key tag is reused only "
                   "when such a key (or a --trust-key key) vouches for it; repeatable, or space-separated in "
                   "IMAGEBUILDER_TRUST_BUILD_KEYS. Stage jobs sign with IMAGEBUILDER_BUILD_KEY.")
@click.option("--container-label", "container_labels", multiple=True, metavar="KEY=VALUE",
              envvar="IMAGEBUILDER_CONTAINER_LABELS",
              help="A label for every container this command starts (e.g. a CI job's id, to find and remove "
                   "what it left); repeatable, or space-separated in IMAGEBUILDER_CONTAINER_LABELS.")
@click.option("--max-entries", type=click.IntRange(1), default=matrix_mod.MAX_ENTRIES, show_default=True,
              envvar="IMAGEBUILDER_MAX_ENTRIES", help="The most entries a matrix may make; a larger one is refused "
              "before any entry is made (planning 10 000 takes about 10 s: benchmarks/results/plan_scale.json).")
@click.option("--registry-ca", "registry_cas", multiple=True, type=click.Path(path_type=Path), metavar="FILE",
              envvar="IMAGEBUILDER_REGISTRY_CA", callback=checked(ca_problem),
              help="CA certificates (PEM) a registry's TLS certificate may chain to, besides the system's and "
                   "/etc/docker/certs.d/HOST/*.crt (which the engine reads too); repeatable, or space-separated in "
                   "IMAGEBUILDER_REGISTRY_CA.")
@click.pass_context
def cli(click_ctx: click.Context, engine_url: str | None, compat_file: Path | None, offline: bool,
        cache_dir: Path | None, trust_keys: tuple[Path, ...], trust_build_keys: tuple[Path, ...],
        container_labels: tuple[str, ...],
        max_entries: int, registry_cas: tuple[Path, ...]) -> None:
    """Build, smoke-test and publish layered PyTorch/CUDA images from a version matrix."""
    wide = None if sys.stdout.isatty() else 160  # logs and CI: wide enough for the summary table
    labels = []
    for item in container_labels:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", key) or "\n" in value:
            raise InputError(f"--container-label {item!r}: expected KEY=VALUE (KEY of letters, digits, '.', '_', "
                             "'-')")
        labels.append((key, value))
    click_ctx.obj = Context(out=Console(width=wide), err=Console(stderr=True), engine_url=engine_url,
                            compat_file=compat_file, check_index=not offline,
                            cache_dir=cache_dir or default_cache_dir(), container_labels=tuple(labels),
                            trust_keys=trust_keys, trust_build_keys=trust_build_keys, max_entries=max_entries,
                            registry_trust=RegistryTrust(cafiles=registry_cas))


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
@click.option("--gpu-runner", default="self-hosted,linux,x64,gpu", show_default=True, metavar="LABELS",
              help="With github-matrix: runs-on labels (comma-separated) for CUDA entries.")
@click.option("--cpu-runner", default="ubuntu-24.04", show_default=True, metavar="LABELS",
              help="With github-matrix: runs-on labels (comma-separated) for CPU entries.")
@click.option("--wave", type=int, default=None,
              callback=checked(lambda wave: "a wave is 0 or more" if wave < 0 else None),
              help="With github-matrix: only the entries of this stage wave (entries that share a node with an "
                   "earlier one wait for its wave; past the last wave: none).")
@click.option("--explain", is_flag=True, help="Also say how each entry was resolved and what `exclude:` removed.")
@click.option("--no-cache", is_flag=True, help="Plan as `build --no-cache` would: every node builds.")
@click.pass_obj
def plan(ctx: Context, matrix_file: Path, strict: bool, only: str | None, registry: str | None,
         as_json: bool, fmt: str, gpu_runner: str, cpu_runner: str, wave: int | None, explain: bool,
         no_cache: bool, part: int | None, tool_image: str | None, kueue_queue: str | None) -> int:
    """Print the build nodes (entry x layer) in build order: key, and whether each is cached or must build
    (and why). Without a reachable engine, keys and statuses are unknown."""
    matrix, the_plan = load_plan(ctx, matrix_file, registry, strict, only)
    registries = None
    try:
        the_plan, registries = decide(ctx, the_plan, rebuild=no_cache)
    except EngineUnavailable as exc:
        ctx.err.print(f"[yellow]warning:[/] {escape(exc.message)}: keys and cache statuses are unknown",
                      highlight=False)
        unknown = plan_mod.Decision(plan_mod.State.UNKNOWN, "no engine to resolve the base image")
        first = keys.first_of(keys.identities(the_plan))  # shared nodes are known without keys
        the_plan = the_plan.with_nodes([dataclasses.replace(n, decision=dataclasses.replace(
            unknown, same_as=None if first[n.id] == n.id else first[n.id])) for n in the_plan.nodes])
    fmt = "json" if as_json else fmt
    if explain:
        explain_plan(ctx.err if fmt in ("json", "github-matrix") else ctx.out, matrix, ctx.table())
    if fmt == "json":
        click.echo(json.dumps([n.to_json() for n in the_plan.nodes], indent=2))
        return 0
    labels = {name: tuple(x.strip() for x in value.split(",") if x.strip())
              for name, value in (("gpu", gpu_runner), ("cpu", cpu_runner))}
    if fmt in EMIT_FORMATS:
        from .emit import formats
        from .emit.graph import graph
        from .run.handoff import staged_digests

        if fmt == "k8s-jobs" and registries is None:
            raise InputError("--format k8s-jobs pins each leaf's staged digest: it needs the engine and registry")
        args = ("--matrix", str(matrix_file), *(("--registry", registry) if registry else ()),
                *(("--only", only) if only else ()))
        settings = formats.Settings(cpu_runner=labels["cpu"], gpu_runner=labels["gpu"], plan_args=args,
                                    tool_image=tool_image, kueue_queue=kueue_queue,
                                    digests=staged_digests(the_plan, registries) if fmt == "k8s-jobs" and registries
                                    else {})
        docs = formats.documents(fmt, graph(the_plan, str(matrix_file), registry=registry, only=only), settings)
        if part is not None and part > len(docs):
            raise InputError(f"--part {part}: --format {fmt} makes {len(docs)} document(s) for this plan")
        click.echo(formats.text(fmt, docs[part - 1:part] if part else docs), nl=False)
        return 0
    if fmt == "github-matrix":
        click.echo(json.dumps(waves_mod.github_matrix(the_plan, gpu_runner=labels["gpu"], cpu_runner=labels["cpu"],
                                                     wave=wave)))
        return 0
    if fmt == "table":
        ctx.out.print(plan_view.table(the_plan))
    else:
        width = shutil.get_terminal_size((ctx.out.width, 24)).columns  # COLUMNS, else the terminal's, else 160
        for line in plan_view.tree(the_plan, width):
            ctx.out.print(line.rich(), soft_wrap=True, highlight=False)
    ctx.out.print(plan_view.summary(the_plan), highlight=False)
    return 0


def explain_plan(console: Console, matrix: matrix_mod.Matrix, table: compat_mod.CompatTable) -> None:
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
    """The matrix file's keys: their kinds, defaults and where they may appear (input/schema.py)."""
    if fmt == "json":
        print(json.dumps(schema_mod.json_schema(), indent=2))
    else:
        print(schema_mod.markdown(), end="")


@cli.group()
def compat() -> None:
    """The torch / CUDA / cuDNN / NCCL / Python / driver compatibility table."""


@compat.command("show")
@click.option("--torch", "torch_version", help="Only this torch release.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def compat_show(ctx: Context, torch_version: str | None, as_json: bool) -> int:
    """Print the table: per release and accelerator, CUDA, cuDNN, NCCL, triton, Python and glibc."""
    table = ctx.table()
    releases = [r for r in table.releases if torch_version in (None, r.torch)]
    if torch_version and not releases:
        raise InputError(f"torch {torch_version} is not in the table",
                         hint=did_you_mean(torch_version, [r.torch for r in table.releases]))
    if as_json:
        click.echo(json.dumps([{
            "torch": r.torch, "python": list(r.python), "requires_python": r.requires_python, "glibc": r.glibc,
            "torchvision": r.torchvision, "torchaudio": r.torchaudio,
            "variants": {v.accelerator: {"cuda": v.cuda, "cudnn": v.cudnn, "nccl": v.nccl, "triton": v.triton,
                                         "index": v.index, "verified": v.verified,
                                         "min_driver": table.min_driver(v.cuda) if v.cuda else None,
                                         "packages": dict(v.packages)} for v in r.variants},
        } for r in releases], indent=2))
        return 0
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
    ctx.out.print(grid)
    ctx.out.print("* not verified against its index", highlight=False)
    return 0


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
    out = out_file or ctx.compat_file or Path(compat_mod.__file__).resolve().parents[1] / "data" / "compat.json"
    urls = index_urls or (compat_mod.PYPI_SIMPLE,)
    try:
        tables = [compat_refresh.fetch_table(url, min_torch=min_torch) for url in urls]
    except compat_refresh.IndexUnreachable as exc:
        raise IndexUnavailable(f"{exc}; the table at {out} is unchanged") from None
    new = tables[0] if len(tables) == 1 else compat_refresh.merge_tables(tables)
    conflicts = new.get("conflicts")
    for conflict in conflicts if isinstance(conflicts, list) else []:
        ctx.err.print(f"[yellow]conflict:[/] {escape(json.dumps(conflict))}", highlight=False)
    old: dict[str, object] = {}
    if out.is_file():
        try:
            old = dict(json.loads(out.read_text(encoding="utf-8")))
        except ValueError:
            old = {}
    changes = compat_refresh.diff_tables(old, new)
    for line in changes:
        ctx.out.print(escape(line), highlight=False)
    releases = new.get("releases")
    count = len(releases) if isinstance(releases, dict) else 0
    if not changes:
        ctx.out.print(f"no changes ({count} releases)", highlight=False)
    if dry_run:
        ctx.out.print(f"dry run: {out} not written", highlight=False)
        return 0
    compat_refresh.write_table(new, out)
    ctx.out.print(f"wrote {out} ({count} releases from {', '.join(urls)})", highlight=False)
    return 0


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


@cli.group("keys")
def keys_group() -> None:
    """The keys that sign pass records (`IMAGEBUILDER_SIGNING_KEY`, else this machine's own) and whose records
    count (`--trust-key`)."""


@keys_group.command("public")
@click.option("--out", "out_file", type=click.Path(path_type=Path), callback=writable_file,
              help="Write it here (default: print it).")
@click.pass_obj
def keys_public(ctx: Context, out_file: Path | None) -> int:
    """The public key this machine signs pass records with (PEM), for other machines' --trust-key."""
    signer = ctx.keys().writer("keys public")
    pem = signer.public.pem()
    if out_file is None:
        click.echo(pem.decode(), nl=False)
    else:
        out_file.write_bytes(pem)
        ctx.err.print(f"wrote {out_file}: {escape(signer.public.label())}", highlight=False)
    return 0


@keys_group.command("new")
@click.argument("folder", type=click.Path(path_type=Path), callback=writable_folder)
@click.pass_obj
def keys_new(ctx: Context, folder: Path) -> int:
    """Make a signing key for CI: FOLDER/signing.pem (private, mode 0600: a secret of the GPU runners only) and
    FOLDER/signing.pub (public: commit it, and name it in --trust-key)."""
    private, public = folder / "signing.pem", folder / "signing.pub"
    if private.exists() or public.exists():
        raise InputError(f"{private} or {public} exists already; not overwritten")
    folder.mkdir(parents=True, exist_ok=True)
    signer = Signer.generate(str(private))
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(signer.private_pem())
    public.write_bytes(signer.public.pem())
    ctx.out.print(f"wrote {private} (keep it secret) and {public}: key {signer.public.keyid[:16]}", highlight=False)
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
    from .plan import bake

    _, the_plan = load_plan(ctx, matrix_file, registry, strict, only)
    try:
        engine = ctx.engine()
        the_plan = keys.assign(the_plan, cache_mod.base_ids(the_plan, engine))
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


def parse_expect(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    out = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--expect {item!r} is not KEY=VALUE")
        out.append((key.strip(), value.strip()))
    return tuple(out)


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
              before: Callable[[plan_mod.Plan, Registries], str | None] | None = None) -> list[NodeRecord]:
    """Load the plan (every input error before anything builds), then, holding the build lock of every
    repository it pushes to, decide it (what a run before this one left is cached) and run the steps.
    `before`: a node command's check of the decided plan; what it returns is said ("nothing to do: ...") and
    nothing runs (no records)."""
    matrix, the_plan = load_plan(ctx, common.matrix_file, common.registry, common.strict, common.only)
    specs = spec_mod.Specs(the_plan, expect)  # --expect may only raise floors
    keys = ctx.keys()
    engine = ctx.engine()
    targets = [tagging.repository_ref(e.registry, e.repository) for e in the_plan.entries()]
    with lock.hold(ctx.cache_dir / "locks", targets, lambda line: ctx.err.print(escape(line), highlight=False)):
        check_bases(the_plan, engine, lambda line: None if common.quiet else ctx.out.print(line, highlight=False))
        the_plan, registries = decide(ctx, the_plan, rebuild=no_cache, builds=require is None)
        if require is not None:
            require.require(the_plan, registries)
        said = before(the_plan, registries) if before is not None else None
        if said is not None:
            ctx.out.print(escape(said), highlight=False, soft_wrap=True)
            return []
        if not common.quiet:
            counts = {s.value: sum(n.status == s for n in the_plan.nodes) for s in plan_mod.State}
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
@click.pass_obj
def publish(ctx: Context, /, dry_run: bool, allow_untested_gpu: bool, **common: Any) -> int:
    """Over the whole matrix, all or nothing per entry: point immutable tags and aliases at the staged digests
    that have pass records (ancestors' records are written `via` their leaf). Builds and tests nothing;
    idempotent: a second run changes nothing and says so."""
    staged, signing = Staged("publish"), Cosign.from_env(True, os.environ)
    steps = (staged, Verify(run_suite=False, host=GpuHost.probe()),
             Publish(allow_untested_gpu=allow_untested_gpu, dry_run=dry_run, stage_untested=False, signing=signing,
                     supply=SupplyChain()))
    records = run_steps(ctx, Common(**common), steps, require=staged, meta={"signing": signing.meta()})
    lacking = sorted({r.entry for r in records if r.leaf and r.verify == VerifyStatus.SKIPPED})
    if lacking:
        raise RunFailed(f"{len(lacking)} entries have no pass record, nothing of them moved: {', '.join(lacking)}")
    if all(r.publish == PublishStatus.CURRENT for r in records) and not dry_run:
        ctx.out.print("nothing to do: publish: every tag already named its digest; nothing changed", highlight=False)
    failed(records)
    return 0


@cli.group("node")
def node_group() -> None:
    """One job of an engine's graph (`plan --format graph|github-actions|buildkite|argo|k8s-jobs`): stage one node
    or one entry, verify one leaf on this runner (`publish` publishes the matrix). Each is idempotent by key tag
    and trusted pass: with nothing to do it says so and exits 0."""


NODE_OPTIONS = (matrix_option, strict_option, registry_option, report_option, quiet_option)


@node_group.command("stage")
@options(*NODE_OPTIONS)
@click.option("--digest-file", type=click.Path(path_type=Path), callback=writable_file,
              help="Write the staged digest of NODE (an entry: its last leaf) here: the job's output for the next.")
@click.argument("name", metavar="NODE|ENTRY")
@click.pass_obj
def node_stage(ctx: Context, /, name: str, digest_file: Path | None, **common: Any) -> int:
    """Stage NODE (ENTRY/LAYER, its parents staged before) or every node of ENTRY that is not staged: build and
    push under key tags only. Nothing to do when every key tag is in the registry."""
    from .run.handoff import Handoff, selector

    handoff = Handoff(name)
    records = run_steps(ctx, Common(only=selector(name), jobs=1, **common), (Stage(), KeyTags()),
                        meta={"smoke": False, "signing": Cosign.from_env(True, os.environ).meta()},
                        before=handoff.staged)
    failed(records)
    digest = handoff.digest({r.node: r.digest for r in records if r.digest})
    if digest_file is not None and digest is not None:
        digest_file.parent.mkdir(parents=True, exist_ok=True)
        digest_file.write_text(digest + "\n", encoding="utf-8")
    return 0


@node_group.command("verify")
@options(*NODE_OPTIONS)
@expect_option
@accept_regression_option
@click.option("--digest", callback=checked(lambda d: None if re.fullmatch(r"sha256:[0-9a-f]{64}", d) else
                                           "not a sha256:<64 hex> digest"),
              help="The digest the stage job handed over: the leaf's key tag must still name it.")
@click.argument("leaf", metavar="LEAF")
@click.pass_obj
def node_verify(ctx: Context, /, leaf: str, digest: str | None, expect: tuple[str, ...], accept_regression: bool,
                **common: Any) -> int:
    """Verify LEAF (ENTRY/LAYER) on this runner: its staged digest's suite, unless a trusted pass of this suite on
    this runner's GPU model is beside it already (nothing to do)."""
    from .run.handoff import Handoff, selector

    if "/" not in leaf:
        raise InputError(f"{leaf!r} is not a node id", hint="node verify takes one leaf, ENTRY/LAYER")
    handoff, staged = Handoff(leaf), Staged("node verify")
    steps = (staged, Verify(same_gpu_model=True, record=True, host=GpuHost.probe(),
                            accept_regression=accept_regression))
    records = run_steps(ctx, Common(only=selector(leaf), jobs=1, **common), steps, expect=parse_expect(expect),
                        require=staged, meta={"signing": Cosign.from_env(True, os.environ).meta()},
                        before=lambda plan, registries: handoff.handed(plan, registries, digest))
    failed(records)
    if all(r.verify == VerifyStatus.FOUND for r in records if r.node == leaf):
        ctx.out.print(f"nothing to do: {escape(leaf)} ({handoff.digests.get(leaf)}) has a trusted pass of this suite "
                      "on this runner; no suite ran", highlight=False, soft_wrap=True)
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
    from .emit import local
    from .emit.graph import Graph

    try:
        graph = Graph.of_json(json.load(graph_file))
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{graph_file.name}: not a graph of `plan --format graph` ({exc})") from None
    env = {**os.environ, "IMAGEBUILDER_CACHE_DIR": str(ctx.cache_dir),
           **({"DOCKER_HOST": ctx.engine_url} if ctx.engine_url else {}),
           **({"IMAGEBUILDER_TRUST_KEYS": " ".join(map(str, ctx.trust_keys))} if ctx.trust_keys else {}),
           **({"IMAGEBUILDER_COMPAT": str(ctx.compat_file)} if ctx.compat_file else {}),
           **({} if ctx.check_index else {"IMAGEBUILDER_OFFLINE": "1"})}
    with contextlib.ExitStack() as stack:
        events = stack.enter_context(events_file.open("a", encoding="utf-8")) if events_file else None
        executor = local.Executor(graph, (sys.executable, "-m", "imagebuilder"), env,
                                  lambda line: ctx.out.print(escape(line), highlight=False, soft_wrap=True), events)
        outcome = executor.run()
    ctx.out.print(local.summary(outcome, graph), highlight=False)
    if any(v in (local.FAILED, local.BLOCKED) for v in outcome.values()):
        raise RunFailed(local.summary(outcome, graph))
    return 0


@cli.command()
@click.option("--from", "pattern", required=True, metavar="REPO:GLOB",
              help="Source tags, e.g. 127.0.0.1:5000/ml/pytorch:nightly-* (key tags cache-* are never promoted).")
@click.option("--to", "template", required=True, metavar="TEMPLATE",
              callback=checked(promote_mod.template_problem),
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
    from .ports.reference import parse

    source = parse(pattern)
    host, source_repo = source.host, source.repository
    _, the_plan = load_plan(ctx, matrix_file)  # (first: its registry is where the environment's credentials go)
    registry = ctx.registry(host)
    moves = promote_mod.plan_moves(registry, pattern, template)
    if not moves:
        raise InputError(f"--from {pattern!r} matches no tag")
    tags = registry.tags(source_repo)
    keys = ctx.keys()
    for move in moves:
        promote_mod.check_target(registry, keys.trust, move, tags)
    specs = spec_mod.Specs(the_plan)
    known = {n.id: n for n in the_plan.nodes}

    def spec_of(node_id: str) -> str | None:
        return specs.key(known[node_id]) if node_id in known else None

    proofs = [promote_mod.evidence(registry, keys.trust, move, tags, spec_of) for move in moves]
    gate = SupplyChain()  # the vulnerability gate, with the current data and the policy of each digest's node
    blocked = {}
    for move, proof in zip(moves, proofs, strict=True):
        node = known.get(proof.record.node if proof.record is not None else proof.node or "")
        for settings in promote_mod.settings_for(node, the_plan):  # (a node it does not know: every policy's)
            why = promote_mod.vulnerable(registry, keys.trust, move, settings.policy, gate.advisories(settings.data),
                                         gate.today)
            if why is not None:
                blocked[move.target] = why
                break
    for target, why in blocked.items():
        ctx.out.print(f"[bold red]refused: {escape(target)}: {escape(why)}[/]", highlight=False, soft_wrap=True)
    if blocked:
        first = next(iter(blocked))
        raise RunFailed(f"{len(blocked)} of {len(moves)} source tags are kept back by the vulnerability gate (first: "
                        f"{first}: {blocked[first]}): nothing {'would move' if dry_run else 'moved'}")
    refused = [(m, p) for m, p in zip(moves, proofs, strict=True) if not p.passed]
    for move, proof in zip(moves, proofs, strict=True):
        mark = "" if proof.passed else ("[bold yellow]UNTESTED, moved anyway: [/]" if allow_untested
                                        else "[bold red]refused: [/]")
        ctx.out.print(f"{'would promote' if dry_run else 'promote'} {escape(move.source)} -> {escape(move.target)} "
                      f"@{move.digest} ({move.state}) {mark}[dim]{escape(proof.why)}[/]", highlight=False,
                      soft_wrap=True)
    if refused and not allow_untested:
        raise RunFailed(f"{len(refused)} of {len(moves)} source tags have no pass record of the current suite "
                        f"(first: {refused[0][0].source}): nothing {'would move' if dry_run else 'moved'} "
                        "(--allow-untested moves them anyway, recorded beside each digest)")
    if not dry_run:
        promote_mod.require_push(registry, moves)
        for move, proof in zip(moves, proofs, strict=True):
            if not promote_mod.apply(registry, keys, move, proof, allow_untested=allow_untested):
                ctx.out.print(f"[yellow]  {escape(move.target)}: no SBOM that counts beside {move.digest} (published "
                              "before imagebuilder wrote SBOMs, or signed by a key not trusted here)[/]",
                              highlight=False, soft_wrap=True)
    changed = sum(m.previous != m.digest for m in moves)
    untested = f", {len(refused)} UNTESTED (--allow-untested)" if refused else ""
    ctx.out.print(f"{len(moves)} tags, {changed} {'would change' if dry_run else 'changed'}{untested}",
                  highlight=False)
    return 0


@cli.command()
@click.argument("image", metavar="IMAGE@DIGEST")
@click.option("--out", "out_file", type=click.Path(path_type=Path), callback=writable_file,
              help="Write the CycloneDX JSON here (default: print it).")
@click.pass_obj
def sbom(ctx: Context, image: str, out_file: Path | None) -> int:
    """The signed CycloneDX SBOM beside an image in its registry, verified: signed by a trusted key (this
    machine's own, or --trust-key) and about this very digest. A tag is looked up to its digest first (and
    said). Exit 1 when there is none that counts, saying why."""
    from .evidence.sboms import RegistrySboms, sbom_tag
    from .ports.reference import parse

    ref = parse(image)
    registry = ctx.registry(ref.host)
    digest = ref.reference if ref.reference.startswith("sha256:") else registry.manifest_digest(ref.repository,
                                                                                              ref.reference)
    if digest is None:
        raise InputError(f"{image}: no such image in {ref.host}/{ref.repository}")
    if not ref.reference.startswith("sha256:"):
        ctx.err.print(f"{escape(image)} is {digest}", highlight=False)
    found = RegistrySboms(registry, ctx.keys().trust).lookup(ref.repository, digest)
    if found.sbom is None:
        raise RunFailed(f"{ref.host}/{ref.repository}@{digest}: " + (found.rejected or f"no SBOM beside it (no "
                        f"{sbom_tag(digest)}); `imagebuilder publish` writes one"))
    text = json.dumps(found.sbom.document, indent=1, sort_keys=True) + "\n"
    components = len(found.sbom.document.get("components") or [])
    said = f"{components} components, signed by {found.sbom.signer()}"
    if out_file is None:
        click.echo(text, nl=False)
        ctx.err.print(f"SBOM of {escape(ref.host)}/{escape(ref.repository)}@{digest}: {escape(said)}",
                      highlight=False)
    else:
        out_file.write_text(text, encoding="utf-8")
        ctx.err.print(f"wrote {out_file}: {escape(said)}", highlight=False)
    return 0


@cli.command()
@click.argument("image", metavar="IMAGE@DIGEST")
@click.option("--trust-key", "keys_named", multiple=True, required=True, type=click.Path(path_type=Path),
              metavar="FILE", help="A PEM public key whose signed evidence counts (repeatable); only these count.")
@click.option("--gpu", "gpu_model", metavar="MODEL", help="Require a pass on this GPU model (e.g. H100); its "
              "failed verdict refuses.")
@click.option("--policy", "policy", multiple=True, type=click.Choice(admission.POLICIES), default=("pass",),
              show_default=True, help="What must stand beside the digest (repeatable): a pass, a pass on GPUs, a "
              "signed SBOM, a VSA that says PASSED.")
@click.option("--spec", metavar="KEY", help="Count only passes of this spec (a prefix of its key).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@click.pass_obj
def check(ctx: Context, image: str, keys_named: tuple[Path, ...], gpu_model: str | None, policy: tuple[str, ...],
          spec: str | None, as_json: bool) -> int:
    """May this digest run? For a deploy pipeline, without a matrix: verifies the evidence beside IMAGE@DIGEST in
    its registry (passes by runner, failed verdicts, SBOM, VSA) with exactly the keys named, and prints a
    verdict. Exit 0 admitted, 1 refused, 2 undecided (bad input, registry unreachable)."""
    from .ports.reference import parse

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
    from .evidence.history import History
    from .evidence.passes import RegistryPasses
    from .evidence.regression import Thresholds, replay
    from .ports.reference import parse

    _, the_plan = load_plan(ctx, matrix_file, registry, strict, only)
    trust, thresholds, stores = ctx.keys().trust, Thresholds.measured(), {}
    lineages, shown = [], set()
    for node in (n for n in the_plan.nodes if n.leaf):
        ref = parse(f"{node.entry.registry}/{node.entry.repository}:latest")
        if ref.host not in stores:
            stores[ref.host] = History(RegistryPasses(ctx.registry(ref.host), trust))
        found = stores[ref.host].records(ref.repository)
        cell = cell_of(node)
        runners = sorted({p.runner for p in (point_of(f) for f in found) if p is not None and p.cell == cell},
                         key=lambda r: r.label())
        for runner in (r for r in runners if (ref.host, ref.repository, cell, r) not in shown):
            shown.add((ref.host, ref.repository, cell, runner))
            points = series(found, cell, runner)
            lineages.append((node, ref, runner, points, replay(points, thresholds, node.entry.smoke.history_window)))
    if as_json:
        click.echo(json.dumps([{"node": node.id, "repository": f"{ref.host}/{ref.repository}",
                                "runner": runner.to_json(),
                                "points": [{**p.to_json(), "judged": j.to_json()}
                                           for p, j in zip(points, judged, strict=True)]}
                               for node, ref, runner, points, judged in lineages], indent=2))
        return 0
    if not lineages:
        ctx.out.print("no performance history: no signed pass record with metrics beside these leaves' images",
                      highlight=False)
        return 0
    for node, ref, runner, points, judged in lineages:
        names = sorted({name for p in points for name in p.metrics})
        table = Table(title=f"{cell_of(node)} · {runner.label()} · {ref.host}/{ref.repository}", box=None,
                      pad_edge=False,
                      title_justify="left")
        for col in ("date", "image", "gate", *names, "what changed"):
            table.add_column(col, overflow="fold")
        for point, finding in zip(points, judged, strict=True):
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
        ctx.out.print(table)
    ctx.out.print(f"thresholds: {thresholds.source} (a metric's threshold is in report.json's `performance`); the "
                  "baseline is the median of the last smoke.history_window passes before each image", highlight=False)
    return 0


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
    kinds = tuple(k.strip() for k in only.split(",") if k.strip())
    unknown = [k for k in kinds if k not in CHECK_KINDS]
    if unknown:
        raise InputError(f"--only {only!r}: unknown kind {unknown[0]!r}",
                         hint=did_you_mean(unknown[0], CHECK_KINDS) or f"kinds: {', '.join(CHECK_KINDS)}")
    given: dict[str, Any] = dict(parse_expect(expect))
    for key, value in list(given.items()):
        if value.lower() in ("none", "null"):
            given[key] = None
    engine = ctx.engine()
    if engine.image_id(image) is None:
        raise InputError(f"image {image!r} is not present on the engine")
    labels = (engine.inspect(image).get("Config") or {}).get("Labels") or {}
    expected = spec_mod.image_expectations(labels, ctx.table())
    if expected is None and not given:
        raise InputError(f"image {image!r} carries no imagebuilder labels (io.imagebuilder.version.*) and no "
                         "--expect was given: the suite would have nothing to check its versions against",
                         hint="say what the image promises, e.g. --expect torch=2.6.0 --expect accelerator=cu124 "
                              "--expect python=3.11")
    source = "labels" if expected is not None and not given else "--expect" if expected is None else \
        "labels and --expect"
    expected = expected or {}
    spec_mod.check_floors(given, expected)
    expected.update(given)
    host = GpuHost.probe()
    commands = spec_mod.image_checks(labels)
    report = run_smoke(engine, image, expected, timeout=timeout, shm_size=shm_size, gpus=gpus, driver_dir=driver_dir,
                       only=kinds, commands=commands, devices=host.devices)
    allowed = ("*",) if kinds else tuple(k.strip() for k in allow_skip.split(",") if k.strip())  # --only: a probe
    verdict = judge(report, expected, commands, host=host, allow_skip=allowed, kinds=kinds)
    click.echo(json.dumps({"image": image, "expect_from": source, "expect": expected,
                           **({"only": list(kinds)} if kinds else {}), **report.to_json(),
                           "gpu_verified": verdict.gpu_verified, "host_verdict": verdict.why(),
                           **({"host_notes": list(verdict.notes)} if verdict.notes else {})}, indent=2))
    if not verdict.passed:
        raise RunFailed("smoke failed: " + verdict.why().replace("smoke.allow_skip", "--allow-skip"))
    return 0


@cli.command("report")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False))
@click.pass_obj
def report_command(ctx: Context, folder: Path) -> int:
    """Remake FOLDER/report.html from FOLDER/report.json (a report folder a run wrote, e.g. one downloaded from
    a nightly's artifacts): one self-contained page, nothing fetched when it opens."""
    doc = report_document.load(folder)
    out = folder / "report.html"
    try:
        out.write_text(report_html.render(doc), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{out}: cannot be written ({exc.strerror})") from None
    ctx.out.print(f"{out}: {len(doc['nodes'])} nodes", highlight=False)
    return 0


def main(argv: list[str] | None = None, interrupts: Interrupts | None = None) -> int:
    """Run one command; every error becomes its exit code and one message here. A signal always wins:
    130 after SIGINT, 143 after SIGTERM, whatever the command was doing (see `interrupts`)."""
    own = interrupts is None  # called inside a longer process (tests): its handlers are put back after
    interrupts = interrupts or Interrupts.install()
    err = Console(stderr=True)
    try:
        code = _invoke(argv, err)
    except KeyboardInterrupt:  # outside click (click turns one inside a command into Abort)
        err.print("interrupted: containers were removed, nothing more was tagged or pushed")
        code = 130
    if own:
        interrupts.restore()
        return interrupts.code or code
    return interrupts.finish(code)


def _invoke(argv: list[str] | None, err: Console) -> int:
    try:
        code = cli.main(args=argv, prog_name="imagebuilder", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        err.print("interrupted: containers were removed, nothing more was tagged or pushed")
        return 130
    except click.ClickException as exc:
        exc.show()
        return int(exc.exit_code)
    except ImageBuilderError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return exc.exit_code
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
