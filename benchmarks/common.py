"""Shared helpers for the benchmark scripts: machine facts, medians, result files."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def machine() -> dict[str, Any]:
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    docker = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                            text=True).stdout.strip()
    return {"cpus": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1), "platform": platform.platform(),
            "python": platform.python_version(), "docker": docker}


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def save(name: str, payload: dict[str, Any], command: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}.json"
    doc = {"benchmark": name, "command": command, "machine": machine(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **payload}
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return out
