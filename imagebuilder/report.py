"""Results of a run -> report.json and the summary table. Pure: takes `Result`s, writes files."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
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
    CACHED = "cached"  # build: an image with the node's key exists; smoke: a pass record for this image exists
    CURRENT = "current"  # publish: every tag already named this digest
    STAGED = "staged"  # publish: untested (--no-smoke), so only pushed under its key tag (or kept local): no tag
    CANCELLED = "cancelled"  # not started: --fail-fast stopped the run
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM stopped the run before this step finished


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
    aliases: list[str] = field(default_factory=list)  # aliases moved to this node's image
    aliases_held: list[str] = field(default_factory=list)  # aliases not moved (something they cover failed)
    base: dict[str, Any] | None = None  # root nodes: the base image's name, image ID and registry digests
    signed: str | None = None  # the signature's outcome (cosign), when signing was on
    secret_scan: str | None = None  # what the secret scan of its image covered (files, bytes)
    pass_record: str | None = None  # where this image's pass is recorded (registry tag, local mirror, this run)
    untested: bool = False  # published without a pass, by --allow-untested
    allowed_skips: list[str] = field(default_factory=list)  # skips of a GPU run that smoke.allow_skip accepted

    @property
    def ok(self) -> bool:
        return self.build in (Status.BUILT, Status.CACHED) \
            and self.smoke in (None, Status.PASSED, Status.SKIPPED, Status.CACHED) \
            and self.publish not in (Status.FAILED, Status.HELD)

    def outcome(self) -> str:
        if self.build in (Status.FAILED, Status.BLOCKED, Status.CANCELLED, Status.INTERRUPTED):
            return str(self.build.value)
        if self.smoke in (Status.FAILED, Status.INTERRUPTED):
            return f"smoke {self.smoke.value}"
        if self.publish is not None:
            return str(self.publish.value)
        return str(self.build.value) if self.build else "pending"

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node, "entry": self.entry, "layer": self.layer, "leaf": self.leaf,
            "key": self.key, "reason": self.reason, "cache": self.cache,
            "status": self.outcome(), "ok": self.ok,
            "build": _v(self.build), "smoke": _v(self.smoke), "publish": _v(self.publish),
            "image": self.image, "digest": self.digest, "tags": self.tags, "aliases": self.aliases,
            "aliases_held": self.aliases_held, "error": self.error,
            "log": self.log, "durations": {k: round(v, 3) for k, v in self.durations.items()},
            "gpu_verified": self.gpu_verified, "base": self.base, "signed": self.signed,
            "secret_scan": self.secret_scan,
            "pass_record": self.pass_record, "untested": self.untested, "allowed_skips": self.allowed_skips,
            "smoke_report": self.smoke_report,
        }


def _v(s: Status | None) -> str | None:
    return s.value if s else None


def write_json(results: list[Result], path: Path, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {**meta, "ok": all(r.ok for r in results), "nodes": [r.to_json() for r in results]}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def write_reports(results: list[Result], folder: Path, meta: dict[str, Any]) -> list[Path]:
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


def _cell(r: Result, folder: Path) -> str:
    build = "♻️" if r.build == Status.CACHED else "🔨" if r.build == Status.BUILT else ""
    text = f"{build} {_MARK.get(r.outcome(), r.outcome())}".strip()
    if r.smoke is not None and r.leaf:
        text += f" · smoke {r.smoke.value}"
    if r.log:
        text += f" ([log]({_relative(Path(r.log), folder)}))"
    return text


def _relative(path: Path, folder: Path) -> str:
    try:
        return os.path.relpath(path, folder)
    except ValueError:
        return str(path)


def summary_markdown(results: list[Result], folder: Path) -> str:
    """A matrix of entries x layers (build / publish / smoke, cached or built, links to logs), then the
    failures with their errors and log tails."""
    layers = list(dict.fromkeys(r.node.split("/", 1)[1] for r in results))
    entries = list(dict.fromkeys(r.entry for r in results))
    cells = {(r.entry, r.node.split("/", 1)[1]): r for r in results}
    failed = [r for r in results if not r.ok]
    built = sum(r.build == Status.BUILT for r in results)
    cached = sum(r.build == Status.CACHED for r in results)
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
    gaps = [r for r in results if r.untested or r.allowed_skips or r.publish == Status.STAGED]
    if gaps:
        lines += ["", "### Not fully tested", ""]
        for r in gaps:
            why = ("published UNTESTED (--allow-untested)" if r.untested else "staged: untested, no public tag"
                   if r.publish == Status.STAGED else "")
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


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def junit_xml(results: list[Result]) -> bytes:
    """One test suite per image; a `build` test case per node and one test case per smoke check of a leaf."""
    suites = ET.Element("testsuites", name="imagebuilder")
    for r in results:
        suite = ET.SubElement(suites, "testsuite", name=r.node)
        cases: list[ET.Element] = []
        build = ET.SubElement(suite, "testcase", classname=r.node, name="build",
                              time=f"{r.durations.get('build', 0.0):.3f}")
        cases.append(build)
        if r.build in (Status.FAILED, Status.BLOCKED, Status.CANCELLED):
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
        if r.leaf and not checks and r.smoke is not None:
            case = ET.SubElement(suite, "testcase", classname=r.node, name="smoke")
            cases.append(case)
            if r.smoke == Status.FAILED:
                _fail(case, r.error or "smoke failed", r.log_tail)
            elif r.smoke == Status.SKIPPED:
                ET.SubElement(case, "skipped", message="--no-smoke")
            else:
                ET.SubElement(case, "system-out").text = f"smoke {r.smoke.value}"
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
        if r.untested:
            note = f"UNTESTED (--allow-untested) · {note}"
        if r.allowed_skips:
            note = f"allowed skips: {', '.join(s.split(':', 1)[0] for s in r.allowed_skips)} · {note}"
        style = _STYLE.get(outcome)
        table.add_row(
            f"[{style}]{escape(r.node)}[/]" if style else escape(r.node),
            _v(r.build) or "-", _v(r.smoke) or "-", _v(r.publish) or "-",
            f"{sum(r.durations.values()):.1f}s", escape(note),
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
