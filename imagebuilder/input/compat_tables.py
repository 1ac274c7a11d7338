"""Compatibility tables as documents: written (JSON, sorted keys), compared (the lines `compat refresh` prints), and
merged (tables read from several indexes, PyPI's first, into one; a disagreement between two verified variants is
recorded as a conflict).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version

SCHEMA_VERSION = 1


def write_table(table: Mapping[str, object], path: str | os.PathLike[str]) -> None:
    """Write ``table`` as JSON (indent=1, sorted keys, trailing newline)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(target)


def _as_dict(value: object) -> dict[str, object]:
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    return {}


def fmt(value: object) -> str:
    """A table value as a diff or a warning prints it (`none`, JSON for lists and mappings)."""
    if value is None:
        return "none"
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _version_sort(keys: Iterable[str]) -> list[str]:
    def key(k: str) -> tuple[int, Version | str]:
        try:
            return (0, Version(k))
        except InvalidVersion:
            return (1, k)

    return sorted(keys, key=key)


def _diff_mapping(prefix: str, old: Mapping[str, object], new: Mapping[str, object], what: str) -> list[str]:
    lines: list[str] = []
    for key in sorted(old.keys() | new.keys()):
        if key not in new:
            lines.append(f"{prefix}: {what} {key} removed (was {fmt(old[key])})")
        elif key not in old:
            lines.append(f"{prefix}: {what} {key} added ({fmt(new[key])})")
        elif old[key] != new[key]:
            lines.append(f"{prefix}: {what} {key} {fmt(old[key])} -> {fmt(new[key])}")
    return lines


def _changed(prefix: str, old: Mapping[str, object], new: Mapping[str, object], keys: Iterable[str]) -> list[str]:
    """`{prefix}{key} old -> new` for each of `keys` whose value differs."""
    return [f"{prefix}{key} {fmt(old.get(key))} -> {fmt(new.get(key))}" for key in keys if old.get(key) != new.get(key)]


def diff_tables(old: dict[str, object], new: dict[str, object]) -> list[str]:
    """Human-readable lines describing how ``new`` differs from ``old``."""
    lines = [f"{key}: {fmt(old.get(key))} -> {fmt(new.get(key))}" for key in ("schema", "source")
             if old.get(key) != new.get(key)]
    old_floor, new_floor = _as_dict(old.get("driver_floor")), _as_dict(new.get("driver_floor"))
    for cuda in _version_sort(old_floor.keys() | new_floor.keys()):
        if cuda not in new_floor:
            lines.append(f"driver_floor: CUDA {cuda} removed")
        elif cuda not in old_floor:
            lines.append(f"driver_floor: CUDA {cuda} added ({fmt(new_floor[cuda])})")
        else:
            lines += _diff_mapping(
                f"driver_floor {cuda}", _as_dict(old_floor[cuda]), _as_dict(new_floor[cuda]), "driver"
            )

    old_rel, new_rel = _as_dict(old.get("releases")), _as_dict(new.get("releases"))
    for release in _version_sort(old_rel.keys() | new_rel.keys()):
        if release not in new_rel:
            lines.append(f"removed release {release}")
            continue
        o, n = _as_dict(old_rel.get(release)), _as_dict(new_rel[release])
        if release not in old_rel:
            accels = ", ".join(sorted(_as_dict(n.get("variants"))))
            lines.append(f"added release {release} (variants: {accels or 'none'})")
            continue
        lines += _changed(f"{release}: ", o, n, sorted((o.keys() | n.keys()) - {"variants"}))
        ov, nv = _as_dict(o.get("variants")), _as_dict(n.get("variants"))
        for accel in sorted(ov.keys() | nv.keys()):
            if accel not in nv:
                lines.append(f"{release}: variant {accel} removed")
                continue
            if accel not in ov:
                lines.append(f"{release}: variant {accel} added (cuda {fmt(_as_dict(nv[accel]).get('cuda'))})")
                continue
            ova, nva = _as_dict(ov[accel]), _as_dict(nv[accel])
            where = f"{release} {accel}"
            lines += _changed(f"{where}: ", ova, nva, sorted((ova.keys() | nva.keys()) - {"packages", "constraints"}))
            lines += _diff_mapping(where, _as_dict(ova.get("packages")), _as_dict(nva.get("packages")), "pin")
            lines += _diff_mapping(
                where, _as_dict(ova.get("constraints")), _as_dict(nva.get("constraints")), "constraint"
            )
    return lines


# --------------------------------------------------------------------------- merge


def _verified(variant: Mapping[str, object]) -> bool:
    return bool(variant.get("verified", True))  # what compat.CompatTable assumes for a missing flag


def _merge_release(merged: dict[str, object], entry: Mapping[str, object]) -> None:
    """Fold the release-level fields of ``entry`` into ``merged`` (variants aside)."""
    for key, value in entry.items():
        if key == "variants":
            continue
        current = merged.get(key)
        if key == "python":
            merged[key] = _version_sort({str(p) for seq in (current, value) if isinstance(seq, list) for p in seq})
        elif key == "glibc":
            floors = {str(g) for g in (current, value) if g is not None}
            merged[key] = _version_sort(floors)[0] if floors else None
        elif current is None:
            merged[key] = copy.deepcopy(value)


def merge_tables(tables: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """Merge tables built from several indexes (PyPI's first, then PyTorch's) into one.

    * releases: the union; per release, the variants' union.  A verified variant
      replaces an unverified one of the same accelerator (PyPI's ``cpu``
      placeholder gives way to a verified ``cpu`` from PyTorch's index); of two
      verified ones the earlier table's wins.  When those disagree on anything
      but ``index`` (the same build served by two indexes is no conflict), a
      record ``{"release", "accelerator", "kept", "dropped", "fields"}`` (the
      sources of the kept and dropped variant, and the keys they differ on) is
      appended to the result's ``"conflicts"`` list; the key is left out when
      there are none.  Conflicts recorded in the input tables are carried over.
    * per release: ``python`` is the union sorted by version, ``glibc`` the lowest
      floor, every other field (``torchvision``, ``torchaudio``,
      ``requires_python``) the first non-null value.
    * ``source``: the tables' distinct sources joined by ``", "``; ``generated``
      and ``driver_floor`` come from the first table; ``schema`` is 1.

    The input tables are not modified.  Raises :class:`ValueError` for no tables.
    """
    if not tables:
        raise ValueError("merge_tables needs at least one table")
    releases: dict[str, dict[str, object]] = {}
    variants: dict[str, dict[str, dict[str, object]]] = {}
    owner: dict[tuple[str, str], str] = {}  # (release, accelerator) -> source of the variant kept
    conflicts: list[object] = []
    sources: list[str] = []
    for table in tables:
        source = str(table.get("source") or "")
        if source and source not in sources:
            sources.append(source)
        previous = table.get("conflicts")
        if isinstance(previous, list):
            conflicts.extend(copy.deepcopy(previous))
        for release, raw in _as_dict(table.get("releases")).items():
            entry = _as_dict(raw)
            if release not in releases:
                releases[release] = {}
                variants[release] = {}
            _merge_release(releases[release], entry)
            kept = variants[release]
            for accel, raw_variant in _as_dict(entry.get("variants")).items():
                new = copy.deepcopy(_as_dict(raw_variant))
                old = kept.get(accel)
                if old is None or (_verified(new) and not _verified(old)):
                    kept[accel] = new
                    owner[(release, accel)] = source
                elif _verified(new) and _verified(old):
                    differ = sorted(k for k in (old.keys() | new.keys()) - {"index"} if old.get(k) != new.get(k))
                    if differ:
                        conflicts.append(
                            {
                                "release": release,
                                "accelerator": accel,
                                "kept": owner[(release, accel)],
                                "dropped": source,
                                "fields": differ,
                            }
                        )
    merged_releases: dict[str, object] = {}
    for release in _version_sort(releases):
        entry = releases[release]
        entry["variants"] = dict(sorted(variants[release].items()))
        merged_releases[release] = entry
    first = tables[0]
    merged: dict[str, object] = {
        "schema": SCHEMA_VERSION,
        "generated": first.get("generated"),
        "source": ", ".join(sources),
        "driver_floor": copy.deepcopy(first.get("driver_floor")),
        "releases": merged_releases,
    }
    if conflicts:
        merged["conflicts"] = conflicts
    return merged


