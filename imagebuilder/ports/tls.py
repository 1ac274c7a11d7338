"""Which certificate authorities a registry's TLS certificate may chain to, and what a TLS failure means.

A registry's certificate is checked against the system's CAs plus, for that registry, the CA files imagebuilder is
given (`--registry-ca`, for every registry) and Docker's own folder for it, `/etc/docker/certs.d/HOST[:PORT]/*.crt`
(the engine reads the same files for its pushes and pulls, so one file serves both). A certificate that does not
chain to one of them is never accepted, not even on loopback: "insecure" (a loopback registry, or one the engine
lists) only lets a registry that does not speak TLS at all be spoken to over plain HTTP.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from requests.adapters import HTTPAdapter

from ..errors import InputError

CERTS_D = Path("/etc/docker/certs.d")


@dataclass(frozen=True)
class RegistryTrust:
    """The CA files every registry's certificate may chain to (`cafiles`), and the folder of per-registry ones."""

    cafiles: tuple[Path, ...] = ()
    certs_d: Path = CERTS_D

    def files(self, host: str) -> list[Path]:
        """The extra CA files for one registry host: the given ones, then its certs.d folder's `*.crt`."""
        folder = self.certs_d / host
        try:
            own = sorted(p for p in folder.glob("*.crt") if p.is_file())
        except OSError:
            own = []
        return [*self.cafiles, *own]



def context(cafiles: Sequence[Path]) -> ssl.SSLContext:
    """A TLS context with the system's CAs (requests adds certifi's) and these extra ones. A file that holds no
    certificate OpenSSL can load (an empty or broken `certs.d/*.crt`) is an input error naming it."""
    out = ssl.create_default_context()
    for path in cafiles:
        try:
            out.load_verify_locations(cafile=str(path))
        except (ssl.SSLError, OSError) as exc:
            raise InputError(f"{path}: not a CA certificate file a registry's TLS can be checked against "
                             f"({getattr(exc, 'strerror', None) or exc})",
                             hint="it must hold PEM certificates (see --registry-ca)") from None
    return out


class ContextAdapter(HTTPAdapter):
    """requests' adapter with a TLS context of our own (the extra CAs are added to the system's, not instead)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **{**kwargs, "ssl_context": self._context})

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:  # (through an HTTPS_PROXY, the same CAs)
        return super().proxy_manager_for(proxy, **{**proxy_kwargs, "ssl_context": self._context})


_UNTRUSTED = re.compile(r"certificate verify failed: (.+?)(?: \(_ssl\.c|'\)|\"\)|$)", re.IGNORECASE)


def untrusted(exc: BaseException) -> str | None:
    """What is wrong with the certificate, when a TLS failure is the certificate's (never retried, never answered
    by falling back to plain HTTP); None when it is something else (a server that does not speak TLS, say).
    requests' error says urllib3's, which says OpenSSL's: `certificate verify failed: <reason> (_ssl.c:N)`."""
    found = _UNTRUSTED.search(str(exc))
    return found.group(1).strip().rstrip(".") if found else None


_PLAIN = re.compile(r"wrong version number|record layer failure|http request|unknown protocol|packet length too long",
                    re.IGNORECASE)


def plain_http(exc: BaseException) -> bool:
    """Whether a TLS failure is a server answering in plain HTTP (OpenSSL's words for the bytes it got instead
    of a handshake); any other TLS failure that is not the certificate's is the network's (retried)."""
    return bool(_PLAIN.search(str(exc)))


def hint(host: str, cafiles: Sequence[Path]) -> str:
    given = f" (given: {', '.join(str(p) for p in cafiles)})" if cafiles else ""
    return (f"give imagebuilder the CA that signed its certificate: --registry-ca FILE or $IMAGEBUILDER_REGISTRY_CA"
            f"{given}, or {CERTS_D / host / 'ca.crt'}, which the Docker engine reads too")
