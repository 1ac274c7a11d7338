"""`python -m imagebuilder.cli`, as before the command line was a package (`python -m imagebuilder` is the
usual way)."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
