"""The terminal side of a run (`ports.Display`): a rich progress display over the nodes (on a terminal), one
row per running step with its latest log line, and, in `stream` mode, every log line prefixed by node id."""

from __future__ import annotations

import threading
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn


class Terminal:
    def __init__(self, console: Console, total: int, mode: str) -> None:
        self.console = console
        self.mode = mode
        self.lock = threading.Lock()
        self.counts = {"built": 0, "cached": 0, "failed": 0}
        self.progress: Progress | None = None
        self.rows: dict[str, TaskID] = {}
        if mode != "none" and console.is_terminal:
            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False)
            self.overall = self.progress.add_task(self._summary(), total=total)

    def _summary(self) -> str:
        c = self.counts
        return f"nodes: {c['built']} built · {c['cached']} cached · {c['failed']} failed"

    def __enter__(self) -> Terminal:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def say(self, text: str) -> None:
        if self.mode != "none":
            self.console.print(text, highlight=False, soft_wrap=True)

    def line(self, activity: str, node_id: str, line: str) -> None:
        if self.mode == "stream":
            self.console.print(f"[dim]{escape(node_id)}[/] │ " + escape(line), highlight=False, soft_wrap=True)
        if self.progress is not None and activity in self.rows:
            self.progress.update(self.rows[activity], description=f"{escape(activity)} [dim]│ {escape(line[:100])}[/]")

    def start(self, activity: str) -> None:
        if self.progress is not None:
            with self.lock:
                self.rows[activity] = self.progress.add_task(escape(activity), total=None)

    def stop(self, activity: str) -> None:
        if self.progress is not None:
            with self.lock:
                row = self.rows.pop(activity, None)
                if row is not None:
                    self.progress.remove_task(row)

    def node_done(self, outcome: str) -> None:
        with self.lock:
            if outcome in self.counts:
                self.counts[outcome] += 1
            if self.progress is not None:
                self.progress.update(self.overall, advance=1, description=self._summary())

    def show_log(self, node_id: str, path: str) -> None:
        """On a failure in `tail` mode the terminal has not seen the log: show it now (its last 200 lines)."""
        if self.mode != "tail":
            return
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        self.console.rule(f"[red]{escape(node_id)}: log ({len(lines)} lines, {path})")
        self.console.print("\n".join(lines[-200:]), markup=False, highlight=False)
