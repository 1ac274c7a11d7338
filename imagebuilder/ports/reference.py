"""Image references, parsed once: `[host[:port]/]path[:tag][@digest]`, the way the engine reads them."""

from __future__ import annotations

import ipaddress
import urllib.parse
from dataclasses import dataclass

DOCKER_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io")


def is_loopback(host: str) -> bool:
    """Whether a host (`name`, `name:port`, `[v6]:port`) is this machine's: `localhost` or a loopback address
    (a name that merely starts with `127.` is not)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback  # an address alone (IPv6 bracketed or not)
    except ValueError:
        pass
    name = urllib.parse.urlsplit(f"//{host}").hostname or ""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Reference:
    name: str  # as written, without tag or digest: what the engine calls the repository
    host: str  # the registry ("docker.io" for Docker Hub's names)
    repository: str  # the path inside the registry ("library/debian" for Hub's official images)
    tag: str | None = None
    digest: str | None = None

    @property
    def reference(self) -> str:
        """What a manifest request names: the digest, else the tag (`latest` when none is written)."""
        return self.digest or self.tag or "latest"

    def at(self, digest: str) -> str:
        """This repository's image `digest`: exactly that manifest, whatever the tag names now."""
        return f"{self.name}@{digest}"

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def parse(ref: str) -> Reference:
    """A first component without a dot, a colon or `localhost` is Docker Hub's namespace, as the engine reads it."""
    name, _, digest = ref.partition("@")
    tag = None
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, repository = first, rest
    else:
        host, repository = "docker.io", name if "/" in name else f"library/{name}"
    return Reference(name, host, repository, tag, digest or None)


def split_reference(ref: str) -> tuple[str, str, str]:
    """(host, repository, tag or digest): the three parts a registry request needs."""
    parsed = parse(ref)
    return parsed.host, parsed.repository, parsed.reference
