"""The keys of a graph's jobs, by role: the one definition every engine's documents use (GitHub Actions, Argo,
Kubernetes Jobs, Buildkite), so that each job holds only the private key of its role and every job names the
public halves with their roles (docs/concepts/trust.md):

- a stage job holds the build key (it signs the build record beside each key tag it pushes);
- a verify job on GPU runners holds the GPU runners' key (passes and verdicts of runs on GPUs);
- a verify job on CPU runners and the publish job hold the hosted fleet's key (CPU passes, SBOMs, VSAs, untested
  records), trusted for `cpu,publish` only: it can never vouch for a GPU pass.

The secrets' names and the committed public halves are conventions a user may rename through the engines'
variables (`vars.IMAGEBUILDER_TRUST_KEY`, `vars.IMAGEBUILDER_TRUST_BUILD_KEY`). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .graph import STAGE, VERIFY, Job

SIGNING_ENV, BUILD_ENV = "IMAGEBUILDER_SIGNING_KEY", "IMAGEBUILDER_BUILD_KEY"  # (`evidence.signing` reads them)
TRUST_ENV, TRUST_BUILD_ENV = "IMAGEBUILDER_TRUST_KEYS", "IMAGEBUILDER_TRUST_BUILD_KEYS"


@dataclass(frozen=True)
class Key:
    """One private key of the CI: who holds it, what it may sign, where imagebuilder finds it."""

    name: str  # a word for it (a file name in the jobs' key folder)
    roles: str  # what its signatures count for, as `--trust-key` names them (`signing.ROLES`)
    secret: str  # the CI secret (a Kubernetes Secret's key) holding its private PEM
    env: str  # the variable imagebuilder reads the private key's path from
    public: str  # its committed public half


BUILD = Key("build", "build", "IMAGEBUILDER_BUILD_KEY", BUILD_ENV, "keys/build.pub")
GPU = Key("gpu", "gpu", "IMAGEBUILDER_SIGNING_KEY", SIGNING_ENV, "keys/signing.pub")
HOSTED = Key("hosted", "cpu,publish", "IMAGEBUILDER_HOSTED_KEY", SIGNING_ENV, "keys/hosted.pub")
KEYS = (BUILD, GPU, HOSTED)
SECRET, TRUST_CONFIG = "imagebuilder-keys", "imagebuilder-trust"  # Kubernetes: the private PEMs; the public halves
TRUST_DIR = "/var/run/imagebuilder/trust"  # where a pod mounts the public halves
TRUST_KEYS = " ".join(f"{k.roles}={k.public}" for k in (GPU, HOSTED))  # the pass keys, each with its roles
TRUST_BUILD_KEYS = BUILD.public


def key_of(job: Job) -> Key:
    """The one private key a job holds: stage the build key, a GPU verify the GPU runners' key, a CPU verify and
    publish the hosted fleet's key."""
    if job.kind == STAGE:
        return BUILD
    if job.kind == VERIFY and job.runner.gpu is not None:
        return GPU
    return HOSTED


def pod(job: Job) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """A Kubernetes container's env, volumes and mounts for a job's keys: its role's private key only, as the
    PEM itself in its variable (a `secretKeyRef` to the Secret `SECRET`, key `<name>.pem`: no file whose owner
    or mode is the kubelet's), and the public halves (the ConfigMap `TRUST_CONFIG`, `<name>.pub`)."""
    key = key_of(job)
    env: list[dict[str, Any]] = [
        {"name": key.env, "valueFrom": {"secretKeyRef": {"name": SECRET, "key": f"{key.name}.pem"}}},
        *({"name": name, "value": value} for name, value in trust(TRUST_DIR).items())]
    volumes = [{"name": "trust", "configMap": {"name": TRUST_CONFIG}}]
    mounts = [{"name": "trust", "mountPath": TRUST_DIR, "readOnly": True}]
    return env, volumes, mounts


def trust(folder: str | None = None) -> dict[str, str]:
    """The trust variables every job sets: the public halves with their roles (under `folder` where the engine
    mounts them, else the repository's paths)."""
    def at(key: Key) -> str:
        return f"{folder}/{key.name}.pub" if folder else key.public
    return {TRUST_ENV: " ".join(f"{k.roles}={at(k)}" for k in (GPU, HOSTED)), TRUST_BUILD_ENV: at(BUILD)}
