"""A YAML document that remembers where each value came from.

Scalars stay strings (so `3.10` is "3.10", not 3.1), except `true`/`false` and `null`.
Every mapping key and value keeps its line, so errors can name `file:line: key`.

A file is hostile until read within `Limits`: only a regular file, at most `max_bytes`, nesting at most
`max_depth` deep, and at most `max_values` values once its aliases are expanded (an alias bomb of a few
hundred bytes would otherwise expand to gigabytes). Each is checked before the next step can blow up: the
size before reading, the depth on libyaml's event stream (no recursion) before composing, the expansion
while converting.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError, Where

Path_ = tuple[str | int, ...]

@dataclass(frozen=True)
class Limits:
    """What a matrix or layer file may be: a real matrix is a few kilobytes, a few levels deep."""

    max_bytes: int = 1 << 20
    max_depth: int = 32
    max_values: int = 100_000


LIMITS = Limits()
_BOOLS = {"true": True, "false": False, "True": True, "False": False, "TRUE": True, "FALSE": False}
_NULLS = {"", "~", "null", "Null", "NULL"}


@dataclass(frozen=True)
class Document:
    """The plain Python value of a YAML file plus the position of every path in it."""

    file: str
    value: Any
    marks: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def where(self, path: Path_) -> Where:
        """The closest known position for `path` (walking up to its parents)."""
        key = dotted(path)
        probe = path
        while probe and probe not in self.marks:
            probe = probe[:-1]
        line, col = self.marks.get(probe, (None, None)) if probe else (None, None)
        return Where(self.file, line, col, key or None)


def dotted(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load(path: Path, limits: Limits = LIMITS) -> Document:
    where = Where(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # (a FIFO opened without it would wait for a writer)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InputError("not a regular file (a device, FIFO or folder cannot be a matrix or layer file)",
                                 where=where)
            if info.st_size > limits.max_bytes:
                raise InputError(f"the file is {info.st_size} bytes; at most {limits.max_bytes} are read",
                                 where=where)
            data = handle.read(limits.max_bytes + 1)
        if len(data) > limits.max_bytes:
            raise InputError(f"the file grew past {limits.max_bytes} bytes while it was read", where=where)
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise InputError("file not found", where=where) from None
    except IsADirectoryError:
        raise InputError("not a regular file (a device, FIFO or folder cannot be a matrix or layer file)",
                         where=where) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", where=where) from None
    return parse(text, str(path), limits)


def parse(text: str, file: str, limits: Limits = LIMITS) -> Document:
    try:
        _check_depth(text, file, limits)
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Where(file, mark.line + 1, mark.column + 1) if mark else Where(file)
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(f"YAML syntax error: {problem}", where=where) from None
    except yaml.YAMLError as exc:
        raise InputError(f"YAML error: {exc}", where=Where(file)) from None
    marks: dict[Path_, tuple[int, int]] = {}
    value = _Converter(file, limits, marks).convert(root, ()) if root is not None else None
    return Document(file, value, marks)


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where it is built in: the same documents


def _check_depth(text: str, file: str, limits: Limits) -> None:
    """Nesting deeper than `limits.max_depth`, refused from the event stream (composing is recursive)."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > limits.max_depth:
                mark = event.start_mark
                raise InputError(f"nested more than {limits.max_depth} levels deep",
                                 where=Where(file, mark.line + 1, mark.column + 1) if mark else Where(file))
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


@dataclass
class _Converter:
    """Plain values from composed nodes, counting every value an alias expands to."""

    file: str
    limits: Limits
    marks: dict[Path_, tuple[int, int]]
    values: int = 0
    open: set[int] = field(default_factory=set)  # nodes being converted: an alias to one is a cycle

    def where(self, node: yaml.Node, path: Path_) -> Where:
        return Where(self.file, node.start_mark.line + 1, node.start_mark.column + 1, dotted(path) or None)

    def convert(self, node: yaml.Node, path: Path_) -> Any:
        self.values += 1
        if self.values > self.limits.max_values:
            raise InputError(f"more than {self.limits.max_values} values once YAML aliases are expanded "
                             "(an alias bomb?)", where=self.where(node, path))
        if len(path) > self.limits.max_depth or id(node) in self.open:
            raise InputError(f"aliases nest more than {self.limits.max_depth} levels deep, or refer to "
                             "themselves", where=self.where(node, path))
        self.open.add(id(node))
        try:
            return _convert(node, path, self)
        finally:
            self.open.discard(id(node))


def _convert(node: yaml.Node, path: Path_, converter: _Converter) -> Any:
    converter.marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.ScalarNode):
        if node.tag == "tag:yaml.org,2002:str" and node.style not in (None, ""):  # ("": libyaml's plain)
            return node.value  # quoted: always a string
        if node.value in _BOOLS:
            return _BOOLS[node.value]
        if node.value in _NULLS:
            return None
        return node.value
    if isinstance(node, yaml.SequenceNode):
        return [converter.convert(child, (*path, i)) for i, child in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise InputError("mapping keys must be plain names", where=converter.where(key_node, path))
            key = key_node.value
            if key in out:
                raise InputError(f"duplicate key {key!r}", where=converter.where(key_node, (*path, key)))
            out[key] = converter.convert(value_node, (*path, key))
            converter.marks[(*path, key)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        return out
    raise InputError("unsupported YAML node", where=Where(converter.file, node.start_mark.line + 1))
