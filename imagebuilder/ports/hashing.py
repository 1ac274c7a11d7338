"""A stream read through and hashed as it goes: what a registry's blob or a layer's tar is checked with against
its digest once it has been read to the end (`rest` reads what a reader left, so the whole stream is hashed)."""

from __future__ import annotations

import hashlib
import io
from typing import Any


class Hashing(io.RawIOBase):
    def __init__(self, source: Any) -> None:
        self.source, self.hash = source, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.source.read(len(buffer))
        self.hash.update(data)
        buffer[:len(data)] = data
        return len(data)

    def rest(self) -> str:
        """Read what is left; the digest of the whole stream (`sha256:<hex>`)."""
        while data := self.source.read(1 << 20):
            self.hash.update(data)
        return "sha256:" + self.hash.hexdigest()
