"""report.html at size: a synthetic report.json of N nodes rendered to HTML, opened in headless Chromium.

The report is made here (no build): entries x the project's 5-layer tree (os -> cuda -> torch -> business ->
task), the os/cuda/torch nodes shared between the runtime entries of one (torch, accelerator) pair as a run
shares them (`same_as`), one entry in 25 failing its build at `business` (its task blocked) and one in 25
failing a smoke check, every task measured with a 30-point history (4 metrics) so every task card carries 4
plots. Measured, per size, median of `--repeat`:

- `render_s`: `html.render` of the document (Python, in-process);
- `bytes`: the page's size;
- `load_ms`: Chromium's navigation to the page's `load` event (PerformanceNavigationTiming.loadEventEnd: parse,
  style, layout, scripts) in a fresh page;
- `filter_ms`: one change of the status filter to "not ok" and the search box typed into (the page's own
  script over every card and cell), timed in the page.

Target (issue 30): 500 nodes render in under a second in that browser (`load_ms` < 1000).

    python benchmarks/report_render.py [--sizes 100 500 2000] [--repeat 5] [--keep DIR]

Needs Debian's chromium (/usr/bin/chromium) and playwright (`pip install -e '.[dev]'`); writes
benchmarks/results/report_render.json."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import CHROMIUM, CHROMIUM_ARGS, save
from imagebuilder.report import html

LAYERS = ("os", "cuda", "torch", "business", "task")
SHARED = ("os", "cuda", "torch")
METRICS = (("matmul.bf16.8192", "TFLOP/s", "higher", 620.0), ("matmul.bf16.4096", "TFLOP/s", "higher", 540.0),
           ("fsdp.samples_per_s", "samples/s", "higher", 1800.0), ("fsdp.compile_s", "s", "lower", 21.0))


def synthetic(nodes: int) -> dict[str, Any]:
    """A report.json document of about `nodes` nodes (a multiple of 5)."""
    out = []
    entries = max(1, nodes // len(LAYERS))

    def name(e: int) -> str:
        return f"2.{10 + e // 40}.{e // 20 % 2}-{('cu130', 'cu128', 'cpu')[e % 3]}-py3.1{e % 5}-" \
               f"{('runtime', 'devel')[e // 3 % 2]}-{e}"

    for e in range(entries):
        torch = f"2.{10 + e // 40}.{e // 20 % 2}"
        acc = ("cu130", "cu128", "cpu")[e % 3]
        flavor = ("runtime", "devel")[e // 3 % 2]
        entry = name(e)
        first = name(e - 3) if flavor == "devel" and e >= 3 else None  # its runtime twin: os, cuda, torch shared
        versions = {"torch": torch, "accelerator": acc, "python": f"3.1{e % 5}", "flavor": flavor,
                    "cuda": None if acc == "cpu" else acc[2:4] + "." + acc[4:], "cudnn": "9.19.0.56",
                    "nccl": "2.28.9", "triton": "3.5.0", "torchvision": None, "torchaudio": None}
        broken = e % 25 == 7
        smoke_broken = e % 25 == 13
        for layer in LAYERS:
            node = f"{entry}/{layer}"
            same = f"{first}/{layer}" if first and layer in SHARED else None
            leaf = layer == "task"
            status, error, tail = "pushed", None, ""
            if broken and layer == "business":
                status, error = "failed", "step 4/9 RUN pip install nope==1.0: exit 1"
                tail = "\n".join(f"#{i} ERROR: No matching distribution found for nope==1.0" for i in range(40))
            elif broken and layer == "task":
                status, error = "blocked", f"parent {entry}/business did not build"
            elif smoke_broken and leaf:
                status, error = "smoke failed", "versions.torch: got '2.6.0', expected " + repr(torch)
                tail = "\n".join(f"suite line {i}" for i in range(60))
            digest = None if status in ("failed", "blocked") else "sha256:" + f"{e:04x}{layer}".ljust(64, "0")[:64]
            perf = None
            if leaf and not broken:
                history = [{"manifest": f"sha256:{i:064x}", "date": f"2026-10-{1 + i % 28:02d}T00:00:00+00:00",
                            "verdict": "ok", "values": {m: base * (1 + 0.02 * ((i * 7 + e) % 5 - 2) / 2)
                                                        for m, _, _, base in METRICS}} for i in range(30)]
                rows = [{"metric": m, "unit": u, "better": b, "value": base * (0.8 if smoke_broken else 1.0),
                         "baseline": base, "change": -0.2 if smoke_broken else 0.0, "threshold": 0.08,
                         "regressed": smoke_broken} for m, u, b, base in METRICS]
                perf = {"verdict": "regressed" if smoke_broken else "ok",
                        "runner": {"kind": "gpu", "models": ["NVIDIA H100 80GB HBM3"], "count": 1, "driver": "580"},
                        "metrics": [], "rows": rows, "history": history}
            checks = [{"name": "versions.torch", "status": "fail" if smoke_broken else "pass",
                       "reason": f"got '2.6.0', expected {torch!r}" if smoke_broken else "",
                       "log": ["import torch", "2.6.0"]}] if leaf else []
            out.append({"node": node, "entry": entry, "layer": layer, "leaf": leaf, "key": "k" * 64, "reason": "",
                        "cache": None, "same_as": same, "versions": versions, "repository": "ghcr.io/acme/pytorch",
                        "status": status, "ok": status == "pushed",
                        "build": "failed" if status == "failed" else "blocked" if status == "blocked" else "built",
                        "smoke": ("failed" if smoke_broken else "passed") if leaf and not broken else None,
                        "publish": "pushed" if status == "pushed" else None, "image": None, "digest": digest,
                        "tags": [f"ghcr.io/acme/pytorch:{entry}-{layer}"] if status == "pushed" else [],
                        "aliases": [], "aliases_held": [], "error": error, "log": f"logs/{entry}_{layer}.log",
                        "log_tail": tail, "durations": {"build": 61.0, "smoke": 95.0 if leaf else 0.0},
                        "gpu_verified": True if leaf and acc != "cpu" else None, "base": None, "signed": None,
                        "secret_scan": None, "pass_record": "this run" if leaf else None,
                        "signer": "0123456789abcdef (this machine's own key)",
                        "gpu": {"kind": "gpu", "verified": True, "count": 1, "models": ["NVIDIA H100 80GB HBM3"],
                                "driver": "580"} if leaf and acc != "cpu" else None,
                        "untested": False, "allowed_skips": [], "smoke_report": {"checks": checks} if leaf else None,
                        "performance": perf})
    return {"tool": "imagebuilder", "version": "0.1.0", "command": "build", "matrix": "matrix.yaml",
            "finished": "2026-11-25T00:00:00+00:00", "host": "bench", "interrupted": False,
            "ok": all(n["ok"] for n in out), "nodes": out}


def measure(sizes: list[int], repeat: int, keep: Path | None) -> list[dict[str, Any]]:
    from playwright.sync_api import sync_playwright

    folder = keep or Path(tempfile.mkdtemp(prefix="report-render-"))
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for size in sizes:
            doc = synthetic(size)
            renders, loads, filters = [], [], []
            page_path = folder / f"report-{size}.html"
            for _ in range(repeat):
                t0 = time.perf_counter()
                text = html.render(doc)
                renders.append(time.perf_counter() - t0)
            page_path.write_text(text, encoding="utf-8")
            for _ in range(repeat):
                page = browser.new_page()
                page.goto(page_path.as_uri(), wait_until="load")
                loads.append(page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd"))
                filters.append(page.evaluate("""() => {
                    const t0 = performance.now();
                    const s = document.getElementById('f-status'); s.value = '@notok';
                    s.dispatchEvent(new Event('change'));
                    const q = document.getElementById('f-text'); q.value = 'cu130 smoke';
                    q.dispatchEvent(new Event('input'));
                    document.body.offsetHeight;  // layout
                    return performance.now() - t0; }"""))
                page.close()
            results.append({"nodes": len(doc["nodes"]), "cards": html.page(doc).cards.__len__(),
                            "bytes": len(text.encode()), "render_s": round(statistics.median(renders), 4),
                            "load_ms": round(statistics.median(loads), 1), "load_ms_all": [round(x, 1) for x in loads],
                            "filter_ms": round(statistics.median(filters), 1)})
            print(json.dumps(results[-1]), flush=True)
        browser.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 500, 2000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="write the pages here (default: a temporary folder)")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    results = measure(args.sizes, args.repeat, args.keep)
    at_500 = next((r for r in results if r["nodes"] == 500), None)
    payload = {"target": "500 nodes: load_ms < 1000 in headless Chromium", "sizes": results,
               "met": None if at_500 is None else at_500["load_ms"] < 1000}
    if not args.no_save:
        command = "python benchmarks/report_render.py " + " ".join(sys.argv[1:])
        print(save("report_render", payload, command.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
