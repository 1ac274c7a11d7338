"""The reports of a run, views of its ledger: report.json, summary.md, junit.xml and the summary table."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from enum import Enum
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .steps.ledger import BuildStatus, NodeRecord, PublishStatus, VerifyStatus


def node_json(r: NodeRecord) -> dict[str, Any]:
    """One node of report.json."""
    return {
        "node": r.node, "entry": r.entry, "layer": r.layer, "leaf": r.leaf,
        "key": r.key, "reason": r.reason, "cache": r.cache,
        "status": r.outcome(), "ok": r.ok,
        "build": _v(r.build), "smoke": _v(r.verify), "publish": _v(r.publish),
        "image": r.image, "digest": r.digest, "tags": list(r.tags), "aliases": list(r.aliases),
        "aliases_held": list(r.aliases_held), "error": r.error,
        "log": r.log, "durations": {k: round(v, 3) for k, v in r.durations.items()},
        "gpu_verified": r.gpu_verified, "base": dict(r.base) if r.base is not None else None, "signed": r.signed,
        "secret_scan": r.secret_scan,
        "pass_record": r.pass_record, "untested": r.untested, "allowed_skips": list(r.allowed_skips),
        "smoke_report": dict(r.smoke_report) if r.smoke_report is not None else None,
        "performance": dict(r.performance) if r.performance is not None else None,
    }


def _v(s: Enum | None) -> str | None:
    return str(s.value) if s else None


def write_json(results: list[NodeRecord], path: Path, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {**meta, "ok": all(r.ok for r in results), "nodes": [node_json(r) for r in results]}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def write_reports(results: list[NodeRecord], folder: Path, meta: dict[str, Any]) -> list[Path]:
    """Every report a build writes: report.json, summary.md (for $GITHUB_STEP_SUMMARY) and junit.xml."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(results, folder / "report.json", meta)
    (folder / "summary.md").write_text(summary_markdown(results, folder), encoding="utf-8")
    (folder / "junit.xml").write_bytes(junit_xml(results))
    return [folder / name for name in ("report.json", "summary.md", "junit.xml")]


_MARK = {"staged": "📦 staged (untested: no tag)",
         "pushed": "✅ pushed", "current": "✅ current", "tagged": "✅ tagged", "built": "🔨 built",
         "cached": "♻️ cached", "failed": "❌ failed", "smoke failed": "❌ smoke failed", "blocked": "⛔ blocked",
         "held": "⏸️ held", "cancelled": "⏹️ cancelled", "interrupted": "⏹️ interrupted",
         "smoke interrupted": "⏹️ smoke interrupted", "pending": "…"}


def _cell(r: NodeRecord, folder: Path) -> str:
    build = "♻️" if r.build == BuildStatus.CACHED else "🔨" if r.build == BuildStatus.BUILT else ""
    text = f"{build} {_MARK.get(r.outcome(), r.outcome())}".strip()
    if r.verify is not None and r.leaf:
        text += f" · smoke {r.verify.value}"
    if r.log:
        text += f" ([log]({_relative(Path(r.log), folder)}))"
    return text


def _relative(path: Path, folder: Path) -> str:
    try:
        return os.path.relpath(path, folder)
    except ValueError:
        return str(path)


def summary_markdown(results: list[NodeRecord], folder: Path) -> str:
    """A matrix of entries x layers (build / publish / smoke, cached or built, links to logs), then the
    failures with their errors and log tails."""
    layers = list(dict.fromkeys(r.node.split("/", 1)[1] for r in results))
    entries = list(dict.fromkeys(r.entry for r in results))
    cells = {(r.entry, r.node.split("/", 1)[1]): r for r in results}
    failed = [r for r in results if not r.ok]
    built = sum(r.build == BuildStatus.BUILT for r in results)
    cached = sum(r.build == BuildStatus.CACHED for r in results)
    lines = ["## imagebuilder", "",
             f"**{len(results) - len(failed)}/{len(results)} nodes ok** · {built} built · {cached} cached"
             + (f" · **{len(failed)} not ok**" if failed else ""), "",
             "| entry | " + " | ".join(layers) + " |", "|---" * (len(layers) + 1) + "|"]
    for entry in entries:
        row = [_cell(cells[(entry, layer)], folder) if (entry, layer) in cells else "" for layer in layers]
        lines.append(f"| `{entry}` | " + " | ".join(row) + " |")
    published = [(r.tags[0], r.digest) for r in results if r.tags and r.digest]
    if published:
        lines += ["", "### Published", "", "| tag | digest |", "|---|---|"]
        lines += [f"| `{tag}` | `{digest}` |" for tag, digest in published]
    measured = [r for r in results if r.performance]
    if measured:
        lines += ["", "### Performance", "", "| node | runner | verdict | metric | value | baseline | change | "
                  "threshold |", "|---|---|---|---|---|---|---|---|"]
        for r in measured:
            lines += _performance_rows(r)
    gaps = [r for r in results if r.untested or r.allowed_skips or r.publish == PublishStatus.STAGED]
    if gaps:
        lines += ["", "### Not fully tested", ""]
        for r in gaps:
            why = ("published UNTESTED (--allow-untested)" if r.untested else "staged: untested, no public tag"
                   if r.publish == PublishStatus.STAGED else "")
            skips = f"skips accepted by smoke.allow_skip: {'; '.join(r.allowed_skips)}" if r.allowed_skips else ""
            lines.append(f"- **`{r.node}`**: " + _md(" · ".join(x for x in (why, skips) if x)))
    if failed:
        lines += ["", "### Not ok", ""]
        for r in failed:
            lines.append(f"- **`{r.node}`**: {r.outcome()}" + (f": {_md(r.error)}" if r.error else ""))
            if r.log_tail:
                lines += ["", "  <details><summary>log tail</summary>", "", "  ```",
                          *(f"  {line}" for line in r.log_tail.splitlines()[-30:]), "  ```", "  </details>", ""]
    return "\n".join(lines) + "\n"


def _performance_rows(r: NodeRecord) -> list[str]:
    """The node's metrics against its baseline (the first of its lineage: its values only)."""
    perf = r.performance or {}
    runner = perf.get("runner") or {}
    where = _md(f"{runner.get('count')}x {' + '.join(runner.get('models') or []) or runner.get('kind')}")
    rows = perf.get("rows") or [{"metric": m.get("name"), "unit": m.get("unit"), "value": m.get("value")}
                                for m in perf.get("metrics") or []]
    out = []
    for row in rows:
        change, limit = row.get("change"), row.get("threshold")
        mark = " **regressed**" if row.get("regressed") else ""
        out.append(f"| `{r.node}` | {where} | {perf.get('verdict')} | {_md(str(row.get('metric')))} | "
                   f"{row.get('value'):.4g} {_md(str(row.get('unit') or ''))} | "
                   + (f"{row['baseline']:.4g}" if row.get("baseline") is not None else "-") + " | "
                   + (f"{change:+.1%}{mark}" if change is not None else "-") + " | "
                   + (f"{limit:.0%}" if limit is not None else "not gated") + " |")
    return out


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def junit_xml(results: list[NodeRecord]) -> bytes:
    """One test suite per image; a `build` test case per node and one test case per smoke check of a leaf."""
    suites = ET.Element("testsuites", name="imagebuilder")
    for r in results:
        suite = ET.SubElement(suites, "testsuite", name=r.node)
        cases: list[ET.Element] = []
        build = ET.SubElement(suite, "testcase", classname=r.node, name="build",
                              time=f"{r.durations.get('build', 0.0):.3f}")
        cases.append(build)
        if r.build in (BuildStatus.FAILED, BuildStatus.BLOCKED, BuildStatus.CANCELLED):
            _fail(build, r.error or r.build.value, r.log_tail)
        elif r.build is None:
            ET.SubElement(build, "skipped", message="not run")
        checks = (r.smoke_report or {}).get("checks") or []
        for check in checks:
            case = ET.SubElement(suite, "testcase", classname=r.node, name=str(check.get("name")),
                                 time=f"{float(check.get('duration') or 0):.3f}")
            cases.append(case)
            status = check.get("status")
            if status == "fail":
                log = check.get("log") or ""
                _fail(case, str(check.get("reason") or "failed"), "\n".join(log) if isinstance(log, list) else str(log))
            elif status == "skip":
                ET.SubElement(case, "skipped", message=str(check.get("reason") or "skipped"))
            elif check.get("reason"):
                ET.SubElement(case, "system-out").text = str(check.get("reason"))
        if r.leaf and not checks and r.verify is not None:
            case = ET.SubElement(suite, "testcase", classname=r.node, name="smoke")
            cases.append(case)
            if r.verify == VerifyStatus.FAILED:
                _fail(case, r.error or "smoke failed", r.log_tail)
            elif r.verify == VerifyStatus.SKIPPED:
                ET.SubElement(case, "skipped", message="--no-smoke")
            else:
                ET.SubElement(case, "system-out").text = f"smoke {r.verify.value}"
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
        suite.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))
    suites.set("tests", str(sum(int(s.get("tests", 0)) for s in suites)))
    suites.set("failures", str(sum(int(s.get("failures", 0)) for s in suites)))
    ET.indent(suites)
    return bytes(ET.tostring(suites, encoding="utf-8", xml_declaration=True)) + b"\n"


def _fail(case: ET.Element, message: str, text: str) -> None:
    failure = ET.SubElement(case, "failure", message=message[:500])
    failure.text = text or message


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
            _v(r.build) or "-", _v(r.verify) or "-", _v(r.publish) or "-",
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
