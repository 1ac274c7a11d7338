"""How much of one torch release's wheels for two Pythons is the same file, byte for byte (by RECORD hashes):
what a layout could share between Pythons' torch builds.

    python benchmarks/torch_wheel_overlap.py [--wheels DIR] [--torch 2.12.0] [--out NAME]

Reads the wheels registry_bytes.py downloaded (default: benchmarks/.registry-bytes/wheels); downloads
nothing. Reports per pair of wheels the bytes of their files, the bytes of files with equal path and hash,
and the largest files that differ.
"""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import sys
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, save


def record(wheel: Path) -> dict[str, tuple[str, int]]:
    """path -> (hash, size) from a wheel's RECORD."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        rows = csv.reader(io.StringIO(archive.read(name).decode()))
        return {row[0]: (row[1], int(row[2])) for row in rows if len(row) == 3 and row[1]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wheels", type=Path, default=ROOT / "benchmarks" / ".registry-bytes" / "wheels")
    parser.add_argument("--torch", default="2.12.0")
    parser.add_argument("--out", default="torch_wheel_overlap")
    args = parser.parse_args()
    wheels = sorted(args.wheels.glob(f"torch-{args.torch}-cp3*-manylinux*_x86_64.whl"))
    if len(wheels) < 2:
        sys.exit(f"need two or more torch {args.torch} wheels in {args.wheels} (run registry_bytes.py first)")
    records = {w.name: record(w) for w in wheels}
    pairs: list[dict[str, Any]] = []
    for a, b in itertools.combinations(records, 2):
        ra, rb = records[a], records[b]
        total = sum(size for _, size in ra.values())
        equal = sum(size for path, (digest, size) in ra.items() if rb.get(path, ("",))[0] == digest)
        differ = sorted(((size, path) for path, (digest, size) in ra.items()
                         if rb.get(path, ("",))[0] != digest), reverse=True)[:5]
        pairs.append({"wheels": [a, b], "file_bytes": total, "equal_bytes": equal,
                      "equal_share": round(equal / total, 4),
                      "largest_differing": [{"path": path, "bytes": size} for size, path in differ]})
    command = "python benchmarks/torch_wheel_overlap.py " + " ".join(sys.argv[1:])
    out = save(args.out, {"torch": args.torch, "pairs": pairs}, command)
    for pair in pairs:
        print(f"{' vs '.join(pair['wheels'])}: {pair['equal_bytes'] / 1e9:.2f} of {pair['file_bytes'] / 1e9:.2f} GB "
              f"equal ({pair['equal_share']:.1%})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
