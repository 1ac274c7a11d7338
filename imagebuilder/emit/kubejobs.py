"""The graph's verify jobs as Kubernetes `Job`s, one per leaf, each a verify pod (`pods.verify`): the leaf image
pinned to its staged digest runs the suite on the GPUs the pod requests (`nvidia.com/gpu`, nodes of its model
selected), and the tool image, pinned by digest, prepares the suite and judges, signs and records what it left,
holding its role's private key only (`roles.pod`). No Docker socket, no host path.

A Job's name is made by the API server from `generateName` (the node's hash and the digest's first hex), so the
documents are created again at any time (`kubectl create`) with no clash on an immutable pod template; each Job
is deleted a day after it ends (`TTL`), and carries the label `PLAN_LABEL` (the same for every Job of one
document set) by which a user waits for the set. With a Kueue queue, each Job carries `kueue.x-k8s.io/queue-name`
and starts suspended (Kueue admits it). Stage and publish stay with the CPU engine that staged the plan: these
Jobs are what needs GPUs. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from . import pods
from .argo import common_args
from .graph import VERIFY, Graph, Job
from .settings import Document, Settings

KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NODE_ANNOTATION = "imagebuilder.dev/node"
DIGEST_ANNOTATION = "imagebuilder.dev/digest"
PLAN_LABEL = "imagebuilder.dev/plan"
TTL = 24 * 3600  # seconds a finished Job (and its pod, with its log) is kept


def name_prefix(node: str, digest: str) -> str:
    """`verify-<node hash 8>-<digest 12>-`: what the API server adds five characters to (63 at most)."""
    return f"verify-{hashlib.sha256(node.encode()).hexdigest()[:8]}-{digest.split(':', 1)[-1][:12]}-"


def job(one: Job, *, image: str, digest: str, queue: str | None, plan: str, base_ids: Sequence[str] = (),
        global_args: Sequence[str] = ()) -> dict[str, Any]:
    node = str(one.node)
    labels = {"app.kubernetes.io/name": "imagebuilder", "app.kubernetes.io/component": "verify", PLAN_LABEL: plan}
    if queue:
        labels[KUEUE_LABEL] = queue
    pod = pods.verify(one, tool=image, leaf=f"{one.repository}@{digest}", digest=digest, node=node,
                      common=common_args(one), base_ids=base_ids, global_args=global_args)
    spec: dict[str, Any] = {
        "backoffLimit": 0, "ttlSecondsAfterFinished": TTL, "activeDeadlineSeconds": pods.DEADLINE,
        "template": {"metadata": {"labels": dict(labels)},
                     "spec": {"restartPolicy": "Never", "nodeSelector": pods.selector(one.runner), **pod}},
    }
    if queue:
        spec["suspend"] = True
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"generateName": name_prefix(node, digest), "labels": labels,
                         "annotations": {NODE_ANNOTATION: node, DIGEST_ANNOTATION: digest}},
            "spec": spec}


def jobs(graph: Graph, digests: Mapping[str, str], *, image: str, queue: str | None = None,
         base_ids: Sequence[str] = (), global_args: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One Job per verify job; `digests`: leaf node id -> its staged digest (every leaf has one); `base_ids`:
    `IMAGE=ID` of each base image as the plan resolved it (the judges have no engine)."""
    verifies = [j for j in graph.jobs if j.kind == VERIFY]
    plan = "plan-" + hashlib.sha256(json.dumps([graph.to_json(), sorted(digests.items()), image],
                                               sort_keys=True).encode()).hexdigest()[:12]  # (never all digits)
    return [job(j, image=image, digest=digests[str(j.node)], queue=queue, plan=plan, base_ids=base_ids,
                global_args=global_args) for j in verifies]


def documents(graph: Graph, settings: Settings) -> list[Document]:
    """One Job per leaf."""
    return [(None, doc) for doc in jobs(graph, settings.digests, image=settings.pinned_tool("k8s-jobs"),
                                        queue=settings.kueue_queue, base_ids=settings.judged_bases("k8s-jobs"),
                                        global_args=settings.global_args)]
