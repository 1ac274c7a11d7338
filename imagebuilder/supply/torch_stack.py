"""The torch stack of an image: its torch, triton and nvidia-* Python distributions as its own Python finds them
(every copy on its path), each with its version, where it lies, the hash of its RECORD, the size of every shared
library it installed (the libraries torch loads) and the files whose content no longer matches the sha256 its
RECORD gives, or that are gone (compiled `.pyc` files aside: Python makes them again). A layer above the torch node
may not change it: a layer whose requirements replace, downgrade or add a second copy of one of them (a team's
`pip install` that pulls another torch build), or that edits one of their files in place (a `sed -i` patch, an
appended line: version and RECORD untouched), fails in `stage`, on CPU, before any GPU time is spent, naming the
file, the distribution and the layer. A new distribution (nvcc's wheels in `devel`) is no change of the stack.
Checking every file costs a read of the stack (0.85 s for CPU torch 2.13's 12,252 files, 698 MB, on the 2-core CI
machine).

`probe` runs a few lines of Python in a container of the image (no network); `changes` is the rule. The rule is
pure; the probe is the engine's."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from ..ports import Engine

MARK = "torch-stack"  # the probe's $0: what the container runs, in the engine's logs
STACK_NAMES = re.compile(r"(torch|triton|pytorch-triton.*|nvidia-.+)")
EDITED_SHOWN = 20  # the edited files a probe names per distribution (and how many there are)
PROBE = r"""
import base64, hashlib, importlib.metadata as md, json, os, re
def edited(d):
    out = []
    for f in d.files or []:
        if f.hash is None or f.hash.mode != "sha256" or str(f).endswith(".pyc"):
            continue
        h = hashlib.sha256()
        try:
            with open(f.locate(), "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        except OSError:
            out.append(str(f) + " (gone)")
            continue
        if base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode() != f.hash.value:
            out.append(str(f))
    return sorted(out)
out = []
for d in md.distributions():
    name = re.sub(r"[-_.]+", "-", str(d.metadata["Name"] or "")).lower()
    if not re.fullmatch(r"(torch|triton|pytorch-triton.*|nvidia-.+)", name):
        continue
    files = [f for f in (d.files or []) if str(f).endswith(".so") or ".so." in str(f)]
    libs = []
    for f in files:
        path = str(f.locate())
        libs.append([str(f), os.path.getsize(path) if os.path.exists(path) else -1])
    changed = edited(d)
    out.append({"name": name, "version": d.version, "path": str(getattr(d, "_path", "")),
                "record": hashlib.sha256((d.read_text("RECORD") or "").encode()).hexdigest(), "libs": sorted(libs),
                "edited": changed[:EDITED_SHOWN], "edited_count": len(changed)})
print("\n" + json.dumps(out))
""".replace("EDITED_SHOWN", str(EDITED_SHOWN))


@dataclass(frozen=True)
class Dist:
    name: str  # normalized (PEP 503)
    version: str
    path: str  # its dist-info folder
    record: str  # sha256 of its RECORD
    libs: tuple[tuple[str, int], ...]  # (file, size) of each shared library it installed
    edited: tuple[str, ...] = ()  # files whose content no longer matches its RECORD (the first EDITED_SHOWN)
    edited_count: int = 0  # how many there are

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Dist:
        edited = tuple(str(f) for f in doc.get("edited") or ())
        return cls(str(doc["name"]), str(doc["version"]), str(doc.get("path") or ""), str(doc.get("record") or ""),
                   tuple((str(f), int(s)) for f, s in doc.get("libs") or ()), edited,
                   int(doc.get("edited_count") or len(edited)))


def parse(logs: str) -> tuple[Dist, ...]:
    """The stack from the probe's output (its last line); empty for an image without Python or torch."""
    for line in reversed(logs.strip().splitlines()):
        if line.startswith("["):
            try:
                return tuple(Dist.from_json(d) for d in json.loads(line) if STACK_NAMES.fullmatch(str(d["name"])))
            except (ValueError, KeyError, TypeError):
                return ()
    return ()


def probe(engine: Engine, image: str) -> tuple[Dist, ...]:
    """The torch stack of `image`, as its own Python sees it (no network, a timeout, the container removed)."""
    command = ["sh", "-c", 'exec "$(command -v python || command -v python3)" -c "$1"', MARK, PROBE]
    result = engine.run(image, command, timeout=120, host_config={"network_mode": "none"})
    return parse(result.logs) if result.exit_code == 0 else ()


def _edits(before: Dist, after: Dist, layer: str) -> str:
    """The files of one distribution the layer edited (those that matched RECORD below it and do not now)."""
    new = [f for f in after.edited if f not in before.edited]
    if not new and after.edited_count <= before.edited_count:
        return ""
    more = after.edited_count - before.edited_count - len(new)
    return (f"layer {layer} edits {', '.join(new) or 'files'}{f' and {more} more file(s)' if more > 0 else ''} of "
            f"{after.name} {after.version} in {after.path or '?'}: the content no longer matches the sha256 its "
            "RECORD gives (version and RECORD untouched); install a patched build instead, or patch in a layer of "
            "your own on purpose with a new version")


def _older(new: str, old: str) -> bool:
    try:
        return Version(new) < Version(old)
    except InvalidVersion:
        return False


def changes(below: Sequence[Dist], above: Sequence[Dist], layer: str, under: str) -> list[str]:
    """How the layer `layer` changed the torch stack of the image below it (`under` names that image's node):
    each replaced, downgraded, removed or duplicated distribution, naming both versions, and each distribution
    whose files the layer edited in place, naming them. None when `below` has no torch (the torch node itself,
    and the layers below it)."""
    if not any(d.name == "torch" for d in below):
        return []
    out = []
    for name in sorted({d.name for d in below}):
        was = sorted((d for d in below if d.name == name), key=lambda d: d.path)
        now = sorted((d for d in above if d.name == name), key=lambda d: d.path)
        old = was[0]
        if now == was:
            continue
        if [dataclasses.replace(d, edited=(), edited_count=0) for d in now] == \
                [dataclasses.replace(d, edited=(), edited_count=0) for d in was]:
            out += [line for before, after in zip(was, now, strict=True) if (line := _edits(before, after, layer))]
            continue
        if not now:
            out.append(f"layer {layer} removes {name} {old.version} (installed by {under})")
        elif len(now) > len(was):
            out.append(f"layer {layer} adds a second copy of {name}: " + " and ".join(
                f"{d.version} in {d.path or '?'}" for d in now) + f" ({under} has {old.version})")
        elif now[0].version != old.version:
            verb = "downgrades" if _older(now[0].version, old.version) else "replaces"
            out.append(f"layer {layer} {verb} {name} {old.version} (installed by {under}) with {now[0].version}")
        else:
            out.append(f"layer {layer} replaces {name} {old.version} (installed by {under}) with another build of "
                       f"{now[0].version}: its files differ")
    return out
