"""Secrets: which names look like one, which values on this host are one, and where such a value shows up
in an image (history, environment, labels) or in text that is about to be logged. Pure; no I/O.

imagebuilder passes no secrets into builds (docker-py's builder has no secret mounts, so a build value
ends up in the image history). What it knows to be secret: the registry credentials it uses, and the
values of this host's environment variables whose names look like secrets (HF_TOKEN, AWS_SECRET_ACCESS_KEY).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

SECRET_WORDS = frozenset({"TOKEN", "TOKENS", "PASSWORD", "PASSWD", "PASS", "SECRET", "SECRETS", "CREDENTIAL",
                          "CREDENTIALS", "KEY", "APIKEY", "AUTH", "PAT"})
MIN_SECRET = 6  # shorter values ("true", "1") would match everywhere and say nothing


def looks_secret(name: str) -> bool:
    """Whether a variable name reads like a secret: a word of it (split at `_`, `-`, `.` and camelCase) is
    TOKEN, PASSWORD, SECRET, CREDENTIAL, KEY, AUTH, ... (`HF_TOKEN`, `aws_secret_access_key`, `apiKey`)."""
    words = re.split(r"[_.\-]+|(?<=[a-z0-9])(?=[A-Z])", name)
    return any(word.upper() in SECRET_WORDS for word in words if word)


def known_secrets(env: Mapping[str, str], extra: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """name -> value of every secret this run knows: `extra` (registry credentials) and the environment's
    variables whose names look like secrets."""
    found = {name: value for name, value in extra if value and len(value) >= MIN_SECRET}
    for name, value in env.items():
        if looks_secret(name) and len(value) >= MIN_SECRET:
            found.setdefault(f"${name}", value)
    return found


def find_in_image(inspect: Mapping[str, Any], history: Iterable[Mapping[str, Any]],
                  secrets: Mapping[str, str]) -> list[str]:
    """Where each known secret appears in an image: its build history, its environment, its labels.
    Findings name the secret and the place, never the value."""
    places: list[tuple[str, str]] = []
    config = inspect.get("Config") or {}
    places += [(f"environment ({item.split('=', 1)[0]})", item) for item in config.get("Env") or []]
    places += [(f"label {key}", f"{key}={value}") for key, value in (config.get("Labels") or {}).items()]
    places += [(f"history step {i + 1} ({mask(str(step.get('CreatedBy', '')), secrets)[:60].strip()}...)",
                str(step.get("CreatedBy", ""))) for i, step in enumerate(reversed(list(history)))]
    return [f"{name} appears in the image's {where}" for name, value in secrets.items()
            for where, text in places if value in text]


def mask(text: str, secrets: Mapping[str, str]) -> str:
    """The text with every known secret value replaced by `***`."""
    for value in sorted(secrets.values(), key=len, reverse=True):
        text = text.replace(value, "***")
    return text
