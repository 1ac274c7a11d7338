"""What an image was built on, as the images themselves say: every build writes the image ID of its parent into
the `org.opencontainers.image.base.digest` label, so the chain below a tested leaf is read from the leaf's
config, then its parent's, and so on. Keys say what should have been built on what; only this says what was."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import EngineError

BASE_LABEL = "org.opencontainers.image.base.digest"


def built_on(config_of: Callable[[str], Mapping[str, Any] | None], image: str, depth: int) -> list[str]:
    """The image IDs `image` was built on, nearest first, up to `depth` of them; shorter where a config cannot be
    read or names no base."""
    chain: list[str] = []
    current = image
    while len(chain) < depth:
        config = config_of(current)
        labels = ((config or {}).get("config") or {}).get("Labels") or {}
        parent = labels.get(BASE_LABEL)
        if not isinstance(parent, str) or not parent.startswith("sha256:"):
            break
        chain.append(parent)
        current = parent
    return chain


def blob_configs(blob: Callable[[str], bytes]) -> Callable[[str], Mapping[str, Any] | None]:
    """Configs read as blobs by image ID (a registry repository holds the config blob of every image pushed to
    it); None where there is none."""
    def config_of(image: str) -> Mapping[str, Any] | None:
        try:
            doc = json.loads(blob(image))
        except (EngineError, KeyError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None
    return config_of
