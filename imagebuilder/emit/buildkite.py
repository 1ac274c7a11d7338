"""The graph as Buildkite pipeline uploads: a step per job, on the agent queue its runner names, `depends_on`
its needs. Buildkite takes at most MAX_STEPS steps per upload, so the graph is cut into parts in dependency
order; each part but the last ends with a step that uploads the next (`imagebuilder plan ... --part N |
buildkite-agent pipeline upload`, under `pipefail`: a plan that fails fails the step), with the global options the
first part was made with (every command of the pipeline gets them: one plan, one graph): steps of one build may
depend on steps of an earlier upload. A stage step hands its digest on in the build's meta-data (`digest:<job
id>`); its verify step reads it back. A GPU step runs on the agent queue its runner names (queue, model, count):
the agents of that queue are the machines with those GPUs. Each step uploads its report folder as artifacts, and
holds its role's private key only (`roles.key_of`), from Buildkite's secrets (`secrets:`, the PEM itself).
Commands are shell-quoted (a node id is never shell text). Pure."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from . import roles
from .graph import STAGE, VERIFY, CiRunner, Graph, Job
from .settings import Document, Settings

MAX_STEPS = 500  # steps per pipeline upload
PROGRAM = "imagebuilder"


def command(job: Job) -> str:
    """The step's shell command: the node command, quoted; a verify is given its stage step's digest, a stage
    step hands its digest on."""
    argv = [PROGRAM, *job.argv]
    if job.kind == VERIFY and job.digest_from:
        digest = f'"$(buildkite-agent meta-data get {meta_key(job.digest_from)})"'
        return f"{shlex.join(argv[:-1])} --digest {digest} {shlex.quote(argv[-1])}"
    text = shlex.join(argv)
    if job.kind == STAGE:
        digest_file = job.argv[job.argv.index("--digest-file") + 1]
        text += f" && buildkite-agent meta-data set {meta_key(job.id)} < {shlex.quote(digest_file)}"
    return text


def meta_key(job_id: str) -> str:
    return f"digest:{job_id}"


def reports(job: Job) -> str | None:
    """The job's report folder (`--report`), which the step uploads as artifacts."""
    return job.argv[job.argv.index("--report") + 1] if "--report" in job.argv else None


def step(job: Job) -> dict[str, Any]:
    label = f"{job.kind} {job.node or job.entry or 'the matrix'}"
    out: dict[str, Any] = {"key": job.id, "label": label, "command": command(job),
                           "agents": {"queue": job.runner.label}}
    if job.needs:
        out["depends_on"] = list(job.needs)
        if job.after_failures:
            out["allow_dependency_failure"] = True
    folder = reports(job)
    if folder:
        out["artifact_paths"] = [f"{folder}/**/*"]
    out["env"] = roles.trust()  # (the public halves, each with its roles)
    key = roles.key_of(job)  # its role's private key only, the PEM itself, from Buildkite's secrets
    out["secrets"] = {key.env: key.secret}
    return out


def uploads(graph: Graph, plan_args: Sequence[str], size: int = MAX_STEPS,
            global_args: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One pipeline document per upload. `plan_args`: the `imagebuilder plan` arguments that made this graph,
    `global_args` the global options before them (the next part's upload step runs both again with `--part`)."""
    parts: list[list[Job]] = [[]]
    for job in graph.with_options(tuple(global_args)).jobs:  # (every step's command with the global options)
        if len(parts[-1]) >= size - 1:
            parts.append([])
        parts[-1].append(job)
    out = []
    for index, jobs in enumerate(parts):
        steps = [step(j) for j in jobs]
        if index + 1 < len(parts):
            again = shlex.join([PROGRAM, *global_args, "plan", *plan_args, "--format", "buildkite", "--part",
                                str(index + 2)])
            steps.append({"key": f"upload-part-{index + 2}", "label": f"upload part {index + 2} of {len(parts)}",
                          "command": f"set -o pipefail; {again} | buildkite-agent pipeline upload",
                          "agents": {"queue": (graph.jobs[0].runner if graph.jobs else CiRunner()).label}})
        out.append({"steps": steps})
    return out


def documents(graph: Graph, settings: Settings) -> list[Document]:
    """The uploads, in order (each but the last uploads the next)."""
    return [(None, doc) for doc in uploads(graph, settings.plan_args, global_args=settings.global_args)]
