"""The local executor: an engine of its own for the graph (`emit.graph`), on this machine, for tests and small
teams. It runs each job's node command in dependency order, one at a time, hands each verify job its stage job's
digest (`--digest`, read from the stage job's digest file), and skips a job whose needs failed (but for one that
runs after failures: the whole matrix's publish). A second run runs every command again, and each command finds
what is done (key tag, trusted pass, published tags), says "nothing to do" and, asked by the executor
(`--exit-code-nothing-to-do`), exits `errors.NOTHING_TO_DO`: the exit code, not the text, tells a job that did
nothing from one that did work (its last line is shown). Executors that run at once on one `state` folder (the
cache folder's) take turns at each job (a lock per job of the graph); one that waited while the other's run of
the job failed takes that failure instead of running the job again (a failing suite runs once, not once per
executor; a job that succeeded is run again, and says "nothing to do", leaving its digest file in this
executor's folder too). A run started after the failure runs the job again (it may have been fixed). Each
job's start and end are written as JSON lines to `events`, for whoever counts what ran."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import functools
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..errors import NOTHING_TO_DO
from .graph import STAGE, VERIFY, Graph, Job

NOTHING_TO_DO_FLAG = "--exit-code-nothing-to-do"  # asks a node command to exit NOTHING_TO_DO when its work was done
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
    state: Path | None = None  # shared by executors on this machine: a lock and the last outcome of each job
    started: float = field(default_factory=time.time)

    def event(self, job: Job, what: str, **more: object) -> None:
        if self.events is not None:
            now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
            self.events.write(json.dumps({"time": now, "job": job.id, "kind": job.kind, "node": job.node,
                                          "event": what, **more}) + "\n")
            self.events.flush()

    def argv(self, job: Job) -> list[str] | None:
        """The job's command, asked for the exit code of nothing to do (before a node job's node, which stays
        last); a verify job is given the digest its stage job wrote (None: that file is missing)."""
        argv = [*self.program, *job.argv]
        if job.kind == VERIFY and job.digest_from:
            stage = self.graph.job(job.digest_from)
            path = Path(stage.argv[stage.argv.index("--digest-file") + 1])
            if not path.is_file():
                return None
            argv[-1:-1] = ["--digest", path.read_text(encoding="utf-8").strip()]
        argv.insert(len(argv) - 1 if job.node is not None else len(argv), NOTHING_TO_DO_FLAG)
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
            with self.turn(job) as record:
                if record.get("outcome") == FAILED and float(record.get("ended") or 0) > self.started:
                    self.outcome[job.id] = FAILED  # another executor ran it while this one waited
                    self.event(job, FAILED, by=record.get("pid"))
                    self.say(f"✗ {job.id}: failed in another executor (pid {record.get('pid')}) while this one "
                             "waited; not run again")
                    continue
                outcome = self.one(job, argv)
                record.update(outcome=outcome, ended=time.time(), pid=os.getpid())
        return self.outcome

    def one(self, job: Job, argv: list[str]) -> str:
        """Run one job's command; its outcome."""
        self.event(job, "start")
        self.say(f"▶ {job.kind} {job.node or job.entry or 'the matrix'} ({job.id})")
        log = self.logs / job.id / "executor.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w", encoding="utf-8") as out:
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=dict(self.env), check=False)
            out.write(proc.stdout)
        outcome = DONE if proc.returncode == 0 else NOTHING if proc.returncode == NOTHING_TO_DO else FAILED
        said = proc.stdout.strip().splitlines()[-1:] if outcome == NOTHING else []  # its last line: what it said
        self.outcome[job.id] = outcome
        self.event(job, outcome, code=proc.returncode)
        self.say(f"{'✗' if outcome == FAILED else '●'} {job.id}: {said[0] if said else outcome}"
                 + (f" (exit {proc.returncode}; {log})" if outcome == FAILED else ""))
        return outcome

    @functools.cached_property
    def fingerprint(self) -> str:
        """The graph's hash: executors of the same graph share its jobs' locks and outcomes."""
        return hashlib.sha256(json.dumps(self.graph.to_json(), sort_keys=True).encode()).hexdigest()[:16]

    @contextlib.contextmanager
    def turn(self, job: Job) -> Iterator[dict[str, Any]]:
        """This executor's turn at a job: the job's lock in `state` held (other executors on the folder wait), and
        the job's last recorded outcome, which the caller updates and which is written back on the way out."""
        if self.state is None:
            yield {}
            return
        folder = self.state / self.fingerprint
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{job.id}.lock", "a+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            path = folder / f"{job.id}.json"
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                record = {}
            before = dict(record)
            yield record
            if record != before:
                path.write_text(json.dumps(record), encoding="utf-8")


def summary(outcome: Mapping[str, str], graph: Graph) -> str:
    counts = {k: sum(v == k for v in outcome.values()) for k in (DONE, NOTHING, FAILED, BLOCKED)}
    stages = sum(j.kind == STAGE for j in graph.jobs)
    return (f"{len(graph.jobs)} jobs ({stages} stage): {counts[DONE]} ran, {counts[NOTHING]} had nothing to do, "
            f"{counts[FAILED]} failed, {counts[BLOCKED]} blocked")
