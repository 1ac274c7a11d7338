"""summary.md (for $GITHUB_STEP_SUMMARY): entries x layers, what was published, performance, gaps and failures."""

from __future__ import annotations

from pathlib import Path

from ..ledger import BuildStatus, NodeRecord, PublishStatus
from ..smoke.runner import Runner
from .document import log_link

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
    link = log_link(r.log)
    if link:
        text += f" ([log]({link}))"
    return text


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
                  "threshold | MDR |", "|---|---|---|---|---|---|---|---|---|"]
        for r in measured:
            lines += _performance_rows(r)
        said = [(r.node, (r.performance or {}).get("cell"), (r.performance or {}).get("summary")) for r in measured]
        lines += [""] + [f"- `{node}` (lineage `{_md(str(cell))}`): {_md(str(summary))}"
                         for node, cell, summary in said if summary] if any(s for *_, s in said) else []
    scanned = [r for r in results if r.vulnerabilities]
    if scanned:
        found = [r for r in scanned if (r.vulnerabilities or {}).get("findings")]
        blocked = sum(bool((r.vulnerabilities or {}).get("blocked")) for r in scanned)
        data = "; ".join(dict.fromkeys(str((r.vulnerabilities or {}).get("data")) for r in scanned))
        lines += ["", "### Vulnerabilities", "", f"{len(scanned)} images checked against {_code(data)}: "
                  f"{len(found)} with known vulnerabilities, **{blocked} blocked**." if blocked else
                  f"{len(scanned)} images checked against {_code(data)}: {len(found)} with known vulnerabilities, "
                  "none blocked."]
        if found:
            lines += ["", "| node | SBOM | outcome | advisory | severity | package | layer | fixed in |",
                      "|---|---|---|---|---|---|---|---|"]
            for r in found:
                lines += _vulnerability_rows(r)
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
    runner = Runner.from_json(perf.get("runner"))  # (the finding's JSON form, as report.json holds it)
    where = _md(runner.short() if runner is not None else "-")
    rows = perf.get("rows") or [{"metric": m.get("name"), "unit": m.get("unit"), "value": m.get("value")}
                                for m in perf.get("metrics") or []]
    out = []
    for row in rows:
        change, limit, mdr = row.get("change"), row.get("threshold"), row.get("mdr")
        mark = " **regressed**" if row.get("regressed") else ""
        out.append(f"| `{r.node}` | {where} | {perf.get('verdict')} | {_md(str(row.get('metric')))} | "
                   f"{row.get('value'):.4g} {_md(str(row.get('unit') or ''))} | "
                   + (f"{row['baseline']:.4g}" if row.get("baseline") is not None else "-") + " | "
                   + (f"{change:+.1%}{mark}" if change is not None else "-") + " | "
                   + (f"{limit:.1%}" if limit is not None else "not gated") + " | "
                   + (f"{mdr:.1%}" if isinstance(mdr, int | float) else "-") + " |")
    return out


def _vulnerability_rows(r: NodeRecord) -> list[str]:
    """The gate's findings on the node, blocking first. Every value from the data or the image is a code span: it
    cannot become a link, markup or a cell of its own."""
    sbom = r.sbom or {}
    components = f"{sbom.get('components', '?')} components" if sbom else "-"
    out = []
    for f in (r.vulnerabilities or {}).get("findings") or []:
        outcome = {"blocks": "**blocks**", "expired": f"**blocks** (exception expired {_code(f.get('expires'))})",
                   "allowed": f"allowed until {_code(f.get('expires'))}: {_code(f.get('reason'))}",
                   "below": "below the threshold"}.get(str(f.get("outcome")), _code(f.get("outcome")))
        out.append(f"| `{r.node}` | {components} | {outcome} | {_code(f.get('id'))} | {_code(f.get('level'))}"
                   f"{'' if f.get('level_known', True) else ' (assumed)'} | "
                   f"{_code(f.get('package'))} {_code(f.get('version'))} | {_code(f.get('layer'))} | "
                   f"{_code(', '.join(map(str, f.get('fixed') or [])) or '-')} |")
    return out


def _code(value: object) -> str:
    """A value as a code span of one line (no backtick, pipe or line break of its own)."""
    text = str(value if value is not None else "").replace("`", "'").replace("\n", " ").replace("|", "/")
    return f"`{text}`" if text else ""


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
