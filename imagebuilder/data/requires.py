"""The requirements of installed distributions, for installing them when some of their own pins are
replaced (entry overrides): pip has no override, so torch installs without its dependencies and then
everything else it requires installs from this list.

    python requires.py DIST[,DIST...] [SKIP ...]

Prints one requirement per line (markers evaluated for this Python, no extras asked for), leaving out the
distributions given (they are installed together) and the names to SKIP (the overridden wheels).
"""

from __future__ import annotations

import importlib.metadata
import re
import sys

from pip._vendor.packaging.requirements import Requirement


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(dists: list[str], skip: list[str]) -> int:
    leave = {canonical(n) for n in [*dists, *skip]}
    out = []
    for dist in dists:
        for text in importlib.metadata.requires(dist) or []:
            req = Requirement(text)
            if canonical(req.name) in leave or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
                continue
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            line = f"{req.name}{extras}{req.specifier}"
            if line not in out:
                out.append(line)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1].split(","), sys.argv[2:]))
