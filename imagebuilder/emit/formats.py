"""`plan --format graph|github-actions|buildkite|argo|k8s-jobs`: the one graph (`emit.graph`) in an engine's
documents, as the text `plan` prints: JSON for the graph, YAML documents (`---` between them) for the engines,
each engine document that must be a file of its own headed by a comment naming it. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..errors import InputError
from . import argo, buildkite, github, kubejobs
from .graph import Graph

FORMATS = ("graph", "github-actions", "buildkite", "argo", "k8s-jobs")


@dataclass(frozen=True)
class Settings:
    """What an engine's documents need beyond the graph (the CLI's options)."""

    cpu_runner: tuple[str, ...] = ("ubuntu-24.04",)
    gpu_runner: tuple[str, ...] = ("self-hosted", "linux", "x64", "gpu")
    max_jobs: int = github.MAX_JOBS  # GitHub: jobs per workflow run (at most that)
    plan_args: tuple[str, ...] = ()  # the `plan` arguments that made the graph (Buildkite's next part reruns them)
    global_args: tuple[str, ...] = ()  # the global options it was made with: every command of the documents gets them
    tool_image: str | None = None  # the image with imagebuilder that pods run (Argo, Jobs): pinned by digest
    kueue_queue: str | None = None
    digests: Mapping[str, str] = field(default_factory=dict)  # leaf -> staged digest (Jobs)
    base_ids: tuple[str, ...] = ()  # IMAGE=ID of each base image, as the plan resolved them (the verify pods' judges)


def pinned(image: str | None, fmt: str) -> str:
    if not image or "@sha256:" not in image:
        raise InputError(f"--format {fmt} needs --tool-image pinned by digest (REPOSITORY@sha256:...), not "
                         f"{image!r}", hint="the image with imagebuilder and this repository's matrix and layers")
    return image


def documents(fmt: str, graph: Graph, settings: Settings) -> list[tuple[str | None, Any]]:
    """(the file it goes in, or None; the document) for each document of the format."""
    if fmt == "graph":
        return [(None, graph.to_json())]
    if fmt == "github-actions":
        return [*((f".github/workflows/{name}", doc) for name, doc in
                  github.workflows(graph, cpu=settings.cpu_runner, gpu=settings.gpu_runner, size=settings.max_jobs)),
                (github.REPORTS_ACTION, github.reports_action())]
    if fmt == "buildkite":
        return [(None, doc) for doc in buildkite.uploads(graph, settings.plan_args, global_args=settings.global_args)]
    if fmt == "argo":
        return [(None, argo.workflow(graph, image=pinned(settings.tool_image, fmt), base_ids=settings.base_ids,
                                     global_args=settings.global_args))]
    if fmt == "k8s-jobs":
        image = pinned(settings.tool_image, fmt)
        return [(None, doc) for doc in kubejobs.jobs(graph, settings.digests, image=image,
                                                      queue=settings.kueue_queue, base_ids=settings.base_ids,
                                                      global_args=settings.global_args)]
    raise ValueError(fmt)


class _Dumper(yaml.SafeDumper):
    """YAML without anchors and aliases (a value used twice is written twice: some engines' parsers refuse them)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def text(fmt: str, docs: Sequence[tuple[str | None, Any]]) -> str:
    if fmt == "graph":
        return json.dumps(docs[0][1], indent=2) + "\n"
    out = []
    for name, doc in docs:
        head = f"# {name}\n" if name else ""
        out.append(head + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True))
    return "---\n".join(out)
