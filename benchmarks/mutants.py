"""The mutation score of the smoke suite, as a table (issue 16): every mutant of tests/mutants/mutants.yaml that
names a check for this device kind is built as a thin layer on a clean image and `imagebuilder smoke IMAGE` runs
in it (expectations from the image's labels, only the check kinds that matter); a row says which check must
catch it, which checks failed, and whether the named one did. A clean row per check kind runs the same on the
unmutated image and must pass. Results are written after every row.

    # CPU: the clean image is the leaf of a matrix built here first (e.g. the CI chain's layers)
    python benchmarks/mutants.py --kind cpu --matrix MATRIX --out benchmarks/results/mutants_cpu.json
    # GPU host (after benchmarks/gpu_smoke.py built tests/gpu/matrix.yaml): the image it built
    python3 benchmarks/mutants.py --kind gpu --image IMAGE --out $OUT/mutants_gpu.json [--only a,b]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagebuilder.ports.engine import DockerEngine  # noqa: E402
from tests.mutants import image as mutants  # noqa: E402


def leaf_of(matrix: str, report: Path) -> str:
    """Build the matrix (no push) and return its leaf's image."""
    proc = subprocess.run([sys.executable, "-m", "imagebuilder", "build", "--matrix", matrix, "--no-push",
                           "--report", str(report)], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"building {matrix} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    nodes = json.loads((report / "report.json").read_text())["nodes"]
    return str(next(n["image"] for n in nodes if n["leaf"]))


def device(kind: str) -> list[str]:
    if kind == "cpu":
        return [platform.processor() or platform.machine()]
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return [line.strip() for line in smi.stdout.splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=("cpu", "gpu"), required=True)
    parser.add_argument("--image", help="the clean image the mutants are built on")
    parser.add_argument("--matrix", help="or: build this matrix (--no-push) and take its leaf")
    parser.add_argument("--only", default="", help="comma-separated mutant names")
    parser.add_argument("--no-clean", action="store_true", help="skip the clean control runs (done elsewhere)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    engine = DockerEngine.connect()
    base = args.image or leaf_of(args.matrix, args.out.parent / "mutants-build")
    engine.tag(base, "imagebuilder-mutants/clean:latest")  # an untagged base would go with its first mutant
    order = args.only.split(",") if args.only else []
    chosen = sorted((m for m in mutants.load(args.kind) if not order or m.name in order),
                    key=lambda m: order.index(m.name) if order else 0)  # in the order asked for
    doc: dict[str, Any] = {
        "benchmark": "mutants", "kind": args.kind, "device": device(args.kind),
        "command": "python benchmarks/mutants.py " + " ".join(sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "clean_image": base, "clean": [], "rows": [],
    }

    def write() -> None:
        rows = doc["rows"]
        doc["score"] = f"{sum(r['result'] == 'caught' for r in rows)}/{len(rows)}"
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")

    for only in [] if args.no_clean else sorted({m.only for m in chosen if m.only}):  # the clean control
        started = time.monotonic()
        code, report, _ = mutants.smoke(base, ("--only", only))
        failed = [c["name"] for c in report.get("checks", []) if c.get("status") == "fail"]
        doc["clean"].append({"only": only, "exit_code": code, "passed": code == 0, "failed_checks": failed,
                             "wall_s": round(time.monotonic() - started, 1)})
        write()
    for mutant in chosen:
        started = time.monotonic()
        try:
            image = mutants.build(engine, base, mutant)
        except Exception as exc:  # noqa: BLE001 - a mutant that does not build is a row that says so
            doc["rows"].append({"mutant": mutant.name, "expected_check": mutant.catch[args.kind],
                                "result": "NOT BUILT", "reason": str(exc)[:500]})
            write()
            continue
        build_s = time.monotonic() - started
        try:
            row = mutants.judge(mutant, args.kind, image).row()
        finally:
            engine.remove_image(image)
        doc["rows"].append({**row, "breaks": mutant.breaks, "build_s": round(build_s, 1),
                            "left_containers": len(engine.managed_containers())})
        write()
        print(f"{row['result']:9} {mutant.name:22} expected {row['expected_check']:28} failed {row['failed_checks']}",
              flush=True)
    print(json.dumps({"score": doc["score"], "clean": doc["clean"]}, indent=2))


if __name__ == "__main__":
    main()
