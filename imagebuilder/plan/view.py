"""The plan on a terminal: a tree of distinct images (default) or the flat table (`plan --format table`).

The tree is the one the matrix describes: each base image, then os -> cuda -> torch -> ..., every image once.
Nodes of several entries that are one image (`Decision.same_as`) are one line, saying how many entries share
it; where the entries' paths part, each branch names its entry. Each line: layer, status, short key, and
what the image serves; under it, why it builds (or where it is cached) and its tags, wrapped at the terminal's
width on word and hyphen boundaries (a tag is cut between its parts, never inside a version). Versions are said
once, per entry, above the tree. A key not known yet (no engine) reads `{key12}` in a tag. Pure: text only,
the CLI colours the status."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..input.matrix import versions_line
from . import keys
from .plan import Plan, State
from .tags import KEY_PENDING

STYLE = {"cached": "cyan", "build": "bold", "unknown": "yellow"}
MIN_WIDTH = 40


@dataclass(frozen=True)
class Line:
    """One line of the tree: its guide (the branches drawn left of it), a name, a status word, then text."""

    guide: str
    text: str
    name: str = ""
    status: str = ""
    dim: bool = False

    def rich(self) -> Text:
        out = Text(self.guide, style="dim")
        out.append(self.name)
        out.append(self.status, style=STYLE.get(self.status, ""))
        out.append(self.text, style="dim" if self.dim else "")
        return out

    def plain(self) -> str:
        return (self.guide + self.name + self.status + self.text).rstrip()


def _tag(ref: str) -> str:
    """A tag as the tree shows it: the part after the repository, `{key12}` where the key is not known yet."""
    tag = ref.rsplit("/", 1)[-1].split(":", 1)[-1]
    return tag.replace(KEY_PENDING, "{key12}")


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, max(width, 1), break_on_hyphens=True, break_long_words=True) or [""]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def tree(plan: Plan, width: int) -> list[Line]:
    """The plan as lines of at most `width` characters (at least MIN_WIDTH)."""
    width = max(width, MIN_WIDTH)
    first = {n.id: n.decision.same_as or n.id for n in plan.nodes}
    serves: dict[str, list[str]] = {}
    tags: dict[str, list[str]] = {}
    for n in plan.nodes:
        serves.setdefault(first[n.id], []).append(n.entry.id)
        tags.setdefault(first[n.id], []).extend(_tag(t) for t in n.tags)
    children: dict[str | None, list[str]] = {}
    for n in plan.nodes:
        if first[n.id] == n.id:
            parent = first[n.parent] if n.parent else None
            children.setdefault(parent, []).append(n.id)
    lines: list[Line] = []
    entries = {n.entry.id: n for n in plan.nodes}
    lines.append(Line("", f"{len(entries)} entries"))
    name_width = min(max(len(e) for e in entries), width // 2)
    for entry_id, node in entries.items():
        head = f"  {_cut(entry_id, name_width):<{name_width}}  "
        body = _wrap(versions_line(node.entry.versions()) or node.entry.accelerator, width - len(head))
        lines.append(Line("", head + body[0]))
        lines += [Line("", " " * len(head) + more, dim=True) for more in body[1:]]
    roots = children.get(None, [])
    by_base: dict[str, list[str]] = {}
    for root in roots:
        by_base.setdefault(plan.node(root).base_image or "?", []).append(root)
    for base, tops in by_base.items():
        lines.append(Line("", ""))
        pinned = plan.base(base)
        lines.append(Line("", f"FROM {base}" + (f"  locked: image {pinned.id[7:19]} ({pinned.lock.file})"
                                                if pinned is not None and pinned.lock else "")))
        for i, node_id in enumerate(tops):
            _branch(plan, node_id, "", i == len(tops) - 1, Shape(children, serves, tags), lines, width, None)
    return lines


def _label(node_id: str, serves: Mapping[str, list[str]], parent_serves: list[str] | None) -> str:
    mine = list(dict.fromkeys(serves[node_id]))
    if len(mine) > 1:
        return f"{len(mine)} entries"
    if parent_serves is None or len(set(parent_serves)) > 1:
        return mine[0]
    return ""


@dataclass(frozen=True)
class Shape:
    """The tree's edges between distinct images, the entries each serves and the tags of all its nodes."""

    children: Mapping[str | None, list[str]]
    serves: Mapping[str, list[str]]
    tags: Mapping[str, list[str]]


def _branch(plan: Plan, node_id: str, guide: str, last: bool, shape: Shape, lines: list[Line], width: int,
            parent_serves: list[str] | None) -> None:
    node = plan.node(node_id)
    status = node.status.value
    head = guide + ("└─ " if last else "├─ ")
    below = guide + ("   " if last else "│  ")
    kids = shape.children.get(node_id, [])
    detail_guide = below + ("│  " if kids else "   ")
    key = keys.short(node.key) or "-" * 12
    label = _label(node_id, shape.serves, parent_serves)
    name = f"{node.layer.name}  "
    rest = f"  {key}" + (f"  {label}" if label else "")
    room = width - len(head) - len(name) - len(status)
    if room < 0:  # a tree deeper than the screen is wide: the layer and status first, cut
        name, status, rest = _cut(name, max(width - len(head), 0)), "", ""
    lines.append(Line(head, _cut(rest, max(room, 0)), name, status))
    tags = shape.tags[node_id]
    shown = f"tag {tags[0]}" + (f" (+{len(tags) - 1} more)" if len(tags) > 1 else "") if tags else ""
    room = width - len(detail_guide)
    joined = " · ".join(x for x in (node.reason, shown) if x)
    for detail in [joined] if len(joined) <= room else (node.reason, shown):
        if detail:
            lines += [Line(detail_guide, part, dim=True) for part in _wrap(detail, room)]
    for i, kid in enumerate(kids):
        _branch(plan, kid, below, i == len(kids) - 1, shape, lines, width, shape.serves[node_id])


def summary(plan: Plan) -> str:
    counts = {s.value: sum(n.status == s and not n.decision.same_as for n in plan.nodes) for s in State}
    shared = sum(1 for n in plan.nodes if n.decision.same_as)
    distinct = len(plan.nodes) - shared
    return (f"{len(plan.nodes)} nodes, {len(plan.entries())} entries, {distinct} distinct images: "
            + ", ".join(f"{v} {k}" for k, v in counts.items() if v)
            + (f" ({shared} nodes are the same image as an earlier one: built once)" if shared else ""))


def table(plan: Plan) -> Table:
    """One row per node (`plan --format table`)."""
    out = Table(box=None, pad_edge=False)
    for col in ("status", "node", "key", "from", "versions", "tags", "why"):
        out.add_column(col, overflow="fold")
    for n in plan.nodes:
        e = n.entry
        cuda = f"cuda {e.cuda} · cudnn {e.cudnn} · nccl {e.nccl}" if e.cuda else "cpu"
        status = "same" if n.decision.same_as else n.status.value
        out.add_row(f"[{STYLE[n.status.value]}]{status}[/]", escape(n.id), keys.short(n.key) or "-",
                    escape(n.parent or n.base_image or ""), cuda,
                    "\n".join(escape(_tag(t)) for t in n.tags), escape(n.reason))
    return out
