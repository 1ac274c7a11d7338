"""`python -m imagebuilder` and the `imagebuilder` command. Signal handlers go in before anything heavy is
imported, so a signal during start-up is handled like one at any later moment."""

from __future__ import annotations

import sys

from .interrupts import Interrupts


def main() -> int:
    interrupts = Interrupts.install()
    try:
        from .cli import main as cli_main
    except BaseException:  # a signal's exception, however the import machinery wrapped it
        if interrupts.code is None:  # (no signal came: a real error of the import, shown as it is)
            raise
        # A signal while a class body runs can come out of `__set_name__` wrapped in a RuntimeError (Python 3.11).
        sys.stderr.write("interrupted\n")
        return interrupts.finish(130)
    return cli_main(interrupts=interrupts)


if __name__ == "__main__":
    sys.exit(main())
