"""The graph's verify jobs as Kubernetes `Job`s, one per leaf: the tool image pinned by digest runs
`imagebuilder node verify --digest <the leaf's staged digest> LEAF` against the GPU node's Docker engine, with
`nvidia.com/gpu` requested and limited to the runner's count and nodes of its GPU model selected, holding its
role's private key only and the public halves with their roles (`roles.pod`). With a Kueue
queue, each Job carries `kueue.x-k8s.io/queue-name` and starts suspended (Kueue admits it). Stage and publish
stay with the CPU engine that staged the plan: these Jobs are what needs GPUs. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import roles
from .argo import GPU_PRODUCT, GPU_RESOURCE, QUEUE_LABEL, SOCKET, common_args
from .graph import VERIFY, Graph, Job

KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NODE_ANNOTATION = "imagebuilder.dev/node"
DIGEST_ANNOTATION = "imagebuilder.dev/digest"


def job(one: Job, *, image: str, digest: str, queue: str | None) -> dict[str, Any]:
    runner = one.runner
    env, volumes, mounts = roles.pod(one)
    container: dict[str, Any] = {
        "name": "verify", "image": image, "command": ["imagebuilder"],
        "args": ["node", "verify", *common_args(one), "--digest", digest, str(one.node)], "env": env,
        "volumeMounts": [{"name": "engine", "mountPath": SOCKET}, *mounts],
    }
    selector = {QUEUE_LABEL: runner.queue}
    if runner.gpu is not None:
        container["resources"] = {"limits": {GPU_RESOURCE: str(runner.gpus)},
                                  "requests": {GPU_RESOURCE: str(runner.gpus)}}
        if runner.gpu != "any":
            selector = {GPU_PRODUCT: runner.gpu}
    labels = {"app.kubernetes.io/name": "imagebuilder", "app.kubernetes.io/component": "verify"}
    if queue:
        labels[KUEUE_LABEL] = queue
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "template": {"metadata": {"labels": dict(labels)},
                     "spec": {"restartPolicy": "Never", "nodeSelector": selector, "containers": [container],
                              "volumes": [{"name": "engine", "hostPath": {"path": SOCKET, "type": "Socket"}},
                                          *volumes]}},
    }
    if queue:
        spec["suspend"] = True
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": one.id, "labels": labels,
                         "annotations": {NODE_ANNOTATION: str(one.node), DIGEST_ANNOTATION: digest}},
            "spec": spec}


def jobs(graph: Graph, digests: Mapping[str, str], *, image: str, queue: str | None = None) -> list[dict[str, Any]]:
    """One Job per verify job; `digests`: leaf node id -> its staged digest (every leaf has one)."""
    return [job(j, image=image, digest=digests[str(j.node)], queue=queue) for j in graph.jobs if j.kind == VERIFY]
