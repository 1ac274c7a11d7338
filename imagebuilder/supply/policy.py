"""The vulnerability gate's rule: which known vulnerabilities of an image's packages block publishing it. Pure.

Each installed package (`Installed`: what it is, where in the image, which layer brought it) is looked up in the
OSV advisories (`osv.Advisories`); each advisory that affects it is a finding. A finding's level is the
advisory's severity, or `Policy.unknown` when the advisory states none: unknown is not safe, so it counts as
`high` unless the matrix says otherwise. A finding at or above `Policy.block` blocks, unless an exception
(`Allowance`) covers it: one that names the advisory (its id or any alias, e.g. the CVE) and, when it lists
packages, the package. An exception is valid through its `expires` day; after that it no longer lets the finding
through, and the finding says which exception expired and when. An exception may not be written to expire more than
`Policy.exception_days` (at most a year) after the day it is read (`too_far`). `block: none` reports findings and
blocks nothing. One advisory found twice on one component is one finding. Data older than `Policy.max_age` days
(its newest record's `modified`) is said, and refused under `require_data` (`stale`). The policy and its exceptions
are what the matrix declares (`declarations/vulnerabilities.py`: `Policy`, `Allowance`, `too_far`); this module
judges by them.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..declarations.vulnerabilities import LEVELS, Allowance, Policy
from . import osv

OUTCOMES = ("blocks", "expired", "allowed", "below")
BLOCKING = ("blocks", "expired")
OSV_EXPORTS = ("https://osv-vulnerabilities.storage.googleapis.com/PyPI/all.zip",
               "https://osv-vulnerabilities.storage.googleapis.com/Debian/all.zip")


@dataclass(frozen=True)
class Installed:
    """A package in an image: what to look up (`query`), which component it is (`ref`, e.g. `pypi jinja2 3.1.4 in
    /opt/venv/lib/python3.11/site-packages`) and the layer that brought it (`task`, `base image debian:bookworm`)."""

    query: osv.Query
    ref: str
    layer: str
    package: str = ""  # the name an exception's `packages:` may give, besides the query's (a deb's binary package)


@dataclass(frozen=True)
class Finding:
    """An advisory that affects an installed package, judged. `level` is the level used (`unknown`'s when the
    advisory states none: then `level_known` is False). `outcome`: `blocks`; `expired` (an exception covers it
    but expired: it blocks); `allowed` (a valid exception covers it); `below` (under the threshold: reported)."""

    id: str
    aliases: tuple[str, ...]
    summary: str
    package: str
    version: str
    ecosystem: str
    ref: str
    layer: str
    level: str
    level_known: bool
    score: float | None
    source: str  # where the severity came from ("CVSS:3.1 7.5"), or why it is unknown
    fixed: tuple[str, ...]
    outcome: str
    allowance: Allowance | None = None
    url: str | None = None

    @property
    def blocking(self) -> bool:
        return self.outcome in BLOCKING

    def rating(self) -> str:
        """`medium 5.4`, `high (GHSA database severity HIGH)`, or `severity unknown, counted as high`."""
        if not self.level_known:
            return f"severity unknown, counted as {self.level}"
        return f"{self.level} {self.score:.1f}" if self.score is not None else f"{self.level} ({self.source})"

    def why(self) -> str:
        """One line: `GHSA-h75v-3vvj-5mfj (CVE-2024-34064, medium 5.4): pypi jinja2 3.1.3 in /opt/venv/...
        (layer task); fixed in 3.1.4`, and what an exception did."""
        cves = [a for a in self.aliases if a.upper().startswith("CVE-")]
        label = ", ".join([*cves, self.rating()])
        what = self.ref or f"{self.package} {self.version}"
        fix = f"fixed in {' or '.join(self.fixed)}" if self.fixed else "no fixed version known"
        line = f"{self.id} ({label}): {what} (layer {self.layer}); {fix}"
        allowance = self.allowance
        if self.outcome == "expired" and allowance is not None:
            line += f"; the exception {allowance.id} expired on {allowance.expires.isoformat()}{allowance.place()}"
        elif self.outcome == "allowed" and allowance is not None:
            line += (f"; allowed by the exception {allowance.id} until {allowance.expires.isoformat()}"
                     f"{allowance.place()}: {allowance.reason}")
        elif self.outcome == "below":
            line += "; below the threshold"
        return line

    def to_json(self) -> dict[str, Any]:
        allowance = self.allowance
        return {"id": self.id, "aliases": list(self.aliases), "summary": self.summary, "package": self.package,
                "version": self.version, "ecosystem": self.ecosystem, "ref": self.ref, "layer": self.layer,
                "level": self.level, "level_known": self.level_known, "score": self.score,
                "severity_source": self.source, "fixed": list(self.fixed), "outcome": self.outcome, "url": self.url,
                "allowance": allowance.to_json() if allowance is not None else None,
                # flat, for reports: the exception that let it through, or expired
                "exception": allowance.id if allowance is not None else None,
                "reason": allowance.reason if allowance is not None else None,
                "expires": allowance.expires.isoformat() if allowance is not None else None,
                "why": self.why()}


@dataclass(frozen=True)
class Verdict:
    """The gate on one image: its findings (blocking first, then the worst, then by id) and the data they come
    from (`data`: the advisories' summary line, or `no vulnerability data`)."""

    findings: tuple[Finding, ...]
    data: str

    @property
    def blocked(self) -> bool:
        return any(f.blocking for f in self.findings)

    @property
    def blocking(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.blocking)

    def counts(self) -> dict[str, int]:
        return {outcome: sum(f.outcome == outcome for f in self.findings) for outcome in OUTCOMES}

    def why(self) -> str:
        """One line: the first blocking finding and how many more block; else what was found."""
        blocking = self.blocking
        if blocking:
            more = len(blocking) - 1
            return blocking[0].why() + (f" (and {more} more blocking finding{'s' if more > 1 else ''})" if more else "")
        if not self.findings:
            return f"no known vulnerability ({self.data})"
        counts = self.counts()
        parts = [f"{n} {'allowed by an exception' if outcome == 'allowed' else 'below the threshold'}"
                 for outcome, n in counts.items() if n]
        return f"nothing blocks: {len(self.findings)} known ({', '.join(parts)}; {self.data})"

    def to_json(self) -> dict[str, Any]:
        return {"blocked": self.blocked, "data": self.data, "counts": self.counts(),
                "findings": [f.to_json() for f in self.findings]}


def _finding(item: Installed, match: osv.Match, policy: Policy, today: datetime.date) -> Finding:
    advisory, severity = match.advisory, match.rated
    level = severity.level if severity.level is not None else policy.unknown
    covering = [a for a in policy.allow if a.covers(advisory.names(), item.query.name, item.package)]
    allowance = max(covering, key=lambda a: a.expires) if covering else None
    if not policy.blocks_at(level):
        outcome = "below"
    elif allowance is None:
        outcome = "blocks"
    else:
        outcome = "allowed" if allowance.valid_on(today) else "expired"
    return Finding(advisory.id, advisory.aliases, advisory.summary, item.query.name, item.query.version,
                   item.query.ecosystem, item.ref, item.layer, level, severity.level is not None, severity.score,
                   severity.source, match.fixed, outcome, allowance, advisory.url)


def _order(finding: Finding) -> tuple[int, int, str, str]:
    return (0 if finding.blocking else 1, -LEVELS.index(finding.level), finding.id, finding.ref)


def judge(installed: Iterable[Installed], advisories: osv.Advisories, policy: Policy,
          today: datetime.date) -> Verdict:
    """The findings on an image's packages, judged by `policy` on `today` (which exceptions still hold)."""
    seen: set[tuple[str, str]] = set()
    findings = []
    for item in installed:
        component = item.ref or f"{item.query.ecosystem} {item.query.name} {item.query.version}"
        for match in advisories.matching(item.query):
            if (match.advisory.id, component) in seen:
                continue
            seen.add((match.advisory.id, component))
            findings.append(_finding(item, match, policy, today))
    return Verdict(tuple(sorted(findings, key=_order)), advisories.summary())


def no_data(policy: Policy, advisories: osv.Advisories) -> str | None:
    """Why the gate refuses to judge: the matrix requires vulnerability data and there is none; else None."""
    if not policy.require_data or advisories.count:
        return None
    return (f"the matrix requires vulnerability data (vulnerabilities.require_data), but it has "
            f"{advisories.summary() if advisories.sources else 'none'}: download OSV's export of each ecosystem "
            f"the images hold ({' and '.join(OSV_EXPORTS)}) and name the files or their folder in "
            "vulnerabilities.data")


def stale(policy: Policy, advisories: osv.Advisories, today: datetime.date) -> str | None:
    """Why the data is too old to judge with: its newest record is older than `policy.max_age` days; None when it is
    fresh enough or there is none (`no_data` says that)."""
    stamp = osv.timestamp(advisories.modified) if advisories.modified else None
    if stamp is None:
        return None
    age = (today - stamp.date()).days
    if age <= policy.max_age:
        return None
    return (f"the vulnerability data is {age} days old (as of {advisories.modified}; vulnerabilities.max_age is "
            f"{policy.max_age}): download OSV's exports again ({' and '.join(OSV_EXPORTS)})")


def installed(document: Mapping[str, Any]) -> tuple[list[Installed], list[str]]:
    """What the gate looks up for each component of a CycloneDX document, and what it cannot check. A Debian
    package is looked up by its source package and version (OSV's Debian records name sources) in the image's
    Debian release; a Python distribution by its name and version, except one Debian installed (its fixes are
    Debian's, under the upstream version: its deb is looked up). Packages of another distribution (an Ubuntu base)
    are not matched against Debian's data: they are named as not checked."""
    out: list[Installed] = []
    others: dict[str, int] = {}
    for component in document.get("components") or []:
        if not isinstance(component, Mapping):
            continue
        props = {str(p.get("name")): str(p.get("value")) for p in component.get("properties") or []
                 if isinstance(p, Mapping)}
        purl = str(component.get("purl") or "")
        name, version = str(component.get("name")), str(component.get("version"))
        layer = props.get("imagebuilder:layer", "?")
        if purl.startswith("pkg:deb/"):
            distro = purl.partition("distro=")[2].split("&", 1)[0]
            namespace = purl[len("pkg:deb/"):].split("/", 1)[0]
            if namespace != "debian":
                others[distro or namespace] = others.get(distro or namespace, 0) + 1
                continue
            release = distro[len("debian-"):] if distro.startswith("debian-") else ""
            source, _, source_version = props.get("imagebuilder:source", f"{name} {version}").partition(" ")
            query = osv.Query(f"{osv.DEBIAN}:{release}" if release else osv.DEBIAN, source,
                              source_version or version)
            ref = f"deb {name} {version}" + (f" (source {source} {source_version})" if source != name else "")
            out.append(Installed(query, ref, layer, name))
        elif purl.startswith("pkg:pypi/") and props.get("imagebuilder:installer") != "debian":
            query = osv.Query(osv.PYPI, name, version)
            out.append(Installed(query, f"pypi {name} {version} in {props.get('imagebuilder:path', '?')}", layer, name))
    unchecked = [f"{n} deb packages of {distro} (no OSV data of that distribution is read)"
                 for distro, n in sorted(others.items())]
    return out, unchecked


def uncovered(looked_up: Sequence[Installed], advisories: osv.Advisories) -> list[str]:
    """The ecosystems the image has packages of and the data has no advisory of (what was not checked)."""
    if not advisories.count:
        return []
    have = {osv.ecosystem_parts(e)[0] for e in advisories.ecosystems}
    need: dict[str, int] = {}
    for item in looked_up:
        base = osv.ecosystem_parts(item.query.ecosystem)[0]
        need[base] = need.get(base, 0) + 1
    return [f"{n} {base} packages (the data has no {base} advisory)" for base, n in sorted(need.items())
            if base not in have]
