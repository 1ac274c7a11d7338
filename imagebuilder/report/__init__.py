"""The reports of a run, views of its ledger. report.json (`document`) is the one every other view is made
from: summary.md (`markdown`), junit.xml (`junit`), report.html (`html`, also remade from a report.json alone by
`imagebuilder report DIR`) and the summary table on the terminal (`terminal`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..steps.ledger import NodeRecord
from . import html
from .document import write_json
from .junit import junit_xml
from .markdown import summary_markdown
from .terminal import print_summary

__all__ = ["print_summary", "write_reports"]


def write_reports(results: list[NodeRecord], folder: Path, meta: dict[str, Any]) -> list[Path]:
    """Every report a run writes: report.json, report.html, summary.md (for $GITHUB_STEP_SUMMARY) and junit.xml."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = write_json(results, folder / "report.json", meta)
    (folder / "report.html").write_text(html.render(doc, folder), encoding="utf-8")
    (folder / "summary.md").write_text(summary_markdown(results, folder), encoding="utf-8")
    (folder / "junit.xml").write_bytes(junit_xml(results))
    return [folder / name for name in ("report.json", "report.html", "summary.md", "junit.xml")]
