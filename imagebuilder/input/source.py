"""A YAML document that remembers where each value came from.

Scalars stay strings (so `3.10` is "3.10", not 3.1), except `true`/`false` and `null`.
Every mapping key and value keeps its line, so errors can name `file:line: key`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError, Where

Path_ = tuple[str | int, ...]

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


def load(path: Path) -> Document:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", where=Where(str(path))) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", where=Where(str(path))) from None
    return parse(text, str(path))


def parse(text: str, file: str) -> Document:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Where(file, mark.line + 1, mark.column + 1) if mark else Where(file)
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(f"YAML syntax error: {problem}", where=where) from None
    except yaml.YAMLError as exc:
        raise InputError(f"YAML error: {exc}", where=Where(file)) from None
    marks: dict[Path_, tuple[int, int]] = {}
    value = _convert(root, (), marks, file) if root is not None else None
    return Document(file, value, marks)


def _convert(node: yaml.Node, path: Path_, marks: dict[Path_, tuple[int, int]], file: str) -> Any:
    marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.ScalarNode):
        if node.tag == "tag:yaml.org,2002:str" and node.style is not None:
            return node.value  # quoted: always a string
        if node.value in _BOOLS:
            return _BOOLS[node.value]
        if node.value in _NULLS:
            return None
        return node.value
    if isinstance(node, yaml.SequenceNode):
        return [_convert(child, (*path, i), marks, file) for i, child in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                w = Where(file, key_node.start_mark.line + 1, key_node.start_mark.column + 1, dotted(path) or None)
                raise InputError("mapping keys must be plain names", where=w)
            key = key_node.value
            if key in out:
                w = Where(file, key_node.start_mark.line + 1, key_node.start_mark.column + 1, dotted((*path, key)))
                raise InputError(f"duplicate key {key!r}", where=w)
            out[key] = _convert(value_node, (*path, key), marks, file)
            marks[(*path, key)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        return out
    raise InputError("unsupported YAML node", where=Where(file, node.start_mark.line + 1))
