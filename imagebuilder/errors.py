"""Error classes. Each carries its exit code and the place (file, line, key) it names.

`cli.main()` is the only place that turns one into an exit code and a message. Elsewhere an error of the
package's own is caught only to fail its node (the ledger records it), to undo what was pointed, or where no
answer is an answer (a registry that does not answer: no earlier image); everything else raises
(tests/unit/test_architecture.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Where:
    """A place in an input file: the file, and optionally a line/column and a dotted key."""

    file: str
    line: int | None = None
    column: int | None = None
    key: str | None = None

    def __str__(self) -> str:
        out = self.file
        if self.line is not None:
            out += f":{self.line}"
            if self.column is not None:
                out += f":{self.column}"
        if self.key:
            out += f": {self.key}"
        return out


NOTHING_TO_DO = 3
"""The exit code of a node command (`node stage`, `node verify`, `publish`) whose work was done already, when its
caller asks for it with `--exit-code-nothing-to-do` (as `execute` does); without the flag it exits 0, so an
engine's job that finds its work done passes. Not an error: nothing is raised for it."""


class ImageBuilderError(Exception):
    """Base class: a failure the user can act on. Never shown with a traceback."""

    exit_code = 1

    def __init__(self, message: str, *, where: Where | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        head = f"{self.where}: {self.message}" if self.where else self.message
        return f"{head}\n  hint: {self.hint}" if self.hint else head


class InputError(ImageBuilderError):
    """A bad matrix, layer or template. Raised before anything is built."""

    exit_code = 2


class EngineUnavailable(ImageBuilderError):
    """The Docker engine could not be reached at start."""

    exit_code = 2


class IndexUnavailable(ImageBuilderError):
    """A package index could not be reached (nothing was changed)."""

    exit_code = 2


class EngineError(ImageBuilderError):
    """The engine or registry refused an operation (build step, push, run)."""

    exit_code = 1


class RegistryAccess(ImageBuilderError):
    """A registry will not let this command work as it is set up: its TLS certificate is not trusted, its token
    service refused the credentials (or the registry refused the tokens it issued), or the credentials may not
    push where the command must. Retrying does not help; nothing was changed by it."""

    exit_code = 2


class Refused(ImageBuilderError):
    """A publishing rule refused an operation (no pass record, an immutable tag that names another digest, a
    key tag that names another image): nothing was changed by it."""

    exit_code = 1


class RunFailed(ImageBuilderError):
    """A run finished, but not everything asked for passed (details are in the summary)."""

    exit_code = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI job cancelled, a pod stopped): handled like Ctrl-C, but the exit code is 143."""

    exit_code = 143


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A ' (did you mean X?)'-style hint, or None if nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


def unknown_key(key: str, allowed: Iterable[str], where: Where) -> InputError:
    allowed = sorted(allowed)
    hint = did_you_mean(key, allowed) or f"allowed keys: {', '.join(allowed)}"
    return InputError(f"unknown key {key!r}", where=where, hint=hint)
