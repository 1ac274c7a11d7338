"""The pods of the Kubernetes engines (Argo Workflows, Kubernetes Jobs). No pod mounts a host path or a Docker
socket, none is privileged, and none gets a service account token:

- a **verify pod is the test** (`verify`): its suite container is the leaf image itself, pinned by digest,
  requesting the GPUs the suite must then see; the tool image's init step writes the suite into a folder the
  containers share, and the tool image's judge reads the report, checks that its own container (given the same
  request) sees those GPUs, and signs and records the pass with the GPU runners' key (`smoke.pod`). The leaf's
  container holds no key: only the judge mounts one;
- stage and publish pods build, pull and push through a container engine the platform runs as a service
  (`engine`): the `DOCKER_HOST` of the ConfigMap `ENGINE_CONFIG`, with its TLS client certificates from the
  Secret `ENGINE_TLS` where it has some.

Every container drops every capability, may not gain privileges, runs under the runtime's default seccomp profile
and as a non-root user: the tool image's as `TOOL_USER`, the leaf's as its image's numeric USER (every image
imagebuilder builds ends with one; the kubelet refuses to start an image whose USER is root or a name). That is
Pod Security "restricted". Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..smoke import pod
from . import roles
from .graph import CiRunner, Job

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT = "nvidia.com/gpu.product"  # the node label NVIDIA's GPU feature discovery sets
QUEUE_LABEL = "imagebuilder.dev/queue"
WORK = "/var/run/imagebuilder/work"  # the tool containers' own writable folder (HOME, the cache folder, reports)
TOOL_USER = 65532  # a non-root uid for the tool image's containers
ENGINE_CONFIG, ENGINE_TLS = "imagebuilder-engine", "imagebuilder-engine-tls"
ENGINE_CERTS = "/var/run/imagebuilder/engine"
REGISTRY_SECRET = "imagebuilder-registry"  # optional: IMAGEBUILDER_REGISTRY_USER/_PASSWORD for the tool containers
BASE_IDS_ENV = "IMAGEBUILDER_BASE_IMAGE_IDS"
DEADLINE = 4 * 3600  # seconds a verify pod may run, its suite and judge together

DROPPED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
           "seccompProfile": {"type": "RuntimeDefault"}}
TOOL_SECURITY = {**DROPPED, "runAsNonRoot": True, "runAsUser": TOOL_USER, "runAsGroup": TOOL_USER}


def selector(runner: CiRunner) -> dict[str, str]:
    """The nodes a job's pod may run on: its GPU model's (as GPU feature discovery labels them), else its queue's."""
    if runner.gpu is not None and runner.gpu != "any":
        return {GPU_PRODUCT: runner.gpu}
    return {QUEUE_LABEL: runner.queue}


def gpus(runner: CiRunner) -> dict[str, Any]:
    """A container's resources for the runner's GPUs (requests = limits), or none."""
    if runner.gpu is None:
        return {}
    count = str(runner.gpus)
    return {"resources": {"limits": {GPU_RESOURCE: count}, "requests": {GPU_RESOURCE: count}}}


def tool_env(extra: Sequence[dict[str, Any]] = (), *, registry: bool = True) -> list[dict[str, Any]]:
    """What a tool container is told: its writable folder (HOME, the cache folder), and (`registry`) the registry's
    credentials from the optional Secret `REGISTRY_SECRET`."""
    return [{"name": "HOME", "value": WORK}, {"name": "IMAGEBUILDER_CACHE_DIR", "value": f"{WORK}/cache"},
            *({"name": name, "valueFrom": {"secretKeyRef": {"name": REGISTRY_SECRET, "key": name, "optional": True}}}
              for name in ("IMAGEBUILDER_REGISTRY_USER", "IMAGEBUILDER_REGISTRY_PASSWORD") if registry), *extra]


def engine(job: Job, *, image: str, args: Sequence[str]) -> dict[str, Any]:
    """A stage or publish pod's spec: the tool image running `imagebuilder ARGS` against the platform's engine
    service, with its role's key (`roles.pod`)."""
    env, volumes, mounts = roles.pod(job)
    env = [*env, *({"name": name, "valueFrom": {"configMapKeyRef": {"name": ENGINE_CONFIG, "key": name,
                                                                     "optional": name != "DOCKER_HOST"}}}
                   for name in ("DOCKER_HOST", "DOCKER_TLS_VERIFY")),
           {"name": "DOCKER_CERT_PATH", "value": ENGINE_CERTS}]
    container = {"name": "main", "image": image, "command": ["imagebuilder"], "args": list(args),
                 "env": tool_env(env), "securityContext": TOOL_SECURITY,
                 "volumeMounts": [{"name": "work", "mountPath": WORK}, *mounts,
                                  {"name": "engine-tls", "mountPath": ENGINE_CERTS, "readOnly": True}]}
    return {"containers": [container],
            "volumes": [{"name": "work", "emptyDir": {}}, *volumes,
                        {"name": "engine-tls", "secret": {"secretName": ENGINE_TLS, "optional": True}}]}


def verify(job: Job, *, tool: str, leaf: str, digest: str, node: str, common: Sequence[str],
           base_ids: Sequence[str] = (), global_args: Sequence[str] = ()) -> dict[str, Any]:
    """A verify pod's spec (containers, volumes, security; the caller adds the node selector): `leaf` is the leaf
    image pinned by `digest` (`REPOSITORY@DIGEST`), `node` its node id, `common` the arguments every command of the
    graph shares (--matrix, --registry), `global_args` the global options before them, `base_ids` the base images'
    IDs as the plan resolved them (the judge has no engine to resolve them: `--base-image-id`)."""
    runner = job.runner
    key_env, key_volumes, key_mounts = roles.pod(job)
    suite = {"name": "suite", "mountPath": pod.FOLDER}
    work = {"name": "work", "mountPath": WORK}
    prepare = {"name": "prepare", "image": tool, "command": ["imagebuilder"],
               "args": [*global_args, "node", "prepare-suite", *common, "--into", pod.FOLDER, node],
               "env": tool_env(registry=False), "securityContext": TOOL_SECURITY, "volumeMounts": [suite, work]}
    test = {"name": "suite", "image": leaf, "command": list(pod.COMMAND), **gpus(runner),
            "securityContext": {**DROPPED, "runAsNonRoot": True},  # (its image's numeric USER: imagebuilder's are)
            "volumeMounts": [suite, {"name": "shm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}]}
    model = ["--requested-model", runner.gpu] if runner.gpu not in (None, "any") else []
    judge = {"name": "judge", "image": tool, "command": ["imagebuilder"],
             "args": [*global_args, "node", "verify", *common, "--digest", digest, "--suite-ran-in", pod.FOLDER,
                      "--requested-gpus", str(runner.gpus if runner.gpu is not None else 0), *model,
                      "--report", f"{WORK}/report", node],
             "env": tool_env([*key_env, *([{"name": BASE_IDS_ENV, "value": " ".join(base_ids)}] if base_ids else [])]),
             **gpus(runner), "securityContext": TOOL_SECURITY,
             "volumeMounts": [{**suite, "readOnly": True}, work, *key_mounts]}
    return {"automountServiceAccountToken": False, "enableServiceLinks": False,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "initContainers": [prepare, test], "containers": [judge],
            "volumes": [{"name": "suite", "emptyDir": {}}, {"name": "work", "emptyDir": {}},
                        {"name": "shm", "emptyDir": {"medium": "Memory"}}, {"name": "tmp", "emptyDir": {}},
                        *key_volumes]}
