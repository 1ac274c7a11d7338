"""The pip installs of a plan's nodes, held to the lock beside the matrix: what each install asks for, the name the lock
files its wheels under, and the check that the lock covers every one.

A layer template installs Python packages through `macros.j2` (`pip_install`, `torch_install`, `cuda_libs`, the team
layers' included): each call is recorded while the node renders as an `Install` (what it asks: its requirements, the
plan's pins and overrides, the index, the wheelhouse, the Python) and named by `key`: a hash of what it asks and of the
install before it in the node's chain (`after`; none for the chain's first), so one name stands for one resolution
whichever entries share it, and a change anywhere below an install (a parent's wheels, a layer's requirement) names it
anew. The lock (`installs.<key>`) gives each install the exact wheels it adds: name, version, file, source and sha256.

Under the lock a node's installs take only those files: each call installs its own requirements file
(`name==version --hash=sha256:…`, `--no-deps --require-hashes`), so pip itself refuses a file the index now serves
under the same name with other bytes, naming both hashes, and installs nothing the lock does not name.
`plan/wheels.py` checks, when the plan is loaded, that the lock pins every install the plan's nodes make; what an
install resolves to is the lock command's to ask (`ports/resolver.py`). This module reads no index and no file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from ..input.lock import LockedInstall

# The platform installs are resolved for: the wheels' tags pip accepts in a glibc image of x86-64 (the base images
# imagebuilder supports are glibc 2.28 or later: Debian 10+, Ubuntu 20.04+, UBI 8+).
PLATFORM = "x86_64-manylinux_2_28"
WHEELHOUSE_SOURCE = "wheelhouse"  # a locked wheel's `source` when it came from the entry's wheelhouse (pinned there)
KINDS = ("venv", "target")  # into the entry's venv (its pins as constraints); into a --target folder (CUDA libraries)


@dataclass(frozen=True)
class Install:
    """One pip install a node's template makes: its `kind`, the requirements it names, the pins that constrain it
    (`constraints`), the versions it installs over torch's own pins (`overrides`), the index (`index`: the URL as the
    matrix gives it) and the wheelhouse it takes wheels from (the lock's name for it, or None), for the entry's Python;
    `after`: the key of the install before it in the node's chain (None: the first). `key`: its name in the lock."""

    kind: str
    requirements: tuple[str, ...]
    index: str
    python: str
    constraints: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    wheelhouse: str | None = None
    after: str | None = None

    @property
    def key(self) -> str:
        asked = {"kind": self.kind, "requirements": list(self.requirements), "index": self.index,
                 "python": self.python, "constraints": list(self.constraints), "overrides": list(self.overrides),
                 "wheelhouse": self.wheelhouse, "after": self.after, "platform": PLATFORM}
        return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:16]

    def said(self) -> str:
        """The install in a line: its requirements and index."""
        reqs = ", ".join(self.requirements[:4]) + (f" and {len(self.requirements) - 4} more"
                                                   if len(self.requirements) > 4 else "")
        return f"pip install {reqs} from {self.index}"


def file_text(locked: LockedInstall) -> str:
    """The requirements file an install takes under the lock: each wheel it adds, pinned by version and hash."""
    return "".join(f"{w.name}=={w.version} --hash=sha256:{w.sha256}\n" for w in locked.wheels)
