"""Where a registry's credentials come from, as the Docker client finds them, and which hosts may get them.

`IMAGEBUILDER_REGISTRY_USER` / `IMAGEBUILDER_REGISTRY_PASSWORD` first (CI), for the hosts they are for only: those
`IMAGEBUILDER_REGISTRY_HOSTS` names (space- or comma-separated; `host` (any port) or `host:port`), else the matrix's
own `registry:` host (`scope`; none where a command reads no matrix). A registry elsewhere (an include's, a
`promote --from`'s) gets the Docker config's credentials for it, never the pair. Else the Docker config
(`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`): the credential helper it names for the registry
(`credHelpers`), else its credential store (`credsStore`), else the registry's `auths` entry. A helper is the
program `docker-credential-<name>` (a desktop keychain, `pass`, ECR's or GCR's helper: whatever `docker login` or
the cloud's CLI set up), asked with `get` and the registry's name on stdin; it answers a user and a secret. A
helper that has nothing for the registry means no credentials; one that cannot run, fails otherwise, or answers
an identity token (an OAuth2 refresh token, which imagebuilder does not exchange) is a `RegistryAccess` error
naming the helper, never the secret.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import RegistryAccess
from .reference import DOCKER_HUB

USER_ENV, PASSWORD_ENV, HOSTS_ENV = "IMAGEBUILDER_REGISTRY_USER", "IMAGEBUILDER_REGISTRY_PASSWORD", \
    "IMAGEBUILDER_REGISTRY_HOSTS"
PLAIN_HTTP_ENV = "IMAGEBUILDER_REGISTRY_PLAIN_HTTP_AUTH"  # `1`: credentials may go over plain HTTP off loopback
HUB_AUTH = "auth.docker.io"  # Docker Hub's token service: a host of Docker Hub's own
HUB_SERVER = "https://index.docker.io/v1/"  # the name Docker stores Docker Hub's credentials under
IDENTITY_TOKEN_USER = "<token>"  # a helper's user name for an identity token

# argv, stdin -> (exit code, stdout, stderr); OSError when the program is not there
HelperRun = Callable[[list[str], str], tuple[int, str, str]]


def run_helper(argv: list[str], stdin: str) -> tuple[int, str, str]:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, done.stdout, done.stderr


def docker_config(env: Mapping[str, str]) -> tuple[Path, dict[str, Any]]:
    """The Docker client config (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`) and where it is; an
    empty one when there is none or it does not read as a JSON object."""
    path = Path(env.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return path, {}
    return path, config if isinstance(config, dict) else {}


def pair_hosts(env: Mapping[str, str], scope: Iterable[str] = ()) -> frozenset[str]:
    """The hosts the environment's pair is for: `IMAGEBUILDER_REGISTRY_HOSTS`, else `scope` (the matrix's registry)."""
    listed = frozenset(h for h in re.split(r"[\s,]+", env.get(HOSTS_ENV, "")) if h)
    return listed or frozenset(h for h in scope if h)


def _name(host: str) -> str:
    return (urllib.parse.urlsplit(f"//{host}").hostname or host).lower()


def _port(host: str) -> int | None:
    try:
        return urllib.parse.urlsplit(f"//{host}").port
    except ValueError:
        return None


def listed(host: str, hosts: Iterable[str]) -> bool:
    """Whether `host` (`name`, `name:port`) is one of `hosts`: the same `name:port`, or its name given without a
    port; Docker Hub's names are one registry, its token service included."""
    names = {h.lower() for h in hosts}
    if names & set(DOCKER_HUB):
        names |= {*DOCKER_HUB, HUB_AUTH}
    return any(h == host.lower() or (_port(h) is None and _name(h) == _name(host)) for h in names)


def realm_allowed(registry: str, realm: str, hosts: Iterable[str]) -> bool:
    """Whether a token service at `realm` (its `host[:port]`) may get the credentials of the registry `registry`: it
    is on the registry's own host name (any port), or is Docker Hub's for Docker Hub, or `hosts` (`pair_hosts`)
    names it."""
    return _name(realm) == _name(registry) or (registry in DOCKER_HUB and _name(realm) == HUB_AUTH) \
        or listed(realm, hosts)


def plain_http_allowed(env: Mapping[str, str]) -> bool:
    """Whether credentials may go over plain HTTP to a registry off loopback (`$IMAGEBUILDER_REGISTRY_PLAIN_HTTP_AUTH`
    is 1, true or yes)."""
    return env.get(PLAIN_HTTP_ENV, "").strip().lower() in ("1", "true", "yes")


def credentials(host: str, env: Mapping[str, str] | None = None, run: HelperRun = run_helper,
                scope: Iterable[str] = ()) -> tuple[str, str] | None:
    """(user, secret) for the registry `host`, or None when nothing is configured for it. The environment's pair
    only where it is for this host (`pair_hosts`)."""
    env = os.environ if env is None else env
    user, password = env.get(USER_ENV), env.get(PASSWORD_ENV)
    if user and password and listed(host, pair_hosts(env, scope)):
        return user, password
    path, config = docker_config(env)
    names = (*DOCKER_HUB, HUB_SERVER) if host in DOCKER_HUB else (host,)
    helpers = config.get("credHelpers") or {}
    helper = next((str(helpers[n]) for n in names if isinstance(helpers, dict) and helpers.get(n)), None)
    if helper is None and config.get("credsStore"):
        helper = str(config["credsStore"])
    if helper is not None:
        return from_helper(helper, HUB_SERVER if host in DOCKER_HUB else host, path, run)
    auths = config.get("auths") or {}
    for key, value in auths.items() if isinstance(auths, dict) else ():
        bare = re.sub(r"^https?://", "", key).rstrip("/")
        if (key in names or bare in names) and isinstance(value, dict) and value.get("auth"):
            user, _, password = base64.b64decode(value["auth"]).decode().partition(":")
            return user, password
    return None


def from_helper(helper: str, server: str, config: Path, run: HelperRun) -> tuple[str, str] | None:
    """What `docker-credential-<helper> get` has for `server`."""
    program = f"docker-credential-{helper}"
    said = f"{config} names the credential helper {helper!r} for {server}"
    try:
        code, out, err = run([program, "get"], server)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RegistryAccess(f"{said}, and {program} could not be run ({type(exc).__name__})",
                             hint=f"install {program}, or set IMAGEBUILDER_REGISTRY_USER and "
                             "IMAGEBUILDER_REGISTRY_PASSWORD") from None
    if code != 0:
        if "credentials not found" in (out + err).lower():
            return None
        raise RegistryAccess(f"{said}, and `{program} get` failed (exit {code}: {err.strip()[:200]})")
    try:
        answer = json.loads(out)
        user, secret = str(answer["Username"]), str(answer["Secret"])
    except (ValueError, KeyError, TypeError):
        raise RegistryAccess(f"{said}, and `{program} get` did not answer a user and a secret") from None
    if user == IDENTITY_TOKEN_USER:
        raise RegistryAccess(f"{said}, and it holds an identity token (OAuth2), which imagebuilder does not exchange",
                             hint="give a user and password or access token: IMAGEBUILDER_REGISTRY_USER and "
                             "IMAGEBUILDER_REGISTRY_PASSWORD")
    return (user, secret) if secret else None
