"""What a run says and logs, with every known secret masked first: lines of its own on the display, and one
log file per node under the report folder, each line also shown as the display's mode says."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..ports import Display, LineSink
from ..secrets import redact


@dataclass(frozen=True)
class Logs:
    display: Display
    folder: Path  # <report dir>/logs
    secrets: Mapping[str, str]  # name -> value: never written or shown

    def say(self, text: str) -> None:
        self.display.say(self.mask(text))

    def mask(self, text: str) -> str:
        return redact.mask(text, self.secrets)

    def path(self, node_id: str) -> Path:
        path = self.folder / (re.sub(r"[^A-Za-z0-9._-]+", "_", node_id) + ".log")
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def sink(self, step: str, node_id: str, log: TextIO, tail: list[str] | None = None, *,
             shown: bool = True) -> LineSink:
        """Each line (masked) to the node's log file, to `tail` (its last 40 lines), and to the display: a step
        row always, every line in `stream` mode unless not `shown` (the suite's lines are only logged)."""
        def emit(line: str) -> None:
            line = self.mask(line)
            log.write(line + "\n")
            log.flush()
            if tail is not None:
                tail.append(line)
                del tail[:-40]
            if shown or self.display.mode == "tail":
                self.display.line(step, node_id, line)
        return emit

    def show(self, node_id: str, log: str | None) -> None:
        if log:
            self.display.show_log(node_id, log)
