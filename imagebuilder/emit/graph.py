"""The plan as a graph of engine jobs: one `stage` job per distinct image (a node several entries share is
staged once), one `verify` job per leaf on the runner its entry names, a `publish` job per entry that needs
only that entry's verifies (one failed leaf holds only its own entry), and one `publish` job for the whole
matrix after them, whatever they ended (it moves the aliases, which cover several entries, and reports the
whole matrix; with one entry it is the only publish job). Every engine's document (`emit.github`,
`emit.buildkite`, `emit.argo`, `emit.kubejobs`) and the local executor (`emit.local`) translate this one
graph: the scheduling is theirs, every decision is the node commands' (`imagebuilder node stage|verify`,
`imagebuilder publish`), which are idempotent by key tag and trusted pass. Nodes hand off by registry digest:
a verify job is given the digest its stage job found under the key tag. Pure."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from ..declarations import schema
from ..errors import InputError
from ..plan import keys
from ..plan.plan import Node, Plan

STAGE, VERIFY, PUBLISH = "stage", "verify", "publish"
COMMAND_WORDS = ("node", PUBLISH)  # the first word of every job's command, after the global options
ID_LENGTH = 63  # the tightest engine: Kubernetes names and label values (Argo task names, Job names)


@dataclass(frozen=True)
class CiRunner:
    """Where an engine runs a job: a CPU queue, or GPUs of one model and count (`runners` in the matrix): a CI
    runner's queue and label, asked for before anything runs; what a suite then ran on, as the host names it, is
    `smoke.runner.Runner`."""

    queue: str = field(default_factory=lambda: str(schema.value("runners.build")))  # a CPU queue (build and CPU
    # verify jobs), or the GPU runners' queue
    gpu: str | None = None  # the GPU model a verify job needs (None: a CPU job)
    gpus: int = 0  # how many of them

    @property
    def label(self) -> str:
        """One word for the runner: `cpu`, or `<queue>-<model>-x<count>` (an agent queue, a runner label)."""
        if self.gpu is None:
            return self.queue
        return f"{self.queue}-{self.gpu}-x{self.gpus}"

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "gpu": self.gpu, "gpus": self.gpus, "label": self.label}


@dataclass(frozen=True)
class Job:
    """One node command of the graph: `imagebuilder <argv>` on `runner`, after every job in `needs`."""

    id: str  # lowercase letters, digits and `-`, at most ID_LENGTH: valid in every engine's names
    kind: str  # stage | verify | publish
    node: str | None  # the plan node it stages or verifies (publish: none)
    argv: tuple[str, ...]
    needs: tuple[str, ...] = ()
    runner: CiRunner = field(default_factory=CiRunner)
    digest_from: str | None = None  # verify: the stage job whose key tag digest it is handed
    entry: str | None = None  # an entry's publish job: the entry it publishes
    after_failures: bool = False  # runs once its needs ended, whatever they ended (the whole matrix's publish)
    repository: str | None = None  # verify: the leaf's repository (its staged image is REPOSITORY@DIGEST)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "node": self.node, "argv": list(self.argv),
                "needs": list(self.needs), "runner": self.runner.to_json(), "digest_from": self.digest_from,
                "entry": self.entry, "after_failures": self.after_failures, "repository": self.repository}


@dataclass(frozen=True)
class Graph:
    """The jobs in dependency order (every job after the jobs it needs)."""

    jobs: tuple[Job, ...]
    matrix: str  # the matrix file the commands name (relative to the repository's root, as the engines check out)

    def with_options(self, options: tuple[str, ...]) -> Graph:
        """The graph with every command given `options` first (the global options the plan was made with)."""
        if not options:
            return self
        return Graph(tuple(dataclasses.replace(j, argv=(*options, *j.argv)) for j in self.jobs), self.matrix)

    def options(self) -> tuple[str, ...]:
        """The global options its commands were given (`with_options`): what precedes the first command's word."""
        argv = self.jobs[0].argv if self.jobs else ()
        return tuple(itertools.takewhile(lambda arg: arg not in COMMAND_WORDS, argv))

    def check_options(self, given: tuple[str, ...], source: str) -> None:
        """An input error when `given` (a runner's own global options) are not the ones the graph's commands carry:
        they run with the plan's, so another `--compat` or `--max-entries` would be silently dropped."""
        planned = self.options()
        if given and given != planned:
            raise InputError(f"{source} was planned with {shlex.join(planned) or 'no global options'}, and this "
                             f"command was given {shlex.join(given)}: its jobs run with the plan's options",
                             hint="make the graph again with these options (`imagebuilder OPTIONS plan --format "
                                  "graph`), or run it without them")

    def job(self, job_id: str) -> Job:
        return next(j for j in self.jobs if j.id == job_id)

    def to_json(self) -> dict[str, Any]:
        return {"matrix": self.matrix, "jobs": [j.to_json() for j in self.jobs]}

    @staticmethod
    def of_json(doc: dict[str, Any]) -> Graph:
        jobs = tuple(Job(id=str(j["id"]), kind=str(j["kind"]), node=j.get("node"), argv=tuple(j["argv"]),
                         needs=tuple(j.get("needs") or ()), runner=CiRunner(**{k: v for k, v in j["runner"].items()
                                                                           if k != "label"}),
                         digest_from=j.get("digest_from"), entry=j.get("entry"),
                         after_failures=bool(j.get("after_failures")), repository=j.get("repository"))
                     for j in doc["jobs"])
        return Graph(jobs, str(doc["matrix"]))


def job_id(kind: str, name: str) -> str:
    """`<kind>-<slug>-<hash8>`: the node id made safe for every engine, kept apart by a hash of the whole id."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    room = ID_LENGTH - len(kind) - len(digest) - 2
    slug = slug[:room].rstrip("-")
    return f"{kind}-{slug}-{digest}" if slug else f"{kind}-{digest}"


def runner_of(node: Node, kind: str) -> CiRunner:
    """The runner the matrix names for this node's job: builds on the entry's CPU queue; a CUDA leaf's verify on
    its GPU model and count; a CPU leaf's verify on the CPU queue."""
    runners = node.entry.runners
    if kind == VERIFY and node.entry.cuda:
        return CiRunner(runners.gpu_queue, runners.gpu, runners.gpus)
    return CiRunner(runners.build)


def graph(plan: Plan, matrix: str, *, registry: str | None = None, only: str | None = None) -> Graph:
    """The plan's jobs (see the module's text). `registry`: the --registry every command is given; `only`: the
    --only the plan was made with (publish publishes that part of the matrix; an entry's publish its leaves)."""
    common = ("--matrix", matrix, *(("--registry", registry) if registry else ()))
    first = keys.first_of(keys.identities(plan))
    entries = [e.id for e in plan.entries()]
    last_of = {n.entry.id: n.id for n in plan.nodes}  # each entry's last node: its publish job follows it
    stage_of: dict[str, str] = {}
    jobs: list[Job] = []
    verifies: dict[str, list[str]] = {e: [] for e in entries}
    leaves: dict[str, list[str]] = {e: [] for e in entries}
    publishes = []
    for node in plan.nodes:  # each leaf's verify right after its stage: shards keep the two together
        if first[node.id] == node.id:
            jid = job_id(STAGE, node.id)
            stage_of[node.id] = jid
            needs = (stage_of[node.parent],) if node.parent else ()
            jobs.append(Job(jid, STAGE, node.id, ("node", "stage", *common, "--report", f"reports/{jid}",
                                                  "--digest-file", f"reports/{jid}/digest", node.id),
                            needs, runner_of(node, STAGE)))
        else:
            stage_of[node.id] = stage_of[first[node.id]]
        if node.leaf:
            jid = job_id(VERIFY, node.id)
            verifies[node.entry.id].append(jid)
            leaves[node.entry.id].append(node.id)
            jobs.append(Job(jid, VERIFY, node.id, ("node", "verify", *common, "--report", f"reports/{jid}",
                                                   node.id),
                            (stage_of[node.id],), runner_of(node, VERIFY), digest_from=stage_of[node.id],
                            repository=node.entry.target.name))
        entry = node.entry.id
        if len(entries) > 1 and last_of[entry] == node.id:  # (one entry: the whole matrix's publish is its own)
            jid = job_id(PUBLISH, entry)
            publishes.append(jid)
            jobs.append(Job(jid, PUBLISH, None, ("publish", *common, "--only", ",".join(leaves[entry]), "--report",
                                                 f"reports/{jid}"), tuple(verifies[entry]),
                            CiRunner(node.entry.runners.build), entry=entry))
    every = publishes or [j for e in entries for j in verifies[e]]
    jobs.append(Job(PUBLISH, PUBLISH, None, ("publish", *common, *(("--only", only) if only else ()), "--report",
                                             "reports/publish"), tuple(every),
                    CiRunner(plan.nodes[0].entry.runners.build) if plan.nodes else CiRunner(),
                    after_failures=bool(publishes)))
    return Graph(tuple(jobs), matrix)
