"""What a pip install resolves to on an index: the exact wheels, asked of uv (`uv pip compile`, which resolves for a
target Python and platform, not the host's, and writes the standard lock of PEP 751, `pylock.toml`: each package's
version and the one wheel chosen, with its URL and sha256). `imagebuilder lock` asks it for each install the lock does
not pin yet (`plan/installs.py`); nothing else runs it.

`Resolver` is the protocol (the unit tests' fake resolves from a table); `UvResolver` is the real one. An index that
does not answer, or requirements no set of wheels satisfies, is `ResolveFailed` with uv's own words.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ResolveFailed(Exception):
    """The requirements could not be resolved (uv's message)."""


@dataclass(frozen=True)
class Resolved:
    """One wheel of a resolution: the distribution's name and version, the file's name, its URL (`file://` for a
    wheelhouse's file) and the sha256 of its bytes (hex)."""

    name: str
    version: str
    file: str
    url: str
    sha256: str


@dataclass(frozen=True)
class Ask:
    """What to resolve: requirements, pins that constrain them, versions to install over their dependencies' own pins
    (`overrides`), for one Python and platform, from one index and an optional wheelhouse folder."""

    requirements: tuple[str, ...]
    index: str
    python: str
    platform: str
    constraints: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    find_links: Path | None = None
    offline: bool = False  # no network: uv's cache, the wheelhouse and a file:// index only


class Resolver(Protocol):
    def resolve(self, ask: Ask) -> tuple[Resolved, ...]: ...


@dataclass(frozen=True)
class UvResolver:
    """`uv pip compile` (the uv of imagebuilder's own environment), binary wheels only, into PEP 751's format."""

    timeout: float = 600.0

    @staticmethod
    def binary() -> str:
        from uv import find_uv_bin

        return str(find_uv_bin())

    def command(self, ask: Ask, folder: Path) -> list[str]:
        def listed(name: str, lines: Sequence[str]) -> Path:
            path = folder / name
            path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
            return path

        cmd = [self.binary(), "pip", "compile", "--quiet", "--no-config", "--no-header", "--format", "pylock.toml",
               "--python-version", ask.python, "--python-platform", ask.platform, "--only-binary", ":all:",
               "--index-url", ask.index, "--output-file", str(folder / "pylock.toml"),
               str(listed("requirements.in", ask.requirements))]
        if ask.constraints:
            cmd += ["--constraint", str(listed("constraints.txt", ask.constraints))]
        if ask.overrides:
            cmd += ["--override", str(listed("overrides.txt", ask.overrides))]
        if ask.find_links is not None:
            cmd += ["--find-links", str(ask.find_links)]
        # Online, every index is asked anew (`--refresh`): an answer from uv's cache could call a moved file current.
        cmd += ["--offline"] if ask.offline else ["--refresh"]
        return cmd

    def resolve(self, ask: Ask) -> tuple[Resolved, ...]:
        with tempfile.TemporaryDirectory(prefix="imagebuilder-resolve-") as tmp:
            folder = Path(tmp)
            env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
            try:
                done = subprocess.run(self.command(ask, folder), capture_output=True, text=True, env=env,
                                      timeout=self.timeout, check=False)
            except subprocess.TimeoutExpired:
                raise ResolveFailed(f"uv took more than {self.timeout:.0f} s") from None
            if done.returncode != 0:
                said = [line for line in done.stderr.splitlines() if line.strip()]
                raise ResolveFailed(" ".join(said[-6:]) or f"uv exited {done.returncode}")
            return wheels_of(tomllib.loads((folder / "pylock.toml").read_text(encoding="utf-8")), ask.python,
                             ask.platform)


def tags(python: str, platform: str) -> dict[Tag, int]:
    """The wheel tags pip accepts for CPython `python` on `platform` (`x86_64-manylinux_2_28`), most preferred first
    (its rank): the manylinux tags from that glibc down to 2.17 and the legacy aliases, then `linux`."""
    arch, _, libc = platform.partition("-")
    major, minor = (int(x) for x in libc.removeprefix("manylinux_").split("_")[:2])
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}  # (PEP 600's aliases, where pip puts them)
    plats = []
    for m in range(minor, 4, -1):
        plats += [f"manylinux_{major}_{m}_{arch}", *([f"{legacy[m]}_{arch}"] if major == 2 and m in legacy else [])]
    plats.append(f"linux_{arch}")
    version = tuple(int(x) for x in python.split(".")[:2])
    ordered = [*cpython_tags(version, platforms=plats), *compatible_tags(version, platforms=plats)]
    return {t: i for i, t in enumerate(dict.fromkeys(ordered))}


def wheels_of(doc: dict[str, Any], python: str = "3.11", platform: str = "x86_64-manylinux_2_28"
              ) -> tuple[Resolved, ...]:
    """The wheels of a PEP 751 lock (`packages[].wheels[]`), one per package: of the wheels uv lists as compatible
    with `platform` (a py3-none-any wheel beside manylinux builds, say), the one pip would install there, by its tag
    priority (`tags`). A package with no wheel (a source distribution alone, a VCS or directory package) is refused,
    naming it."""
    order = tags(python, platform)
    found = []
    for package in doc.get("packages", []):
        wheels = package.get("wheels") or []
        if not wheels:
            raise ResolveFailed(f"{package.get('name')} {package.get('version', '')}: the resolution gives no wheel "
                                "where one wheel for the image's platform was asked")

        def file_of(wheel: dict[str, Any]) -> str:
            url = str(wheel["url"])
            return str(wheel.get("name") or urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1]))

        def rank(wheel: dict[str, Any]) -> int:
            try:
                found_tags = parse_wheel_filename(file_of(wheel))[3]
            except InvalidWheelFilename:
                return len(order)
            return min((order.get(t, len(order)) for t in found_tags), default=len(order))

        wheel = min(wheels, key=rank)
        if rank(wheel) == len(order):
            raise ResolveFailed(f"{package.get('name')} {package.get('version', '')}: no wheel of the resolution is "
                                f"for Python {python} on {platform}")
        found.append(Resolved(str(package["name"]), str(package["version"]), file_of(wheel), str(wheel["url"]),
                              str(wheel["hashes"]["sha256"])))
    return tuple(sorted(found, key=lambda r: r.name))
