"""The reports of a run, views of its ledger: report.json (`document`), report.html (`html`: made from
report.json alone, so `imagebuilder report DIR` remakes it anywhere), summary.md (`markdown`), junit.xml
(`junit`) and the summary table on the terminal (`terminal`), these three from the ledger's records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..ledger import NodeRecord
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
    (folder / "summary.md").write_text(summary_markdown(results, folder), encoding="utf-8")
    (folder / "junit.xml").write_bytes(junit_xml(results))
    (folder / "report.html").write_text(html.render(doc), encoding="utf-8")  # the newest view: the others first
    return [folder / name for name in ("report.json", "report.html", "summary.md", "junit.xml")]
