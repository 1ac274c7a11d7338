"""The mutants of tests/mutants/mutants.yaml as images: each is built as a thin layer on a clean image and
the smoke suite runs in it through `imagebuilder smoke IMAGE` (which reads what to check from the image's
labels); a mutant is caught when the check it names failed. Used by tests/integration/test_mutants.py (the
CPU mutants on the CI chain) and benchmarks/mutants.py (a table, on this host or a GPU host)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from imagebuilder.ports.engine import DockerEngine

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CHECKS_LABEL = "io.imagebuilder.checks"


@dataclass(frozen=True)
class Mutant:
    name: str
    breaks: str
    catch: dict[str, str]  # device kind (cpu, gpu) -> the check that must fail (a trailing ':' is a prefix)
    only: str = ""
    seed: str | None = None  # a folder with a sitecustomize.py, first on PYTHONPATH
    seedfiles: str | None = None  # a folder copied to /tmp/mutant for `run`
    run: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    checks: tuple[dict[str, str], ...] = ()
    smoke: tuple[str, ...] = ()

    def dockerfile(self, base: str, base_user: str, base_checks: str) -> str:
        lines = [f"FROM {base}", "USER 0"]
        if self.seed or self.seedfiles:
            lines.append("COPY mutant/ /tmp/mutant/")
        if self.seed:
            lines += ["RUN mkdir -p /opt/ib-mutant && cp /tmp/mutant/sitecustomize.py /opt/ib-mutant/",
                      "ENV PYTHONPATH=/opt/ib-mutant"]
        lines += [f"RUN {command}" for command in self.run]
        lines += [f"ENV {key}={json.dumps(value)}" for key, value in self.env.items()]
        if self.checks:
            checks = [*json.loads(base_checks or "[]"), *self.checks]
            lines.append(f"LABEL {CHECKS_LABEL}={json.dumps(json.dumps(checks, separators=(',', ':')))}")
        lines.append(f"USER {self.user if self.user is not None else (base_user or '0')}")
        return "\n".join(lines) + "\n"

    def context(self, base: str, base_user: str, base_checks: str) -> bytes:
        files = {"Dockerfile": self.dockerfile(base, base_user, base_checks).encode()}
        folder = self.seed or self.seedfiles
        if folder:
            for path in sorted((HERE / folder).iterdir()):
                if path.is_file() and path.suffix != ".md":
                    files[f"mutant/{path.name}"] = path.read_bytes()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o755
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()


def load(kind: str | None = None) -> list[Mutant]:
    """The mutants (for one device kind: those that name a check for it)."""
    out = []
    for raw in yaml.safe_load((HERE / "mutants.yaml").read_text(encoding="utf-8")):
        mutant = Mutant(**{**raw, "run": tuple(raw.get("run", ())), "checks": tuple(raw.get("checks", ())),
                           "smoke": tuple(raw.get("smoke", ()))})
        if kind is None or kind in mutant.catch:
            out.append(mutant)
    return out


def build(engine: DockerEngine, base: str, mutant: Mutant) -> str:
    """The mutant's image on top of `base` (its image ID)."""
    config = engine.inspect(base).get("Config") or {}
    labels = config.get("Labels") or {}
    lines: list[str] = []
    return engine.build(mutant.context(base, str(config.get("User") or ""), labels.get(CHECKS_LABEL, "")),
                        network="none", sink=lines.append)


@dataclass(frozen=True)
class Outcome:
    mutant: str
    expected: str
    failed: tuple[str, ...]
    caught: bool
    exit_code: int
    wall_s: float
    reasons: dict[str, str]

    def row(self) -> dict[str, Any]:
        return {"mutant": self.mutant, "expected_check": self.expected, "failed_checks": list(self.failed),
                "caught_by": self.expected if self.caught else None,
                "result": "caught" if self.caught else "MISSED", "exit_code": self.exit_code,
                "wall_s": round(self.wall_s, 1), "reason": self.reasons.get(self.expected.rstrip(":"), "")
                or next((r for n, r in self.reasons.items() if n.startswith(self.expected)), "")}


def smoke(image: str, args: tuple[str, ...], env: dict[str, str] | None = None,
          timeout: float = 1800) -> tuple[int, dict[str, Any], str]:
    """`imagebuilder smoke IMAGE ARGS`: (exit code, its JSON report, its stderr)."""
    proc = subprocess.run([sys.executable, "-m", "imagebuilder", "smoke", image, *args], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "NO_COLOR": "1", **(env or {})}, timeout=timeout)
    text = proc.stdout
    report = json.loads(text[text.index("{"):]) if "{" in text else {}
    return proc.returncode, report, proc.stderr


def judge(mutant: Mutant, kind: str, image: str, extra: tuple[str, ...] = ()) -> Outcome:
    """Run the suite in the mutant's image; caught when the named check failed."""
    expected = mutant.catch[kind]
    args = (*(("--only", mutant.only) if mutant.only else ()), *mutant.smoke, *extra)
    started = time.monotonic()
    code, report, _err = smoke(image, args)
    wall = time.monotonic() - started
    failed = tuple(c["name"] for c in report.get("checks", []) if c.get("status") == "fail")
    hit = [n for n in failed if (n.startswith(expected) if expected.endswith(":") else n == expected)]
    reasons = {c["name"]: str(c.get("reason", ""))[:300] for c in report.get("checks", [])
               if c.get("status") == "fail"}
    return Outcome(mutant.name, expected, failed, bool(hit) and code == 1, code, wall, reasons)
