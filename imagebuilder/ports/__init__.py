"""The ports: what the steps, the cache, the secret scan and the smoke runner need of the world outside, as
protocols. The real classes (`engine.DockerEngine`, `registry.Registry`, `run.display.Terminal`) satisfy
them; the unit tests' fakes (tests/unit/fakes.py) implement them without subclassing anything."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

LineSink = Callable[[str], None]


@dataclass(frozen=True)
class RunResult:
    exit_code: int | None  # None: killed after the timeout
    logs: str
    files: dict[str, bytes]
    duration: float


class Engine(Protocol):
    """A container engine: images, builds, pushes and pulls, one-shot containers."""

    run_labels: dict[str, str]  # put on every container this engine object creates

    def clone(self) -> Engine: ...

    def image_id(self, ref: str) -> str | None: ...

    def inspect(self, ref: str) -> dict[str, Any]: ...

    def images_with_label(self, label: str, *, every: bool = False) -> list[dict[str, Any]]: ...

    def history(self, image: str) -> list[dict[str, Any]]: ...

    def layer_files(self, image: str, top: int) -> Iterator[tuple[str, int, BinaryIO]]: ...

    def layer_folders(self, image: str) -> list[str] | None: ...

    def insecure_registries(self) -> tuple[str, ...]: ...

    def storage(self) -> tuple[str, int | None]: ...

    def has_nvidia_runtime(self) -> bool: ...

    def build(self, context: bytes, *, network: str, sink: LineSink, nocache: bool = False,
              buildargs: Mapping[str, str] | None = None) -> str: ...

    def pull(self, ref: str, sink: LineSink | None = None, *, auth: tuple[str, str] | None = None) -> str: ...

    def push(self, ref: str, sink: LineSink | None = None, *, auth: tuple[str, str] | None = None) -> str: ...

    def tag(self, image: str, ref: str) -> None: ...

    def remove_image(self, ref: str) -> None: ...

    def run(self, image: str, command: list[str], *, files: Mapping[str, bytes] | None = None,
            fetch: tuple[str, ...] = (), timeout: float = 600, env: Mapping[str, str] | None = None,
            host_config: Mapping[str, Any] | None = None, user: str | None = None,
            sink: LineSink | None = None) -> RunResult: ...

    def close_containers(self) -> int: ...

    def remove_containers(self, label: str) -> int: ...

    def prune_volumes(self, prefix: str) -> int: ...


class Registry(Protocol):
    """One registry host's HTTP API: manifests, blobs, tags, and pointing a tag at a manifest."""

    host: str
    auth: tuple[str, str] | None  # the credentials it was given (never printed)
    on_retry: Callable[[str], None] | None

    def manifest_digest(self, repo: str, reference: str) -> str | None: ...

    def manifest(self, repo: str, reference: str) -> tuple[bytes, str]: ...

    def put_manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> str: ...

    def push_manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> tuple[str, str | None]:
        """`put_manifest`, and the `OCI-Subject` header the registry answered with (None: none)."""

    def referrers(self, repo: str, digest: str) -> dict[str, Any] | None:
        """The referrers API's index for a digest; None where the registry has no referrers API."""

    def deletes_tags(self, repo: str) -> bool: ...

    def tag_lock(self, repo: str, tag: str) -> AbstractContextManager[Any]: ...

    def tags(self, repo: str) -> list[str]: ...

    def copy(self, source_repo: str, digest: str, target_repo: str, tag: str) -> str: ...

    def untag(self, repo: str, tag: str) -> bool: ...

    def blob(self, repo: str, digest: str) -> bytes: ...

    def open_blob(self, repo: str, digest: str) -> AbstractContextManager[BinaryIO]: ...

    def put_blob(self, repo: str, data: bytes) -> str: ...

    def config(self, repo: str, reference: str) -> dict[str, Any] | None: ...

    def labels(self, repo: str, reference: str) -> dict[str, str] | None: ...

    def can_push(self, repo: str) -> str | None:
        """None when these credentials may push to `repo`; else why not (asked before anything is built)."""


class Display(Protocol):
    """What a run shows while it goes: lines of its own, each running step's latest log line, progress."""

    mode: str  # stream: every log line; tail: a progress row per running step; none: nothing

    def say(self, text: str) -> None: ...

    def line(self, activity: str, node_id: str, line: str) -> None: ...

    def start(self, activity: str) -> None: ...

    def stop(self, activity: str) -> None: ...

    def node_done(self, outcome: str) -> None: ...

    def show_log(self, node_id: str, path: str) -> None: ...
