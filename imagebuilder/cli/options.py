"""What the commands share about flags: options declared once (`options` applies a stack of them), values checked
as they are parsed (`checked`: a folder or file a command writes, CA bundles), and `--expect`'s KEY=VALUE pairs."""

from __future__ import annotations

import functools
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ..choices import FLOORS
from ..declarations import grammar
from ..errors import NOTHING_TO_DO, InputError

T = TypeVar("T")
LIST_SEPARATORS = re.compile(r"[\s:]+")  # a list of files in one environment variable: spaces, or ':' as PATH has


def split_list(value: str) -> list[str]:
    """An environment variable's list of files: separated by spaces or ':' (both forms CI files write)."""
    return [part for part in LIST_SEPARATORS.split(value) if part]


class Paths(click.Path):
    """A file option that is repeatable, and a list separated by spaces or ':' in its environment variable."""

    def split_envvar_value(self, rv: str) -> list[str]:
        return split_list(rv)


class TrustedKey(click.ParamType[str]):
    """A trusted public key as `FILE` (every role) or `ROLE[,ROLE]=FILE` (`signing.named`), checked as it is
    parsed; repeatable, and a list separated by spaces or ':' in its environment variable."""

    name = "key"

    def split_envvar_value(self, rv: str) -> list[str]:
        return split_list(rv)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from ..evidence import signing

        signing.named(str(value))  # (an unknown role is an input error, before anything runs)
        return str(value)


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
        from ..input import certs  # (cryptography: only where a bundle is named)

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
only_option = click.option("--only", metavar="GLOB[,GLOB...]", help="Only nodes whose id matches a glob (plus "
                           "their parents), e.g. '2.6.0-cu124-*/task'; several globs are separated by commas.")
registry_option = click.option("--registry", help="Override the registry (host[:port][/namespace]).")
report_option = click.option("--report", "report_dir", type=click.Path(path_type=Path), callback=writable_folder,
                             default=Path("imagebuilder-report"), show_default=True,
                             help="Folder for report.json and per-node logs.")
quiet_option = click.option("--quiet", is_flag=True, help="No live log; summary only.")
jobs_option = click.option("--jobs", "-j", default=1, show_default=True, type=click.IntRange(1, 64),
                           help="Up to N independent nodes at once (smoke suites still run one at a time).")
expect_option = click.option("--expect", multiple=True, metavar="FLOOR=VALUE",
                             help=f"Raise a floor of the smoke suite ({', '.join(FLOORS)}), never lower it; "
                                  "what an image must contain is the matrix's to say.")
resmoke_option = click.option("--resmoke", is_flag=True, help="Run the smoke suite even where this very image (by "
                              "ID or digest) has a pass record.")
accept_regression_option = click.option(
    "--accept-regression", is_flag=True, help="A leaf whose performance falls below its lineage's baseline passes, "
    "its pass record saying `accepted` (the lineage's new normal); without it the regression fails it.")
no_cache_option = click.option("--no-cache", is_flag=True, help="Ignore the engine's build cache (a cold build).")
untested_gpu_option = click.option("--allow-untested-gpu", is_flag=True,
                                   help="Publish CUDA images even when no GPU was there to test them.")
attestations_option = click.option("--attestations", type=click.Choice(grammar.PATTERNS["layouts"].split("|")),
                                   default=None,
                                   help="Where cosign-compatible copies of the evidence go (default: the matrix's "
                                        "`attestations:`, else both): Sigstore bundle referrers, cosign's .att tag, "
                                        "both, or off.")
nothing_to_do_option = click.option(
    "--exit-code-nothing-to-do", "nothing_to_do_code", is_flag=True,
    help=f"Exit {NOTHING_TO_DO} instead of 0 when the work was done already (the command says `nothing to do`), for "
         "a caller that tells the two apart by exit code, as `execute` does.")
PLAN_OPTIONS = (matrix_option, strict_option, only_option, registry_option)
RUN_OPTIONS = (*PLAN_OPTIONS, report_option, quiet_option, jobs_option, attestations_option)
NODE_OPTIONS = (matrix_option, strict_option, registry_option, report_option, quiet_option)


def options(*stack: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Apply a stack of click options (declared once above) to a command."""
    def apply(func: Any) -> Any:
        for option in reversed(stack):
            func = option(func)
        return func
    return apply


def parse_expect(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    out = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--expect {item!r} is not KEY=VALUE")
        out.append((key.strip(), value.strip()))
    return tuple(out)
