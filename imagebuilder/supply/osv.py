"""Vulnerability data in OSV's format (https://ossf.github.io/osv-schema/), and the packages it says are affected.

Data: `Advisories.load(path)` reads a `.json` file (one record, or a JSON list of them), a `.zip` file (OSV's
per-ecosystem export, e.g. https://osv-vulnerabilities.storage.googleapis.com/PyPI/all.zip: one record per
`.json` member) or a folder (every `*.json` and `*.zip` under it). A file that is not JSON, or JSON that is not an
OSV record (no `id`, or neither `affected` nor `modified`), is an `InputError` naming the file (and the zip
member). A withdrawn record is left out and counted. When one id comes twice (a record in two exports), the one
modified last is kept. Records are indexed by (ecosystem, package name) as they load, so a lookup reads only the
records of that package: PyPI's whole export (about 15,000 records) loads in seconds.

Ecosystems: `PyPI` (names compared as PEP 503 normalizes them, `Jinja2` = `jinja2`, `zope.interface` =
`zope-interface`; versions ordered by PEP 440) and `Debian` with its release, as OSV writes it: `Debian:12`.
Debian's records name SOURCE packages: ask with the source package's name and version (`glibc`, not `libc6`;
dpkg's `Source:` field, and its version when it gives one in parentheses). Versions are ordered as dpkg orders
them (epochs, tildes). A query for `Debian:12` reads the records for `Debian:12` and those for plain `Debian`; a
query for plain `Debian` reads every release's. Another ecosystem is looked up by its name as written, and only a
record's explicit `versions` list can match it (there is no order to evaluate ranges with).

Matching follows the schema's evaluation: an `affected` entry of the package affects a version in its `versions`
list, or inside one of its `ECOSYSTEM` or `SEMVER` ranges (`GIT` ranges are not read). A range's events are
ordered by version: `introduced` (`0`: from the first version) starts an affected span, `fixed` and `limit` end it
before the version they name, `last_affected` ends it after; a span with no end goes on forever. A PyPI version
with a local label (`2.6.0+cu124`, `2.13.0+cpu`: PyTorch's own builds) is compared by its public version
(`2.6.0`) against advisory versions that carry none: the label names a build of that release, not a later one. A
match says which fixed versions apply: the `fixed` event that ends the span the version is in. What cannot be
evaluated is never taken for "not affected": an installed version that does not parse against an entry with
ranges, and a range with an event version that does not parse, are `unchecked` (named with the advisory).

Severity, first found: the record's `severity` vectors (CVSS v4, then v3, then v2; the base score computed from
the vector), the `severity` vectors of the matching `affected` entries, the record's `database_specific.severity`
(GitHub's LOW/MODERATE/HIGH/CRITICAL), then Debian's `urgency` in `ecosystem_specific`. A score maps to CVSS
v3.x's qualitative ratings (0.1-3.9 low, 4.0-6.9 medium, 7.0-8.9 high, 9.0-10.0 critical; 0.0 counts as low). A
vector that does not parse is passed over for the next source; no source gives level None (unknown). Pure apart
from reading the files it is given.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion
from packaging.version import Version as PyPIVersion

from ..declarations.vulnerabilities import LEVELS
from ..errors import InputError, Where

PYPI, DEBIAN = "PyPI", "Debian"
RANGE_TYPES = ("ECOSYSTEM", "SEMVER")  # ranges evaluated with the ecosystem's order; GIT ranges are not read
VECTOR_TYPES = ("CVSS_V4", "CVSS_V3", "CVSS_V2")  # the order a record's vectors are read in
EXPORT_HINT = ("OSV's export of an ecosystem is https://osv-vulnerabilities.storage.googleapis.com/<ecosystem>/all.zip "
               "(PyPI, Debian); a .json file holds one OSV record or a list of them")
_GITHUB_LEVELS = {"low": "low", "moderate": "medium", "medium": "medium", "high": "high", "critical": "critical"}
_DEBIAN_URGENCY = {"low": "low", "medium": "medium", "high": "high", "unimportant": "low"}  # else unknown
_BASES = {"pypi": PYPI, "debian": DEBIAN}
_NANOS = re.compile(r"(\.\d{6})\d+")  # osv.dev writes nanoseconds; datetime reads up to microseconds
_CVSS_ERRORS = (ValueError, TypeError, KeyError, IndexError, ArithmeticError, AttributeError)  # (+ CVSSError)


# -- ecosystems: names and version order (the one place that knows them) ---------------------------------------------

class Ordered(Protocol):
    """A parsed version: ordered against other versions of its ecosystem."""

    def __lt__(self, other: Any, /) -> bool: ...


def ecosystem_parts(ecosystem: str) -> tuple[str, str | None]:
    """`Debian:12` -> (`Debian`, `12`); `PyPI` -> (`PyPI`, None). Known names are spelled as OSV spells them."""
    base, sep, release = ecosystem.strip().partition(":")
    base = _BASES.get(base.strip().lower(), base.strip())
    return base, (release.strip() or None) if sep else None


def normalize_name(ecosystem: str, name: str) -> str:
    """A package's name as the ecosystem compares names: PEP 503 for PyPI, lower case for Debian."""
    base, _ = ecosystem_parts(ecosystem)
    if base == PYPI:
        return canonicalize_name(name)
    if base == DEBIAN:
        return name.strip().lower()
    return name.strip()


def version_key(ecosystem: str, version: str) -> Ordered | None:
    """`version` parsed for ordering in `ecosystem` (PEP 440 for PyPI, dpkg's order for Debian), or None when it
    cannot be parsed or the ecosystem has no order here."""
    return _version_key(ecosystem_parts(ecosystem)[0], version.strip())


@functools.lru_cache(maxsize=65536)
def _version_key(base: str, version: str) -> Ordered | None:
    try:
        if base == PYPI:
            return PyPIVersion(version)
        if base == DEBIAN:
            from debian.debian_support import Version as DebianVersion  # (imported when a deb is compared)

            return DebianVersion(version)
    except (InvalidVersion, ValueError):
        return None
    return None


def _same_version(base: str, a: str, b: str) -> bool:
    if a.strip() == b.strip():
        return True
    key_a, key_b = _version_key(base, a.strip()), _version_key(base, b.strip())
    return key_a is not None and key_b is not None and not key_a < key_b and not key_b < key_a


def public_version(base: str, version: str) -> str:
    """A PyPI version without its local label (`2.6.0+cu124` -> `2.6.0`); any other version as it is."""
    key = _version_key(base, version.strip())
    return key.public if base == PYPI and isinstance(key, PyPIVersion) else version.strip()


def _local(raw: str) -> bool:
    return "+" in raw


# -- severities ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Severity:
    """How bad an advisory says it is: `level` is one of `LEVELS`, or None when no source states one."""

    level: str | None
    score: float | None
    source: str  # where it came from: "CVSS:3.1 7.5", "GHSA database severity HIGH", "Debian urgency low"

    @property
    def known(self) -> bool:
        return self.level is not None


UNKNOWN = Severity(None, None, "no severity stated")


def level_of(score: float) -> str:
    """CVSS v3.x's qualitative rating of a base score; 0.0 ("none") counts as low."""
    return "low" if score < 4.0 else "medium" if score < 7.0 else "high" if score < 9.0 else "critical"


def cvss_severity(kind: str, vector: str) -> Severity | None:
    """The base score of a CVSS vector (`kind` is OSV's CVSS_V4, CVSS_V3 or CVSS_V2), or None if it does not parse."""
    from cvss import CVSS2, CVSS3, CVSS4  # type: ignore[import-untyped, unused-ignore]  # (when a vector is read)
    from cvss.exceptions import CVSSError  # type: ignore[import-untyped, unused-ignore]

    vector = vector.strip()
    try:
        if kind == "CVSS_V4":
            score, label = float(CVSS4(vector).base_score), "CVSS:4.0"
        elif kind == "CVSS_V3":
            score, label = float(CVSS3(vector).scores()[0]), vector.split("/", 1)[0]
        elif kind == "CVSS_V2":
            score, label = float(CVSS2(vector.removeprefix("CVSS:2.0/")).scores()[0]), "CVSS:2.0"
        else:
            return None
    except (CVSSError, *_CVSS_ERRORS):
        return None
    if not 0.0 <= score <= 10.0:
        return None
    return Severity(level_of(score), score, f"{label} {score:.1f}")


def _from_vectors(entries: Any) -> Severity | None:
    if not isinstance(entries, list):
        return None
    for kind in VECTOR_TYPES:
        for entry in entries:
            if isinstance(entry, Mapping) and entry.get("type") == kind and isinstance(entry.get("score"), str):
                severity = cvss_severity(kind, entry["score"])
                if severity is not None:
                    return severity
    return None


def _worst(severities: Iterable[Severity]) -> Severity | None:
    known = [s for s in severities if s.level is not None]
    return max(known, key=lambda s: (LEVELS.index(s.level or "low"), s.score or 0.0), default=None)


def severity_of(record: Mapping[str, Any], affected: Sequence[Mapping[str, Any]]) -> Severity:
    """A record's severity, from the sources in the module's order; `affected` are the entries it is asked for (the
    ones that matched a package), whose own vectors and Debian urgency count (the worst of them)."""
    found = _from_vectors(record.get("severity"))
    if found is None:
        found = _worst(s for entry in affected if (s := _from_vectors(entry.get("severity"))) is not None)
    if found is not None:
        return found
    database = record.get("database_specific")
    raw = database.get("severity") if isinstance(database, Mapping) else None
    if isinstance(raw, str) and raw.strip().lower() in _GITHUB_LEVELS:
        prefix = str(record.get("id", "")).partition("-")[0] or "its"
        return Severity(_GITHUB_LEVELS[raw.strip().lower()], None, f"{prefix} database severity {raw.strip()}")
    urgencies = [u.strip().rstrip("*").strip() for entry in affected
                 if isinstance(specific := entry.get("ecosystem_specific"), Mapping)
                 and isinstance(u := specific.get("urgency"), str)]
    rated = _worst(Severity(_DEBIAN_URGENCY[u.lower()], None, f"Debian urgency {u}")
                   for u in urgencies if u.lower() in _DEBIAN_URGENCY)
    if rated is not None:
        return rated
    if urgencies:
        return Severity(None, None, f"Debian urgency {urgencies[0]}")
    return UNKNOWN


# -- records ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Query:
    """An installed package to look up: `ecosystem` is `PyPI` or `Debian:<release>` (or plain `Debian`). For Debian,
    `name` and `version` are the SOURCE package's (OSV's Debian records name source packages)."""

    ecosystem: str
    name: str
    version: str


@dataclass(frozen=True)
class Advisory:
    """One OSV record, as a finding shows it. `aliases` holds the record's `aliases` and `upstream` ids (a DSA's
    CVEs are in `upstream`); `url` is its first ADVISORY reference; `summary` is its summary, or the first line of
    its details."""

    id: str
    aliases: tuple[str, ...]
    summary: str
    published: str | None
    modified: str | None
    severity: Severity
    url: str | None
    _affected: tuple[Mapping[str, Any], ...] = field(default=(), repr=False, compare=False)

    def names(self) -> tuple[str, ...]:
        """Its id and aliases: what an exception may name it by."""
        return (self.id, *self.aliases)


@dataclass(frozen=True)
class Match:
    """An advisory that affects a queried package: `fixed` are the versions that fix it (empty: no fix known);
    `severity` is the advisory's severity read for the entries that matched (a vector or urgency stated per
    package), None where it is the advisory's own."""

    advisory: Advisory
    fixed: tuple[str, ...]
    severity: Severity | None = None

    @property
    def rated(self) -> Severity:
        return self.severity if self.severity is not None else self.advisory.severity


class _Entry(NamedTuple):
    record: int  # index into Advisories._records
    affected: int  # index into the record's `affected`
    release: str | None  # Debian:12 -> "12"


def _first_line(text: Any) -> str:
    if not isinstance(text, str):
        return ""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _advisory(record: Mapping[str, Any]) -> Advisory:
    rid = str(record["id"])
    aliases: list[str] = []
    for key in ("aliases", "upstream"):
        for alias in record.get(key) or ():
            if isinstance(alias, str) and alias and alias != rid and alias not in aliases:
                aliases.append(alias)
    affected = tuple(entry for entry in record.get("affected") or () if isinstance(entry, Mapping))
    url = next((ref["url"] for ref in record.get("references") or () if isinstance(ref, Mapping)
                and ref.get("type") == "ADVISORY" and isinstance(ref.get("url"), str)), None)
    summary = _first_line(record.get("summary")) or _first_line(record.get("details"))
    published, modified = record.get("published"), record.get("modified")
    return Advisory(rid, tuple(aliases), summary, published if isinstance(published, str) else None,
                    modified if isinstance(modified, str) else None, severity_of(record, affected), url, affected)


def timestamp(text: str) -> datetime.datetime | None:
    """An OSV `modified`/`published` time (nanoseconds allowed, UTC when it names no zone); None if unreadable."""
    try:
        stamp = datetime.datetime.fromisoformat(_NANOS.sub(r"\1", text.strip()).replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.timezone.utc)


# -- matching --------------------------------------------------------------------------------------------------------

_EVENTS = ("introduced", "fixed", "last_affected", "limit")


class Unparsed(Exception):
    """A range whose events cannot all be read: it says nothing either way (`unchecked`)."""


def _range_hit(base: str, events: Any, version: str) -> tuple[bool, str | None]:
    """Whether `version` falls in a range, and the `fixed` event that ends its span (None: no fix known). A PyPI
    version with a local label is compared by its public version unless an event carries a label too. `Unparsed`
    when an event version does not parse."""
    if not isinstance(events, list):
        return False, None
    from_start = False  # an `introduced: "0"`: before every version
    ordered: list[tuple[Ordered, str, str]] = []  # (version, kind, as written)
    for event in events:
        if not isinstance(event, Mapping):
            continue
        for kind in _EVENTS:
            raw = event.get(kind)
            if raw is None:
                continue
            if not isinstance(raw, str):
                raise Unparsed(f"{kind}: {raw!r}")
            if kind == "introduced" and raw.strip() == "0":
                from_start = True
                continue
            parsed = _version_key(base, raw.strip())
            if parsed is None:
                raise Unparsed(f"{kind}: {raw!r}")
            ordered.append((parsed, kind, raw))
    labelled = any(_local(raw) for _, _, raw in ordered)
    key = _version_key(base, version if labelled else public_version(base, version))
    if key is None:
        raise Unparsed(f"the installed version {version!r}")
    ordered.sort(key=lambda event: event[0])
    affected, fix, ended = from_start, None, False
    for at, kind, raw in ordered:
        if key < at:  # past the version: the first end event above it says what fixes it
            if affected and not ended and kind != "introduced":
                ended = True
                fix = raw if kind == "fixed" else None
        elif kind == "introduced":
            affected = True
        elif kind in ("fixed", "limit") or (kind == "last_affected" and at < key):
            affected = False
    return affected, fix if affected else None


def _fixed_events(entry: Mapping[str, Any]) -> list[str]:
    return [event["fixed"] for r in entry.get("ranges") or () if isinstance(r, Mapping) and r.get("type") in RANGE_TYPES
            for event in r.get("events") or () if isinstance(event, Mapping) and isinstance(event.get("fixed"), str)]


def _affects(base: str, entry: Mapping[str, Any], version: str) -> tuple[bool, list[str], list[str]]:
    """Whether one `affected` entry affects `version`, the fixed versions that apply, and what could not be read
    (ranges that say nothing either way; empty when it is affected anyway)."""
    hit, fixed, unread = False, [], []
    for r in entry.get("ranges") or ():
        if isinstance(r, Mapping) and r.get("type") in RANGE_TYPES:
            try:
                inside, fix = _range_hit(base, r.get("events"), version.strip())
            except Unparsed as exc:
                unread.append(f"{exc} does not parse")
                continue
            if inside:
                hit = True
                if fix is not None:
                    fixed.append(fix)
    if hit:
        return True, fixed, []
    public = public_version(base, version)
    listed = entry.get("versions")
    if isinstance(listed, list) and any(isinstance(v, str) and (_same_version(base, v, version) or (
            not _local(v) and _same_version(base, v, public))) for v in listed):
        key = _version_key(base, public)
        later = [f for f in _fixed_events(entry)
                 if key is None or ((at := _version_key(base, f.strip())) is not None and key < at)]
        return True, later, []
    return False, [], unread


def _sorted_versions(base: str, versions: Iterable[str]) -> tuple[str, ...]:
    unique = list(dict.fromkeys(versions))
    keyed = [(key, v) for v in unique if (key := _version_key(base, v.strip())) is not None]
    keyed.sort(key=lambda pair: pair[0])
    return tuple(v for _, v in keyed) + tuple(v for v in unique if _version_key(base, v.strip()) is None)


class Advisories:
    """Loaded OSV records, indexed by (ecosystem, normalized package name). Build with `load`, `load_all` or
    `empty`; read with `matching`."""

    def __init__(self, records: Sequence[Mapping[str, Any]] = (), *, withdrawn: int = 0,
                 sources: Sequence[str] = (), modified: str | None = None) -> None:
        self._records = tuple(records)
        self._withdrawn = withdrawn
        self._sources = tuple(sources)
        self._modified = modified
        self._cache: dict[int, Advisory] = {}
        self._index: dict[tuple[str, str], list[_Entry]] = {}
        ecosystems: set[str] = set()
        for i, record in enumerate(self._records):
            for j, entry in enumerate(record.get("affected") or ()):
                package = entry.get("package") if isinstance(entry, Mapping) else None
                if not isinstance(package, Mapping):
                    continue
                ecosystem, name = package.get("ecosystem"), package.get("name")
                if not isinstance(ecosystem, str) or not isinstance(name, str) or not ecosystem or not name:
                    continue
                base, release = ecosystem_parts(ecosystem)
                ecosystems.add(f"{base}:{release}" if release else base)
                self._index.setdefault((base, normalize_name(base, name)), []).append(_Entry(i, j, release))
        self._ecosystems = tuple(sorted(ecosystems))

    @classmethod
    def empty(cls) -> Advisories:
        return cls()

    @classmethod
    def load(cls, path: Path) -> Advisories:
        """The records of a `.json` file, a `.zip` export or a folder of them."""
        return cls.load_all([path])

    @classmethod
    def load_all(cls, paths: Iterable[Path]) -> Advisories:
        """The records of several files or folders, as one set (an id found twice: the one modified last)."""
        reader = _Reader()
        for path in paths:
            reader.read(Path(path))
        return reader.advisories()

    @property
    def count(self) -> int:
        """Records read and kept (withdrawn ones are not)."""
        return len(self._records)

    @property
    def withdrawn(self) -> int:
        return self._withdrawn

    @property
    def modified(self) -> str | None:
        """The newest `modified` of the records read: the data's "as of"."""
        return self._modified

    @property
    def ecosystems(self) -> tuple[str, ...]:
        return self._ecosystems

    @property
    def sources(self) -> tuple[str, ...]:
        """The files read."""
        return self._sources

    def summary(self) -> str:
        """One line: `1,234 advisories (Debian:12, PyPI) as of 2026-11-20T08:00:00Z; 3 withdrawn left out`."""
        if not self._records and not self._withdrawn and not self._sources:
            return "no vulnerability data"
        noun = "advisory" if len(self._records) == 1 else "advisories"
        line = f"{len(self._records):,} {noun} ({', '.join(self._ecosystems) or 'no packages'})"
        if self._modified:
            line += f" as of {self._modified}"
        if self._withdrawn:
            line += f"; {self._withdrawn:,} withdrawn left out"
        return line

    def advisory(self, index: int) -> Advisory:
        if index not in self._cache:
            self._cache[index] = _advisory(self._records[index])
        return self._cache[index]

    def unchecked(self, query: Query) -> list[str]:
        """What could not be evaluated for the queried package version, one line per advisory that might affect it
        (`jinja2 3.1.4: GHSA-…: fixed: 'x.y' does not parse`): never to be taken for "no known vulnerability"."""
        return self._lookup(query)[1]

    def matching(self, query: Query) -> list[Match]:
        """The advisories that affect the queried package version, by id; one match per advisory."""
        return self._lookup(query)[0]

    def _lookup(self, query: Query) -> tuple[list[Match], list[str]]:
        base, release = ecosystem_parts(query.ecosystem)
        hits: dict[int, tuple[list[Mapping[str, Any]], list[str]]] = {}
        unread: dict[int, list[str]] = {}
        for entry in self._index.get((base, normalize_name(base, query.name)), ()):
            if release is not None and entry.release is not None and entry.release != release:
                continue
            affected = self._records[entry.record]["affected"][entry.affected]
            hit, fixed, unsure = _affects(base, affected, query.version)
            if hit:
                entries, fixes = hits.setdefault(entry.record, ([], []))
                entries.append(affected)
                fixes.extend(fixed)
            elif unsure:
                unread.setdefault(entry.record, []).extend(unsure)
        matches = []
        for index, (entries, fixes) in hits.items():
            advisory = self.advisory(index)
            own = None
            if len(entries) < len(advisory._affected):  # some entries matched: their own severities may differ
                rated = severity_of(self._records[index], entries)
                own = None if rated == advisory.severity else rated
            matches.append(Match(advisory, _sorted_versions(base, fixes), own))
        unchecked = sorted(f"{query.name} {query.version}: {self.advisory(index).id}: {'; '.join(dict.fromkeys(why))}"
                           for index, why in unread.items() if index not in hits)
        return sorted(matches, key=lambda m: m.advisory.id), unchecked

    def __repr__(self) -> str:
        return f"Advisories({self.summary()!r})"


# -- reading files ---------------------------------------------------------------------------------------------------

class _Reader:
    """Collects records from files: validates each, keeps the newest version of an id."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[datetime.datetime | None, Mapping[str, Any]]] = {}
        self.sources: list[str] = []

    def read(self, path: Path) -> None:
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.suffix.lower() in (".json", ".zip"):
                    self.read_file(child)
        elif path.is_file():
            if path.suffix.lower() not in (".json", ".zip"):
                raise InputError("vulnerability data must be an OSV .json file, a .zip export or a folder of them",
                                 where=Where(str(path)), hint=EXPORT_HINT)
            self.read_file(path)
        else:
            raise InputError("vulnerability data not found", where=Where(str(path)), hint=EXPORT_HINT)

    def read_file(self, path: Path) -> None:
        self.sources.append(str(path))
        try:
            if path.suffix.lower() == ".zip":
                self.read_zip(path)
            else:
                self.read_json(path.read_bytes(), path, None)
        except OSError as e:
            raise InputError(f"cannot read it: {e.strerror or e}", where=Where(str(path))) from None

    def read_zip(self, path: Path) -> None:
        try:
            with zipfile.ZipFile(path) as archive:
                for member in archive.infolist():
                    if not member.is_dir() and member.filename.lower().endswith(".json"):
                        self.read_json(archive.read(member), path, member.filename)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as e:
            raise InputError(f"not a readable zip file ({e})", where=Where(str(path)), hint=EXPORT_HINT) from None

    def read_json(self, data: bytes, path: Path, member: str | None) -> None:
        inside = f"member {member}: " if member else ""
        try:
            document = json.loads(data)
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
            raise InputError(f"{inside}not JSON ({e})", where=Where(str(path)), hint=EXPORT_HINT) from None
        items = document if isinstance(document, list) else [document]
        for i, item in enumerate(items):
            place = f"{inside}item {i}: " if isinstance(document, list) else inside
            self.add(item, path, place)

    def add(self, record: Any, path: Path, place: str) -> None:
        def bad(why: str) -> InputError:
            return InputError(f"{place}not an OSV record: {why}", where=Where(str(path)), hint=EXPORT_HINT)

        if not isinstance(record, Mapping):
            raise bad(f"a JSON {type(record).__name__}, not an object")
        rid = record.get("id")
        if not isinstance(rid, str) or not rid.strip():
            raise bad("no `id`")
        if "affected" not in record and "modified" not in record:
            raise bad(f"{rid} has neither `affected` nor `modified`")
        if "modified" in record and not isinstance(record["modified"], str):
            raise bad(f"{rid}: `modified` is not a string")
        affected = record.get("affected")
        if affected is not None and (not isinstance(affected, list)
                                     or not all(isinstance(entry, Mapping) for entry in affected)):
            raise bad(f"{rid}: `affected` is not a list of objects")
        stamp = timestamp(record["modified"]) if isinstance(record.get("modified"), str) else None
        held = self.records.get(rid)
        if held is None or (stamp is not None and (held[0] is None or stamp > held[0])):
            self.records[rid] = (stamp, record)

    def advisories(self) -> Advisories:
        kept = [record for _, record in self.records.values() if not record.get("withdrawn")]
        stamps = [(stamp, str(record["modified"])) for stamp, record in self.records.values() if stamp is not None]
        newest = max(stamps, key=lambda pair: pair[0])[1] if stamps else None
        return Advisories(kept, withdrawn=len(self.records) - len(kept), sources=self.sources, modified=newest)

