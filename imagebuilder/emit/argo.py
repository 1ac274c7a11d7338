"""The graph as one Argo Workflows `Workflow`: a DAG task per job, a template per kind and runner. A verify
template is a verify pod (`pods.verify`: the leaf image itself runs the suite on the GPUs it requests, the tool
image prepares and judges); stage and publish templates run the tool image against the platform's engine service
(`pods.engine`). No template mounts a host path or a Docker socket. A stage task's digest is its output
parameter, which its verify task is given (the leaf's image, `REPOSITORY@DIGEST`, and `--digest`). Each pod holds
its role's private key only (`roles.pod`). The DAG does not fail fast: a failed suite is a verdict on its leaf, and
blocks only what depends on it (an entry's publish waits for its own verifies; the matrix's publish for every
entry's, whatever they ended). Template names follow Argo's validator (`NAME`, `MAX_NAME`), from any runner
label. The Workflow is one Kubernetes object: past `MAX_BYTES` it is refused, naming its size. Argument values
are never shell text. Pure."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from ..errors import InputError
from . import pods
from .graph import STAGE, VERIFY, CiRunner, Graph, Job
from .settings import Document, Settings

MAX_BYTES = 1024 * 1024  # under etcd's 1.5 MiB request limit, with room for the status Argo adds
NAME = re.compile(r"[a-zA-Z0-9][-a-zA-Z0-9]*")  # Argo's template and task names (workflow/validate/validate.go)
MAX_NAME = 128
DIGEST_PATH = "/tmp/imagebuilder-digest"
EXECUTOR_ACCOUNT = "imagebuilder-executor"  # Argo's executor's service account: no container of ours gets a token


def template_name(kind: str, runner: CiRunner) -> str:
    """`<kind>-<runner label>`, lowercase; where the label holds what Argo refuses in a name (`.`, `_`: MIG
    profiles, `cpu_large`) or an upper-case letter, those become `-` (or lower case) and a hash of the label keeps
    it apart from others (`cpu_large` from `cpu-large`, `CPU-Large` from `cpu-large`)."""
    raw = f"{kind}-{runner.label}"
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    if name != raw or len(name) > MAX_NAME:  # (changed by lowercasing too: `CPU-Large` and `cpu-large` are two)
        name = f"{name[:MAX_NAME - 9]}-{hashlib.sha256(runner.label.encode()).hexdigest()[:8]}"
    return name


def template(kind: str, runner: CiRunner, image: str, common: list[str], base_ids: Sequence[str],
             global_args: Sequence[str] = ()) -> dict[str, Any]:
    """The template of a kind on a runner: a verify pod, or the tool image's command against the engine service."""
    out: dict[str, Any] = {"name": template_name(kind, runner)}
    job = Job(kind, kind, None, (), runner=runner)
    if kind == VERIFY:
        out["inputs"] = {"parameters": [{"name": "node"}, {"name": "image"}, {"name": "digest"}]}
        pod = pods.verify(job, tool=image, leaf="{{inputs.parameters.image}}", digest="{{inputs.parameters.digest}}",
                          node="{{inputs.parameters.node}}", common=common, base_ids=base_ids,
                          global_args=global_args)
        pod.pop("enableServiceLinks")  # (not a template's field)
        out.update(initContainers=pod.pop("initContainers"), container=pod.pop("containers")[0], **pod,
                   activeDeadlineSeconds=pods.DEADLINE)
    else:
        if kind == STAGE:
            args = ["node", "stage", *common, "--digest-file", DIGEST_PATH, "{{inputs.parameters.node}}"]
            out["inputs"] = {"parameters": [{"name": "node"}]}
            out["outputs"] = {"parameters": [{"name": "digest", "valueFrom": {"path": DIGEST_PATH}}]}
        else:  # publish: an entry's leaves, or every node
            args = ["publish", *common, "--only", "{{inputs.parameters.only}}"]
            out["inputs"] = {"parameters": [{"name": "only", "value": "*"}]}
        pod = pods.engine(job, image=image, args=[*global_args, *args])
        out.update(container=pod["containers"][0], volumes=pod["volumes"], automountServiceAccountToken=False)
    out["nodeSelector"] = pods.selector(runner)
    out["executor"] = {"serviceAccountName": EXECUTOR_ACCOUNT}  # (its token is for Argo's own wait container)
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
            digest = f"{{{{tasks.{job.digest_from}.outputs.parameters.digest}}}}"
            params += [{"name": "image", "value": f"{job.repository}@{digest}"}, {"name": "digest", "value": digest}]
        out["arguments"] = {"parameters": params}
    return out


def workflow(graph: Graph, *, image: str, base_ids: Sequence[str] = (), global_args: Sequence[str] = ()
             ) -> dict[str, Any]:
    """The Workflow; `base_ids`: `IMAGE=ID` of each base image as the plan resolved it (the verify pods' judges
    have no engine). An input error when it would be larger than `MAX_BYTES`."""
    common = common_args(graph.jobs[-1]) if graph.jobs else []
    templates: dict[str, dict[str, Any]] = {}
    for job in graph.jobs:
        name = template_name(job.kind, job.runner)
        if name not in templates:
            templates[name] = template(job.kind, job.runner, image, common, base_ids, global_args)
    doc = {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "metadata": {"generateName": "imagebuilder-"},
        "spec": {"entrypoint": "plan",
                 "templates": [{"name": "plan", "dag": {"failFast": False, "tasks": [task(j) for j in graph.jobs]}},
                               *templates.values()]},
    }
    size = len(json.dumps(doc, separators=(",", ":")).encode())
    if size > MAX_BYTES:
        raise InputError(f"the Argo Workflow of this plan would be {size} bytes ({len(graph.jobs)} tasks): one "
                         f"Kubernetes object, it must stay under {MAX_BYTES} (etcd refuses requests past 1.5 MiB, "
                         "and Argo adds its status)",
                         hint="submit the matrix in parts: `plan --only 'GLOB'` per part, one Workflow each")
    return doc


def documents(graph: Graph, settings: Settings) -> list[Document]:
    """The Workflow (one document)."""
    return [(None, workflow(graph, image=settings.pinned_tool("argo"), base_ids=settings.judged_bases("argo"),
                            global_args=settings.global_args))]
