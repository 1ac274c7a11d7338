"""report.html opened in headless Chromium: every node is on the page, a failure shows its log tail and the
command that reproduces it, the filters and the search work, hostile text stays text, the theme follows the
system, and no request leaves the page (a page that does make one is seen caught)."""

from __future__ import annotations

import http.server
import re
import threading
from pathlib import Path
from typing import Any

from imagebuilder.ledger import BuildStatus, NodeRecord, PublishStatus, VerifyStatus
from imagebuilder.report import write_reports

from ..report_page import ReportPage

CPU = {"torch": "2.13.0", "accelerator": "cpu", "python": "3.11"}
CU130 = {"torch": "2.11.0", "accelerator": "cu130", "python": "3.11", "cuda": "13.0", "nccl": "2.28.9"}
HOSTILE = "<script>alert('x')</script><img src=http://127.0.0.1:9/beacon.png onerror=alert(1)>"
HISTORY = [{"manifest": f"sha256:{i:064x}", "date": f"2026-11-{i + 1:02d}", "verdict": "ok",
            "values": {"matmul.fp32.256": 100.0 + i}} for i in range(6)]


def records(folder: Path) -> list[NodeRecord]:
    digest = "sha256:" + "b" * 64
    perf = {"verdict": "regressed", "runner": {"kind": "cpu", "models": ["AMD EPYC"], "count": 2, "driver": None},
            "metrics": [], "rows": [{"metric": "matmul.fp32.256", "unit": "GFLOP/s", "better": "higher",
                                     "value": 60.0, "baseline": 103.0, "change": -0.4175, "threshold": 0.22,
                                     "regressed": True}], "history": HISTORY}
    return [
        NodeRecord("cpu-a/base", "cpu-a", "base", False, build=BuildStatus.BUILT, publish=PublishStatus.PUSHED,
                   versions=CPU, digest="sha256:" + "a" * 64, tags=("r.example/x:cpu-a-base",), key="k" * 64),
        NodeRecord("cpu-a/task", "cpu-a", "task", True, build=BuildStatus.BUILT, verify=VerifyStatus.PASSED,
                   publish=PublishStatus.PUSHED, versions=CPU, digest=digest, tags=("r.example/x:cpu-a-task",),
                   pass_record="this run", signer="0123456789abcdef (this machine's own key)",
                   performance={**perf, "verdict": "ok", "rows": [{**perf["rows"][0], "value": 104.0,
                                                                   "change": 0.01, "regressed": False}]}),
        NodeRecord("gpu-b/base", "gpu-b", "base", False, build=BuildStatus.FAILED, versions=CU130,
                   error=f"step 2/3 RUN false: exit 1 {HOSTILE}", log=str(folder / "logs" / "gpu-b_base.log"),
                   log_tail="Step 2/3 : RUN false\nE: the build step failed here\n" + HOSTILE,
                   repository="r.example/x"),
        NodeRecord("gpu-b/task", "gpu-b", "task", True, build=BuildStatus.BLOCKED, versions=CU130,
                   error="parent gpu-b/base did not build"),
        NodeRecord("cpu-c/base", "cpu-c", "base", False, build=BuildStatus.CACHED, publish=PublishStatus.HELD,
                   versions=CPU, same_as="cpu-a/base"),
        NodeRecord("cpu-c/task", "cpu-c", "task", True, build=BuildStatus.BUILT, verify=VerifyStatus.FAILED,
                   publish=PublishStatus.HELD, versions=CPU, digest="sha256:" + "c" * 64, repository="r.example/x",
                   error="versions.torch: got '2.6.0', expected '2.13.0'", log_tail="suite: 1 check failed",
                   smoke_report={"checks": [{"name": "versions.torch", "status": "fail",
                                             "reason": "got '2.6.0', expected '2.13.0'", "log": ["import torch"]},
                                            {"name": "health.user", "status": "pass"}]},
                   performance=perf),
    ]


def report(tmp_path: Path) -> Path:
    folder = tmp_path / "r"
    write_reports(records(folder), folder, {"tool": "imagebuilder", "command": "build", "matrix": "m x.yaml"})
    return folder / "report.html"


def test_every_node_failures_and_repro_commands_are_on_the_page(chromium: Any, tmp_path: Path) -> None:
    page = ReportPage(chromium, report(tmp_path))
    try:
        text = page.text()
        for r in records(tmp_path):
            assert r.node in text, r.node
        assert "3 of 6 nodes ok" not in text and "imagebuilder: 2/6 nodes ok" in text
        failed = page.open_from_grid("gpu-b/base")
        tail = failed.locator("pre.log.tail").inner_text()
        assert "E: the build step failed here" in tail and HOSTILE in tail  # hostile text shown as text
        repro = failed.locator(".repro pre").inner_text()
        assert repro == "imagebuilder build --matrix 'm x.yaml' --only gpu-b/base --no-push"
        smoke = page.open_from_grid("cpu-c/task")
        assert smoke.locator(".repro pre").inner_text().splitlines() == [
            "docker pull r.example/x@sha256:" + "c" * 64,
            "imagebuilder smoke r.example/x@sha256:" + "c" * 64 + " --only versions",
            "imagebuilder build --matrix 'm x.yaml' --only cpu-c/task --resmoke --no-push"]
        assert "got '2.6.0', expected '2.13.0'" in smoke.inner_text()
        # the regressed metric: its row, and a plot of the 6 earlier images and this one
        row = smoke.locator("table.perf tr.bad")
        assert re.search(r"matmul\.fp32\.256\s+60 GFLOP/s\s+103\s+-41\.8% regressed\s+22\.0%\s+-", row.inner_text())
        assert len(str(row.locator("polyline").get_attribute("points")).split()) == 7
        # the shared node is one card; its other entry's cell says so and links to that card
        assert len(page.shown_cards()) == 5 and "cpu-c/base" not in page.shown_cards()
        shared = page.page.locator("tr:has(th:has-text('cpu-c')) td.cell").first
        assert shared.inner_text().splitlines() == ["held", "= cpu-a"]
        assert shared.locator("a").get_attribute("href") == "#" + page.page.eval_on_selector_all(
            "details.card", "cs => cs.find(c => c.querySelector('.node').textContent === 'cpu-a/base').id")
        # a passed image's card (closed until its cell is clicked): who signed its pass
        assert "signed by0123456789abcdef (this machine's own key)" in \
            page.open_from_grid("cpu-a/task").inner_text().replace("\n", "").replace("\t", "")
        assert page.dialogs == []  # no script from the report's text ran
        assert page.foreign_requests() == []
    finally:
        page.close()


def test_the_filters_and_the_search(chromium: Any, tmp_path: Path) -> None:
    page = ReportPage(chromium, report(tmp_path))
    try:
        everything = page.shown_cards()
        assert len(everything) == 5 and page.shown() == "5 of 5 images"
        page.choose("status", "@notok")
        assert page.shown_cards() == ["gpu-b/base", "gpu-b/task", "cpu-c/task"]
        page.choose("status", "smoke failed")
        assert page.shown_cards() == ["cpu-c/task"]
        page.choose("status", "")
        page.choose("layer", "task")
        assert page.shown_cards() == ["cpu-a/task", "gpu-b/task", "cpu-c/task"]
        page.choose("acc", "cu130")
        assert page.shown_cards() == ["gpu-b/task"] and page.shown() == "1 of 5 images"
        assert page.page.locator("tr[data-acc=cpu]").first.is_hidden()  # the grid's other rows go
        page.choose("layer", "")
        page.choose("acc", "")
        page.search("EXPECTED '2.13")  # case-insensitive, on errors too
        assert page.shown_cards() == ["cpu-c/task"]
        page.search("sha256:aaaa")
        assert page.shown_cards() == ["cpu-a/base"]
        page.search("nothing-like-this")
        assert page.shown_cards() == [] and page.page.locator("#none").is_visible()
        # the filters are in the address: a link to this view opens it
        page.search("")
        page.choose("status", "@notok")
        again = ReportPage(chromium, report(tmp_path))
        try:
            again.page.goto(page.page.url, wait_until="load")
            again.page.reload(wait_until="load")
            assert again.shown_cards() == ["gpu-b/base", "gpu-b/task", "cpu-c/task"]
        finally:
            again.close()
        assert page.foreign_requests() == []
    finally:
        page.close()


def test_the_theme_follows_the_system(chromium: Any, tmp_path: Path) -> None:
    path = report(tmp_path)
    colours = []
    for scheme in ("light", "dark"):
        page = ReportPage(chromium, path, color_scheme=scheme)
        colours.append(page.page.evaluate("getComputedStyle(document.body).backgroundColor"))
        page.close()
    assert colours == ["rgb(255, 255, 255)", "rgb(13, 17, 23)"]


def test_a_phone_sized_screen_needs_no_sideways_scroll_but_the_grid(chromium: Any, tmp_path: Path) -> None:
    page = ReportPage(chromium, report(tmp_path), viewport={"width": 390, "height": 844})
    try:
        assert page.page.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        page.close()


def test_a_request_from_the_page_would_be_seen(chromium: Any, tmp_path: Path) -> None:
    """The check above is seen failing: the same page with an image from a server (its policy removed, as a
    careless template change might) makes a request, the recorder sees it and the server gets it. With the
    policy kept, the page's Content-Security-Policy stops it: the server gets nothing."""
    hits: list[str] = []

    class Server(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        html = report(tmp_path).read_text(encoding="utf-8")
        beacon = f'<img src="http://127.0.0.1:{server.server_port}/beacon.png" alt="">'
        leaky = tmp_path / "leaky.html"
        leaky.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)
                         .replace("<main>", "<main>" + beacon), encoding="utf-8")
        page = ReportPage(chromium, leaky)
        assert page.foreign_requests() == [f"http://127.0.0.1:{server.server_port}/beacon.png"]
        assert hits == ["/beacon.png"]
        page.close()
        guarded = tmp_path / "guarded.html"
        guarded.write_text(html.replace("<main>", "<main>" + beacon), encoding="utf-8")
        page = ReportPage(chromium, guarded)
        fetched = page.page.evaluate(f"""() => fetch('http://127.0.0.1:{server.server_port}/fetch')
            .then(() => 'fetched', () => 'blocked')""")
        page.close()
        assert fetched == "blocked" and hits == ["/beacon.png"]  # nothing more reached the server
    finally:
        server.shutdown()
