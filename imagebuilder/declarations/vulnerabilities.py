"""The vulnerability policy a matrix declares (`vulnerabilities:`), as frozen values: the gate's threshold and the
level assumed for an advisory that states none (`Policy`), and the exceptions (`Allowance`), each valid through its
`expires` day and at most `Policy.exception_days` out (`too_far`). The loader makes them; the gate
(`supply.policy`) judges an image's findings by them. Pure; no I/O.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from packaging.utils import canonicalize_name

from ..errors import InputError, Where, did_you_mean
from . import schema

LEVELS = ("low", "medium", "high", "critical")  # CVSS v3.x qualitative ratings ("none", 0.0, counts as low)
THRESHOLDS = (*LEVELS, "none")  # `block: none`: nothing blocks, findings are reported


def _where(where: str | None) -> Where | None:
    return Where(where) if where else None


@dataclass(frozen=True)
class Allowance:
    """An exception: the advisory `id` (or any of its aliases, e.g. a CVE; any case) does not block until the end
    of `expires`, on `packages` only when some are named. `reason` says why; `where` is where it was written."""

    id: str
    reason: str
    expires: datetime.date
    packages: tuple[str, ...] = ()
    where: str | None = None  # "matrix.yaml:14"

    def __post_init__(self) -> None:
        if not self.id.strip():
            raise InputError("an exception needs the id of the advisory it is for", where=_where(self.where))
        if not self.reason.strip():
            raise InputError(f"the exception for {self.id} needs a reason", where=_where(self.where))
        object.__setattr__(self, "packages", tuple(self.packages))

    def covers(self, names: Iterable[str], *packages: str) -> bool:
        """Whether it is for an advisory known by `names` (id and aliases), found on one of `packages` (a deb's
        source and binary package names, a distribution's name)."""
        wanted = self.id.strip().casefold()
        if not any(name.casefold() == wanted for name in names):
            return False
        return not self.packages or bool({canonicalize_name(p) for p in packages if p} &
                                         {canonicalize_name(p) for p in self.packages})

    def valid_on(self, day: datetime.date) -> bool:
        """`expires` is the last day it is valid."""
        return day <= self.expires

    def place(self) -> str:
        return f" ({self.where})" if self.where else ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "reason": self.reason, "expires": self.expires.isoformat(),
                "packages": list(self.packages), "where": self.where}


@dataclass(frozen=True)
class Policy:
    """`block`: the lowest level that blocks (`none`: nothing does); `unknown`: the level assumed for an advisory
    that states no severity (unknown is not safe: `high` by default); `allow`: the exceptions; `require_data`:
    refuse to judge without vulnerability data (`no_data`)."""

    block: str = schema.value("vulnerabilities.block")
    unknown: str = schema.value("vulnerabilities.unknown")
    allow: tuple[Allowance, ...] = ()
    require_data: bool = schema.value("vulnerabilities.require_data")
    max_age: int = schema.value("vulnerabilities.max_age")  # days the data may be old (`stale`)
    exception_days: int = schema.value("vulnerabilities.exception_days")  # how far out an exception may expire

    def __post_init__(self) -> None:
        for key, value, allowed in (("block", self.block, THRESHOLDS), ("unknown", self.unknown, LEVELS)):
            if value.strip().lower() not in allowed:
                raise InputError(f"vulnerabilities.{key}: {value!r} is not one of {', '.join(allowed)}",
                                 hint=did_you_mean(value.strip().lower(), allowed))
            object.__setattr__(self, key, value.strip().lower())
        object.__setattr__(self, "allow", tuple(self.allow))
        for key, days in (("max_age", self.max_age), ("exception_days", self.exception_days)):
            low, high = schema.bounds(f"vulnerabilities.{key}")
            if (low is not None and days < low) or (high is not None and days > high):
                raise InputError(f"vulnerabilities.{key}: {days} is outside [{low:g}, {high:g}] (days)")

    def to_json(self) -> dict[str, Any]:
        return {"block": self.block, "unknown": self.unknown, "require_data": self.require_data,
                "max_age": self.max_age, "exception_days": self.exception_days,
                "allow": [a.to_json() for a in self.allow]}

    def blocks_at(self, level: str) -> bool:
        """Whether a finding of `level` is at or above the threshold."""
        return self.block != "none" and LEVELS.index(level) >= LEVELS.index(self.block)


def too_far(allowance: Allowance, days: int, today: datetime.date) -> str | None:
    """Why an exception's `expires` is too far out: more than `days` after `today` (the day the matrix is read)."""
    last = today + datetime.timedelta(days=days)
    if allowance.expires <= last:
        return None
    return (f"the exception for {allowance.id} expires {allowance.expires.isoformat()}, more than {days} days out "
            f"(vulnerabilities.exception_days): at most {last.isoformat()}; renew it when it runs out")
