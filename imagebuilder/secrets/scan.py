"""The secret scan of a run's images: where a known secret, a credential-shaped token or a credentials file
shows up in an image: its configuration (environment, labels, history) and the files of its own layers
(`redact.LayerScan`, bounded). Images are scanned as they are built, and cached ones before anything of
theirs is published (they may predate a secret this run knows); an image only in the registry has its
configuration read from there, its layers are not pulled for it. Each image once per run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

from ..errors import EngineError
from . import redact


class Engine(Protocol):
    """What a scan needs of the engine."""

    def inspect(self, ref: str) -> dict[str, Any]: ...

    def image_id(self, ref: str) -> str | None: ...

    def history(self, image: str) -> list[dict[str, Any]]: ...

    def layer_files(self, image: str, top: int) -> Iterator[tuple[str, int, BinaryIO]]: ...


@dataclass(frozen=True)
class Findings:
    found: tuple[str, ...]  # where and what, never a value
    covered: str  # what the scan read, for the report


@dataclass
class Scanner:
    secrets: Mapping[str, str]
    _done: dict[str, Findings] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def image(self, engine: Engine, image: str, parent: str | None = None) -> Findings:
        """An image on the engine. `parent`: the image it was built on (default: its base-digest label); only
        the layers above it are read."""
        with self._lock:
            if image in self._done:
                return self._done[image]
        info = engine.inspect(image)
        found = redact.find_in_image(info, engine.history(image), self.secrets)
        parent = parent or ((info.get("Config") or {}).get("Labels") or {}).get("org.opencontainers.image.base.digest")
        below = engine.inspect(parent) if parent and engine.image_id(parent) else {}
        top = len(_layers(info)) - len(_layers(below))
        files = redact.LayerScan(self.secrets)
        try:
            for path, size, stream in engine.layer_files(image, top):
                files.add(path, size, stream)
        except EngineError as exc:
            found.append(f"its layers could not be scanned ({exc.message})")
        result = Findings(tuple(found + files.findings), files.summary())
        with self._lock:
            self._done[image] = result
        return result

    def config(self, config: Mapping[str, Any]) -> Findings:
        """An image known only by its config document (from the registry)."""
        history = [{"CreatedBy": entry.get("created_by", "")} for entry in reversed(config.get("history") or [])]
        found = redact.find_in_image({"Config": config.get("config") or {}}, history, self.secrets)
        return Findings(tuple(found), "configuration only (the image is only in the registry)")


def _layers(info: Mapping[str, Any]) -> list[str]:
    return list((info.get("RootFS") or {}).get("Layers") or [])
