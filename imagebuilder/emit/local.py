"""The local executor: an engine of its own for the graph (`emit.graph`), on this machine, for tests and small
teams. It runs each job's node command in dependency order, one at a time, hands each verify job its stage job's
digest (`--digest`, read from the stage job's digest file), and skips a job whose needs failed (but for one that
runs after failures: the whole matrix's publish). It keeps no state:
a second run runs every command again, and each command finds what is done (key tag, trusted pass, published
tags) and says "nothing to do". Each job's start and end are written as JSON lines to `events`, for whoever
counts what ran."""

from __future__ import annotations

import datetime
import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .graph import STAGE, VERIFY, Graph, Job

NOTHING_TO_DO = "nothing to do"  # what a node command says when its work was done already (`run.handoff`)
DONE, NOTHING, FAILED, BLOCKED = "done", "nothing-to-do", "failed", "blocked"


@dataclass
class Executor:
    graph: Graph
    program: Sequence[str]  # how to start imagebuilder (with its global options)
    env: Mapping[str, str]
    say: Callable[[str], None]
    events: TextIO | None = None
    logs: Path = Path("reports")
    outcome: dict[str, str] = field(default_factory=dict)  # job id -> DONE, NOTHING, FAILED or BLOCKED

    def event(self, job: Job, what: str, **more: object) -> None:
        if self.events is not None:
            now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
            self.events.write(json.dumps({"time": now, "job": job.id, "kind": job.kind, "node": job.node,
                                          "event": what, **more}) + "\n")
            self.events.flush()

    def argv(self, job: Job) -> list[str] | None:
        """The job's command; a verify job is given the digest its stage job wrote (None: that file is missing)."""
        argv = [*self.program, *job.argv]
        if job.kind == VERIFY and job.digest_from:
            stage = self.graph.job(job.digest_from)
            path = Path(stage.argv[stage.argv.index("--digest-file") + 1])
            if not path.is_file():
                return None
            argv[-1:-1] = ["--digest", path.read_text(encoding="utf-8").strip()]
        return argv

    def run(self) -> dict[str, str]:
        """Every job, in the graph's order; the outcome of each."""
        for job in self.graph.jobs:
            failed = [] if job.after_failures else [n for n in job.needs if self.outcome.get(n) not in (DONE, NOTHING)]
            argv = None if failed else self.argv(job)
            if argv is None:
                self.outcome[job.id] = BLOCKED
                why = f"{failed[0]} did not finish" if failed else "its stage job wrote no digest"
                self.event(job, BLOCKED, why=why)
                self.say(f"✗ {job.id}: blocked ({why})")
                continue
            self.event(job, "start")
            self.say(f"▶ {job.kind} {job.node or job.entry or 'the matrix'} ({job.id})")
            log = self.logs / job.id / "executor.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("w", encoding="utf-8") as out:
                proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env=dict(self.env), check=False)
                out.write(proc.stdout)
            said = [line for line in proc.stdout.splitlines() if line.startswith(NOTHING_TO_DO)]
            outcome = FAILED if proc.returncode else NOTHING if said else DONE
            self.outcome[job.id] = outcome
            self.event(job, outcome, code=proc.returncode)
            self.say(f"{'✗' if outcome == FAILED else '●'} {job.id}: {said[0] if said else outcome}"
                     + (f" (exit {proc.returncode}; {log})" if outcome == FAILED else ""))
        return self.outcome


def summary(outcome: Mapping[str, str], graph: Graph) -> str:
    counts = {k: sum(v == k for v in outcome.values()) for k in (DONE, NOTHING, FAILED, BLOCKED)}
    stages = sum(j.kind == STAGE for j in graph.jobs)
    return (f"{len(graph.jobs)} jobs ({stages} stage): {counts[DONE]} ran, {counts[NOTHING]} had nothing to do, "
            f"{counts[FAILED]} failed, {counts[BLOCKED]} blocked")
