"""Image signatures with cosign: optional (where it is installed and given a key in IMAGEBUILDER_COSIGN_KEY), and
never a reason to fail a run: a signature that fails is noted on its node."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Cosign:
    status: str  # on | skipped
    reason: str = ""
    key: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, push: bool, env: Mapping[str, str]) -> Cosign:
        if not push:
            return cls("skipped", "nothing is pushed (--no-push)")
        if shutil.which("cosign") is None:
            return cls("skipped", "cosign is not installed; images are not signed")
        if not env.get("IMAGEBUILDER_COSIGN_KEY"):
            return cls("skipped", "set IMAGEBUILDER_COSIGN_KEY to sign with cosign")
        return cls("on", key=env["IMAGEBUILDER_COSIGN_KEY"])

    def meta(self) -> dict[str, str]:
        """What report.json says of signing (never the key)."""
        return {"tool": "cosign", "status": self.status, **({"reason": self.reason} if self.reason else {})}

    def sign(self, ref: str) -> str | None:
        """Sign a published image by digest; the outcome, or None when signing is off."""
        if self.status != "on" or self.key is None:
            return None
        try:
            proc = subprocess.run(["cosign", "sign", "--yes", "--tlog-upload=false", "--key", self.key, ref],
                                  capture_output=True, text=True, timeout=300, env={**os.environ, "COSIGN_YES": "true"})
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"not signed: cosign did not run to its end ({type(exc).__name__})"
        return "signed" if proc.returncode == 0 else \
            f"not signed: cosign exited {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:200]}"
