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

import math
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from ..smoke.runner import check_kind

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


def tone(node: Mapping[str, Any]) -> str:
    status = str(node.get("status"))
    if status in BAD:
        return "bad"
    if not node.get("ok") or node.get("untested") or status not in OK_WORDS:
        return "warn"
    return "ok"


def short(digest: Any) -> str:
    text = str(digest or "")
    return text.split(":", 1)[-1][:12] if text else ""


def accelerator(node: Mapping[str, Any]) -> str:
    return str((node.get("versions") or {}).get("accelerator") or "unknown")


def _versions(versions: Mapping[str, Any]) -> str:
    names = ("torch", "cuda", "cudnn", "nccl", "python")
    return " · ".join(f"{n} {versions[n]}" for n in names if versions.get(n))


def repro(node: Mapping[str, Any], meta: Mapping[str, Any]) -> tuple[str, ...]:
    """Commands that reproduce what went wrong with this node, every value shell-quoted: the failed smoke checks
    in its very image (by digest when it is in a registry), or the step that failed, for this node alone."""
    status = str(node.get("status"))
    node_id = str(node["node"])
    matrix = str(meta.get("matrix") or "matrix.yaml")
    command = str(meta.get("command") or "build")
    registry = meta.get("registry")
    run = ["imagebuilder", command, "--matrix", matrix, *(["--registry", str(registry)] if registry else []),
           "--only", node_id]
    if status == "smoke failed":
        report = node.get("smoke_report") or {}
        kinds = sorted({k for c in report.get("checks") or [] if c.get("status") == "fail"
                        and (k := check_kind(str(c.get("name")))) is not None})
        digest, repo = node.get("digest"), node.get("repository")
        ref = f"{repo}@{digest}" if digest and repo else str(node.get("image") or "")
        out = []
        if ref and kinds:
            if digest and repo:
                out.append(shlex.join(["docker", "pull", ref]))
            out.append(shlex.join(["imagebuilder", "smoke", ref, "--only", ",".join(kinds)]))
        again = ["imagebuilder", "build" if command != "verify" else "verify", *run[2:], "--resmoke",
                 *(["--no-push"] if command != "verify" else [])]
        return (*out, shlex.join(again))  # the same from the matrix: the suite and the performance gate
    if status in ("failed", "interrupted", "cancelled"):
        return (shlex.join([*run, *(["--no-push"] if command == "build" else [])]),)
    if status in ("held",) or node.get("publish") == "failed":
        return (shlex.join([*run, "--dry-run"] if command == "publish" else run),)
    return ()


def _relative(path: str, folder: Path) -> str:
    try:
        return os.path.relpath(path, folder)
    except ValueError:
        return path


def _fmt(value: Any, unit: str = "") -> str:
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "-"
    return f"{value:.4g}" + (f" {unit}" if unit else "")


def metrics(node: Mapping[str, Any]) -> tuple[str, str, tuple[Metric, ...]]:
    """The regression gate's verdict, the runner, and each metric against its baseline with its history."""
    perf = node.get("performance") or {}
    if not perf:
        return "", "", ()
    runner = perf.get("runner") or {}
    models = " + ".join(str(m) for m in runner.get("models") or []) or str(runner.get("kind") or "?")
    where = f"{runner.get('count')}x {models}" + (f", driver {runner['driver']}" if runner.get("driver") else "")
    history = [h for h in perf.get("history") or [] if isinstance(h, Mapping)]
    rows = perf.get("rows") or [{"metric": m.get("name"), "unit": m.get("unit"), "value": m.get("value"),
                                 "better": m.get("better")} for m in perf.get("metrics") or []]
    out = []
    for row in rows:
        name = str(row.get("metric"))
        values = [float(v) for h in history if isinstance(v := (h.get("values") or {}).get(name), int | float)]
        value = row.get("value")
        if isinstance(value, int | float):
            values.append(float(value))
        change, limit = row.get("change"), row.get("threshold")
        plot = Plot(name, str(row.get("unit") or ""), tuple(values), row.get("baseline"), limit,
                    str(row.get("better") or "higher"), bool(row.get("regressed")))
        out.append(Metric(name, _fmt(value, str(row.get("unit") or "")), _fmt(row.get("baseline")),
                          f"{change:+.1%}" if isinstance(change, int | float) else "-",
                          f"{limit:.0%}" if isinstance(limit, int | float) else "not gated",
                          bool(row.get("regressed")), plot))
    return str(perf.get("verdict") or ""), where, tuple(out)


def card(node: Mapping[str, Any], anchor: str, also: Sequence[str], meta: Mapping[str, Any], folder: Path) -> Card:
    facts: list[tuple[str, str]] = []

    def fact(label: str, value: Any) -> None:
        if value not in (None, "", [], {}):
            facts.append((label, value if isinstance(value, str) else ", ".join(map(str, value))
                          if isinstance(value, list | tuple) else str(value)))

    steps = " · ".join(f"{name} {node[key]}" for name, key in (("build", "build"), ("smoke", "smoke"),
                                                                ("publish", "publish")) if node.get(key))
    fact("steps", steps)
    fact("digest", node.get("digest"))
    fact("image", node.get("image"))
    fact("key", node.get("key"))
    fact("tags", node.get("tags"))
    fact("aliases", node.get("aliases"))
    fact("aliases held", node.get("aliases_held"))
    fact("pass record", node.get("pass_record"))
    fact("signed by", node.get("signer"))
    gpu = node.get("gpu") or {}
    if gpu.get("kind") == "gpu" and gpu.get("verified"):
        fact("ran on", f"{gpu.get('count')}x {' + '.join(map(str, gpu.get('models') or [])) or 'GPU'}"
             + (f", driver {gpu['driver']}" if gpu.get("driver") else ""))
    elif gpu.get("kind") == "cpu":
        fact("ran on", "CPU")
    if node.get("gpu_verified") is False:
        fact("GPU", "NOT GPU-verified: no GPU reached the suite")
    fact("why", node.get("reason"))
    fact("cache", node.get("cache"))
    fact("versions", _versions(node.get("versions") or {}))
    durations = node.get("durations") or {}
    fact("durations", " · ".join(f"{k} {float(v):.1f} s" for k, v in durations.items()
                                 if isinstance(v, int | float)))
    fact("secret scan", node.get("secret_scan"))
    fact("cosign", node.get("signed"))
    if node.get("untested"):
        fact("UNTESTED", "published without a pass (--allow-untested)")
    fact("allowed skips", node.get("allowed_skips"))
    checks = tuple((str(c.get("name")), str(c.get("reason") or ""),
                    "\n".join(map(str, c["log"][-40:])) if isinstance(c.get("log"), list) else str(c.get("log") or ""))
                   for c in (node.get("smoke_report") or {}).get("checks") or [] if c.get("status") == "fail")
    verdict, runner, rows = metrics(node)
    text = " ".join(str(x) for x in (node["node"], node.get("status"), node.get("digest"), node.get("image"),
                                     *(node.get("tags") or []), *(v for v in (node.get("versions") or {}).values()
                                                                  if v), node.get("error"), *also))
    return Card(anchor, str(node["node"]), str(node["entry"]), str(node["layer"]), str(node["status"]), tone(node),
                accelerator(node), tuple(facts), text.lower(), tuple(also), str(node.get("error") or ""),
                "\n".join(str(node.get("log_tail") or "").splitlines()[-60:]),
                _relative(str(node["log"]), folder) if node.get("log") else "", checks,
                repro(node, meta) if tone(node) != "ok" else (), VERDICTS.get(verdict, verdict), runner, rows)


def page(doc: Mapping[str, Any], folder: Path) -> Page:
    """What the template shows, from a report.json document."""
    nodes = [n for n in doc.get("nodes") or [] if isinstance(n, Mapping)]
    anchors = {str(n["node"]): f"n{i}" for i, n in enumerate(nodes)}
    by_id = {str(n["node"]): n for n in nodes}
    also: dict[str, list[str]] = {}
    for n in nodes:
        if n.get("same_as") in by_id:
            also.setdefault(str(n["same_as"]), []).append(str(n["node"]))
    meta = {k: v for k, v in doc.items() if k != "nodes"}
    cards = tuple(card(n, anchors[str(n["node"])], also.get(str(n["node"]), ()), meta, folder) for n in nodes
                  if n.get("same_as") not in by_id)
    card_of = {c.node: c for c in cards}
    layers = tuple(dict.fromkeys(str(n["layer"]) for n in nodes))
    entries = tuple(dict.fromkeys(str(n["entry"]) for n in nodes))
    cell_of = {(str(n["entry"]), str(n["layer"])): n for n in nodes}
    rows = []
    for entry in entries:
        cells: list[Cell | None] = []
        first = next(n for n in nodes if n["entry"] == entry)
        for layer in layers:
            found = cell_of.get((entry, layer))
            if found is None:
                cells.append(None)
                continue
            n = found
            same = str(n["same_as"]) if n.get("same_as") in by_id else None
            shown = card_of[same] if same else card_of[str(n["node"])]
            perf = n.get("performance") or {}
            changes = [r.get("change") for r in perf.get("rows") or [] if isinstance(r.get("change"), int | float)]
            worst = f"{min(changes):+.1%}" if changes else ""
            cells.append(Cell(shown.anchor, str(n["status"]), tone(n), short(n.get("digest")), same, layer,
                              accelerator(n), (shown.search + " " + str(n["node"])).lower(),
                              f"{VERDICTS.get(str(perf.get('verdict')), perf.get('verdict'))} {worst}".strip()
                              if perf else "", str(n["status"]) != shown.status))
        rows.append(Row(entry, accelerator(first), _versions(first.get("versions") or {}), tuple(cells)))
    counts: dict[str, int] = {}
    for n in nodes:
        counts[str(n["status"])] = counts.get(str(n["status"]), 0) + 1
    tones = {str(n["status"]): tone(n) for n in nodes}
    shown_meta = tuple((label, str(meta[key])) for label, key in (
        ("command", "command"), ("matrix", "matrix"), ("registry", "registry"), ("finished", "finished"),
        ("host", "host"), ("tool", "version")) if meta.get(key))
    signing = meta.get("signing")
    if isinstance(signing, Mapping) and signing.get("status"):
        shown_meta += (("cosign", f"{signing.get('status')}" + (f" ({signing['reason']})" if signing.get("reason")
                                                                 else "")),)
    if meta.get("interrupted"):
        shown_meta += (("interrupted", "yes: what had not finished says so"),)
    ok = bool(doc.get("ok", all(n.get("ok") for n in nodes)))
    return Page(f"imagebuilder: {sum(bool(n.get('ok')) for n in nodes)}/{len(nodes)} nodes ok", ok, shown_meta,
                tuple((s, c, tones[s]) for s, c in sorted(counts.items(), key=lambda x: (-x[1], x[0]))),
                layers, tuple(sorted({accelerator(n) for n in nodes})), tuple(sorted(counts)), tuple(rows), cards,
                len(nodes), tuple(c for c in cards if c.tone != "ok"))


def render(doc: Mapping[str, Any], folder: Path) -> str:
    """The page for a report.json document whose report folder is `folder` (log links are relative to it)."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("imagebuilder.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("report.html.j2").render(page=page(doc, folder))
