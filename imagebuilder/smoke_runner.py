"""Host side of the smoke suite: copy it into a container of the image, run it with the image's own
Python (shm_size set, a timeout, the container always removed) and read back its JSON report."""

from __future__ import annotations

import glob
import json
from dataclasses import dataclass, field
from typing import Any

from .engine import Engine, LineSink
from .smoke import suite_source

SUITE_PATH = "/opt/imagebuilder-smoke/suite.py"
REPORT_PATH = "/tmp/imagebuilder-smoke-report.json"


@dataclass(frozen=True)
class SmokeReport:
    passed: bool
    checks: tuple[dict[str, Any], ...]
    duration: float
    exit_code: int | None
    raw: dict[str, Any] = field(default_factory=dict)
    log_tail: str = ""

    def failures(self) -> list[str]:
        return [f"{c['name']}: {c.get('reason') or 'failed'}" for c in self.checks if c.get("status") == "fail"]

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "duration": round(self.duration, 3), "exit_code": self.exit_code,
                "checks": list(self.checks)}


def gpu_options(mode: str) -> dict[str, Any]:
    """How containers reach GPUs: none; the NVIDIA toolkit (`all`); or raw /dev/nvidia* devices plus the
    driver folder (`auto` when such devices exist and no toolkit is asked for)."""
    if mode == "none":
        return {}
    if mode == "all":
        import docker.types

        return {"device_requests": [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]}
    devices = sorted(glob.glob("/dev/nvidia*"))
    devices = [d for d in devices if not d.endswith("caps")]
    if not devices:
        return {}
    return {
        "devices": [f"{d}:{d}:rwm" for d in devices],
        "binds": {"/usr/local/nvidia": {"bind": "/usr/local/nvidia", "mode": "ro"}},
    }


def run_smoke(engine: Engine, image: str, expect: dict[str, Any], *, timeout: float, shm_size: str,
              gpus: str = "auto", commands: list[dict[str, str]] | None = None,
              sink: LineSink | None = None) -> SmokeReport:
    host_config: dict[str, Any] = {"shm_size": shm_size, "network_mode": "none", **gpu_options(gpus)}
    command = ["sh", "-c", 'exec "$(command -v python || command -v python3)" "$@"', "smoke",
               SUITE_PATH, "--expect", json.dumps(expect, sort_keys=True),
               "--commands", json.dumps(commands or []), "--report", REPORT_PATH]
    result = engine.run(image, command, files={SUITE_PATH: suite_source()}, fetch=(REPORT_PATH,),
                        timeout=timeout, host_config=host_config, sink=sink)
    tail = "\n".join(result.logs.strip().splitlines()[-30:])
    if result.exit_code is None:
        return SmokeReport(False, ({"name": "suite", "status": "fail", "reason":
                                    f"timed out after {timeout:.0f} s; the container was killed"},),
                           result.duration, None, log_tail=tail)
    raw_text = result.files.get(REPORT_PATH, b"")
    try:
        raw = json.loads(raw_text) if raw_text else {}
    except ValueError:
        raw = {}
    if not raw.get("checks"):
        reason = f"the suite exited {result.exit_code} without a report"
        return SmokeReport(False, ({"name": "suite", "status": "fail", "reason": reason},),
                           result.duration, result.exit_code, log_tail=tail)
    checks = tuple(raw["checks"])
    passed = bool(raw.get("passed")) and result.exit_code == 0
    return SmokeReport(passed, checks, result.duration, result.exit_code, raw, tail)
