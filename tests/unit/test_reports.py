"""report.json, summary.md and junit.xml: views of a set of ledger records."""

from __future__ import annotations

import html as htmllib
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from imagebuilder import cli
from imagebuilder.ledger import BuildStatus, NodeRecord, PublishStatus, VerifyStatus
from imagebuilder.report import html, repro, write_reports
from imagebuilder.report.document import load, log_link, write_json


def results(folder: Path) -> list[NodeRecord]:
    base = NodeRecord("e1/base", "e1", "base", False, build=BuildStatus.CACHED, publish=PublishStatus.CURRENT,
                      tags=["r/x:e1-base"], digest="sha256:" + "a" * 64, key="k" * 64)
    task = NodeRecord("e1/task", "e1", "task", True, build=BuildStatus.BUILT, verify=VerifyStatus.PASSED,
                      publish=PublishStatus.PUSHED,
                      tags=["r/x:e1-task"], digest="sha256:" + "b" * 64, log=str(folder / "logs" / "e1_task.log"),
                      durations={"build": 1.5, "smoke": 20.0},
                      smoke_report={"checks": [
                          {"name": "versions.torch", "status": "pass", "duration": 0.5},
                          {"name": "health.user", "status": "skip", "reason": "root"},
                          {"name": "throughput.cpu", "status": "pass", "reason": "12 GFLOP/s"}]})
    bad = NodeRecord("e2/base", "e2", "base", False, build=BuildStatus.FAILED, error="step 3 | exit 1",
                     log_tail="E: Unable to locate package nope", log=str(folder / "logs" / "e2_base.log"))
    blocked = NodeRecord("e2/task", "e2", "task", True, build=BuildStatus.BLOCKED, error="parent e2/base did not build")
    smoke_bad = NodeRecord("e3/task", "e3", "task", True, build=BuildStatus.BUILT, verify=VerifyStatus.FAILED,
                           publish=PublishStatus.HELD,
                           error="versions.torch: got '2.6.0', expected '2.7.1'",
                           smoke_report={"checks": [{"name": "versions.torch", "status": "fail",
                                                     "reason": "got '2.6.0', expected '2.7.1'", "log": ["a", "b"]}]})
    return [base, task, bad, blocked, smoke_bad]


def test_every_report_is_written(tmp_path: Path) -> None:
    written = write_reports(results(tmp_path), tmp_path, {"tool": "imagebuilder"})
    assert [p.name for p in written] == ["report.json", "report.html", "summary.md", "junit.xml"]
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["ok"] is False
    task = next(n for n in doc["nodes"] if n["node"] == "e1/task")
    assert (task["status"], task["digest"], task["tags"]) == ("pushed", "sha256:" + "b" * 64, ["r/x:e1-task"])
    assert next(n for n in doc["nodes"] if n["node"] == "e1/base")["key"] == "k" * 64


def test_summary_markdown_is_a_matrix_with_links_and_failures(tmp_path: Path) -> None:
    write_reports(results(tmp_path), tmp_path, {})
    text = (tmp_path / "summary.md").read_text()
    assert "**2/5 nodes ok** · 2 built · 1 cached · **3 not ok**" in text
    assert "| entry | base | task |" in text
    row = next(line for line in text.splitlines() if line.startswith("| `e1`"))
    assert "♻️ ✅ current" in row and "🔨 ✅ pushed · smoke passed ([log](logs/e1_task.log))" in row
    assert "| `e2` | ❌ failed ([log](logs/e2_base.log)) | ⛔ blocked |" in text
    assert "- **`e2/base`**: failed: step 3 \\| exit 1" in text  # a pipe cannot break the table
    assert "E: Unable to locate package nope" in text
    assert "| `r/x:e1-task` | `sha256:" + "b" * 64 + "` |" in text


def test_junit_has_a_case_per_smoke_check_and_per_build(tmp_path: Path) -> None:
    write_reports(results(tmp_path), tmp_path, {})
    root = ET.parse(tmp_path / "junit.xml").getroot()
    suites = {s.get("name"): s for s in root}
    assert list(suites) == ["e1/base", "e1/task", "e2/base", "e2/task", "e3/task"]
    task = suites["e1/task"]
    assert [c.get("name") for c in task] == ["build", "versions.torch", "health.user", "throughput.cpu"]
    assert task.get("tests") == "4" and task.get("failures") == "0" and task.get("skipped") == "1"
    assert task[2].find("skipped") is not None
    assert suites["e2/base"][0].find("failure").get("message") == "step 3 | exit 1"  # type: ignore[union-attr]
    assert suites["e2/task"][0].find("failure") is not None  # blocked counts as a failure
    failure = suites["e3/task"][1].find("failure")
    assert failure is not None and failure.text == "a\nb"
    assert root.get("failures") == "3"


def test_the_summary_prints_every_outcome_and_any_error_text() -> None:
    """Every publish state (staged included) and an error with markup-like text print as they are: the
    summary never fails on what a node says (it did on `staged`, an outcome without a style)."""
    import io

    from rich.console import Console

    from imagebuilder.report import print_summary

    rows = [NodeRecord(f"e/{s.value}", "e", s.value, True, build=BuildStatus.BUILT, verify=VerifyStatus.PASSED,
                       publish=s,
                       error="[/] [red]not markup[/red] $(id)") for s in PublishStatus]
    rows.append(NodeRecord("e/untested", "e", "untested", True, build=BuildStatus.CACHED,
                           publish=PublishStatus.PUSHED, untested=True))
    out = io.StringIO()
    print_summary(Console(file=out, width=200), rows)
    text = out.getvalue()
    assert "e/staged" in text and "[/] [red]not markup[/red]" in text and "UNTESTED (--allow-untested)" in text


def test_gaps_in_the_evidence_are_listed_in_the_summary(tmp_path: Path) -> None:
    allowed = NodeRecord("e/task", "e", "task", True, build=BuildStatus.BUILT, verify=VerifyStatus.PASSED,
                         publish=PublishStatus.PUSHED,
                         tags=["r/x:e-task"], digest="sha256:" + "c" * 64,
                         allowed_skips=["throughput.cuda:0: unknown GPU model 'Tesla T4'"])
    staged = NodeRecord("f/task", "f", "task", True, build=BuildStatus.BUILT, verify=VerifyStatus.SKIPPED,
                        publish=PublishStatus.STAGED,
                        digest="sha256:" + "d" * 64)
    untested = NodeRecord("g/task", "g", "task", True, build=BuildStatus.BUILT, verify=VerifyStatus.SKIPPED,
                          publish=PublishStatus.PUSHED,
                          tags=["r/x:g-task"], digest="sha256:" + "e" * 64, untested=True)
    write_reports([allowed, staged, untested], tmp_path, {"tool": "imagebuilder"})
    summary = (tmp_path / "summary.md").read_text()
    gaps = summary.split("### Not fully tested", 1)[1]
    assert "`e/task`**: skips accepted by smoke.allow_skip: throughput.cuda:0: unknown GPU model 'Tesla T4'" in gaps
    assert "`f/task`**: staged: untested, no public tag" in gaps
    assert "`g/task`**: published UNTESTED (--allow-untested)" in gaps
    assert "`r/x:f-task`" not in summary  # a staged node is not listed as published
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["nodes"][0]["allowed_skips"] == ["throughput.cuda:0: unknown GPU model 'Tesla T4'"]


def test_allowed_skips_of_a_gpu_run_are_split_from_blocking_ones() -> None:
    from imagebuilder.smoke.judge import gpu_skips

    checks = [{"name": "throughput.cuda:0", "status": "skip", "reason": "unknown GPU"},
              {"name": "versions.driver", "status": "skip", "reason": "no floor"}]
    assert gpu_skips(checks, gpu_run=True, allow=("throughput",)) == (["versions.driver: no floor"],
                                                                      ["throughput.cuda:0: unknown GPU"])
    assert gpu_skips(checks, gpu_run=False, allow=()) == ([], [])


# ------------------------------------------------------------------------------------------- report.html


def test_report_html_is_one_file_that_fetches_nothing_and_escapes_everything(tmp_path: Path) -> None:
    hostile = NodeRecord("e4/<b>task</b>", "e4", "<b>task</b>", True, build=BuildStatus.FAILED,
                         error="<script>alert(1)</script>", log_tail="</pre><img src=x onerror=alert(2)>",
                         tags=('r/x:"><svg onload=alert(3)>',), versions={"torch": "<u>2</u>"},
                         performance={"verdict": "ok", "rows": [{"metric": "</title><script>alert(4)</script>",
                                                                 "value": 1.0}]})
    write_reports([*results(tmp_path), hostile], tmp_path, {"tool": "imagebuilder", "matrix": "m.yaml"})
    page = (tmp_path / "report.html").read_text()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page and "&lt;/pre&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    assert re.findall(r"""(?:src|href)=["']?(?:https?:)?//""", page) == []  # nothing from elsewhere
    assert "<b>task</b>" not in page and "<svg onload" not in page and "<u>2</u>" not in page
    assert "alert(4)</script>" not in page
    policy = htmllib.unescape(re.findall(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)[0])
    assert policy.startswith("default-src 'none'; style-src 'sha256-") and "unsafe-inline" not in policy
    assert page.count("<script>") == 1 and page.count("<style>") == 1  # both inline, allowed by their hashes


def test_the_page_shows_a_shared_node_once_and_its_other_cells_link_to_it(tmp_path: Path) -> None:
    first = NodeRecord("a/os", "a", "os", False, build=BuildStatus.BUILT, publish=PublishStatus.PUSHED)
    twin = NodeRecord("b/os", "b", "os", False, build=BuildStatus.CACHED, publish=PublishStatus.PUSHED,
                      same_as="a/os")
    doc = write_json([first, twin], tmp_path / "report.json", {})
    view = html.page(doc)
    assert [c.node for c in view.cards] == ["a/os"] and view.cards[0].also == ("b/os",)
    cell = view.rows[1].cells[0]
    assert cell is not None and cell.same_as == "a/os" and cell.anchor == view.cards[0].anchor


@pytest.mark.parametrize(("node", "meta", "expected"), [
    ({"node": "e/base", "status": "failed"}, {"matrix": "my matrix.yaml", "command": "build"},
     ["imagebuilder build --matrix 'my matrix.yaml' --only e/base --no-push"]),
    ({"node": "e/base", "status": "failed"}, {"matrix": "m.yaml", "command": "stage", "registry": "r:5000/x"},
     ["imagebuilder stage --matrix m.yaml --registry r:5000/x --only e/base"]),
    ({"node": "e/task;rm -rf /", "status": "smoke failed", "digest": "sha256:" + "d" * 64, "repository": "r/x",
      "smoke_report": {"checks": [{"name": "layer.task.0", "status": "fail"}, {"name": "fsdp.compiled_step_cpu",
                                                                                "status": "fail"}]}},
     {"matrix": "m.yaml", "command": "verify"},
     ["docker pull r/x@sha256:" + "d" * 64, "imagebuilder smoke r/x@sha256:" + "d" * 64 + " --only fsdp,layers",
      "imagebuilder verify --matrix m.yaml --only 'e/task;rm -rf /' --resmoke"]),
    ({"node": "e/task", "status": "pushed"}, {}, []),
    ({"node": "e/task", "status": "failed", "publish": "failed"}, {"matrix": "m.yaml", "command": "build"},
     ["imagebuilder build --matrix m.yaml --only e/task"]),  # the push failed: again with the push
    ({"node": "e/task", "status": "failed", "publish": "failed"}, {"matrix": "m.yaml", "command": "publish"},
     ["imagebuilder publish --matrix m.yaml --only e/task --dry-run"]),
])
def test_repro_commands_are_quoted_and_name_the_failed_checks(node: dict[str, Any], meta: dict[str, Any],
                                                               expected: list[str]) -> None:
    assert list(repro.commands(node, meta)) == expected


def test_report_command_remakes_the_page_from_report_json(tmp_path: Path) -> None:
    write_reports(results(tmp_path), tmp_path, {"tool": "imagebuilder"})
    (tmp_path / "report.html").unlink()
    assert cli.main(["report", str(tmp_path)]) == 0
    assert "e2/base" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize(("content", "says"), [
    (None, "report.json: no such file"),
    ("{not json", "report.json: not a JSON report"),
    ('{"nodes": {}}', "not an imagebuilder report (no `nodes` list)"),
    ('{"nodes": [{"node": "a/b", "entry": "a", "layer": 3, "status": "ok"}]}', "nodes[0] has no 'layer'"),
])
def test_report_command_refuses_what_is_not_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     content: str | None, says: str) -> None:
    if content is not None:
        (tmp_path / "report.json").write_text(content)
    assert cli.main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and not (tmp_path / "report.html").exists()


@pytest.mark.parametrize(("log", "link"), [
    ("imagebuilder-report/logs/e_task.log", "logs/e_task.log"),
    ("/elsewhere/run 1/logs/e task#1.log", "logs/e%20task%231.log"),
    ("javascript:alert(document.domain)", None), ("https://evil.example/x.log", None),
    ("https:/evil.example/logs/x.log", None), ("/etc/passwd", None), ("logs/..", None), (None, None), (3, None),
])
def test_a_log_links_only_into_the_report_folder(log: Any, link: str | None) -> None:
    assert log_link(log) == link


def test_a_report_json_from_anywhere_never_breaks_the_page(tmp_path: Path) -> None:
    """Odd values where the page expects others are shown as empty, never a traceback; a same_as that names
    nothing, itself, or a node that is itself a copy leaves the node a card of its own."""
    nodes: list[dict[str, Any]] = [
        {"node": "a/os", "entry": "a", "layer": "os", "status": "pushed", "ok": True, "same_as": "a/os",
         "versions": ["not", "a", "map"], "gpu": "x", "durations": {"build": "slow"}, "tags": "one-tag",
         "log": "javascript:alert(1)"},
        {"node": "b/os", "entry": "b", "layer": "os", "status": "cached", "same_as": "c/os"},
        {"node": "c/os", "entry": "c", "layer": "os", "status": "cached", "same_as": "b/os"},
        {"node": "d/task", "entry": "d", "layer": "task", "status": "smoke failed", "same_as": ["x"],
         "smoke_report": {"checks": ["not a check", {"name": 3, "status": "fail", "log": "one line"}]},
         "performance": {"runner": None, "rows": [{"metric": "m", "value": "fast", "baseline": "1",
                                                   "threshold": True, "change": None}, "junk"],
                         "history": [{"values": {"m": float("nan")}}, 7]}},
        {"node": "d/eval", "entry": "d", "layer": "task", "status": "failed"},  # one layer folder, two nodes
    ]
    (tmp_path / "report.json").write_text(json.dumps({"nodes": nodes}))
    assert cli.main(["report", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "javascript:" not in page
    view = html.page(load(tmp_path))
    assert [c.node for c in view.cards] == ["a/os", "b/os", "c/os", "d/task", "d/eval"]
    assert view.layers == ("os", "task", "eval")  # columns by node name: d/eval is not hidden behind d/task


def test_vulnerability_findings_are_in_every_report(tmp_path: Path) -> None:
    """The gate's verdict per node: report.json keeps it whole, summary.md lists the findings (blocking first),
    report.html shows them on the image's card, escaped, and its search finds the advisory ids."""
    finding = {"id": "GHSA-q2x7-8rv6-6q7h", "aliases": ["CVE-2024-56326"], "package": "Jinja2", "version": "3.1.4",
               "layer": "older", "level": "medium", "level_known": True, "fixed": ["3.1.5"], "outcome": "expired",
               "expires": "2026-01-31", "reason": "<b>ours</b>", "summary": "sandbox breakout <script>x</script>"}
    gated = NodeRecord("e5/older", "e5", "older", True, build=BuildStatus.BUILT, publish=PublishStatus.FAILED,
                       error="blocked by the vulnerability gate: GHSA-q2x7-8rv6-6q7h",
                       sbom={"components": 212, "deb": 130, "python": 82, "format": "CycloneDX 1.7",
                             "source": "computed", "where": "registry r/x:sha256-aa.sbom", "signer": "ab12 (key)"},
                       vulnerabilities={"blocked": True, "data": "5 advisories (PyPI) as of 2025-11-03",
                                        "findings": [finding]})
    clean = NodeRecord("e5/base", "e5", "base", False, build=BuildStatus.CACHED, publish=PublishStatus.HELD,
                       vulnerabilities={"blocked": False, "data": "5 advisories (PyPI) as of 2025-11-03",
                                        "findings": []})
    write_reports([clean, gated], tmp_path, {"tool": "imagebuilder"})
    node = next(n for n in json.loads((tmp_path / "report.json").read_text())["nodes"] if n["node"] == "e5/older")
    assert node["vulnerabilities"]["findings"][0]["id"] == "GHSA-q2x7-8rv6-6q7h" and node["sbom"]["components"] == 212
    text = (tmp_path / "summary.md").read_text()
    assert "2 images checked against `5 advisories (PyPI) as of 2025-11-03`: 1 with known vulnerabilities, " \
           "**1 blocked**." in text
    assert "| `e5/older` | 212 components | **blocks** (exception expired `2026-01-31`) | `GHSA-q2x7-8rv6-6q7h` | " \
           "`medium` | `Jinja2` `3.1.4` | `older` | `3.1.5` |" in text
    page = (tmp_path / "report.html").read_text()
    assert "BLOCKED by known vulnerabilities" in page and "blocks: the exception expired 2026-01-31" in page
    assert "<script>x</script>" not in page and "CycloneDX 1.7: 212 components (130 Debian, 82 Python)" in page
    assert "ghsa-q2x7-8rv6-6q7h" in page  # (the card's search text, lower-cased)


def test_summary_markdown_says_what_an_upgrade_did(tmp_path: Path) -> None:
    """issue 42: `torch 2.10.0 → 2.11.0: fsdp.samples_per_s −6 %`, with the lineage's cell."""
    upgraded = NodeRecord("2.11.0-cu130-py3.12-runtime/task", "e", "task", True, build=BuildStatus.BUILT,
                          performance={"verdict": "ok", "cell": "cuda-runtime/task", "runner": {"count": 2},
                                       "summary": "torch 2.10.0 \u2192 2.11.0: fsdp.samples_per_s \u22126 %",
                                       "rows": [{"metric": "fsdp.samples_per_s", "value": 940.0, "baseline": 1000.0,
                                                 "change": -0.06, "threshold": 0.15}]})
    write_reports([upgraded], tmp_path, {"tool": "imagebuilder", "matrix": "m.yaml"})
    assert "- `2.11.0-cu130-py3.12-runtime/task` (lineage `cuda-runtime/task`): torch 2.10.0 \u2192 2.11.0: " \
           "fsdp.samples_per_s \u22126 %" in (tmp_path / "summary.md").read_text()


def test_each_metric_shows_its_mdr_beside_its_threshold(tmp_path: Path) -> None:
    """issue 47: the report says how fine the gate is for each metric: its threshold and the minimum detectable
    regression that threshold comes from (or `-` where none was measured)."""
    node = NodeRecord("2.11.0-cu130-py3.12-runtime/task", "e", "task", True, build=BuildStatus.BUILT,
                      performance={"verdict": "regressed", "runner": {"count": 1, "models": ["NVIDIA H200"]},
                                   "rows": [{"metric": "bench.matmul.bf16.8192", "unit": "TFLOP/s", "value": 646.0,
                                             "baseline": 680.1, "change": -0.0501, "threshold": 0.02,
                                             "mdr": 0.0031, "regressed": True},
                                            {"metric": "fsdp.samples_per_s", "unit": "samples/s", "value": 4000.0,
                                             "baseline": 4100.0, "change": -0.0244, "threshold": None,
                                             "regressed": False}]})
    write_reports([node], tmp_path, {"tool": "imagebuilder", "matrix": "m.yaml"})
    text = (tmp_path / "summary.md").read_text()
    assert "| threshold | MDR |" in text
    assert "| -5.0% **regressed** | 2.0% | 0.3% |" in text and "| -2.4% | not gated | - |" in text
    page = (tmp_path / "report.html").read_text()
    assert "<th>threshold</th><th>MDR</th>" in page and "<td>2.0%</td><td>0.3%</td>" in page
