"""Which package index gets which credentials.

Index credentials come only from `~/.netrc` (`$NETRC`), by host, or from the environment's pair
(`IMAGEBUILDER_INDEX_USER` / `IMAGEBUILDER_INDEX_PASSWORD`), which goes only to the hosts
`IMAGEBUILDER_INDEX_HOSTS` names (space- or comma-separated; `host` or `host:port`). The public indexes
(PyPI, download.pytorch.org) never get any. A pair without the hosts it is for is an input error when the
matrix names an index host that has no netrc entry: sent to every such host, as it once was, it would reach
any index a matrix (or an include in it) names. Nor do they go over plain HTTP (an `http://` index URL) off
loopback, where anyone on the path reads them, unless `IMAGEBUILDER_INDEX_PLAIN_HTTP_AUTH=1` says so: a matrix that
would need that is an input error before anything builds (`plain_http_problem`). They never enter an image: pip
reaches such an index through the loopback proxy (`run/loopback.py`). Pure but for reading `~/.netrc`.
"""

from __future__ import annotations

import base64
import netrc
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..ports.reference import is_loopback

PLAIN_HTTP_ENV = "IMAGEBUILDER_INDEX_PLAIN_HTTP_AUTH"  # `1`: index credentials may go over plain HTTP off loopback
PUBLIC_INDEXES = frozenset({"pypi.org", "files.pythonhosted.org", "download.pytorch.org"})
USER_ENV, PASSWORD_ENV, HOSTS_ENV = "IMAGEBUILDER_INDEX_USER", "IMAGEBUILDER_INDEX_PASSWORD", "IMAGEBUILDER_INDEX_HOSTS"


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str
    source: str  # where they came from, for messages: never the values

    def header(self) -> str:
        return "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()


def _netrc(host: str, env: Mapping[str, str]) -> Credentials | None:
    path = env.get("NETRC") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".netrc")
    try:
        found = netrc.netrc(path).authenticators(host) if os.path.isfile(path) else None
    except (OSError, netrc.NetrcParseError):
        found = None
    if found is not None and found[2] is not None:
        return Credentials(found[0] or "", found[2], f"netrc ({path})")
    return None


def hosts_for_pair(env: Mapping[str, str]) -> frozenset[str]:
    """The hosts (and host:port) the environment's pair is for."""
    return frozenset(h for h in re.split(r"[\s,]+", env.get(HOSTS_ENV, "")) if h)


def index_credentials(url: str, env: Mapping[str, str]) -> Credentials | None:
    """The credentials for an index URL: `~/.netrc` for its host, else the environment's pair where
    `IMAGEBUILDER_INDEX_HOSTS` names the host; never for a public index."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if not host or url.startswith("file:") or host in PUBLIC_INDEXES:
        return None
    if _in_clear(url, env):
        return None
    return _found(url, env)


def _found(url: str, env: Mapping[str, str]) -> Credentials | None:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    found = _netrc(host, env)
    if found is not None:
        return found
    if env.get(USER_ENV) and env.get(PASSWORD_ENV) and {host, parts.netloc} & hosts_for_pair(env):
        return Credentials(env[USER_ENV], env[PASSWORD_ENV], f"${USER_ENV}/${PASSWORD_ENV}")
    return None


def _in_clear(url: str, env: Mapping[str, str]) -> bool:
    """Whether credentials for `url` would cross a network in clear text: plain HTTP to a host off loopback, and
    the environment does not allow it."""
    parts = urllib.parse.urlsplit(url)
    return parts.scheme == "http" and not is_loopback(parts.netloc) and env.get(PLAIN_HTTP_ENV) != "1"


def plain_http_problem(urls: Iterable[str], env: Mapping[str, str]) -> str | None:
    """Why these index URLs cannot get their credentials: one is `http://` off loopback and has credentials
    (netrc, or the pair for its host), which would go in clear text. None when all is clear."""
    for url in sorted(urls):
        host = urllib.parse.urlsplit(url).hostname or ""
        found = _found(url, env) if host and host not in PUBLIC_INDEXES and _in_clear(url, env) else None
        if found is not None:
            return (f"index {url} is plain HTTP and has credentials ({found.source}): they are not sent in "
                    f"clear text to a host off loopback; use https://, or set {PLAIN_HTTP_ENV}=1 to send them anyway")
    return None


def scope_problem(urls: Iterable[str], env: Mapping[str, str]) -> str | None:
    """Why the environment's pair cannot be used as given: it is set, `IMAGEBUILDER_INDEX_HOSTS` is not, and a
    non-public index host of these URLs has no netrc entry. None when all is clear."""
    if not (env.get(USER_ENV) and env.get(PASSWORD_ENV)) or hosts_for_pair(env):
        return None
    hosts = sorted({host for url in urls if (host := urllib.parse.urlsplit(url).hostname or "")
                    and not url.startswith("file:") and host not in PUBLIC_INDEXES and _netrc(host, env) is None})
    if not hosts:
        return None
    return (f"${USER_ENV}/${PASSWORD_ENV} are set, but ${HOSTS_ENV} does not say which index hosts they are for; "
            f"this matrix names {', '.join(hosts)}: set {HOSTS_ENV}={hosts[0]} (or unset the pair)")
