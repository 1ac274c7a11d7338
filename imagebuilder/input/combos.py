"""The matrix's combinations, located: `matrix:` axes crossed, `exclude:` and `include:` applied the way GitHub
Actions does, each combination (`Combo`) keeping where each of its values was written. A matrix that would make
more than the entry cap is refused before its product is built. Part of the reader: nothing is resolved here.
"""

from __future__ import annotations

import collections
import itertools
import math
from dataclasses import dataclass
from typing import Any

from ..declarations import schema
from ..errors import InputError
from .reader import AXES, CASCADED_KEYS, ENTRY_ONLY_KEYS, Combo, Path_, Reader, label

ENTRY_KEYS = (*AXES, *ENTRY_ONLY_KEYS, *CASCADED_KEYS)  # what an include may set


@dataclass(frozen=True)
class Crossed:
    """The combinations in the file's order (the product's, then the includes that matched none), what each exclude
    removed and why, and the notes (an exclude that matched nothing)."""

    combos: list[Combo]
    excluded: list[tuple[str, str]]
    notes: list[str]


@dataclass(frozen=True)
class Crossing:
    """Crosses one file's axes: `max_entries` caps the entries (and the values of an axis, the rules of `include`
    and `exclude`); under `strict` a note is an error."""

    read: Reader
    max_entries: int
    strict: bool

    def cross(self, top: dict[str, Any]) -> Crossed:
        values = self.axes(top)
        includes = self.read.listof(top.get("include", schema.value("include")), ("include",))
        count = math.prod(len(v) for v in values.values())
        if count > self.max_entries:
            sizes = " × ".join(f"{len(v)} {axis}" for axis, v in values.items())
            raise self.too_many(f"the matrix would make {count} entries ({sizes})", ("matrix",))
        for key in ("include", "exclude"):  # each rule is checked against every entry
            if len(top.get(key) or []) > self.max_entries:
                raise self.too_many(f"{len(top[key])} {key} rules", (key,))
        names = list(values)
        combos = [Combo({name: values[name][i] for name, i in zip(names, prod, strict=True)}, ("matrix",),
                        {name: ("matrix", name, i) for name, i in zip(names, prod, strict=True)})
                  for prod in itertools.product(*(range(len(v)) for v in values.values()))]
        notes: list[str] = []
        combos, excluded = self.exclude(top, combos, names, notes)
        for combo in combos:
            combo.original = dict(combo.values)
        result = combos + self.include(includes, combos)
        if not result:
            raise self.read.fail("the matrix has no entries left after exclude", ("exclude",))
        if len(result) > self.max_entries:
            raise self.too_many(f"the matrix makes {len(result)} entries with its includes", ("include",))
        return Crossed(result, excluded, notes)

    def axes(self, top: dict[str, Any]) -> dict[str, list[str]]:
        """Each axis's values, checked for their kind; none empty, none twice."""
        axes = self.read.mapping(top["matrix"], ("matrix",), AXES)
        if not axes:
            raise self.read.fail("no axes: give at least `torch` and `accelerator`", ("matrix",))
        values: dict[str, list[str]] = {}
        for axis, raw in axes.items():
            items = self.read.listof(raw, ("matrix", axis))
            if not items:
                raise self.read.fail("axis is empty: it would produce no entries", ("matrix", axis))
            if len(items) > self.max_entries:
                raise self.too_many(f"the axis has {len(items)} values", ("matrix", axis))
            values[axis] = [self.read.scalar(v, _kind(axis), ("matrix", axis, i)) for i, v in enumerate(items)]
            dupes = sorted(v for v, n in collections.Counter(values[axis]).items() if n > 1)
            if dupes:
                raise self.read.fail(f"value {dupes[0]!r} appears twice", ("matrix", axis))
        return values

    def exclude(self, top: dict[str, Any], combos: list[Combo], names: list[str],
                notes: list[str]) -> tuple[list[Combo], list[tuple[str, str]]]:
        """The combos no exclude rule matches, and what each rule removed (`combination`, `why`)."""
        excluded: list[tuple[str, str]] = []
        for i, rule in enumerate(self.read.listof(top.get("exclude", schema.value("exclude")), ("exclude",))):
            path = ("exclude", i)
            rule = self.read.mapping(rule, path, tuple(names))
            if not rule:
                raise self.read.fail("an empty exclude would remove every entry", path)
            want = {k: self.read.scalar(v, _kind(k), (*path, k)) for k, v in rule.items()}
            kept = []
            for combo in combos:
                if all(combo.values.get(k) == v for k, v in want.items()):
                    excluded.append((label(combo.values), f"exclude[{i}] {label(want)} ({self.read.where(path)})"))
                else:
                    kept.append(combo)
            if len(kept) == len(combos):
                self.note(f"{self.read.where(path)}: exclude {label(want)} matches no entry", path, notes)
            combos = kept
        return combos, excluded

    def include(self, includes: list[Any], combos: list[Combo]) -> list[Combo]:
        """Each include's keys set on the combos whose axis values it matches; one that matches none is a new combo
        (it must name its torch and accelerator)."""
        added: list[Combo] = []
        for i, rule in enumerate(includes):
            path = ("include", i)
            rule = self.read.mapping(rule, path, (*tuple(k for k in ENTRY_KEYS if k != "base_image"), "base_image"))
            if not rule:
                raise self.read.fail("an empty include adds nothing", path)
            matched = False
            for combo in combos:
                if all(combo.original[k] == str(v) for k, v in rule.items() if k in combo.original):
                    combo.values.update(rule)
                    combo.paths.update({k: (*path, k) for k in rule})
                    matched = True
            if not matched:
                missing = [a for a in ("torch", "accelerator") if a not in rule]
                if missing:
                    raise self.read.fail(
                        f"include matches no entry, and as a new entry it lacks {', '.join(missing)}", path)
                added.append(Combo(dict(rule), path, {k: (*path, k) for k in rule}))
        return added

    def too_many(self, what: str, path: Path_) -> InputError:
        return self.read.fail(f"{what}; at most {self.max_entries} entries are planned", path,
                              hint="raise the cap (`imagebuilder --max-entries N ...`, or IMAGEBUILDER_MAX_ENTRIES) if "
                                   "the matrix is meant to be this large, or split it into several files")

    def note(self, message: str, path: Path_, notes: list[str]) -> None:
        if self.strict:
            raise self.read.fail(message.split(": ", 1)[-1] + " (an error under --strict)", path)
        notes.append(message)


def _kind(axis: str) -> str:
    """The grammar kind of an axis's values (`base_image` holds images)."""
    return "image" if axis == "base_image" else axis
