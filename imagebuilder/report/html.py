"""report.html: the run as one self-contained page, made from report.json alone (so `imagebuilder report DIR`
remakes it from a report folder anywhere). Nothing is fetched: styles, script and plots are inline, and the
page's Content-Security-Policy forbids any request, so it opens offline, from an artifact or an email.

What it shows: the matrix as a grid (entries x layers; a node that is the same image as an earlier one is a
link to it, not a second copy), then one card per distinct node: status, digest, tags, where its pass is
recorded and who signed it, the GPUs it ran on, versions, durations; for what failed, the error, its log tail,
the failed checks and a command that reproduces it; for a measured leaf, each metric against its baseline with
a plot of its lineage's history. Filters (status, layer, accelerator) and a search box work on the page itself.

Every value in the document is text from a run (node ids, errors, log lines): the template escapes all of it
(autoescape, StrictUndefined); the plots are drawn here from numbers only."""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup, escape

from ..input.matrix import versions_line
from . import repro
from .document import log_link

BAD = ("failed", "smoke failed")
VERDICTS = {"first": "perf: first of its lineage", "ok": "perf ok", "regressed": "perf REGRESSED",
            "accepted": "perf regression accepted"}
OK_WORDS = ("pushed", "current", "tagged", "built", "cached", "passed")


@dataclass(frozen=True)
class Plot:
    """A sparkline of one metric: the lineage's values, oldest first, then this image's."""

    metric: str
    unit: str
    values: tuple[float, ...]
    baseline: float | None
    threshold: float | None
    better: str
    regressed: bool

    def svg(self, width: int = 160, height: int = 36) -> Markup:
        points = [v for v in self.values if math.isfinite(v)]
        if not points:
            return Markup("")
        scale = [*points, *([self.baseline] if self.baseline is not None else [])]
        if self.baseline is not None and self.threshold is not None:
            limit = self.baseline * (1 - self.threshold if self.better == "higher" else 1 + self.threshold)
            scale.append(limit)
        else:
            limit = None
        low, high = min(scale), max(scale)
        span = (high - low) or abs(high) or 1.0
        pad = 4

        def xy(i: int, v: float) -> tuple[float, float]:
            x = pad + (width - 2 * pad) * (i / (len(points) - 1) if len(points) > 1 else 0.5)
            y = pad + (height - 2 * pad) * (1 - (v - low) / span)
            return round(x, 1), round(y, 1)

        parts = [f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">',
                 f"<title>{escape(self.metric)}: {len(points)} image(s), newest last</title>"]
        if limit is not None:
            y0, y1 = sorted((xy(0, limit)[1], xy(0, self.baseline or limit)[1]))
            parts.append(f'<rect class="band" x="0" y="{y0}" width="{width}" height="{max(y1 - y0, 0.5)}"/>')
        if self.baseline is not None:
            y = xy(0, self.baseline)[1]
            parts.append(f'<line class="base" x1="0" x2="{width}" y1="{y}" y2="{y}"/>')
        line = " ".join(f"{x},{y}" for x, y in (xy(i, v) for i, v in enumerate(points)))
        parts.append(f'<polyline class="line" points="{line}"/>')
        x, y = xy(len(points) - 1, points[-1])
        parts.append(f'<circle class="{"now bad" if self.regressed else "now"}" cx="{x}" cy="{y}" r="3"/></svg>')
        return Markup("".join(parts))


@dataclass(frozen=True)
class Metric:
    name: str
    value: str
    baseline: str
    change: str
    threshold: str
    mdr: str  # the minimum detectable regression the threshold comes from ("-": none measured)
    regressed: bool
    plot: Plot


@dataclass(frozen=True)
class Card:
    """One distinct node."""

    anchor: str
    node: str
    entry: str
    layer: str
    status: str
    tone: str  # ok | warn | bad
    accelerator: str
    facts: tuple[tuple[str, str], ...]
    search: str
    also: tuple[str, ...] = ()  # the other nodes that are this same image
    error: str = ""
    log_tail: str = ""
    log: str = ""
    failed_checks: tuple[tuple[str, str, str], ...] = ()  # name, reason, log
    repro: tuple[str, ...] = ()
    verdict: str = ""  # the regression gate's, in words
    runner: str = ""
    metrics: tuple[Metric, ...] = ()
    findings: tuple[Finding, ...] = ()  # the vulnerability gate's, blocking first
    gate: str = ""  # the gate's verdict in words (and the data it judged with)


@dataclass(frozen=True)
class Finding:
    id: str
    level: str
    package: str
    layer: str
    fixed: str
    outcome: str  # in words: blocks, blocks (exception expired ...), allowed until ...: reason, below the threshold
    blocks: bool
    summary: str


OUTCOMES = {"blocks": "blocks", "below": "below the threshold"}


def findings(node: Mapping[str, Any]) -> tuple[str, tuple[Finding, ...]]:
    """The vulnerability gate's verdict on a node in words, and its findings (none when it did not run)."""
    gate = mapping(node.get("vulnerabilities"))
    if not gate:
        return "", ()
    out = []
    for f in map(mapping, items(gate.get("findings"))):
        outcome = text(f.get("outcome"))
        words = (f"blocks: the exception expired {text(f.get('expires'))}" if outcome == "expired" else
                 f"allowed until {text(f.get('expires'))}: {text(f.get('reason'))}" if outcome == "allowed" else
                 OUTCOMES.get(outcome, outcome))
        level = text(f.get("level")) + ("" if f.get("level_known", True) else " (assumed)")
        out.append(Finding(text(f.get("id")), level, f"{text(f.get('package'))} {text(f.get('version'))}",
                           text(f.get("layer")), ", ".join(map(text, items(f.get("fixed")))) or "-", words,
                           outcome in ("blocks", "expired"), text(f.get("summary"))))
    verdict = "BLOCKED by known vulnerabilities" if gate.get("blocked") else \
        f"{len(out)} known, none blocks" if out else "no known vulnerability"
    return f"{verdict} ({text(gate.get('data'))})", tuple(out)


@dataclass(frozen=True)
class Cell:
    anchor: str
    status: str
    tone: str
    digest: str
    same_as: str | None
    layer: str
    accelerator: str
    search: str
    perf: str = ""
    own_status: bool = False  # a shared cell whose status differs from its image's (held for its own entry)


@dataclass(frozen=True)
class Row:
    entry: str
    accelerator: str
    versions: str
    cells: tuple[Cell | None, ...]


@dataclass(frozen=True)
class Page:
    title: str
    ok: bool
    meta: tuple[tuple[str, str], ...]
    counts: tuple[tuple[str, int, str], ...]
    layers: tuple[str, ...]
    accelerators: tuple[str, ...]
    statuses: tuple[str, ...]
    rows: tuple[Row, ...]
    cards: tuple[Card, ...]
    total: int
    failed: tuple[Card, ...] = field(default=())


def mapping(value: Any) -> Mapping[str, Any]:
    """A value of the document that should be an object; anything else reads as empty (the page is made from a
    file that may come from anywhere: it never raises on one)."""
    return value if isinstance(value, Mapping) else {}


def items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def text(value: Any) -> str:
    return "" if value is None else str(value)


def tone(node: Mapping[str, Any]) -> str:
    status = text(node.get("status"))
    if status in BAD:
        return "bad"
    if not node.get("ok") or node.get("untested") or status not in OK_WORDS:
        return "warn"
    return "ok"


def short(digest: Any) -> str:
    return text(digest).split(":", 1)[-1][:12]


def accelerator(node: Mapping[str, Any]) -> str:
    return text(mapping(node.get("versions")).get("accelerator")) or "unknown"


def column(node: Mapping[str, Any]) -> str:
    """The node's column in the grid: its name in its entry (two nodes of one entry may use one layer folder)."""
    node_id = text(node.get("node"))
    return node_id.split("/", 1)[1] if "/" in node_id else text(node.get("layer"))


def _fmt(value: Any, unit: str = "") -> str:
    v = number(value)
    return "-" if v is None else f"{v:.4g}" + (f" {unit}" if unit else "")


def _runner_label(runner: Mapping[str, Any]) -> str:
    models = " + ".join(text(m) for m in items(runner.get("models"))) or text(runner.get("kind")) or "unknown"
    count = number(runner.get("count"))
    return (f"{int(count)}x " if count else "") + models + (f", driver {runner['driver']}" if runner.get("driver")
                                                          else "")


def metrics(node: Mapping[str, Any]) -> tuple[str, str, tuple[Metric, ...]]:
    """The regression gate's verdict, the runner, and each metric against its baseline with its history."""
    perf = mapping(node.get("performance"))
    if not perf:
        return "", "", ()
    history = [mapping(h) for h in items(perf.get("history"))]
    rows = [mapping(r) for r in items(perf.get("rows"))] or [
        {"metric": m.get("name"), "unit": m.get("unit"), "value": m.get("value"), "better": m.get("better")}
        for m in map(mapping, items(perf.get("metrics")))]
    out = []
    for row in rows:
        name, unit = text(row.get("metric")), text(row.get("unit"))
        values = [v for h in history if (v := number(mapping(h.get("values")).get(name))) is not None]
        value = number(row.get("value"))
        if value is not None:
            values.append(value)
        change, limit = number(row.get("change")), number(row.get("threshold"))
        better = "lower" if row.get("better") == "lower" else "higher"
        plot = Plot(name, unit, tuple(values), number(row.get("baseline")), limit, better, bool(row.get("regressed")))
        mdr = number(row.get("mdr"))
        out.append(Metric(name, _fmt(value, unit), _fmt(row.get("baseline")),
                          "-" if change is None else f"{change:+.1%}",
                          "not gated" if limit is None else f"{limit:.1%}", "-" if mdr is None else f"{mdr:.1%}",
                          bool(row.get("regressed")), plot))
    return text(perf.get("verdict")), _runner_label(mapping(perf.get("runner"))), tuple(out)


def card(node: Mapping[str, Any], anchor: str, also: Sequence[str], meta: Mapping[str, Any]) -> Card:
    facts: list[tuple[str, str]] = []

    def fact(label: str, value: Any) -> None:
        shown = ", ".join(map(text, value)) if isinstance(value, list | tuple) else text(value)
        if shown:
            facts.append((label, shown))

    fact("steps", " · ".join(f"{key} {node[key]}" for key in ("build", "smoke", "publish") if node.get(key)))
    for label, key in (("digest", "digest"), ("image", "image"), ("key", "key"), ("tags", "tags"),
                       ("aliases", "aliases"), ("aliases held", "aliases_held"), ("pass record", "pass_record"),
                       ("signed by", "signer")):
        fact(label, node.get(key))
    gpu = mapping(node.get("gpu"))
    if gpu.get("kind") == "gpu" and gpu.get("verified"):
        fact("ran on", _runner_label(gpu))
    elif gpu.get("kind") == "cpu":
        fact("ran on", "CPU")
    if node.get("gpu_verified") is False:
        fact("GPU", "NOT GPU-verified: no GPU reached the suite")
    fact("why", node.get("reason"))
    fact("cache", node.get("cache"))
    fact("versions", versions_line(mapping(node.get("versions"))))
    fact("durations", " · ".join(f"{k} {v:.1f} s" for k, raw in mapping(node.get("durations")).items()
                                 if (v := number(raw)) is not None))
    fact("secret scan", node.get("secret_scan"))
    fact("cosign", node.get("signed"))
    if node.get("untested"):
        fact("UNTESTED", "published without a pass (--allow-untested)")
    fact("allowed skips", node.get("allowed_skips"))
    sbom = mapping(node.get("sbom"))
    if sbom:
        fact("SBOM", f"{text(sbom.get('format'))}: {text(sbom.get('components'))} components ({text(sbom.get('deb'))} "
                     f"Debian, {text(sbom.get('python'))} Python), {text(sbom.get('source'))}; "
                     f"{text(sbom.get('where'))}" + (f", signed by {text(sbom.get('signer'))}" if sbom.get("signer")
                                                     else ""))
    gate, found = findings(node)
    checks = tuple((text(c.get("name")), text(c.get("reason")),
                    "\n".join(map(text, items(c.get("log"))[-40:])) if isinstance(c.get("log"), list)
                    else text(c.get("log")))
                   for c in map(mapping, items(mapping(node.get("smoke_report")).get("checks")))
                   if c.get("status") == "fail")
    verdict, runner, rows = metrics(node)
    search = " ".join(text(x) for x in (node.get("node"), node.get("status"), node.get("digest"), node.get("image"),
                                         *items(node.get("tags")), *mapping(node.get("versions")).values(),
                                         node.get("error"), *also, *(f.id for f in found)))
    return Card(anchor, text(node.get("node")), text(node.get("entry")), column(node), text(node.get("status")),
                tone(node), accelerator(node), tuple(facts), search.lower(), tuple(also), text(node.get("error")),
                "\n".join(text(node.get("log_tail")).splitlines()[-60:]), log_link(node.get("log")) or "", checks,
                repro.commands(node, meta) if tone(node) != "ok" else (), VERDICTS.get(verdict, verdict), runner,
                rows, found, gate)


def page(doc: Mapping[str, Any]) -> Page:
    """What the template shows, from a report.json document (`document.load` checked its nodes' ids)."""
    nodes = [n for n in items(doc.get("nodes")) if isinstance(n, Mapping) and text(n.get("node"))]
    by_id = {text(n.get("node")): n for n in nodes}

    def first(n: Mapping[str, Any]) -> str | None:  # the node whose image this one is, when the report has it
        twin = n.get("same_as")
        ok = isinstance(twin, str) and twin != n.get("node") and twin in by_id \
            and not (isinstance(by_id[twin].get("same_as"), str) and by_id[twin]["same_as"] in by_id)
        return str(twin) if ok else None

    anchors = {text(n.get("node")): f"n{i}" for i, n in enumerate(nodes)}
    also: dict[str, list[str]] = {}
    for n in nodes:
        if (twin := first(n)) is not None:
            also.setdefault(twin, []).append(text(n.get("node")))
    meta = {k: v for k, v in doc.items() if k != "nodes"}
    cards = tuple(card(n, anchors[text(n.get("node"))], also.get(text(n.get("node")), ()), meta) for n in nodes
                  if first(n) is None)
    card_of = {c.node: c for c in cards}
    columns = tuple(dict.fromkeys(column(n) for n in nodes))
    entries = tuple(dict.fromkeys(text(n.get("entry")) for n in nodes))
    cell_of = {(text(n.get("entry")), column(n)): n for n in nodes}
    rows = []
    for entry in entries:
        cells: list[Cell | None] = []
        for name in columns:
            found = cell_of.get((entry, name))
            if found is None:
                cells.append(None)
                continue
            n = found
            same = first(n)
            shown = card_of[same or text(n.get("node"))]
            perf = mapping(n.get("performance"))
            changes = [c for r in items(perf.get("rows")) if (c := number(mapping(r).get("change"))) is not None]
            verdict = text(perf.get("verdict"))
            summary = f"{VERDICTS.get(verdict, verdict)} {f'{min(changes):+.1%}' if changes else ''}".strip()
            cells.append(Cell(shown.anchor, text(n.get("status")), tone(n), short(n.get("digest")), same, name,
                              accelerator(n), (shown.search + " " + text(n.get("node"))).lower(), summary,
                              text(n.get("status")) != shown.status))
        one = next(n for n in nodes if text(n.get("entry")) == entry)
        rows.append(Row(entry, accelerator(one), versions_line(mapping(one.get("versions"))), tuple(cells)))
    counts: dict[str, int] = {}
    for n in nodes:
        counts[text(n.get("status"))] = counts.get(text(n.get("status")), 0) + 1
    tones = {text(n.get("status")): tone(n) for n in nodes}
    shown_meta = tuple((label, text(meta[key])) for label, key in (
        ("command", "command"), ("matrix", "matrix"), ("registry", "registry"), ("only", "only"),
        ("finished", "finished"), ("host", "host"), ("tool", "version")) if meta.get(key))
    signing = mapping(meta.get("signing"))
    if signing.get("status"):
        shown_meta += (("cosign", text(signing.get("status")) + (f" ({signing['reason']})" if signing.get("reason")
                                                                   else "")),)
    if meta.get("interrupted"):
        shown_meta += (("interrupted", "yes: what had not finished says so"),)
    ok = bool(doc.get("ok", all(n.get("ok") for n in nodes)))
    return Page(f"imagebuilder: {sum(bool(n.get('ok')) for n in nodes)}/{len(nodes)} nodes ok", ok, shown_meta,
                tuple((s, c, tones[s]) for s, c in sorted(counts.items(), key=lambda x: (-x[1], x[0]))),
                columns, tuple(sorted({accelerator(n) for n in nodes})), tuple(sorted(counts)), tuple(rows), cards,
                len(nodes), tuple(c for c in cards if c.tone != "ok"))


def render(doc: Mapping[str, Any]) -> str:
    """The page for a report.json document. Its style and script are the package's own files, inline, and the
    page's Content-Security-Policy allows exactly them (by hash): no request, no other script, no inline handler."""
    files = resources.files("imagebuilder.report") / "templates"
    style = "\n" + (files / "report.css").read_text(encoding="utf-8")
    script = "\n" + (files / "report.js").read_text(encoding="utf-8")
    csp = (f"default-src 'none'; style-src '{_sha256(style)}'; script-src '{_sha256(script)}'; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    env = jinja2.Environment(loader=jinja2.PackageLoader("imagebuilder.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("report.html.j2").render(page=page(doc), style=Markup(style), script=Markup(script),
                                                     csp=csp)


def _sha256(content: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(content.encode("utf-8")).digest()).decode()
