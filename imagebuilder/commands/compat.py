"""`compat show` and `compat refresh`: the compatibility table's releases as a document, and a new table read from
package indexes with what changed against the one on disk."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import IndexUnavailable, InputError, did_you_mean
from ..input import compat_refresh
from ..input.compat import CompatTable, Release


def releases(table: CompatTable, torch_version: str | None) -> list[Release]:
    """The table's releases, or only `torch_version`'s (an input error when the table lacks it)."""
    found = [r for r in table.releases if torch_version in (None, r.torch)]
    if torch_version and not found:
        raise InputError(f"torch {torch_version} is not in the table",
                         hint=did_you_mean(torch_version, [r.torch for r in table.releases]))
    return found


def document(table: CompatTable, shown: list[Release]) -> list[dict[str, Any]]:
    """`compat show --json`: per release, its Pythons, glibc, companions and each variant's versions."""
    return [{
        "torch": r.torch, "python": list(r.python), "requires_python": r.requires_python, "glibc": r.glibc,
        "torchvision": r.torchvision, "torchaudio": r.torchaudio,
        "variants": {v.accelerator: {"cuda": v.cuda, "cudnn": v.cudnn, "nccl": v.nccl, "triton": v.triton,
                                     "index": v.index, "verified": v.verified,
                                     "min_driver": table.min_driver(v.cuda) if v.cuda else None,
                                     "packages": dict(v.packages)} for v in r.variants},
    } for r in shown]


@dataclass(frozen=True)
class Refreshed:
    """A table read from the indexes, not written yet: what it would change in the one at `out`."""

    table: dict[str, object]
    conflicts: list[object]  # where the indexes disagree (the first index won)
    changes: list[str]
    releases: int


def refresh(urls: tuple[str, ...], out: Path, min_torch: str) -> Refreshed:
    """Read the table from each index (merged in order: the first wins conflicts) and diff it against `out`'s."""
    try:
        tables = [compat_refresh.fetch_table(url, min_torch=min_torch) for url in urls]
    except compat_refresh.IndexUnreachable as exc:
        raise IndexUnavailable(f"{exc}; the table at {out} is unchanged") from None
    new = tables[0] if len(tables) == 1 else compat_refresh.merge_tables(tables)
    conflicts = new.get("conflicts")
    old: dict[str, object] = {}
    if out.is_file():
        try:
            old = dict(json.loads(out.read_text(encoding="utf-8")))
        except ValueError:
            old = {}
    found = new.get("releases")
    return Refreshed(new, conflicts if isinstance(conflicts, list) else [], compat_refresh.diff_tables(old, new),
                     len(found) if isinstance(found, dict) else 0)
