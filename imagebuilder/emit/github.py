"""The graph as GitHub Actions workflows, sharded past the 256 jobs a workflow run may have.

Each shard is a workflow file of at most MAX_JOBS jobs, in dependency order: its node jobs, then a `next` job
that dispatches the next shard once this one is done (`gh workflow run`; a dispatch by the job's token starts
a run, other events do not). The shards are one run in effect: the first shard hands on the commit it ran and the
graph's fingerprint, every later shard's jobs check out that commit and refuse to run a graph other than the one
the first shard started (a workflow regenerated on the branch meanwhile). Every node job calls one reusable
workflow (`imagebuilder-node.yml`) with the node command's arguments as JSON, which it runs without a shell (a
node id is never shell text); a value GitHub would evaluate (`${{`) is refused before anything is written. A
verify job is handed its stage job's digest (the reusable workflow's output) when both are in one shard; across
shards the key tag is read again. An entry's publish job follows its verifies (in its shard, or in a later one,
which starts after them); the whole matrix's publish runs last, whatever they ended. Each job is given only the
private key of its role, by name (`roles.key_of`: never `secrets: inherit`), and names the public halves with
their roles (committed under `keys/`, or the repository variables). The runner installs imagebuilder from the
checkout without a marketplace action, once per commit on a self-hosted runner (its tool cache). Limits:
https://docs.github.com/en/actions/reference/limits (256 jobs per run, 500 KB per workflow file; 20 unique
reusable workflows, 4 levels: this uses 1 and 1). Pure."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from .. import choices
from ..errors import InputError
from . import roles
from .graph import VERIFY, CiRunner, Graph, Job
from .settings import Document, Settings

MAX_JOBS = choices.MAX_JOBS  # jobs per workflow run (as per strategy matrix)
MAX_BYTES = 500 * 1024  # a workflow file larger than this starts no runs
NODE_WORKFLOW = "imagebuilder-node.yml"
HOSTED = ("ubuntu-24.04",)  # the runner of the `next` jobs
HOSTED_IMAGE = re.compile(r"(ubuntu|windows|macos)-[a-z0-9.-]+", re.IGNORECASE)  # a GitHub-hosted image label
EXPRESSION = "${{"  # what GitHub evaluates wherever it stands in a workflow's values
# imagebuilder from the checkout, without a marketplace action: into the runner's tool cache, keyed by the commit's
# tree, once per commit on a self-hosted runner (jobs side by side wait on a lock); a fresh venv on a hosted one.
INSTALL = {"name": "install imagebuilder (this commit's)", "run": """\
tree="$(git rev-parse 'HEAD^{tree}')"
tool="${RUNNER_TOOL_CACHE:-$RUNNER_TEMP}/imagebuilder/$tree"
mkdir -p "$(dirname "$tool")"
exec 9>"$tool.lock"
flock 9
if [ ! -e "$tool/.complete" ] || ! "$tool/bin/python" -c 'import imagebuilder.cli' 2>/dev/null; then
  rm -rf "$tool"
  python3 -m venv "$tool" && "$tool/bin/python" -m pip install -q . && touch "$tool/.complete" \
    || { rm -rf "$tool"; echo "::error::imagebuilder could not be installed from this commit"; exit 1; }
fi
echo "$tool/bin" >> "$GITHUB_PATH"
"""}
# The commit the first shard ran (a later shard is dispatched on the branch, which may have moved since).
PIN = {"name": "the commit the first shard ran", "if": "inputs.sha != ''",
       "env": {"SHA": "${{ inputs.sha }}"},
       "run": """\
if [ "$(git rev-parse HEAD)" != "$SHA" ]; then
  git cat-file -e "$SHA^{commit}" 2>/dev/null || git fetch -q --no-tags --depth=1 origin "$SHA"
  git checkout -q --detach "$SHA"
fi
"""}
SETUP = [{"uses": "actions/checkout@v4"}, PIN, INSTALL]
# Reports are uploaded as artifacts through a local action of the repository's (REPORTS_ACTION), but not under
# nektos/act, which runs these workflows in the tests offline: act fetches every marketplace action a job names
# before the job starts, and cannot offline; a local action's own are fetched only if its step runs
# (docs/guide/engines/github-actions.md).
ARTIFACTS = "always() && !env.ACT"
REPORTS_ACTION = ".github/actions/imagebuilder-reports/action.yml"


def reports_action() -> dict[str, Any]:
    """The local composite action that uploads a job's reports (`name`, `path`) or downloads every report
    (`pattern`, `path`) as artifacts: the only place the workflows name `actions/*-artifact`."""
    return {
        "name": "imagebuilder reports",
        "description": "Uploads a job's reports as an artifact, or downloads the reports of every job of the run.",
        "inputs": {"name": {"description": "the artifact to upload", "required": False, "default": ""},
                   "pattern": {"description": "the artifacts to download", "required": False, "default": ""},
                   "path": {"description": "the folder", "required": True}},
        "runs": {"using": "composite", "steps": [
            {"if": "inputs.name != ''", "uses": "actions/upload-artifact@v4",
             "with": {"name": "${{ inputs.name }}", "path": "${{ inputs.path }}", "if-no-files-found": "ignore"}},
            {"if": "inputs.pattern != ''", "uses": "actions/download-artifact@v4",
             "with": {"pattern": "${{ inputs.pattern }}", "path": "${{ inputs.path }}"}}]},
    }


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
    graph = {"name": "the graph the first shard started", "if": "inputs.expect_graph != ''",
             "env": {"EXPECT": "${{ inputs.expect_graph }}", "GRAPH": "${{ inputs.graph }}"},
             "run": 'if [ "$EXPECT" != "$GRAPH" ]; then echo "::error::this shard is of graph $GRAPH, the first shard '
                    'ran graph $EXPECT: the workflows were regenerated on the branch since; start again from the '
                    'first shard"; exit 1; fi'}
    pass_keys = " ".join(k.public for k in (roles.GPU, roles.HOSTED))
    check = (f'missing=""\n'
             f'[ -n "$TRUST" ] || for f in {pass_keys}; do [ -r "$f" ] || missing="$missing $f"; done\n'
             f'[ -n "$TRUST_BUILD" ] || [ -r {roles.BUILD.public} ] || missing="$missing {roles.BUILD.public}"\n'
             'if [ -n "$missing" ]; then echo "::error::not in the repository:$missing: commit the public halves '
             'of the keys (imagebuilder keys new; docs/concepts/trust.md) or name them in '
             'vars.IMAGEBUILDER_TRUST_KEY and vars.IMAGEBUILDER_TRUST_BUILD_KEY"; exit 1; fi')
    keys = {"name": "the public keys the jobs trust", "run": check,
            "env": {"TRUST": "${{ vars.IMAGEBUILDER_TRUST_KEY }}",
                    "TRUST_BUILD": "${{ vars.IMAGEBUILDER_TRUST_BUILD_KEY }}"}}
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
                                     ("digest_file", False), ("key_env", False), ("sha", False), ("graph", False),
                                     ("expect_graph", False))}
    return {
        "name": "imagebuilder node",
        "on": {"workflow_call": {"inputs": inputs, "outputs": {"digest": {"value": "${{ jobs.node.outputs.digest }}"}},
                                 "secrets": {"REGISTRY_USER": {"required": False},
                                             "REGISTRY_PASSWORD": {"required": False},
                                             "IMAGEBUILDER_KEY": {"required": False}}}},
        "permissions": {"contents": "read"},
        "jobs": {"node": {"runs-on": "${{ fromJSON(inputs.runs_on) }}", "timeout-minutes": 120,
                          "outputs": {"digest": "${{ steps.digest.outputs.digest }}"},
                          "steps": [*SETUP, graph, keys, login, key, run, out,
                                    {"name": "the reports as artifacts", "if": ARTIFACTS,
                                     "uses": "./" + REPORTS_ACTION.rsplit("/", 1)[0],
                                     "with": {"name": "report-${{ inputs.id }}", "path": "reports/"}}]}},
    }


def runs_on(job: Job, cpu: tuple[str, ...], gpu: tuple[str, ...]) -> list[str]:
    """A job's runner labels: the CPU or GPU runners' labels, plus the queue (when not the default, and the CPU
    runners are not GitHub-hosted: a hosted runner has its image's label only), the GPU model (when one is asked)
    and `gpus-<count>`."""
    runner = job.runner
    if runner.gpu is None:
        queue = runner.queue != CiRunner().queue and not hosted(cpu)  # (the schema's default queue: no label)
        return [*cpu, *([runner.queue] if queue else [])]
    return [*gpu, *([runner.gpu] if runner.gpu != "any" else []), f"gpus-{runner.gpus}"]


def hosted(labels: tuple[str, ...]) -> bool:
    """A GitHub-hosted runner's labels: one image label (`ubuntu-24.04`, `windows-latest`, `macos-14`, ...), which
    carries no other label; any other set is a self-hosted pool's, which may carry the queue's."""
    return len(labels) == 1 and bool(HOSTED_IMAGE.fullmatch(labels[0]))


def shards(graph: Graph, size: int = MAX_JOBS) -> list[list[Job]]:
    """The jobs in dependency order, cut into runs of at most `size` jobs (one of each is the `next` job)."""
    out: list[list[Job]] = [[]]
    for job in graph.jobs:
        if len(out[-1]) >= size - 1:
            out.append([])
        out[-1].append(job)
    return out


def fingerprint(graph: Graph, size: int, cpu: tuple[str, ...], gpu: tuple[str, ...]) -> str:
    """The graph and how it is cut and placed (the shards' size, the runner labels), in 16 hex digits: what every
    shard of one run must share."""
    doc = {"graph": graph.to_json(), "size": size, "cpu": list(cpu), "gpu": list(gpu)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def unevaluated(values: Iterable[str], what: str) -> None:
    """Refuse a value GitHub would evaluate as an expression where it is written (`${{`)."""
    for value in values:
        if EXPRESSION in value:
            raise InputError(f"{what} {value!r} holds {EXPRESSION!r}, which GitHub evaluates where the workflow "
                             "names it", hint="a matrix path, --registry, --only and runner labels are written into "
                                              "the workflows as they are")


def workflows(graph: Graph, *, cpu: tuple[str, ...], gpu: tuple[str, ...], size: int = MAX_JOBS
              ) -> list[tuple[str, dict[str, Any]]]:
    """(file name under .github/workflows/, document): the node workflow, then one workflow per shard."""
    unevaluated(cpu, "--cpu-runner label")
    unevaluated(gpu, "--gpu-runner label")
    for job in graph.jobs:
        unevaluated(job.argv, "the command's argument")
    parts = shards(graph, size)
    mark = fingerprint(graph, size, cpu, gpu)
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
            needs = [n for n in job.needs if n in here]
            doc_jobs[job.id] = {
                "name": f"{job.kind} {job.node or job.entry or 'the matrix'}",
                **({"needs": needs} if needs else {}),
                **({"if": "${{ !cancelled() }}"} if job.after_failures and needs else {}),
                "uses": f"./.github/workflows/{NODE_WORKFLOW}",
                "with": {"id": job.id, "argv": json.dumps(list(job.argv)), "kind": job.kind,
                         "runs_on": json.dumps(runs_on(job, cpu, gpu)), "digest": digest, "digest_file": digest_file,
                         "key_env": key.env, "sha": "${{ inputs.sha || github.sha }}", "graph": mark,
                         "expect_graph": "${{ inputs.graph }}"},
                "secrets": {"REGISTRY_USER": "${{ secrets.REGISTRY_USER }}",  # (named: never `inherit`)
                            "REGISTRY_PASSWORD": "${{ secrets.REGISTRY_PASSWORD }}",
                            "IMAGEBUILDER_KEY": f"${{{{ secrets.{key.secret} }}}}"},
            }
        if index + 1 < len(parts):
            doc_jobs["next"] = {  # (on the first shard's graph only: a regenerated shard dispatches no other)
                "name": f"dispatch {shard_name(index + 1)}", "needs": [j.id for j in jobs],
                "if": f"${{{{ !cancelled() && (inputs.graph == '' || inputs.graph == '{mark}') }}}}",
                "runs-on": list(HOSTED), "permissions": {"actions": "write"},
                "env": {"GH_TOKEN": "${{ github.token }}", "NEXT": shard_name(index + 1),
                        "SHA": "${{ inputs.sha || github.sha }}", "GRAPH": f"${{{{ inputs.graph || '{mark}' }}}}"},
                "steps": [{"run": 'gh workflow run "$NEXT" --repo "$GITHUB_REPOSITORY" --ref "$GITHUB_REF_NAME" '
                                  '-f sha="$SHA" -f graph="$GRAPH"'}],
            }
        trigger: dict[str, Any] = {"workflow_dispatch": {"inputs": {
            "sha": {"description": "the commit the first shard ran (set by the shard before)", "type": "string",
                    "required": False, "default": ""},
            "graph": {"description": "the graph the first shard ran (set by the shard before)", "type": "string",
                      "required": False, "default": ""}}}}
        if index == 0:
            trigger["schedule"] = [{"cron": "17 2 * * *"}]
        out.append((shard_name(index), {
            "name": f"imagebuilder {index + 1}/{len(parts)}", "on": trigger,
            "permissions": {"contents": "read", **({"actions": "write"} if index + 1 < len(parts) else {})},
            "concurrency": {"group": f"imagebuilder-{index + 1}", "cancel-in-progress": False},
            "jobs": doc_jobs}))
    return out


def documents(graph: Graph, settings: Settings) -> list[Document]:
    """The workflows (each under .github/workflows/) and the reports action they use; every command with the
    global options the plan was made with."""
    made = workflows(graph.with_options(settings.global_args), cpu=settings.cpu_runner, gpu=settings.gpu_runner,
                     size=settings.max_jobs)
    return [*((f".github/workflows/{name}", doc) for name, doc in made),
            (REPORTS_ACTION, reports_action())]
