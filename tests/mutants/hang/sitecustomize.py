"""Mutant `hang`: the smoke suite never finishes. Must be caught by the runner's timeout (smoke.timeout): the
host reports the record `suite` ("timed out after N s; the container was killed") and the container must be
gone afterwards. Run it with a short smoke.timeout (e.g. 60): the suite's own per-check timeouts are minutes.

Installed as sitecustomize.py on the image's Python path. It hangs only the suite's main process (python
.../suite.py without --worker): any other Python in the image (the build's own steps) runs normally."""

from __future__ import annotations

import os
import sys
import time

if os.path.basename(sys.argv[0] if sys.argv else "") == "suite.py" and "--worker" not in sys.argv:
    print("MUTANT hang: the suite sleeps forever", file=sys.stderr, flush=True)
    while True:
        time.sleep(3600)
