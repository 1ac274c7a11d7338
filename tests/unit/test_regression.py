"""The performance history and its regression gate, on synthetic series: a 10 % drop is flagged, run-to-run
noise of the measured size is not, the first image of a lineage has no baseline, regressed images never join a
baseline, lineages are kept apart by runner, and the finding names the metric, the baseline, the images and the
pins that changed. Then the gate inside `verify`, on the fakes: an image half as fast as its lineage fails."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.evidence import passes, regression
from imagebuilder.evidence.history import Point, Runner, cell_of, line, series
from imagebuilder.evidence.passes import PassRecord, Signed
from imagebuilder.evidence.regression import Thresholds, judge, pins_changed, threshold_from
from imagebuilder.input.compat import CompatTable
from imagebuilder.ledger import VerifyStatus
from imagebuilder.smoke.metrics import Metric, metrics_of, semantics
from imagebuilder.steps.verify import Verify

from ..conftest import MatrixWriter
from .fakes import FakeEngine, FakeRegistry, suite_report
from .test_verify import leaf_of

H100 = Runner("gpu", ("NVIDIA H100 80GB HBM3",), 1, "580.95.05")
# The clean image on the H100 (issue 29's audit): 756-772 TFLOP/s, the host itself 778-782.
CLEAN = [756.0, 772.0, 764.0, 761.0, 769.0, 758.0, 766.0]
PINS = {"torch": "2.11.0", "cuda": "13.0", "nccl": "2.27.5"}


def metric(value: float, name: str = "matmul.bf16.8192", better: str = "higher", unit: str = "TFLOP/s") -> Metric:
    return Metric(name, unit, better, value, (value,), 0.0)


def point(i: int, value: float, *, verdict: str = "ok", runner: Runner = H100, pins: dict[str, str] | None = None,
          node: str = "e/task") -> Point:
    return Point(f"sha256:{i:064x}", f"sha256:{i + 1000:064x}", f"2026-11-{i + 1:02d}T00:00:00+00:00", node, runner,
                 pins or PINS, {"matmul.bf16.8192": metric(value)}, verdict)


THRESHOLDS = Thresholds.from_noise({"kinds": {H100.noise_key(): {"metrics": {"matmul.bf16.8192": {
    "better": "higher", "values": CLEAN}}}}})
CPU = Runner("cpu", ("AMD EPYC",), 2)


def test_the_threshold_comes_from_the_measured_noise() -> None:
    # The worst clean run, 756, is 1.18 % short of the median of the others (765): the MDR is twice that, 2.35 %,
    # or three robust spreads (0.97 % each), 2.91 %, whichever is larger; the threshold rounds it up to 3 %.
    assert regression.mdr_of(CLEAN, "higher") == pytest.approx(0.0291, abs=1e-4)
    assert threshold_from(CLEAN, "higher") == 0.03
    assert THRESHOLDS.of(H100, "matmul.bf16.8192") == 0.03
    limit = THRESHOLDS.limit(H100, "matmul.bf16.8192")
    assert limit is not None and (limit.mdr, limit.measured_on) == (0.0291, "gpu/1x NVIDIA H100 80GB HBM3")
    assert threshold_from([100, 90, 100, 100], "higher") == 0.2  # 10 % short at worst: 20 %
    assert threshold_from([1.0, 1.3, 1.0], "lower") == 0.6  # a time: longer is worse
    assert threshold_from([100.0, 100.1, 99.9, 100.0], "higher") == regression.MIN_THRESHOLD  # never below it
    assert threshold_from([100.0, 99.0, 100.0, 100.0, 100.0], "higher") == 0.02  # 2 x 1 %: 2 %, not 2.5 %
    noisy = Thresholds.from_noise({"kinds": {"cpu": {"metrics": {"m": {"values": [100, 60, 100]}}}}})
    assert noisy.table["cpu"]["m"].threshold == 0.8 and noisy.of(CPU, "m") is None  # too noisy: recorded, not gated
    assert THRESHOLDS.of(CPU, "matmul.bf16.8192") is None and THRESHOLDS.of(H100, "other") is None


def test_each_gpu_kind_has_its_own_thresholds_and_an_unmeasured_one_the_loosest() -> None:
    one, two = Runner("gpu", ("NVIDIA H200",), 1), Runner("gpu", ("NVIDIA H200",), 2)
    table = Thresholds.from_noise({"kinds": {
        one.noise_key(): {"metrics": {"m": {"values": [100.0, 99.5, 100.0, 100.2]}}},
        two.noise_key(): {"metrics": {"m": {"values": [100.0, 95.0, 100.0, 100.0]}}}}})
    assert (table.of(one, "m"), table.of(two, "m")) == (0.02, 0.1)  # each runner by its own noise
    a100 = Runner("gpu", ("NVIDIA A100-SXM4-80GB",), 1)
    found = table.limit(a100, "m")
    assert found is not None and (found.threshold, found.measured_on) == (0.1, "gpu/2x NVIDIA H200")
    assert table.limit(CPU, "m") is None  # a GPU's noise never judges a CPU runner
    history = [Point(f"sha256:{i:064x}", "c", f"d{i}", "e/task", a100, PINS, {"m": metric(100.0, "m")}, "ok")
               for i in range(3)]
    row = judge({"m": metric(80.0, "m")}, a100, history, PINS, table).rows[0]
    assert row.regressed and row.measured_on == "gpu/2x NVIDIA H200"
    assert "threshold 10 %, MDR 10 %, measured on gpu/2x NVIDIA H200" in row.text()
    # Another count of measured chips is judged by those chips' noise, not another model's looser one: 8x H200 by
    # the H200s (10 %), and with the H200s' 2 % only, not by a noisier H100 (seen failing: 30 % from the H100)
    h100 = Runner("gpu", ("NVIDIA H100 80GB HBM3",), 1)
    eight = Runner("gpu", ("NVIDIA H200",), 8)
    noisy = Thresholds.from_noise({"kinds": {
        one.noise_key(): {"metrics": {"m": {"values": [100.0, 99.5, 100.0, 100.2]}}},
        h100.noise_key(): {"metrics": {"m": {"values": [100.0, 85.0, 100.0, 100.0]}}}}})
    found = noisy.limit(eight, "m")
    assert found is not None and (found.threshold, found.measured_on) == (0.02, "gpu/1x NVIDIA H200")
    assert table.of(eight, "m") == 0.1 and noisy.of(a100, "m") == 0.3  # (no A100 measured: the loosest of all)


# Measured, and over issue 47's bar: (noise key, metric) -> why (docs/concepts/gpu-runners.md says it too)
OVER_FIVE = {
    ("gpu/2x NVIDIA H200", "bench.all_reduce.busbw.1MiB"):
        "latency-bound, launched from Python (~40 us a call): MDR 51 % over ten clean runs, recorded and not gated",
    ("gpu/1x NVIDIA H100 80GB HBM3", "bench.matmul.bf16.8192"):
        "power-bound: each run's windows go boost (~800 TFLOP/s), a throttle dip (~680), then steady (~725); a run "
        "whose median window falls in the dip reads 5 % low (2 of 14 clean runs): MDR 10 %, gated at 10.5 %",
}


def test_every_gpu_metric_of_the_shipped_noise_over_five_percent_is_named_with_its_reason() -> None:
    """Issue 47's bar, on the data the gate ships with: every metric the GPU gate judges can see 5 %, but those
    OVER_FIVE names with the reason (and each of them is still over it: the list never outlives the noise)."""
    measured = Thresholds.measured()
    gpu = {key: limits for key, limits in measured.table.items() if key.startswith("gpu/")}
    assert gpu, "no GPU runner's noise is shipped"
    over = {(key, name) for key, limits in gpu.items() for name, limit in limits.items()
            if not (limit.mdr <= 0.05 and limit.threshold < 0.05 / 1.05)}
    assert over == set(OVER_FIVE), over ^ set(OVER_FIVE)


def test_a_ten_percent_drop_is_flagged_and_noise_is_not() -> None:
    history = [point(i, v) for i, v in enumerate(CLEAN[:5])]
    baseline = 764.0  # the median of 756, 772, 764, 761, 769
    for value in CLEAN:  # every clean run of the measured spread passes against the others
        assert judge({"matmul.bf16.8192": metric(value)}, H100, history, PINS, THRESHOLDS).verdict == "ok"
    found = judge({"matmul.bf16.8192": metric(0.9 * baseline)}, H100, history, {**PINS, "nccl": "2.28.9"},
                  THRESHOLDS)
    assert found.verdict == "regressed" and found.regressed
    row = found.rows[0]
    assert row.baseline == baseline and row.change == pytest.approx(-0.1) and row.threshold == 0.03
    why = found.why()
    assert "matmul.bf16.8192 687.6 TFLOP/s against a baseline of 764 (-10.0%; threshold 3 %, MDR 2.9 %)" in why
    assert "the median of 5 earlier pass(es) of this lineage" in why and f"sha256:{4:064x}"[:19] in why
    assert why.endswith("pins changed since " + f"sha256:{4:064x}"[:19] + ": nccl 2.27.5 -> 2.28.9")
    # 2.5 % down is inside the threshold, 3.5 % is not; faster is never a regression
    assert judge({"matmul.bf16.8192": metric(0.975 * baseline)}, H100, history, PINS, THRESHOLDS).verdict == "ok"
    assert judge({"matmul.bf16.8192": metric(0.965 * baseline)}, H100, history, PINS, THRESHOLDS).regressed
    assert judge({"matmul.bf16.8192": metric(2 * baseline)}, H100, history, PINS, THRESHOLDS).verdict == "ok"


def test_the_first_image_of_a_lineage_has_no_baseline() -> None:
    found = judge({"matmul.bf16.8192": metric(100.0)}, H100, [], PINS, THRESHOLDS)
    assert found.verdict == "first" and found.rows == () and found.why() == ""
    other_gpu = [point(1, 760.0, runner=Runner("gpu", ("NVIDIA H200",), 1, "580.95.05"))]
    assert judge({"matmul.bf16.8192": metric(100.0)}, H100, other_gpu, PINS, THRESHOLDS).verdict == "first"


def test_regressed_images_never_join_a_baseline_and_accepted_ones_do() -> None:
    history = [point(0, 760.0), point(1, 600.0, verdict="regressed"), point(2, 762.0)]
    found = judge({"matmul.bf16.8192": metric(610.0)}, H100, history, PINS, THRESHOLDS)
    assert found.regressed and found.rows[0].baseline == 761.0 and len(found.baseline_of) == 2
    accepted = [*history, point(3, 610.0, verdict="accepted"), point(4, 612.0), point(5, 608.0)]
    assert judge({"matmul.bf16.8192": metric(611.0)}, H100, accepted, PINS, THRESHOLDS, window=3).verdict == "ok"


def test_a_time_metric_regresses_upwards() -> None:
    limits = Thresholds({"gpu": {"fsdp.compile_s": regression.Limit(0.3, 0.3, "gpu")}}, "test")
    history = [Point(f"sha256:{i:064x}", "c", f"d{i}", "e/task", H100, PINS,
                     {"fsdp.compile_s": metric(10.0, "fsdp.compile_s", "lower", "s")}, "ok") for i in range(3)]
    slow = judge({"fsdp.compile_s": metric(14.0, "fsdp.compile_s", "lower", "s")}, H100, history, PINS, limits)
    assert slow.regressed and slow.rows[0].change == pytest.approx(-0.4)
    assert not judge({"fsdp.compile_s": metric(8.0, "fsdp.compile_s", "lower", "s")}, H100, history, PINS,
                     limits).regressed


def test_pins_changed_names_both_sides() -> None:
    assert pins_changed({"nccl": "2.27.5", "cudnn": "9.1"}, {"nccl": "2.28.9", "triton": "3.4"}) == [
        "cudnn 9.1 -> none", "nccl 2.27.5 -> 2.28.9", "triton none -> 3.4"]


def test_metrics_are_the_hosts_statistic_of_the_reps_median_over_gpus() -> None:
    def gpu(name: str, reps: list[Any], status: str = "pass") -> dict[str, Any]:
        return {"name": name, "status": status, "metrics": [
            {"name": "matmul.bf16.8192", "unit": "TFLOP/s", "better": "higher", "stat": "median", "reps": reps}]}

    checks = [gpu("throughput.cuda:0", [700, 760, 770]), gpu("throughput.cuda:1", [750, 751, 752]),
              gpu("throughput.cuda:2", [10, 10, 10]),
              {"name": "throughput.cpu", "status": "pass", "metrics": [
                  {"name": "matmul.fp32.256", "unit": "GFLOP/s", "better": "higher", "stat": "max", "reps": [80, 99]},
                  {"name": "bad", "unit": "x", "reps": [1, float("nan")]}, {"name": "neg", "reps": [-1.0]},
                  {"name": "odd", "reps": [1.0], "stat": "mean"}, "not a mapping"]},
              gpu("throughput.cuda:3", [1, 1, 1], status="fail")]  # a failed check measures no working image
    found = metrics_of(checks)
    assert sorted(found) == ["matmul.bf16.8192", "matmul.fp32.256"]
    assert found["matmul.bf16.8192"].value == 751.0  # median of the GPUs' medians 760, 751, 10
    assert found["matmul.fp32.256"].value == 99.0 and found["matmul.fp32.256"].spread == pytest.approx(19 / 99)
    back = Metric.from_json(found["matmul.bf16.8192"].to_json())
    assert back is not None and back.value == 751.0 and Metric.from_json({"name": "x"}) is None


def signed(record: PassRecord) -> Signed:
    return Signed(record, "k" * 64, "test")


def test_a_lineage_is_one_point_per_image_of_one_node_on_one_runner() -> None:
    perf = regression.judge({"matmul.bf16.8192": metric(760.0)}, H100, [], PINS, THRESHOLDS).to_json()

    def record(manifest: int, date: str, node: str = "e/task", perf_doc: Any = perf) -> Signed:
        return signed(PassRecord(passes.PASSED, f"sha256:{manifest + 1000:064x}", "s" * 64, node, "e",
                                 expect={"torch": "2.11.0"}, date=date, manifest=f"sha256:{manifest:064x}",
                                 performance=perf_doc))

    found = [record(2, "2026-11-03"), record(1, "2026-11-01"), record(1, "2026-11-02"),  # image 1 twice: newest
             record(3, "2026-11-04", node="e/other"), record(4, "2026-11-05", perf_doc=None)]
    points = series(found, "e/task", H100)
    assert [(p.manifest[-1], p.date[-2:]) for p in points] == [("1", "02"), ("2", "03")]
    assert points[0].pins == {"torch": "2.11.0"} and points[0].verdict == "first"
    assert series(found, "e/task", H100, image=f"sha256:{1001:064x}")[0].manifest.endswith("2")  # itself left out
    assert series(found, "e/task", Runner("cpu", ("AMD EPYC",), 2)) == []


# ------------------------------------------------------------------------------------- the gate in verify


def with_rate(report: dict[str, Any], rate: float) -> dict[str, Any]:
    check = next(c for c in report["checks"] if c["name"] == "throughput.cpu")
    check["metrics"] = [{"name": "matmul.fp32.256", "unit": "GFLOP/s", "better": "higher", "stat": "max",
                         "reps": [rate * f for f in (0.9, 1.0, 0.95)]}]
    return report


@pytest.mark.parametrize(("rate", "accept", "passed", "verdict"), [
    (97.0, False, True, "ok"), (50.0, False, False, "regressed"), (50.0, True, True, "accepted")])
def test_verify_fails_an_image_slower_than_its_lineage(write_matrix: MatrixWriter, header: str, table: CompatTable,
                                                        tmp_path: Path, rate: float, accept: bool, passed: bool,
                                                        verdict: str) -> None:
    engine = FakeEngine(FakeRegistry())
    engine.report = lambda image, expect, commands, gpus: with_rate(suite_report(expect, commands, gpus), rate)
    run, leaf = leaf_of(write_matrix, header, table, tmp_path, "cpu", engine)
    limits = Thresholds({"cpu": {"matmul.fp32.256": regression.Limit(0.2, 0.2, "cpu")}}, "test")
    host, repo, _ = run.key_tag(leaf)
    for i, earlier_rate in enumerate((100.0, 104.0, 98.0)):  # three earlier images of this node, in the registry
        earlier = engine.add({"config": {"Labels": {"earlier": str(i)}}})
        engine.tag(earlier, f"{host}/{repo}:old{i}")
        digest = engine.push(f"{host}/{repo}:old{i}")
        report = with_rate(suite_report({}, [], 0), earlier_rate)
        perf = regression.judge(metrics_of(report["checks"]), Runner("cpu"), [], {}, limits,
                                cell=cell_of(leaf)).to_json()
        run.passes(host).put(repo, PassRecord(passes.PASSED, earlier, "a" * 64, leaf.id, leaf.entry.id,
                                              expect={"torch": "2.5.1"}, date=f"2026-11-0{i + 1}",
                                              performance=perf).at(digest, f"{host}/{repo}"))
    ok = Verify(thresholds=limits, accept_regression=accept).leaf(run, leaf)
    record = run.ledger[leaf.id]
    assert ok is passed and record.performance is not None and record.performance["verdict"] == verdict
    row = record.performance["rows"][0]
    assert row["baseline"] == 100.0 and row["threshold"] == 0.2
    if not passed:
        assert record.verify == VerifyStatus.FAILED and record.record is None
        assert str(record.error).startswith("performance regressed on CPU unknown x0: matmul.fp32.256 50 GFLOP/s "
                                            "against a baseline of 100 (-50.0%; threshold 20 %, MDR 20 %)")
        assert "pins changed since" in str(record.error) and "torch 2.5.1 -> 2.6.0" in str(record.error)
    else:  # the signed record carries the finding; the run's report also the lineage it plots (not signed)
        shown = dict(record.performance)
        assert [h["values"]["matmul.fp32.256"] for h in shown.pop("history")] == [100.0, 104.0, 98.0]
        assert record.record is not None and record.record.performance == shown
        # found again by a later run's verify (publish's): the same finding, the lineage read from the registry
        assert Verify(thresholds=limits).leaf(run, leaf)
        found = run.ledger[leaf.id]
        assert found.verify == VerifyStatus.FOUND and found.performance is not None and found.signer
        assert [h["values"]["matmul.fp32.256"] for h in found.performance["history"]] == [100.0, 104.0, 98.0]


def test_the_shipped_thresholds_are_the_measured_ones() -> None:
    """imagebuilder/data/perf_noise.json, written by benchmarks/perf_noise.py (README: the table of thresholds)."""
    shipped = Thresholds.measured()
    h200 = Runner("gpu", ("NVIDIA H200",), 1, "580.95.05")
    assert shipped.of(h200, "bench.matmul.bf16.8192") == 0.02 and shipped.of(h200, "bench.train.samples_per_s") == 0.02
    assert shipped.of(h200, "fsdp.samples_per_s") is None  # the FSDP check's tiny model: recorded, never gated
    assert shipped.of(h200, "matmul.bf16.8192") is None  # timed call by call (before issue 47): not gated
    assert shipped.of(CPU, "matmul.fp32.256") == 0.215
    assert shipped.of(CPU, "matmul.fp32.1024") is None and shipped.table["cpu"]["matmul.fp32.1024"].threshold == 0.785
    assert shipped.of(CPU, "fsdp.samples_per_s") is None  # too noisy on a shared 2-core machine
    # a clean image's noise never trips them, a 5 % slower 8192^3 matmul on an H200 does
    history = [Point(f"sha256:{i:064x}", "c", f"d{i}", "e/task", h200, PINS,
                     {"bench.matmul.bf16.8192": metric(v, "bench.matmul.bf16.8192")}, "ok")
               for i, v in enumerate((679.6, 680.1, 679.2, 684.6, 680.0))]
    judged = [judge({"bench.matmul.bf16.8192": metric(v, "bench.matmul.bf16.8192")}, h200, history, PINS, shipped)
              for v in (675.0, 686.0, 680.1 / 1.05)]
    assert [j.verdict for j in judged] == ["ok", "ok", "regressed"]


# ------------------------------------------------------- issue 42: lineages across upgrades, the host's meaning

FSDP = Thresholds({"gpu": {"fsdp.samples_per_s": regression.Limit(0.05, 0.05, "gpu")}}, "test")


def fsdp(i: int, value: float, torch: str, *, verdict: str = "ok", cuda: str = "13.0") -> Point:
    return Point(f"sha256:{i:064x}", f"sha256:{i + 1000:064x}", f"2026-11-{i + 1:02d}T00:00:00+00:00", "n", H100,
                 {"torch": torch, "cuda": cuda, "python": "3.12"},
                 {"fsdp.samples_per_s": metric(value, "fsdp.samples_per_s", unit="samples/s")}, verdict, cell="c")


def test_an_upgrade_continues_the_line_of_the_newest_older_version() -> None:
    points = [fsdp(0, 1000.0, "2.10.0"), fsdp(1, 1010.0, "2.10.0"), fsdp(2, 990.0, "2.10.0")]
    pins = {"torch": "2.11.0", "cuda": "13.0", "python": "3.12"}
    found = judge({"fsdp.samples_per_s": metric(940.0, "fsdp.samples_per_s", unit="samples/s")}, H100,
                  line(points, pins), pins, FSDP)
    assert found.verdict == "regressed"
    assert found.summary() == "torch 2.10.0 \u2192 2.11.0: fsdp.samples_per_s \u22126 %"
    assert line(points, {**pins, "torch": "2.9.1"}) == []  # an older version never takes a newer one's line


def test_versions_side_by_side_keep_a_line_each() -> None:
    points = [fsdp(0, 1000.0, "2.10.0"), fsdp(1, 700.0, "2.11.0"), fsdp(2, 1002.0, "2.10.0"), fsdp(3, 702.0, "2.11.0")]
    ten = line(points, {"torch": "2.10.0", "cuda": "13.0", "python": "3.12"})
    eleven = line(points, {"torch": "2.11.0", "cuda": "13.0", "python": "3.12"})
    assert [p.pins["torch"] for p in ten] == ["2.10.0"] * 2 and [p.pins["torch"] for p in eleven] == ["2.11.0"] * 2
    twelve = line(points, {"torch": "2.12.0", "cuda": "13.0", "python": "3.12"})
    assert [p.manifest[-1] for p in twelve] == ["1", "3"]  # the newest older version's line: 2.11's
    regressed_only = [fsdp(0, 1000.0, "2.10.0"), fsdp(1, 500.0, "2.11.0", verdict="regressed")]
    assert [p.pins["torch"] for p in line(regressed_only, {"torch": "2.11.0", "cuda": "13.0", "python": "3.12"})] \
        == ["2.10.0"]  # a line with no pass the gate let through continues the older one


def test_an_accepted_regression_is_the_baseline_from_the_next_image_on() -> None:
    """N8: four passes at 770, then one accepted at 616: the next image at 616 is ok with the default window."""
    history = [point(i, 770.0) for i in range(4)] + [point(4, 616.0, verdict="accepted")]
    found = judge({"matmul.bf16.8192": metric(616.0)}, H100, history, PINS, THRESHOLDS)
    assert found.verdict == "ok" and found.baseline_of == (f"sha256:{4:064x}",) and found.rows[0].baseline == 616.0
    slower = judge({"matmul.bf16.8192": metric(500.0)}, H100, [*history, point(5, 618.0)], PINS, THRESHOLDS)
    assert slower.regressed and slower.rows[0].baseline == 617.0  # the accepted level is what it is judged by


def test_a_metrics_meaning_is_the_hosts_not_the_reports() -> None:
    """N9: a report that says matmul throughput is better lower, or in other units, or names a metric of its own."""
    lying = [{"name": "throughput.cuda:0", "status": "pass", "metrics": [
        {"name": "matmul.bf16.8192", "unit": "s", "better": "lower", "stat": "min", "reps": [700.0, 760.0, 770.0]},
        {"name": "made.up", "unit": "x", "better": "higher", "reps": [1.0]}]}]
    found = metrics_of(lying)
    assert list(found) == ["matmul.bf16.8192"]
    assert (found["matmul.bf16.8192"].better, found["matmul.bf16.8192"].unit, found["matmul.bf16.8192"].value) == (
        "higher", "TFLOP/s", 760.0)
    assert semantics("all_gather.busbw.256MiB") == ("GB/s", "higher", "median") and semantics("all_gather") is None


def test_a_cell_is_the_layer_with_its_flavor_and_accelerator_family_or_the_users_name(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    _, leaf = leaf_of(write_matrix, header, table, tmp_path, "cu124", FakeEngine(FakeRegistry()))
    assert leaf.id == "2.6.0-cu124-py3.11-runtime/task" and cell_of(leaf) == "cuda-runtime/task"
    named = dataclasses.replace(leaf, entry=dataclasses.replace(leaf.entry, id="prod-train"))
    assert cell_of(named) == "prod-train/task"
    cpu = dataclasses.replace(leaf, entry=dataclasses.replace(leaf.entry, id="2.7.1-cpu-py3.12-devel", torch="2.7.1",
                                                              accelerator="cpu", python="3.12", flavor="devel"))
    assert cell_of(cpu) == "cpu-devel/task"
