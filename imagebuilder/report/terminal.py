"""The summary table a run prints at its end, and the log tails of what failed."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..ledger import BuildStatus, NodeRecord, PublishStatus
from .document import status_word

_STYLE = {"pushed": "green", "tagged": "green", "current": "green", "cancelled": "yellow",
           "passed": "green", "built": "cyan", "cached": "cyan",
          "failed": "bold red", "smoke failed": "bold red", "blocked": "yellow", "held": "yellow",
          "staged": "yellow", "interrupted": "yellow", "smoke interrupted": "yellow"}


def summary_table(results: list[NodeRecord]) -> Table:
    table = Table(title="imagebuilder summary", show_lines=False)
    table.add_column("node", no_wrap=True)
    for col in ("build", "smoke", "publish", "time", "note"):
        table.add_column(col, overflow="fold")
    for r in results:
        outcome = r.outcome()
        note = r.error or (r.tags[0].rsplit("/", 1)[-1] if r.tags and r.publish in (
            PublishStatus.PUSHED, PublishStatus.TAGGED, PublishStatus.CURRENT) else "")
        if r.gpu_verified is False and not r.error:
            note = f"not GPU-verified · {note}"
        if r.untested:
            note = f"UNTESTED (--allow-untested) · {note}"
        if r.allowed_skips:
            note = f"allowed skips: {', '.join(s.split(':', 1)[0] for s in r.allowed_skips)} · {note}"
        style = _STYLE.get(outcome)
        table.add_row(
            f"[{style}]{escape(r.node)}[/]" if style else escape(r.node),
            status_word(r.build) or "-", status_word(r.verify) or "-", status_word(r.publish) or "-",
            f"{sum(r.durations.values()):.1f}s", escape(note),
        )
    return table


def print_summary(console: Console, results: list[NodeRecord]) -> None:
    console.print(summary_table(results))
    failed = [r for r in results if not r.ok]
    for r in failed:
        if r.log_tail:
            console.rule(f"[red]{r.node}: {r.outcome()}")
            console.print(r.log_tail, markup=False, highlight=False)
    total = len(results)
    built = sum(r.build == BuildStatus.BUILT for r in results)
    cached = sum(r.build == BuildStatus.CACHED for r in results)
    console.print(f"{total - len(failed)}/{total} nodes ok" + (f", {len(failed)} not ok" if failed else "")
                  + f" · {built} built, {cached} cached")
