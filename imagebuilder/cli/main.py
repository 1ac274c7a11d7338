"""Errors become exit codes here, and only here: one command runs, and whatever it raises becomes one message
and its exit code (`errors`); a signal always wins."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..errors import ImageBuilderError
from ..interrupts import Interrupts
from .root import cli

if TYPE_CHECKING:
    from rich.console import Console


def main(argv: list[str] | None = None, interrupts: Interrupts | None = None) -> int:
    """Run one command; every error becomes its exit code and one message here. A signal always wins:
    130 after SIGINT, 143 after SIGTERM, whatever the command was doing (see `interrupts`)."""
    own = interrupts is None  # called inside a longer process (tests): its handlers are put back after
    interrupts = interrupts or Interrupts.install()
    try:
        code = _invoke(argv)
    except KeyboardInterrupt:  # outside click (click turns one inside a command into Abort)
        _err().print("interrupted: containers were removed, nothing more was tagged or pushed")
        code = 130
    if own:
        interrupts.restore()
        return interrupts.code or code
    return interrupts.finish(code)


def _invoke(argv: list[str] | None) -> int:
    try:
        code = cli.main(args=argv, prog_name="imagebuilder", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        _err().print("interrupted: containers were removed, nothing more was tagged or pushed")
        return 130
    except click.ClickException as exc:
        exc.show()
        return int(exc.exit_code)
    except ImageBuilderError as exc:
        from rich.markup import escape

        _err().print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return exc.exit_code
    return int(code or 0)


def _err() -> Console:
    """stderr, for an error's one message (rich is loaded only when there is one to print)."""
    from rich.console import Console

    return Console(stderr=True)
