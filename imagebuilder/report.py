"""Results of a run -> report.json and the summary table. Pure: takes `Result`s, writes files."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


class Status(str, Enum):
    BUILT = "built"
    FAILED = "failed"
    BLOCKED = "blocked"
    PASSED = "passed"
    SKIPPED = "skipped"
    PUSHED = "pushed"
    TAGGED = "tagged"
    HELD = "held"
    CACHED = "cached"  # build: an image with the node's key exists; smoke: a pass for the same leaf key exists
    CURRENT = "current"  # publish: every tag already named this digest
    CANCELLED = "cancelled"  # not started: --fail-fast stopped the run


@dataclass
class Result:
    """What happened to one node. Filled in as the run goes; reported at the end."""

    node: str
    entry: str
    layer: str
    leaf: bool
    build: Status | None = None
    smoke: Status | None = None
    publish: Status | None = None
    image: str | None = None
    digest: str | None = None
    tags: list[str] = field(default_factory=list)
    error: str | None = None
    log: str | None = None
    log_tail: str = ""
    durations: dict[str, float] = field(default_factory=dict)
    smoke_report: dict[str, Any] | None = None
    gpu_verified: bool | None = None  # False: a CUDA image smoke-tested without a GPU
    key: str | None = None
    reason: str = ""  # why it was built (or is cached)
    cache: str | None = None  # where a cached image was found: local | registry

    @property
    def ok(self) -> bool:
        return self.build in (Status.BUILT, Status.CACHED) \
            and self.smoke in (None, Status.PASSED, Status.SKIPPED, Status.CACHED) \
            and self.publish not in (Status.FAILED, Status.HELD)

    def outcome(self) -> str:
        if self.build in (Status.FAILED, Status.BLOCKED, Status.CANCELLED):
            return str(self.build.value)
        if self.smoke == Status.FAILED:
            return "smoke failed"
        if self.publish is not None:
            return str(self.publish.value)
        return str(self.build.value) if self.build else "pending"

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node, "entry": self.entry, "layer": self.layer, "leaf": self.leaf,
            "key": self.key, "reason": self.reason, "cache": self.cache,
            "status": self.outcome(), "ok": self.ok,
            "build": _v(self.build), "smoke": _v(self.smoke), "publish": _v(self.publish),
            "image": self.image, "digest": self.digest, "tags": self.tags, "error": self.error,
            "log": self.log, "durations": {k: round(v, 3) for k, v in self.durations.items()},
            "gpu_verified": self.gpu_verified, "smoke_report": self.smoke_report,
        }


def _v(s: Status | None) -> str | None:
    return s.value if s else None


def write_json(results: list[Result], path: Path, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {**meta, "ok": all(r.ok for r in results), "nodes": [r.to_json() for r in results]}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


_STYLE = {"pushed": "green", "tagged": "green", "current": "green", "cancelled": "yellow",
           "passed": "green", "built": "cyan", "cached": "cyan",
          "failed": "bold red", "smoke failed": "bold red", "blocked": "yellow", "held": "yellow"}


def summary_table(results: list[Result]) -> Table:
    table = Table(title="imagebuilder summary", show_lines=False)
    table.add_column("node", no_wrap=True)
    for col in ("build", "smoke", "publish", "time", "note"):
        table.add_column(col, overflow="fold")
    for r in results:
        outcome = r.outcome()
        note = r.error or (r.tags[0].rsplit("/", 1)[-1] if r.tags and r.publish in (Status.PUSHED, Status.TAGGED,
                                                                                      Status.CURRENT) else "")
        if r.gpu_verified is False and not r.error:
            note = f"not GPU-verified · {note}"
        table.add_row(
            f"[{_STYLE.get(outcome, '')}]{r.node}[/]",
            _v(r.build) or "-", _v(r.smoke) or "-", _v(r.publish) or "-",
            f"{sum(r.durations.values()):.1f}s", note,
        )
    return table


def print_summary(console: Console, results: list[Result]) -> None:
    console.print(summary_table(results))
    failed = [r for r in results if not r.ok]
    for r in failed:
        if r.log_tail:
            console.rule(f"[red]{r.node}: {r.outcome()}")
            console.print(r.log_tail, markup=False, highlight=False)
    total = len(results)
    built = sum(r.build == Status.BUILT for r in results)
    cached = sum(r.build == Status.CACHED for r in results)
    console.print(f"{total - len(failed)}/{total} nodes ok" + (f", {len(failed)} not ok" if failed else "")
                  + f" · {built} built, {cached} cached")
