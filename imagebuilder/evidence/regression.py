"""The regression gate: an image's metrics against its lineage's history (`history`), judged by the host.

Rule: for each metric, the baseline is the median of the last `window` passes of the image's line (same cell,
same runner, same versions, or the newest older version's line for an upgrade: `history.line`); regressed images
never count. An accepted image (`--accept-regression`) is the new normal from the next image on: the baseline
starts at it, passes before it no longer count. A metric worse than the baseline by more than its threshold is a
regression; one regression fails the image (unless the run accepts it: then its pass says `accepted`). The
first image of a lineage has no baseline: the suite's absolute floors
are all that judge it. The finding names the metric, the baseline and the images it came from, and the pins that
changed since the newest of them (`nccl 2.27.5 -> 2.28.9`).

Thresholds come from measured noise, never a guess: `data/perf_noise.json` holds, per runner (`Runner.noise_key`:
`cpu`, or `gpu/1x NVIDIA H200`), each metric's values over repeated clean runs of one image (written by
`benchmarks/perf_noise.py`). From them, a metric's minimum detectable regression (MDR) is the larger of
NOISE_FACTOR x the worst shortfall of a clean run from the median of the others and SPREAD_FACTOR x their robust
spread (1.4826 x MAD): the smallest slowdown one run can be told apart from clean runs by. Its threshold is the MDR
rounded up to half a percent, at least `MIN_THRESHOLD`; a metric whose threshold comes out above `MAX_THRESHOLD`
is too noisy to gate: it is recorded and shown, never judged. A metric with no measured noise on its runner is
judged by the loosest threshold measured for it on another count of the same GPU models (8x H200 by 1x and 2x
H200), else on any other runner of the same kind (said in the finding), and one measured nowhere is not judged.
Pure."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..declarations import schema
from ..smoke.metrics import Metric
from ..smoke.runner import Runner
from .history import Point, line

# The finest threshold. On an H200 the gated metrics' MDRs are 0.3..1.2 % and no clean run of twenty fell more
# than 1.3 % from its baseline (benchmarks/results/perf_signal_1xh200.json); 2 % keeps 1.5x that margin for what
# one host cannot measure (another unit of the same GPU model, a baseline a few weeks old), and a 5 % slower step
# (a rate 4.8 % lower) still fails by more than twice the threshold's distance from the noise.
MIN_THRESHOLD = 0.02
MAX_THRESHOLD = 0.40  # above it a metric's noise hides any regression worth the name: recorded, not gated
NOISE_FACTOR = 2.0
SPREAD_FACTOR = 3.0
ROUND_TO = 0.005
WINDOW: int = schema.value("smoke.history_window")  # the passes a baseline is the median of (its default)
HISTORY_SHOWN = 30  # the points of a lineage a report plots
FIRST, OK, REGRESSED, ACCEPTED = "first", "ok", "regressed", "accepted"


def _short(value: float, median: float, better: str) -> float:
    return (median - value) / median if better == "higher" else (value - median) / median


def worst_shortfall(values: Sequence[float], better: str) -> float:
    """How far the worst of some clean runs falls short of their median, as a fraction of it."""
    median = statistics.median(values)
    return max(_short(v, median, better) for v in values)


def worst_left_out(values: Sequence[float], better: str) -> float:
    """How far the worst clean run falls short of the median of the others (each run left out in turn)."""
    return max(_short(v, statistics.median([*values[:i], *values[i + 1:]]), better) for i, v in enumerate(values))


def robust_spread(values: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation, as a fraction of the median (a standard deviation's estimate
    that one outlier does not move)."""
    median = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - median) for v in values) / median


def mdr_of(values: Sequence[float], better: str) -> float:
    """The minimum detectable regression of a metric with these clean runs (see the module's rule)."""
    return max(NOISE_FACTOR * max(worst_left_out(values, better), 0.0), SPREAD_FACTOR * robust_spread(values))


def threshold_from(values: Sequence[float], better: str) -> float:
    """The rule: the MDR rounded up to ROUND_TO, at least MIN_THRESHOLD."""
    steps = math.ceil(round(mdr_of(values, better) / ROUND_TO, 6))
    return max(MIN_THRESHOLD, round(steps * ROUND_TO, 4))


@dataclass(frozen=True)
class Limit:
    """A metric's threshold on one runner, the MDR it comes from, and the runner (noise key) it was measured on."""

    threshold: float
    mdr: float
    measured_on: str


@dataclass(frozen=True)
class Thresholds:
    """Per runner (`Runner.noise_key`), per metric: the threshold and MDR, from measured noise."""

    table: Mapping[str, Mapping[str, Limit]]
    source: str = ""

    @classmethod
    def from_noise(cls, doc: Mapping[str, Any], source: str = "") -> Thresholds:
        table: dict[str, dict[str, Limit]] = {}
        for key, measured in (doc.get("kinds") or {}).items():
            for name, m in (measured.get("metrics") or {}).items():
                values = [float(v) for v in m.get("values") or []]
                better = str(m.get("better") or "higher")
                if len(values) >= 3:
                    table.setdefault(key, {})[name] = Limit(threshold_from(values, better),
                                                            round(mdr_of(values, better), 4), key)
        return cls(table, source)

    @classmethod
    def measured(cls) -> Thresholds:
        """The thresholds of the noise measured by benchmarks/perf_noise.py, shipped with the package."""
        path = resources.files("imagebuilder") / "data" / "perf_noise.json"
        return cls.from_noise(json.loads(path.read_text(encoding="utf-8")), "imagebuilder/data/perf_noise.json")

    def limit(self, runner: Runner, metric: str) -> Limit | None:
        """The metric's limit on this runner: measured on it, else the loosest measured on another count of its
        GPU models (8x H200 by 1x and 2x H200: the same chips, the same power and clocks), else the loosest
        measured on any runner of its kind; None: no noise measured for it anywhere of its kind."""
        key = runner.noise_key()
        own = (self.table.get(key) or {}).get(metric)
        if own is not None:
            return own
        others = [limits[metric] for k, limits in sorted(self.table.items())
                  if metric in limits and k.split("/", 1)[0] == runner.kind]
        models = key.partition("x ")[2] if runner.kind == "gpu" else None
        mine = [lim for lim in others if models and lim.measured_on.partition("x ")[2] == models]
        return max(mine or others, key=lambda lim: lim.threshold, default=None)

    def of(self, runner: Runner, metric: str) -> float | None:
        """The metric's threshold on this runner; None: not gated (no noise measured, or too noisy)."""
        found = self.limit(runner, metric)
        return found.threshold if found is not None and found.threshold <= MAX_THRESHOLD else None


@dataclass(frozen=True)
class Row:
    """One metric of the judged image against its baseline."""

    metric: str
    unit: str
    better: str
    value: float
    baseline: float | None
    change: float | None  # relative to the baseline, signed so that negative is worse
    threshold: float | None  # None: recorded, not gated
    regressed: bool
    mdr: float | None = None  # the minimum detectable regression the threshold comes from (None: none measured)
    measured_on: str = ""  # the runner whose noise set them, where it is not this one

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "unit": self.unit, "better": self.better, "value": round(self.value, 4),
                "baseline": None if self.baseline is None else round(self.baseline, 4),
                "change": None if self.change is None else round(self.change, 4), "threshold": self.threshold,
                "mdr": self.mdr, "measured_on": self.measured_on, "regressed": self.regressed}

    def text(self) -> str:
        if self.baseline is None or self.change is None:
            return f"{self.metric} {self.value:.4g} {self.unit} (no baseline)"
        gate = f"threshold {_percent(self.threshold)}" if self.threshold is not None else "not gated"
        if self.mdr is not None:
            gate += f", MDR {_percent(self.mdr)}"
        if self.measured_on:
            gate += f", measured on {self.measured_on}"
        return (f"{self.metric} {self.value:.4g} {self.unit} against a baseline of {self.baseline:.4g} "
                f"({self.change:+.1%}; {gate})")


@dataclass(frozen=True)
class Performance:
    """The gate's finding for one image on one runner."""

    verdict: str  # first | ok | regressed | accepted
    runner: Runner
    metrics: Mapping[str, Metric]
    rows: tuple[Row, ...] = ()
    baseline_of: tuple[str, ...] = ()  # the manifests (or image IDs) of the passes the baseline is the median of
    previous: str | None = None  # the newest of them
    pins_changed: tuple[str, ...] = ()  # since `previous`
    window: int = WINDOW
    thresholds: str = ""  # where the thresholds come from
    history: tuple[Point, ...] = ()  # the lineage before this image, oldest first (the report's plots; not signed)
    cell: str = ""  # the lineage's cell (history.cell_of)

    @property
    def regressed(self) -> bool:
        return any(r.regressed for r in self.rows)

    def why(self) -> str:
        """The regression in one message: the metrics, the baseline, the images, the pins that changed."""
        bad = [r for r in self.rows if r.regressed]
        if not bad:
            return ""
        pins = "; pins changed since " + (self.previous or "?")[:19] + ": " + ", ".join(self.pins_changed) \
            if self.pins_changed else f"; no pin changed since {(self.previous or '?')[:19]}"
        return (f"performance regressed on {self.runner.label()}: " + "; ".join(r.text() for r in bad)
                + f" (baseline: the median of {len(self.baseline_of)} earlier pass(es) of this lineage: "
                + ", ".join(m[:19] for m in self.baseline_of) + ")" + pins)

    def summary(self) -> str:
        """What changed since the previous image and what it did, in one line: `torch 2.10.0 → 2.11.0:
        fsdp.samples_per_s −6 %` (every metric with a baseline)."""
        changes = ", ".join(f"{r.metric} {r.change * 100:+.0f} %".replace("-", "\u2212") for r in self.rows
                            if r.change is not None)
        pins = ", ".join(self.pins_changed).replace(" -> ", " \u2192 ") or "no pin changed"
        return f"{pins}: {changes}" if changes else ""

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "runner": self.runner.to_json(),
                "metrics": [m.to_json() for m in self.metrics.values()], "rows": [r.to_json() for r in self.rows],
                "baseline_of": list(self.baseline_of), "previous": self.previous,
                "pins_changed": list(self.pins_changed), "window": self.window, "thresholds": self.thresholds,
                "cell": self.cell, "summary": self.summary()}

    def report_json(self) -> dict[str, Any]:
        """What the run's report says: the finding, and the newest `HISTORY_SHOWN` points of the lineage before
        this image (date, image, verdict, each metric's value), which its plots draw."""
        return {**self.to_json(), "history": history_json(self.history)}

    def accepted(self) -> Performance:
        """The same finding, accepted by the run (`--accept-regression`): a pass, and the lineage's new normal."""
        return dataclasses.replace(self, verdict=ACCEPTED)


def _percent(value: float) -> str:
    """0.035 -> '3.5 %', 0.05 -> '5 %'."""
    return f"{value * 100:.1f}".removesuffix(".0") + " %"


def history_json(points: Sequence[Point]) -> list[dict[str, Any]]:
    """The newest `HISTORY_SHOWN` points of a lineage as a report plots them: date, image, verdict, values."""
    return [{"manifest": p.manifest, "date": p.date, "verdict": p.verdict,
             "values": {name: round(m.value, 4) for name, m in p.metrics.items()}} for p in points[-HISTORY_SHOWN:]]


def pins_changed(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """`name old -> new` for every pin that differs (`none` where one side has none)."""
    return [f"{k} {before.get(k) or 'none'} -> {after.get(k) or 'none'}"
            for k in sorted({*before, *after}) if before.get(k) != after.get(k)]


def judge(metrics: Mapping[str, Metric], runner: Runner, history: Sequence[Point], pins: Mapping[str, str],
          thresholds: Thresholds, window: int = WINDOW, cell: str = "") -> Performance:
    """The finding for an image with these `metrics` and `pins`, measured on `runner`, after its lineage's
    `history` (oldest first, the image itself left out)."""
    usable = [p for p in history if p.baseline and p.runner == runner]
    accepted = [i for i, p in enumerate(usable) if p.verdict == ACCEPTED]
    usable = usable[accepted[-1]:] if accepted else usable  # the accepted image is the new normal
    usable = usable[-window:]
    if not usable:
        return Performance(FIRST, runner, metrics, window=window, thresholds=thresholds.source,
                           history=tuple(history), cell=cell)
    rows = []
    for name, metric in metrics.items():
        earlier = [p.metrics[name].value for p in usable if name in p.metrics and p.metrics[name].unit == metric.unit]
        baseline = statistics.median(earlier) if earlier else None
        found = thresholds.limit(runner, name)
        limit = thresholds.of(runner, name)
        change = -metric.worse(baseline) if baseline else None
        regressed = change is not None and limit is not None and -change > limit
        elsewhere = found.measured_on if found is not None and found.measured_on != runner.noise_key() else ""
        rows.append(Row(name, metric.unit, metric.better, metric.value, baseline, change, limit, regressed,
                        None if found is None else found.mdr, elsewhere))
    previous = usable[-1]
    return Performance(REGRESSED if any(r.regressed for r in rows) else OK, runner, metrics, tuple(rows),
                       tuple(p.manifest for p in usable), previous.manifest,
                       tuple(pins_changed(previous.pins, pins)), window, thresholds.source, tuple(history), cell)


def replay(points: Sequence[Point], thresholds: Thresholds, window: int = WINDOW) -> list[Performance]:
    """Each point of a lineage judged against the points before it, by today's thresholds (`imagebuilder
    history`): what the gate says of the series as it stands."""
    return [judge(p.metrics, p.runner, line(points[:i], p.pins), p.pins, thresholds, window, p.cell)
            for i, p in enumerate(points)]
