"""The strict grammar of every value a matrix or layer file may give: one pattern per kind of value, and
checks for the structured ones (URLs, Debian packages, pip requirements). A value reaches a Dockerfile only
after it matched its grammar here, and then `quoting` still quotes it for where it lands: two locks.

No grammar here admits a newline, a `$`, a backtick, a backslash or a quote, except a pip requirement's
environment marker (`; python_version < "3.12"`), which is always printed quoted. Pure; no I/O.
"""

from __future__ import annotations

import re
import urllib.parse

from ..secrets.redact import query_credential

PATTERNS: dict[str, str] = {
    "torch": r"\d+\.\d+\.\d+",
    "accelerator": r"cpu|cu\d{3}",
    "python": r"3\.\d{1,2}",
    "flavor": r"runtime|devel",
    "name": r"[a-z0-9][a-z0-9._-]{0,63}",
    "layer": r"[a-z0-9][a-z0-9_-]{0,63}",
    "glob": r"[A-Za-z0-9.*?_\[\]-]{1,64}",  # a layer's `when:` value: fnmatch over a version or flavor
    "image": r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?",
    "registry": r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*",
    "repository": r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*",
    # scheme://host[:port]/path[?query]: no user info (see url_problem), no fragment, no shell characters
    "url": r"(?:https?|file)://[A-Za-z0-9._~:/?=&%+,-]+",
    "var": r"[A-Za-z0-9._:/@+=,%-]{0,256}",
    "varname": r"[A-Za-z_][A-Za-z0-9_]{0,63}",
    "envname": r"[A-Za-z_][A-Za-z0-9_]{0,127}",  # a variable of the smoke container's environment (`smoke.env`)
    "check": r"[A-Za-z0-9_.*?\[\]-]{1,128}",  # a smoke check's name, or a glob of names (`smoke.allow_skip`)
    "size": r"\d+[bkmgBKMG]?",
    "int": r"\d{1,7}",
    "network": r"host|bridge|none|default",
    "gpus": r"none|all|auto|cdi|devices",
    "fraction": r"0?\.\d+|1(?:\.0+)?",
    "float": r"\d{1,6}(?:\.\d+)?",
    "abspath": r"/[A-Za-z0-9._/-]*",
    "libversion": r"\d+(?:\.\d+){1,3}",
    "username": r"[a-z_][a-z0-9_-]{0,31}",
    "id": r"[1-9]\d{0,9}",
    "severity": r"none|low|medium|high|critical",
    "layouts": r"both|bundle|att|off",
    "package": r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}",  # a Python distribution's or a Debian package's name
    "date": r"\d{4}-\d{2}-\d{2}",
    "advisory": r"[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9.:]+)+",  # an OSV id or alias: GHSA-..., CVE-2024-1, DSA-5532-1
    # Debian's package name, an optional :arch and an optional =version (apt-get install's own syntax)
    "debian": r"[a-z0-9][a-z0-9+.-]{0,127}(?::[a-z0-9-]{1,32})?(?:=[A-Za-z0-9.+~:-]{1,128})?",
    "label": r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?",  # a Kubernetes label value, a runner label
}

HINTS: dict[str, str] = {
    "torch": "a release version such as 2.6.0",
    "accelerator": "cpu or cuNNN, e.g. cu124",
    "python": "major.minor as a string, e.g. \"3.11\"",
    "flavor": "runtime or devel",
    "registry": "host[:port][/namespace], e.g. 127.0.0.1:5000/ml",
    "repository": "lowercase path components, e.g. pytorch or ml/pytorch",
    "image": "an image reference such as debian:bookworm",
    "layer": "lowercase letters, digits, '-' and '_'",
    "glob": "a value or an fnmatch glob of letters, digits and .*?_-[], e.g. devel or cu13*",
    "name": "lowercase letters, digits, '.', '-' and '_'",
    "url": "an http(s):// or file:// URL of letters, digits and ._~:/?=&%+,- (no user info, no fragment)",
    "var": "letters, digits and ._:/@+=,%- (no spaces or shell characters)",
    "varname": "a letter or _, then letters, digits and _",
    "size": "a number of bytes, optionally with a unit b, k, m or g, e.g. 2g",
    "severity": "none, low, medium, high or critical",
    "layouts": "both, bundle, att or off",
    "package": "a package name such as jinja2 or libssl3",
    "date": "a date as YYYY-MM-DD, e.g. 2027-01-31",
    "advisory": "an advisory id or alias, e.g. GHSA-h75v-3vvj-5mfj or CVE-2024-56326",
    "debian": "a Debian package name, optionally with :arch and =version (e.g. git, libc6:amd64, curl=7.88.1-10)",
    "label": "letters, digits, '.', '-' and '_', at most 63, starting and ending with a letter or digit",
}

# pip requirement strings: PEP 508 (name, extras, specifiers, a marker); a direct URL only over https
_REQUIREMENT_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f$`\\']")


def hint(kind: str) -> str:
    return HINTS.get(kind, f"must match {PATTERNS[kind]}")


def matches(kind: str, text: str) -> bool:
    return re.fullmatch(PATTERNS[kind], text) is not None


def has_user_info(text: str) -> bool:
    """Whether a URL names credentials (`scheme://user[:password]@host`)."""
    rest = text.split("://", 1)[1] if "://" in text else text
    return "@" in re.split(r"[/?#]", rest, maxsplit=1)[0]


def has_credentials(text: str) -> bool:
    """Whether a URL carries credentials: user info, or a query parameter such as `token=` or `sig=`."""
    return has_user_info(text) or query_credential(text) is not None


def mask_url(text: str) -> str:
    """A URL as it may be shown: any user info replaced by `***`, and the query too when it carries one."""
    if query_credential(text) is not None:
        text = text.split("?", 1)[0] + "?***"
    if not has_user_info(text):
        return text
    scheme, sep, rest = text.partition("://")
    cut = re.search(r"[/?#]", rest)
    authority, tail = (rest[:cut.start()], rest[cut.start():]) if cut else (rest, "")
    return f"{scheme}{sep}***@{authority.rsplit('@', 1)[1]}{tail}"


def url_problem(text: str, *, placeholders: tuple[str, ...] = ()) -> str | None:
    """Why a URL is refused, or None. The answer never repeats credentials."""
    if has_user_info(text):
        return (f"{mask_url(text)!r} carries credentials (user info before the host); credentials never go into "
                "a matrix, where they would end in the image's history")
    name = query_credential(text)
    if name is not None:
        return (f"{mask_url(text)!r} carries a credential in its query ({name}=…); credentials never go into a "
                "matrix, where they would end in the image's history")
    plain = text
    for name in placeholders:
        plain = plain.replace("{" + name + "}", "x")
    if not matches("url", plain):
        return f"invalid url {text!r}"
    if urllib.parse.urlsplit(plain).scheme in ("http", "https") and not urllib.parse.urlsplit(plain).hostname:
        return f"url {text!r} names no host"
    return None


def requirement_problem(text: str) -> str | None:
    """Why a pip requirement (a layer's `pip:` item) is refused, or None: it must be one PEP 508 requirement
    (`name[extra]>=1,<2; python_version < "3.13"`), not a pip option (`--index-url ...`), with no quote but
    the marker's double quotes, no `$`, backtick or backslash; a direct URL must be https with no user info."""
    if _REQUIREMENT_FORBIDDEN.search(text):
        return f"pip requirement {text!r} holds a character a shell would read ($, `, \\, ' or a control character)"
    if text.lstrip().startswith("-"):
        return f"{text!r} is a pip option, not a requirement; options come from imagebuilder (build: in the matrix)"
    from packaging.requirements import InvalidRequirement, Requirement  # (here: the CLI's help reads PATTERNS)

    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        shown = mask_url(text) if has_credentials(text.split("@", 1)[-1].strip()) else text
        return f"{shown!r} is not a pip requirement (PEP 508): {str(exc).splitlines()[0]}"
    if req.url is not None:
        if has_credentials(req.url):
            return (f"pip requirement {req.name} @ {mask_url(req.url)!r} carries credentials; they come from the "
                    "environment or ~/.netrc, never a layer file")
        if not req.url.startswith("https://") or url_problem(req.url) is not None:
            return f"pip requirement {req.name}: direct URL {req.url!r} must be an https URL of plain characters"
    return None
