"""How a run stops on SIGINT (Ctrl-C, a CI cancel) and SIGTERM (a pod or job stopped).

The first signal raises in the main thread (KeyboardInterrupt, or `Terminated` for SIGTERM), so every
`finally` runs: containers are removed, reports are written, nothing more is tagged or pushed. A second
signal does not raise (that would cut the clean-up short); it says that the clean-up is still running. A
third ends the process at once. Once the exit code is decided (`finish`), any signal ends the process at
once with its own code, so a signal can never turn into exit 0.

Handlers are installed explicitly, whatever the parent left: a process started in the background of a
non-interactive shell inherits SIGINT *ignored*, and Python keeps it ignored, so without this a CI cancel
or a test's SIGINT would be lost and the run would finish (and publish) as if nothing had happened.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from types import FrameType

from .errors import Terminated

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class Interrupts:
    """The signals one process received, and what they decide about its exit code."""

    received: list[int] = field(default_factory=list)
    finishing: bool = False
    previous: dict[int, object] = field(default_factory=dict)

    @classmethod
    def install(cls) -> Interrupts:
        """Handle SIGINT and SIGTERM from now on (only the main thread may install signal handlers; in any
        other thread this returns an object that never sees a signal)."""
        interrupts = cls()
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                interrupts.previous[signum] = signal.signal(signum, interrupts.handle)
        return interrupts

    def restore(self) -> None:
        """Put back the handlers that were there before `install` (for callers inside a longer process)."""
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self.previous.clear()

    @property
    def code(self) -> int | None:
        """128 + the first signal's number (130 for SIGINT, 143 for SIGTERM), or None without a signal."""
        return 128 + self.received[0] if self.received else None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.finishing or len(self.received) >= 3:
            _flush()
            os._exit(self.code or 128 + signum)
            return  # not reached (os._exit does not return)
        if len(self.received) == 2:
            sys.stderr.write("imagebuilder: still removing containers and writing reports; "
                             "signal once more to quit without them\n")
            return
        if signum == signal.SIGTERM:
            raise Terminated()
        raise KeyboardInterrupt()

    def finish(self, code: int) -> int:
        """The process's exit code: the first signal's, if one came, else `code`. From here on a signal
        ends the process at once with its own code."""
        self.finishing = True
        return self.code if self.code is not None else code


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
