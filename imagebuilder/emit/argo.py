"""The graph as one Argo Workflows `Workflow`: a DAG task per job, a container template per kind and runner.
GPU templates limit `nvidia.com/gpu` to the runner's count and select nodes of its model
(`nvidia.com/gpu.product`, as NVIDIA's GPU feature discovery labels them); a stage task's digest is its output
parameter, which its verify task is given (`--digest`). Each template's pod holds its role's private key only
(`roles.pod`: the Secret `imagebuilder-keys`) and names the public halves with their roles (the ConfigMap
`imagebuilder-trust`). The tool image runs the node commands against the node's Docker engine (its socket
mounted: the pod, and the image under test, are root on the node). Argument values are never shell text. The
Workflow is one Kubernetes object: it must stay under MAX_BYTES (etcd's request limit). Pure."""

from __future__ import annotations

from typing import Any

from . import roles
from .graph import STAGE, VERIFY, Graph, Job, Runner

MAX_BYTES = 1024 * 1024  # under etcd's 1.5 MiB request limit, with room for the status Argo adds
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT = "nvidia.com/gpu.product"
QUEUE_LABEL = "imagebuilder.dev/queue"
DIGEST_PATH = "/tmp/imagebuilder-digest"
SOCKET = "/var/run/docker.sock"


def template_name(kind: str, runner: Runner) -> str:
    return f"{kind}-{runner.label}".lower()


def template(kind: str, runner: Runner, image: str, common: list[str]) -> dict[str, Any]:
    """A container template: `imagebuilder <kind command> <common> <node>` on the runner's nodes."""
    params = {STAGE: [{"name": "node"}], VERIFY: [{"name": "node"}, {"name": "digest"}]}.get(
        kind, [{"name": "only", "value": "*"}])  # (publish: an entry's leaves, or every node)
    args = {STAGE: ["node", "stage", *common, "--digest-file", DIGEST_PATH, "{{inputs.parameters.node}}"],
            VERIFY: ["node", "verify", *common, "--digest", "{{inputs.parameters.digest}}",
                     "{{inputs.parameters.node}}"]}.get(kind, ["publish", *common, "--only",
                                                               "{{inputs.parameters.only}}"])
    env, volumes, mounts = roles.pod(Job(kind, kind, None, (), runner=runner))  # (this template's role's key)
    container: dict[str, Any] = {"image": image, "command": ["imagebuilder"], "args": args, "env": env,
                                 "volumeMounts": [{"name": "engine", "mountPath": SOCKET}, *mounts]}
    out: dict[str, Any] = {"name": template_name(kind, runner), "container": container,
                           "volumes": [{"name": "engine", "hostPath": {"path": SOCKET, "type": "Socket"}}, *volumes]}
    out["inputs"] = {"parameters": params}
    if runner.gpu is not None:
        container["resources"] = {"limits": {GPU_RESOURCE: str(runner.gpus)}}
        out["nodeSelector"] = {GPU_PRODUCT: runner.gpu} if runner.gpu != "any" else {QUEUE_LABEL: runner.queue}
    else:
        out["nodeSelector"] = {QUEUE_LABEL: runner.queue}
    if kind == STAGE:
        out["outputs"] = {"parameters": [{"name": "digest", "valueFrom": {"path": DIGEST_PATH}}]}
    return out


def common_args(job: Job) -> list[str]:
    """The arguments every command of the graph shares (--matrix, --registry)."""
    argv, out = list(job.argv), []
    for flag in ("--matrix", "--registry"):
        if flag in argv:
            out += [flag, argv[argv.index(flag) + 1]]
    return out


def task(job: Job) -> dict[str, Any]:
    out: dict[str, Any] = {"name": job.id, "template": template_name(job.kind, job.runner)}
    if job.needs and job.after_failures:  # (whatever they ended)
        out["depends"] = " && ".join(f"({n}.Succeeded || {n}.Failed || {n}.Errored || {n}.Skipped || {n}.Omitted)"
                                     for n in job.needs)
    elif job.needs:
        out["dependencies"] = list(job.needs)
    if job.node is None and "--only" in job.argv:
        out["arguments"] = {"parameters": [{"name": "only", "value": job.argv[job.argv.index("--only") + 1]}]}
    if job.node is not None:
        params = [{"name": "node", "value": job.node}]
        if job.kind == VERIFY:
            params.append({"name": "digest", "value": f"{{{{tasks.{job.digest_from}.outputs.parameters.digest}}}}"})
        out["arguments"] = {"parameters": params}
    return out


def workflow(graph: Graph, *, image: str) -> dict[str, Any]:
    common = common_args(graph.jobs[-1]) if graph.jobs else []
    templates: dict[str, dict[str, Any]] = {}
    for job in graph.jobs:
        name = template_name(job.kind, job.runner)
        if name not in templates:
            templates[name] = template(job.kind, job.runner, image, common)
    return {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "metadata": {"generateName": "imagebuilder-"},
        "spec": {"entrypoint": "plan",
                 "templates": [{"name": "plan", "dag": {"tasks": [task(j) for j in graph.jobs]}},
                               *templates.values()]},
    }
