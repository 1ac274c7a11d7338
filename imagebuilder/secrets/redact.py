"""Secrets: which names look like one, which values on this host are one, and where such a value shows up
in an image (history, environment, labels) or in text that is about to be logged. Pure; no I/O.

imagebuilder passes no secrets into builds (docker-py's builder has no secret mounts, so a build value
ends up in the image history). What it knows to be secret: the registry credentials it uses, and the
values of this host's environment variables whose names look like secrets (HF_TOKEN, AWS_SECRET_ACCESS_KEY).
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Collection, Iterable, Mapping
from typing import Any, BinaryIO

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
    places += [(f"history step {i + 1} ({mask(str(entry.get('CreatedBy', '')), secrets)[:60].strip()}...)",
                str(entry.get("CreatedBy", ""))) for i, entry in enumerate(reversed(list(history)))]
    found = [f"{name} appears in the image's {where}" for name, value in secrets.items()
             for where, text in places if value in text]
    return found + [f"the image's {where.split(' (', 1)[0]} holds {what}" for where, text in places  # (no excerpt)
                    for what in shapes_in(text.encode(), CONFIG_PATTERNS)]


def mask(text: str, secrets: Mapping[str, str]) -> str:
    """The text with every known secret value replaced by `***`."""
    for value in sorted(secrets.values(), key=len, reverse=True):
        text = text.replace(value, "***")
    return text


# Docker's predefined build args: given to RUN steps' environment without an ARG line, and kept out of the
# image's history and of the build cache's key, unless the Dockerfile declares them (then they are in both).
PREDEFINED_ARGS = frozenset({"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "FTP_PROXY", "ftp_proxy",
                             "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"})


def find_in_build_args(args: Mapping[str, str], secrets: Mapping[str, str], declared: Collection[str]) -> list[str]:
    """Build args end in the image's history, but for Docker's predefined proxy args the text does not declare
    (`declared`: the names its ARG lines give): none of the others may carry a known secret, a token or a URL's
    password."""
    found = []
    kept_out = PREDEFINED_ARGS - set(declared)
    for name, value in sorted(args.items()):
        if name in kept_out:
            continue
        found += [f"{secret} appears in build arg {name}" for secret, known in secrets.items() if known in value]
        found += [f"build arg {name} holds {what}" for what in tokens_in(value.encode())]
        if looks_secret(name):
            found.append(f"build arg {name} is named like a secret")
    return found


# A URL query parameter that carries a credential: `token`, `accessToken`, `api_key`, `sig` (Azure SAS),
# `X-Amz-Signature`, `X-Goog-Credential`, `password`, ...: a strong word anywhere in the name, or a short
# one as the whole name or its last `_`/`-`/`.` word.
QUERY_SECRET = (r"(?:[A-Za-z0-9_.-]*(?:token|secret|passw|pwd|signature|credential|api_?key)[A-Za-z0-9_.-]*"
                r"|(?:[A-Za-z0-9_.-]*[_.-])?(?:key|sig|auth)s?)")


def query_credential(url: str) -> str | None:
    """The name of the first query parameter of `url` that carries a credential (with a value), or None."""
    query = url.partition("?")[2].partition("#")[0]
    for item in query.split("&"):
        name, _, value = item.partition("=")
        name = urllib.parse.unquote_plus(name).strip()
        if value and re.fullmatch(QUERY_SECRET, name, re.IGNORECASE):
            return name
    return None


# Credentials with a shape of their own: what a layer's files must never hold, whoever put them there. Each
# pattern has a literal that every match contains, checked first (a fast substring search) before the regex.
TOKEN_PATTERNS: tuple[tuple[str, tuple[bytes, ...], bytes], ...] = (
    ("a GitHub token", (b"gh", b"github_pat_"), rb"\bgh[pousr]_[A-Za-z0-9]{36,255}\b|\bgithub_pat_[A-Za-z0-9_]{60,}"),
    ("a Hugging Face token", (b"hf_",), rb"\bhf_[A-Za-z]{34,}\b"),
    ("an AWS access key id", (b"AKIA", b"ASIA"), rb"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("a Slack token", (b"xox",), rb"\bxox[abprs]-[0-9]{8,}-[A-Za-z0-9-]{8,}"),
    ("a PyPI upload token", (b"pypi-AgEI",), rb"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}"),
    ("a private key", (b"PRIVATE KEY-----",),
     rb"-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED )?PRIVATE KEY-----\r?\n[A-Za-z0-9+/=]{40}"),
    ("a URL with a password", (b"://",), rb"\b(?:https?|ftp)://[A-Za-z0-9._~%!$&()*+,;=-]+:"
                                          rb"(?!(?:pass|password|passwd|pwd|secret|xxx+)@)"
                                          rb"[A-Za-z0-9._~%!$&()*+,;=-]{3,}@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"),
)
# Looked for in an image's configuration (history, environment, labels) only: package documentation in a layer's
# files is full of example URLs such as `https://huggingface.co/...?token=...`.
CONFIG_PATTERNS = (
    ("a URL with a credential in its query", (b"://",), rb"(?i)\b(?:https?|ftp)://[^\s'\"<>?]*\?(?:[^\s'\"<>#]*&)?"
                                                       + QUERY_SECRET.encode() + rb"=[^&\s'\"<>#]{6,}"),
    *(pattern for pattern in TOKEN_PATTERNS if pattern[0] == "a URL with a password"),
)
# Variables whose value is a credential, set in a file (an .env, a profile, /etc/environment).
SECRET_VARIABLES = (b"HF_TOKEN", b"HUGGING_FACE_HUB_TOKEN", b"GITHUB_TOKEN", b"GH_TOKEN", b"AWS_SECRET_ACCESS_KEY",
                    b"AWS_SESSION_TOKEN", b"PIP_INDEX_URL", b"PIP_EXTRA_INDEX_URL", b"IMAGEBUILDER_INDEX_PASSWORD",
                    b"IMAGEBUILDER_REGISTRY_PASSWORD", b"WANDB_API_KEY", b"OPENAI_API_KEY", b"NPM_TOKEN",
                    b"TWINE_PASSWORD")
SECRET_ASSIGNMENT = rb"(?m)^\s*(?:export\s+)?(" + b"|".join(SECRET_VARIABLES) + rb")\s*=\s*['\"]?[^\s'\"]{8,}"
# Files whose presence in an image is itself a leak when they hold credentials.
CREDENTIAL_FILES = (".netrc", ".pypirc", ".git-credentials", ".docker/config.json", "pip/pip.conf", "pip.conf",
                    ".npmrc", ".aws/credentials", ".huggingface/token", ".cache/huggingface/token")
# Where installed packages keep their code and documentation: searched for the run's known secrets, not for
# credential shapes (their docs are full of `https://user:pass@example.com`), except the metadata pip writes
# there (a direct URL's credentials would end in `*.dist-info/direct_url.json`).
PACKAGE_TREES = re.compile(r"/(?:site|dist)-packages/(?![^/]+\.(?:dist|egg)-info/)|^/usr/share/(?:doc|man)/"
                           r"|^/usr/lib/python3[^/]*/")


def shapes_in(data: bytes, patterns: Iterable[tuple[str, tuple[bytes, ...], bytes]]) -> list[str]:
    """Which of these credential shapes the data holds (their names, no values): each pattern's literal hints
    first, a fast substring search, then its regex."""
    return [what for what, hints, pattern in patterns if any(h in data for h in hints) and re.search(pattern, data)]


def tokens_in(data: bytes) -> list[str]:
    """Which kinds of credential-shaped text a file holds (no values)."""
    found = shapes_in(data, TOKEN_PATTERNS)
    if any(name in data for name in SECRET_VARIABLES):
        match = re.search(SECRET_ASSIGNMENT, data)
        if match:
            found.append(f"a value for ${match.group(1).decode()}")
    return found


@dataclasses.dataclass
class LayerScan:
    """A bounded scan of the files a node's own layers add: every byte of each file (up to `max_bytes` in
    all) for the run's known secrets; text files up to `max_text` bytes for credential shapes and secret
    assignments; credential files by name. Findings name the file and what is there, never a value."""

    secrets: Mapping[str, str]
    max_bytes: int = 8 << 30
    max_text: int = 1 << 20
    files: int = 0
    scanned: int = 0
    skipped: int = 0
    findings: list[str] = dataclasses.field(default_factory=list)

    def add(self, path: str, size: int, stream: BinaryIO) -> None:
        """One file of the layer, read in chunks (a needle across two chunks is still found); not read at all
        when nothing is to be looked for in it (no known secret, and not a text file for the shapes)."""
        self.files += 1
        shapes = size <= self.max_text and not PACKAGE_TREES.search(path)
        if not (self.secrets or shapes):
            return
        if self.scanned + size > self.max_bytes:
            self.skipped += 1
            return
        needles = {name: value.encode() for name, value in self.secrets.items()}
        overlap = max((len(v) for v in needles.values()), default=1) - 1
        head, tail = b"", b""
        seen: set[str] = set()
        while chunk := stream.read(8 << 20):
            window = tail + chunk
            seen.update(name for name, value in needles.items() if value in window)
            if shapes:
                head += chunk
            tail = window[-overlap:] if overlap else b""
            self.scanned += len(chunk)
        self.findings += [f"{name} appears in the file {path}" for name in sorted(seen)]
        if not shapes or b"\0" in head[:8192]:
            return
        what = tokens_in(head)
        if not what and path.rstrip("/").endswith(CREDENTIAL_FILES) \
                and re.search(rb"(?i)password|passwd|token|_auth|secret", head):
            what = ["credentials"]
        self.findings += [f"the file {path} holds {w}" for w in what]

    def summary(self) -> str:
        extra = f", {self.skipped} over the scan's {self.max_bytes >> 30} GiB bound not read" if self.skipped else ""
        return f"{self.files} files, {self.scanned / 2**20:.0f} MiB scanned{extra}"
