"""Mutant `torch_version`: the installed torch says it is another release. Must be caught by versions.torch.

Run once in the mutant layer (`RUN python /tmp/mutate.py [version|metadata|both]`, as root, with the image's
own Python): it rewrites, without importing torch,
- `version`: torch/version.py's `__version__` (what torch.__version__ says), and/or
- `metadata`: the `Version:` line of torch's dist-info METADATA (what pip and importlib.metadata say),
to the same release with its patch number raised by one (2.13.0+cpu -> 2.13.1+cpu). The default is `both`."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import re
import sys
from pathlib import Path


def bumped(version: str) -> str:
    return re.sub(r"^(\d+)\.(\d+)\.(\d+)", lambda m: f"{m[1]}.{m[2]}.{int(m[3]) + 1}", version, count=1)


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "both"
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        sys.exit("torch is not installed")
    if what in ("version", "both"):
        path = Path(spec.origin).parent / "version.py"
        text = path.read_text()
        new = re.sub(r"^__version__ = '([^']+)'", lambda m: f"__version__ = '{bumped(m[1])}'", text, count=1,
                     flags=re.M)
        if new == text:
            sys.exit(f"no __version__ line in {path}")
        path.write_text(new)
        print(f"MUTANT torch_version: {path}: {re.search(r'^__version__.*$', new, re.M)[0]}")  # type: ignore[index]
    if what in ("metadata", "both"):
        dist = md.distribution("torch")
        meta = next(Path(str(dist.locate_file(f))) for f in dist.files or []
                    if f.name == "METADATA" and f.parent.name.endswith(".dist-info"))
        text = meta.read_text()
        new = re.sub(r"^Version: (.+)$", lambda m: f"Version: {bumped(m[1])}", text, count=1, flags=re.M)
        meta.write_text(new)
        print(f"MUTANT torch_version: {meta}: {re.search(r'^Version: .+$', new, re.M)[0]}")  # type: ignore[index]


if __name__ == "__main__":
    main()
