"""The graph as GitHub Actions workflows, sharded past the 256 jobs a workflow run may have.

Each shard is a workflow file of at most MAX_JOBS jobs, in dependency order: its node jobs, then a `next` job
that dispatches the next shard once this one is done (`gh workflow run`; a dispatch by the job's token starts
a run, other events do not). Every node job calls one reusable workflow (`imagebuilder-node.yml`) with the
node command's arguments as JSON, which it runs without a shell (a node id is never shell text). A verify job
is handed its stage job's digest (the reusable workflow's output) when both are in one shard; across shards
the key tag is read again. Each job is given only the private key of its role, by name (`roles.key_of`: never
`secrets: inherit`), and names the public halves with their roles. Limits:
https://docs.github.com/en/actions/reference/limits (256 jobs per run, 500 KB per workflow file; 20 unique
reusable workflows, 4 levels: this uses 1 and 1). Pure."""

from __future__ import annotations

import json
from typing import Any

from . import roles
from .graph import VERIFY, Graph, Job

MAX_JOBS = 256  # jobs per workflow run
MAX_BYTES = 500 * 1024  # a workflow file larger than this starts no runs
NODE_WORKFLOW = "imagebuilder-node.yml"
SETUP = [
    {"uses": "actions/checkout@v4"},
    {"uses": "actions/setup-python@v5", "with": {"python-version": "3.11"}},
    {"run": "python -m pip install ."},
]


def shard_name(index: int) -> str:
    return f"imagebuilder-{index + 1}.yml"


def node_workflow() -> dict[str, Any]:
    """The reusable workflow every node job calls: set up, log in, run `imagebuilder <argv>`, hand on a digest."""
    login = {"name": "registry login", "if": "vars.IMAGEBUILDER_REGISTRY != ''",
             "env": {"REGISTRY": "${{ vars.IMAGEBUILDER_REGISTRY }}", "REGISTRY_USER": "${{ secrets.REGISTRY_USER }}",
                     "REGISTRY_PASSWORD": "${{ secrets.REGISTRY_PASSWORD }}"},
             "run": 'printf \'%s\' "$REGISTRY_PASSWORD" | docker login "$REGISTRY" -u "$REGISTRY_USER" '
                    '--password-stdin'}
    trusted = roles.trust()
    run = {"id": "node", "name": "imagebuilder node command",
           "env": {"ARGV": "${{ inputs.argv }}", "DIGEST": "${{ inputs.digest }}",
                   roles.TRUST_ENV: f"${{{{ vars.IMAGEBUILDER_TRUST_KEY || '{trusted[roles.TRUST_ENV]}' }}}}",
                   roles.TRUST_BUILD_ENV: "${{ vars.IMAGEBUILDER_TRUST_BUILD_KEY || "
                                          f"'{trusted[roles.TRUST_BUILD_ENV]}' }}}}"},
           "run": "python -c 'import json, os; a = json.loads(os.environ[\"ARGV\"]); d = os.environ[\"DIGEST\"]; "
                  "os.execvp(\"imagebuilder\", [\"imagebuilder\", *a[:-1], *([\"--digest\", d] if d else []), a[-1]])'"}
    out = {"name": "hand on the digest", "if": "inputs.digest_file != ''",
           "env": {"DIGEST_FILE": "${{ inputs.digest_file }}"},
           "run": 'echo "digest=$(cat "$DIGEST_FILE")" >> "$GITHUB_OUTPUT"', "id": "digest"}
    key = {"name": "this job's key (its role's only: emit/roles.py)", "if": "inputs.key_env != ''",
           "env": {"SIGNING_KEY": "${{ secrets.IMAGEBUILDER_KEY }}", "KEY_ENV": "${{ inputs.key_env }}"},
           "run": 'case "$KEY_ENV" in ' + "|".join(sorted({k.env for k in roles.KEYS})) + ') ;; *) echo "unknown key '
                  'variable $KEY_ENV" >&2; exit 1;; esac\n'
                  '[ -n "$SIGNING_KEY" ] || { echo "::warning::no key for $KEY_ENV: it signs nothing"; exit 0; }\n'
                  'umask 077\n'
                  'printf \'%s\\n\' "$SIGNING_KEY" > "$RUNNER_TEMP/signing.pem"\n'
                  'echo "$KEY_ENV=$RUNNER_TEMP/signing.pem" >> "$GITHUB_ENV"'}
    inputs = {name: {"type": "string", "required": required, **({} if required else {"default": ""})}
              for name, required in (("id", True), ("argv", True), ("runs_on", True), ("kind", True), ("digest", False),
                                     ("digest_file", False), ("key_env", False))}
    return {
        "name": "imagebuilder node",
        "on": {"workflow_call": {"inputs": inputs, "outputs": {"digest": {"value": "${{ jobs.node.outputs.digest }}"}},
                                 "secrets": {"REGISTRY_USER": {"required": False},
                                             "REGISTRY_PASSWORD": {"required": False},
                                             "IMAGEBUILDER_KEY": {"required": False}}}},
        "permissions": {"contents": "read"},
        "jobs": {"node": {"runs-on": "${{ fromJSON(inputs.runs_on) }}", "timeout-minutes": 120,
                          "outputs": {"digest": "${{ steps.digest.outputs.digest }}"},
                          "steps": [*SETUP, login, key, run, out,
                                    {"uses": "actions/upload-artifact@v4", "if": "always()",
                                     "with": {"name": "report-${{ inputs.id }}",
                                              "path": "reports/", "if-no-files-found": "ignore"}}]}},
    }


def runs_on(job: Job, cpu: tuple[str, ...], gpu: tuple[str, ...]) -> list[str]:
    """A job's runner labels: the CPU or GPU runners' labels, plus the queue (when not the default), the GPU model
    (when one is asked) and `gpus-<count>`."""
    runner = job.runner
    if runner.gpu is None:
        return [*cpu, *([runner.queue] if runner.queue != "cpu" else [])]
    return [*gpu, *([runner.gpu] if runner.gpu != "any" else []), f"gpus-{runner.gpus}"]


def shards(graph: Graph, size: int = MAX_JOBS) -> list[list[Job]]:
    """The jobs in dependency order, cut into runs of at most `size` jobs (one of each is the `next` job)."""
    out: list[list[Job]] = [[]]
    for job in graph.jobs:
        if len(out[-1]) >= size - 1:
            out.append([])
        out[-1].append(job)
    return out


def workflows(graph: Graph, *, cpu: tuple[str, ...], gpu: tuple[str, ...], size: int = MAX_JOBS
              ) -> list[tuple[str, dict[str, Any]]]:
    """(file name under .github/workflows/, document): the node workflow, then one workflow per shard."""
    parts = shards(graph, size)
    out = [(NODE_WORKFLOW, node_workflow())]
    for index, jobs in enumerate(parts):
        here = {j.id for j in jobs}
        doc_jobs: dict[str, Any] = {}
        for job in jobs:
            digest = ""
            if job.kind == VERIFY and job.digest_from in here:
                digest = f"${{{{ needs.{job.digest_from}.outputs.digest }}}}"
            digest_file = job.argv[job.argv.index("--digest-file") + 1] if "--digest-file" in job.argv else ""
            key = roles.key_of(job)
            doc_jobs[job.id] = {
                "name": f"{job.kind} {job.node or 'the matrix'}",
                **({"needs": [n for n in job.needs if n in here]} if any(n in here for n in job.needs) else {}),
                "uses": f"./.github/workflows/{NODE_WORKFLOW}",
                "with": {"id": job.id, "argv": json.dumps(list(job.argv)), "kind": job.kind,
                         "runs_on": json.dumps(runs_on(job, cpu, gpu)), "digest": digest, "digest_file": digest_file,
                         "key_env": key.env},
                "secrets": {"REGISTRY_USER": "${{ secrets.REGISTRY_USER }}",  # (named: never `inherit`)
                            "REGISTRY_PASSWORD": "${{ secrets.REGISTRY_PASSWORD }}",
                            "IMAGEBUILDER_KEY": f"${{{{ secrets.{key.secret} }}}}"},
            }
        if index + 1 < len(parts):
            doc_jobs["next"] = {
                "name": f"dispatch {shard_name(index + 1)}", "needs": [j.id for j in jobs],
                "if": "${{ !cancelled() }}", "runs-on": "ubuntu-24.04", "permissions": {"actions": "write"},
                "env": {"GH_TOKEN": "${{ github.token }}", "NEXT": shard_name(index + 1)},
                "steps": [{"run": 'gh workflow run "$NEXT" --repo "$GITHUB_REPOSITORY" --ref "$GITHUB_REF_NAME"'}],
            }
        trigger: dict[str, Any] = {"workflow_dispatch": {}}
        if index == 0:
            trigger["schedule"] = [{"cron": "17 2 * * *"}]
        out.append((shard_name(index), {
            "name": f"imagebuilder {index + 1}/{len(parts)}", "on": trigger,
            "permissions": {"contents": "read", **({"actions": "write"} if index + 1 < len(parts) else {})},
            "concurrency": {"group": f"imagebuilder-{index + 1}", "cancel-in-progress": False},
            "jobs": doc_jobs}))
    return out
