"""docs/report-*.png: screenshots of a real report.html, from a real run on the local engine and registry.

Two entries of the demo's CPU torch chain (torch 2.13.0 from the wheelhouse): the first (base -> business ->
task) passes and is pushed (to a new repository each time: a first publication); the second, the same chain
on a second name of the same base image (so the engine's cache serves both), ends in an `eval` layer whose
own smoke check fails (an accuracy gate below its bar), so its leaf is `smoke failed`, held, and its card
shows the failed check, the log tail and the command that reproduces it. Then headless Chromium (Debian's,
through playwright) opens the page and takes three screenshots: wide in the light theme (the grid), wide in
the dark theme with the failed card opened, and a phone-sized one. The page's requests are counted: only the
page itself may load.

    make env && python benchmarks/report_screenshot.py [--out docs] [--keep DIR]

Needs the engine, the registry at 127.0.0.1:5000, the wheelhouse (`make env`), chromium and playwright."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

TWIN = "screenshot/debian:bookworm"


def matrix(folder: Path) -> Path:
    layer = folder / "layers" / "eval"
    layer.mkdir(parents=True)
    (layer / "Dockerfile.j2").write_text("FROM {{ parent_image }}\nCOPY gate.py /opt/eval/gate.py\n")
    (layer / "gate.py").write_text(textwrap.dedent("""\
        import sys
        accuracy = 0.61  # what this team's tiny evaluation reached
        print(f"evaluated 512 samples: accuracy {accuracy:.2f}")
        if accuracy < 0.70:
            print(f"accuracy {accuracy:.2f} is below the gate of 0.70", file=sys.stderr)
            sys.exit(1)
        """))
    (layer / "layer.yaml").write_text("description: A team's evaluation gate.\nsmoke:\n  - python /opt/eval/gate.py\n")
    path = folder / "matrix.yaml"
    path.write_text(textwrap.dedent(f"""\
        version: 1
        base_image: debian:bookworm
        registry: 127.0.0.1:5000/screenshot
        repository: report-{int(time.time())}
        layers_path: [layers]
        layers: [base, business, task]
        torch_extras: []
        build:
          wheelhouse: {ROOT / ".wheelhouse"}
          pip_index_url: {{cpu: "https://pypi.org/simple"}}
        matrix:
          base_image: [debian:bookworm, "{TWIN}"]
          torch: ["2.13.0"]
          accelerator: [cpu]
          python: ["3.11"]
        include:
          - {{base_image: "{TWIN}", layers: [base, business, eval]}}
        """))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--keep", type=Path, help="the run's folder (default: a temporary one)")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="report-shot-"))
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["docker", "tag", "debian:bookworm", TWIN], check=True)
    try:
        run = subprocess.run([sys.executable, "-m", "imagebuilder", "build", "--matrix", str(matrix(folder)),
                              "--report", str(folder / "report"), "--logs", "none", "--jobs", "2"],
                             cwd=folder, capture_output=True, text=True)
    finally:
        subprocess.run(["docker", "rmi", TWIN], capture_output=True)
    doc = json.loads((folder / "report" / "report.json").read_text())
    statuses = {n["node"]: n["status"] for n in doc["nodes"]}
    print(json.dumps(statuses, indent=1))
    passed = {n["entry"] for n in doc["nodes"] if n["ok"]}
    if run.returncode != 1 or "smoke failed" not in statuses.values() or len(passed) != 1:
        print(run.stdout[-3000:], run.stderr[-3000:], file=sys.stderr)
        print("expected one entry published and one smoke failed", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    page_uri = (folder / "report" / "report.html").as_uri()
    requests: list[str] = []
    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for name, scheme, size, script in (
                ("report-light.png", "light", {"width": 1280, "height": 860}, ""),
                ("report-dark.png", "dark", {"width": 1280, "height": 860},
                 "const c = [...document.querySelectorAll('details.card')].find(d => d.dataset.tone === 'bad');"
                 "c.open = true; c.scrollIntoView();"),
                ("report-phone.png", "light", {"width": 390, "height": 844}, "")):
            page = browser.new_page(viewport=size, color_scheme=scheme, device_scale_factor=1)
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_uri, wait_until="load")
            if script:
                page.evaluate(script)
            page.screenshot(path=str(args.out / name))
            page.close()
        browser.close()
    others = sorted({u for u in requests if u != page_uri})
    print(f"requests other than the page: {others or 'none'}")
    print(f"screenshots in {args.out}; report in {folder / 'report'}")
    return 0 if not others else 1


if __name__ == "__main__":
    sys.exit(main())
