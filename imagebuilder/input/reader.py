"""The matrix loader's first part: it reads the matrix file and locates its values. Every value comes back checked
for its shape and its kind (`declarations.grammar`), with the key path it was written at, and every error names
that place (file, key path, line); a key the schema does not declare is refused with a did-you-mean. What is
read is not resolved here: the resolver (`input/resolver.py`) makes typed entries of it.

An entry key's value is located where the entry wrote it (a `matrix:` axis value, an include's key), else at the
top level (`cascaded`); a mapping key (`build`, `smoke`, `user`, ...) merges the entry's keys over the top level's,
key by key (`merged`); an absent key is the schema's default (`setting`), within the schema's bounds (`bounded`).
Pure; reads no file but the CA bundle, wheelhouse and advisory paths it checks exist.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..declarations import grammar, schema
from ..errors import InputError, Where, did_you_mean, unknown_key
from ..secrets.redact import looks_secret
from . import source

Path_ = source.Path_
AXES = schema.names(schema.AXIS, under="matrix")
ENTRY_ONLY_KEYS = schema.names(schema.INCLUDE)
CASCADED_KEYS = schema.names(schema.ENTRY)
TOP_KEYS = (*schema.names(schema.TOP), *CASCADED_KEYS)
BUILD_KEYS = schema.names(under="build")
USER_KEYS = schema.names(under="user")
SMOKE_KEYS = schema.names(under="smoke")
# the top-level keys a file must give (and `registry`, unless --registry gives it)
REQUIRED = tuple(k.name for k in schema.KEYS if k.required and k.parent is None and k.name != "registry")


@dataclass
class Combo:
    """One entry before it is resolved: its raw values, and where each was written (a `matrix:` axis value,
    an include's key); keys it lacks come from the top level or the schema's default."""

    values: dict[str, Any]
    origin: tuple[str | int, ...]  # ("matrix",) or ("include", i)
    paths: dict[str, tuple[str | int, ...]]
    original: dict[str, Any] = field(default_factory=dict)  # the axis values, before any include


@dataclass(frozen=True)
class Merged:
    """A mapping key merged over the levels (`build`, `smoke`, `user`): each leaf's value and where it was written."""

    name: str
    values: dict[str, Any]
    paths: dict[str, tuple[str | int, ...]]

    def path(self, leaf: str) -> tuple[str | int, ...]:
        return self.paths.get(leaf, (self.name, leaf))


@dataclass(frozen=True)
class Reader:
    """A matrix document and the folder its relative paths start from. Every method returns a value of the kind it
    was asked for, located where it was written, or raises an `InputError` that names the place."""

    doc: source.Document
    root: Path

    def where(self, path: Path_) -> Where:
        return self.doc.where(path)

    def fail(self, message: str, path: Path_, hint: str | None = None) -> InputError:
        return InputError(message, where=self.doc.where(path), hint=hint)

    def written(self, path: Path_) -> str:
        """Where the value at `path` was written, as `file:line` (the file's name only)."""
        where = self.doc.where(path)
        return f"{Path(where.file).name}:{where.line}"

    def top(self, *, registry_given: bool) -> dict[str, Any]:
        """The file's top level: a mapping of the schema's keys, of version 1, with the required keys; its mapping
        keys' own keys checked before any entry is resolved, so a misspelt key is reported first."""
        top = self.doc.value
        if not isinstance(top, dict):
            raise InputError(f"the matrix file must be a mapping of keys, got {describe(top)}",
                             where=Where(self.doc.file, 1, 1))
        self.mapping(top, (), TOP_KEYS)
        version = top.get("version", schema.default("version"))
        if str(version) != schema.default("version"):
            raise self.fail(f"unsupported matrix version {version!r}; this imagebuilder reads version 1",
                            ("version",))
        for required in REQUIRED:
            if required not in top:
                raise InputError(f"missing required key {required!r}", where=Where(self.doc.file, 1, 1))
        if "registry" not in top and not registry_given:
            raise InputError("missing required key 'registry' (or pass --registry)",
                             where=Where(self.doc.file, 1, 1))
        self.mapping(top.get("build") or {}, ("build",), BUILD_KEYS)
        self.mapping(top.get("smoke") or {}, ("smoke",), SMOKE_KEYS)
        self.mapping(top.get("user") or {}, ("user",), USER_KEYS)
        if "vars" in top:
            self.mapping(top["vars"] or {}, ("vars",), tuple(top["vars"] or {}))
        return top

    # -- values of a kind ----------------------------------------------------------------------
    def scalar(self, value: Any, kind: str, path: Path_) -> str:
        if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
            raise self.fail(f"expected a {kind} value, got {describe(value)}", path)
        text = str(value)
        if kind == "url":
            return self.url(text, path)
        if not grammar.matches(kind, text):
            raise self.fail(f"invalid {kind} {text!r}", path, hint=grammar.hint(kind))
        return text

    def url(self, text: str, path: Path_, placeholders: tuple[str, ...] = ()) -> str:
        """An index URL: never with credentials (refused without repeating them), of plain characters only."""
        problem = grammar.url_problem(text, placeholders=placeholders)
        if problem is None:
            return text
        if grammar.has_credentials(text):
            raise self.fail(problem, path, hint="give index credentials in IMAGEBUILDER_INDEX_USER and "
                            "IMAGEBUILDER_INDEX_PASSWORD (for the hosts in IMAGEBUILDER_INDEX_HOSTS) or in ~/.netrc: "
                            "pip reaches the index through imagebuilder's loopback proxy, and nothing of them enters "
                            "an image")
        raise self.fail(problem, path, hint=grammar.hint("url"))

    def mapping(self, value: Any, path: Path_, allowed: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"expected a mapping, got {describe(value)}", path)
        for key in value:
            if key not in allowed:
                raise unknown_key(key, allowed, self.doc.where((*path, key)))
        return value

    def listof(self, value: Any, path: Path_, *, nonempty: bool = False) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(f"expected a list, got {describe(value)}", path)
        if nonempty and not value:
            raise self.fail("must not be empty", path)
        return value

    def flag(self, value: Any, path: Path_) -> bool:
        """A `true`/`false` value."""
        if not isinstance(value, bool):
            raise self.fail(f"expected true or false, got {describe(value)}", path)
        return value

    def choice(self, value: Any, allowed: tuple[str, ...], path: Path_) -> str:
        if value not in allowed:
            hint = did_you_mean(str(value), allowed) or f"one of: {', '.join(allowed)}"
            raise self.fail(f"unknown value {value!r}", path, hint=hint)
        return str(value)

    def path_value(self, value: Any, path: Path_, *, want_dir: bool) -> Path:
        if not isinstance(value, str) or not value or "\n" in value:
            raise self.fail(f"expected a path, got {describe(value)}", path)
        p = self.resolved(value)
        if want_dir and not p.is_dir():
            raise self.fail(f"folder {value!r} does not exist (resolved to {p})", path)
        if not want_dir:
            if not p.is_file():
                raise self.fail(f"file {value!r} does not exist (resolved to {p})", path)
            if not os.access(p, os.R_OK):
                raise self.fail(f"file {value!r} is not readable", path)
        return p

    def resolved(self, value: str) -> Path:
        """A path as the file wrote it (`~` expanded), relative ones from the file's folder."""
        p = Path(os.path.expanduser(value))
        return p if p.is_absolute() else (self.root / p)

    def tag_template(self, value: Any, path: Path_) -> str:
        """A tag template: its literal text (outside `{field}`s) may hold only what a Docker tag allows, so a
        bad character is named at its own key, not later in the tag it makes."""
        if not isinstance(value, str) or not value:
            raise self.fail(f"a tag template must be a string, got {describe(value)}", path)
        literal = re.sub(r"{[A-Za-z0-9_]*}", "", value)
        if not re.fullmatch(r"[A-Za-z0-9_.-]*", literal):
            bad = "".join(sorted({ch for ch in literal if not re.fullmatch(r"[A-Za-z0-9_.-]", ch)}))
            raise self.fail(f"tag template {value!r} has characters Docker does not allow in a tag: {bad!r}", path,
                            hint="use letters, digits, '_', '.' and '-', and {fields}")
        return value

    def not_a_secret(self, top: dict[str, Any], name: str, path: Path_) -> None:
        """Values of `vars` reach Dockerfiles (and so the image history), `smoke.env` the report: a name that
        looks like a secret is refused, unless the matrix lists it under `not_secrets:`."""
        allowed = self.listof(top.get("not_secrets") or [], ("not_secrets",))
        if looks_secret(name) and name not in allowed:
            raise self.fail(
                f"{name!r} looks like a secret; imagebuilder passes no secrets into images or reports", path,
                hint="docker-py's builder has no secret mounts, so a build value ends up in the image history: "
                     "give secrets to containers at run time; if it is not a secret, list it in `not_secrets:`")

    # -- where an entry's value was written ------------------------------------------------------
    def own(self, combo: Combo, key: str, kind: str, default: Any = None) -> str:
        """An entry's own value of `key` (an axis value, an include's key), else `default`, of `kind`; an error names
        where the value was written, else where the combination was."""
        return self.scalar(combo.values.get(key, default), kind, combo.paths.get(key, combo.origin))

    def cascaded(self, top: dict[str, Any], combo: Combo, key: str) -> tuple[Any, Path_]:
        """An entry key's value and where it was written: the entry's own (an axis value, an include's key),
        else the top level's."""
        if key in combo.values:
            return combo.values[key], combo.paths.get(key, (*combo.origin, key))
        return top.get(key), (key,)

    def merged(self, top: dict[str, Any], combo: Combo, name: str, allowed: tuple[str, ...] | None) -> Merged:
        """A mapping key merged key by key: the entry's keys over the top level's (`allowed`: its keys; None:
        any)."""
        paths: dict[str, Path_] = {}
        values: dict[str, Any] = {}
        for level, base in ((top.get(name), (name,)), (combo.values.get(name), combo.paths.get(name))):
            if level is None or base is None:
                continue
            own = allowed if allowed is not None else tuple(level) if isinstance(level, dict) else ()
            for leaf, value in self.mapping(level, base, own).items():
                values[leaf], paths[leaf] = value, (*base, leaf)
        return Merged(name, values, paths)

    def setting(self, merged: Merged, name: str) -> str:
        """A value of a merged mapping (`build`, `smoke`, `user`), or the schema's default; checked against
        the schema's kind for the key, an error naming where it was written."""
        key = schema.key(name)
        return self.scalar(merged.values.get(key.leaf, key.default), key.kind, merged.path(key.leaf))

    def bounded(self, merged: Merged, name: str, what: str, *, hint: str = "") -> float:
        """A number of a merged mapping within the schema's bounds for its key (`setting`), else an error naming
        where it was written, the bounds and the default."""
        number = float(self.setting(merged, name))
        low, high = schema.bounds(name)
        leaf = schema.key(name).leaf
        hint = f"{schema.value(name):g} is the default" + (f"; {hint}" if hint else "")
        if low is not None and high is not None and not low <= number <= high:
            raise self.fail(f"{leaf} {number:g} is outside [{low:g}, {high:g}] ({what})", merged.path(leaf), hint=hint)
        if low is not None and number < low:
            raise self.fail(f"{leaf} {number:g} is below {low:g} {what}", merged.path(leaf), hint=hint)
        if high is not None and number > high:
            raise self.fail(f"{leaf} {number:g} is above {high:g} {what}", merged.path(leaf), hint=hint)
        return number


def describe(value: Any) -> str:
    """A value as an error names what was found instead of what was expected."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def label(combo: Mapping[str, Any]) -> str:
    """A combination's scalar values as `key=value, ...` (what an exclude removed, and which rule)."""
    return ", ".join(f"{k}={v}" for k, v in combo.items() if not isinstance(v, (dict, list)))
