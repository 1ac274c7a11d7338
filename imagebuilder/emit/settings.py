"""What every engine's emitter is given besides the graph (`Settings`, from `plan`'s options), what it returns
(`Document`s) and the one shape of an emitter (`Emitter`): `emit.formats.ENGINES` is the table of them. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..choices import CPU_RUNNER, GPU_RUNNER, MAX_JOBS
from ..errors import InputError
from .graph import Graph

Document = tuple[str | None, Any]  # (the file it must go in, or None; the document)


@dataclass(frozen=True)
class Settings:
    """What an engine's documents need beyond the graph (the CLI's options)."""

    cpu_runner: tuple[str, ...] = CPU_RUNNER
    gpu_runner: tuple[str, ...] = GPU_RUNNER
    max_jobs: int = MAX_JOBS  # GitHub: jobs per workflow run (at most that)
    plan_args: tuple[str, ...] = ()  # the `plan` arguments that made the graph (Buildkite's next part reruns them)
    global_args: tuple[str, ...] = ()  # the global options it was made with: every command of the documents gets them
    tool_image: str | None = None  # the image with imagebuilder that pods run (Argo, Jobs): pinned by digest
    kueue_queue: str | None = None
    digests: Mapping[str, str] = field(default_factory=dict)  # leaf -> staged digest (Jobs)
    base_ids: tuple[str, ...] = ()  # IMAGE=ID of each base image, as the plan resolved them (the verify pods' judges)
    bases: tuple[str, ...] = ()  # every base image of the plan's roots

    def pinned_tool(self, fmt: str) -> str:
        """The tool image, which must be pinned by digest (an input error naming the format otherwise)."""
        image = self.tool_image
        if not image or "@sha256:" not in image:
            raise InputError(f"--format {fmt} needs --tool-image pinned by digest (REPOSITORY@sha256:...), not "
                             f"{image!r}", hint="the image with imagebuilder and this repository's matrix and layers")
        return image


    def judged_bases(self, fmt: str) -> tuple[str, ...]:
        """`IMAGE=ID` of every base image, for judges with no engine (an input error naming the first missing)."""
        known = {item.rpartition("=")[0] for item in self.base_ids}
        missing = [base for base in self.bases if base not in known]
        if missing:
            raise InputError(f"--format {fmt}: the verify pods' judges have no engine, and the ID of base image "
                             f"{missing[0]!r} is not known here", hint="plan where the engine that stages has the "
                             "base images (DOCKER_HOST), or name each with --base-image-id IMAGE=sha256:ID")
        return self.base_ids


class Emitter(Protocol):
    """One engine: the graph in its documents."""

    def __call__(self, graph: Graph, settings: Settings) -> list[Document]: ...
