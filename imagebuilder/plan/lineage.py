"""What an image was built on, proven by content: an image is built on another exactly when the other's layers
(its config's `rootfs.diff_ids`, the digests of its uncompressed layer tars) are the first layers of its own. A
config is read by its digest (the image ID), and a registry's blob or the engine's pull is checked against that
digest, so these lists are the images' own. Labels such as `org.opencontainers.image.base.digest` are written by
whoever builds or pushes an image and are at most a hint: nothing here reads them."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import EngineError


def diff_ids(config: Mapping[str, Any] | None) -> tuple[str, ...]:
    """An image config's layer diff_ids, bottom first; empty when it has none (or is not a config)."""
    rootfs = (config or {}).get("rootfs") or {}
    ids = rootfs.get("diff_ids") if isinstance(rootfs, Mapping) else None
    return tuple(str(d) for d in ids) if isinstance(ids, list) else ()


def rooted(below: Sequence[str], above: Sequence[str]) -> bool:
    """Whether an image with layers `above` was built on one with layers `below`: `below` is not empty and is a
    prefix of `above` (equal where a layer added no files)."""
    return bool(below) and len(below) <= len(above) and tuple(above[:len(below)]) == tuple(below)


def blob_configs(blob: Callable[[str], bytes]) -> Callable[[str], Mapping[str, Any] | None]:
    """Configs read as blobs by image ID (a registry repository holds the config blob of every image pushed to
    it; `blob` checks the digest); None where there is none."""
    def config_of(image: str) -> Mapping[str, Any] | None:
        try:
            doc = json.loads(blob(image))
        except (EngineError, KeyError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None
    return config_of
