"""Where a registry's credentials come from, as the Docker client finds them.

`IMAGEBUILDER_REGISTRY_USER` / `IMAGEBUILDER_REGISTRY_PASSWORD` first (CI); else the Docker config
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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import RegistryAccess
from ..ports.reference import DOCKER_HUB

HUB_SERVER = "https://index.docker.io/v1/"  # the name Docker stores Docker Hub's credentials under
IDENTITY_TOKEN_USER = "<token>"  # a helper's user name for an identity token

# argv, stdin -> (exit code, stdout, stderr); OSError when the program is not there
Runner = Callable[[list[str], str], tuple[int, str, str]]


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


def credentials(host: str, env: Mapping[str, str] | None = None, run: Runner = run_helper) \
        -> tuple[str, str] | None:
    """(user, secret) for the registry `host`, or None when nothing is configured for it."""
    env = os.environ if env is None else env
    user, password = env.get("IMAGEBUILDER_REGISTRY_USER"), env.get("IMAGEBUILDER_REGISTRY_PASSWORD")
    if user and password:
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


def from_helper(helper: str, server: str, config: Path, run: Runner) -> tuple[str, str] | None:
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
