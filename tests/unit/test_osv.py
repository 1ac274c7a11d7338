"""OSV data (`supply.osv`) read and matched against the real advisories in data/osv/ (README.md there says where
each came from). A test that needs a shape no published record here has copies one into tmp_path and changes the
one field it is about."""

from __future__ import annotations

import copy
import itertools
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.errors import InputError
from imagebuilder.supply import osv
from imagebuilder.supply.osv import Advisories, Query

FEED = Path(__file__).parent / "data" / "osv"
ADVISORIES = Advisories.load(FEED)


def record(name: str) -> dict[str, Any]:
    """A fixture record, as a fresh dict to change."""
    found = next(FEED.rglob(f"{name}.json"))
    loaded: dict[str, Any] = json.loads(found.read_text(encoding="utf-8"))
    return loaded


def write(folder: Path, *records: Any, name: str = "feed.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(list(records) if len(records) != 1 else records[0]), encoding="utf-8")
    return path


def with_events(events: list[dict[str, str]], base: str = "GHSA-h75v-3vvj-5mfj") -> dict[str, Any]:
    """A real record whose one range is replaced by `events`."""
    changed = record(base)
    changed["affected"][0]["ranges"][0]["events"] = events
    return changed


def match(advisories: Advisories, ecosystem: str, name: str, version: str, advisory: str) -> osv.Match:
    """The match of one advisory on a package version."""
    return next(m for m in advisories.matching(Query(ecosystem, name, version)) if m.advisory.id == advisory)


def ids(advisories: Advisories, ecosystem: str, name: str, version: str) -> dict[str, tuple[str, ...]]:
    """The advisories that affect a package version, and the fixed versions each names."""
    return {m.advisory.id: m.fixed for m in advisories.matching(Query(ecosystem, name, version))}


def test_the_feed_loads_with_what_it_is_and_how_fresh() -> None:
    assert ADVISORIES.count == 9 and ADVISORIES.withdrawn == 0
    assert ADVISORIES.ecosystems == ("Debian:11", "Debian:12", "PyPI")
    assert ADVISORIES.modified == "2025-11-03T22:54:41Z"  # GHSA-cpwx-vrp4-4pq7's, the newest
    assert len(ADVISORIES.sources) == 9 and all(s.endswith(".json") for s in ADVISORIES.sources)
    assert ADVISORIES.summary() == "9 advisories (Debian:11, Debian:12, PyPI) as of 2025-11-03T22:54:41Z"


def test_jinja2_advisories_as_published_pep440_order_and_prereleases() -> None:
    # CVE-2024-56326 is GHSA-q2x7-8rv6-6q7h and CVE-2024-56201 GHSA-gmj6-6f8f-6699, both fixed in 3.1.5;
    # GHSA-h75v-3vvj-5mfj is CVE-2024-34064, fixed in 3.1.4; GHSA-cpwx-vrp4-4pq7 (CVE-2025-27516) in 3.1.6.
    assert ids(ADVISORIES, "PyPI", "jinja2", "3.1.3") == {
        "GHSA-h75v-3vvj-5mfj": ("3.1.4",), "GHSA-q2x7-8rv6-6q7h": ("3.1.5",), "GHSA-gmj6-6f8f-6699": ("3.1.5",),
        "GHSA-cpwx-vrp4-4pq7": ("3.1.6",)}
    assert ids(ADVISORIES, "PyPI", "jinja2", "3.1.4") == {
        "GHSA-q2x7-8rv6-6q7h": ("3.1.5",), "GHSA-gmj6-6f8f-6699": ("3.1.5",), "GHSA-cpwx-vrp4-4pq7": ("3.1.6",)}
    assert ids(ADVISORIES, "PyPI", "jinja2", "3.1.5rc1") == ids(ADVISORIES, "PyPI", "jinja2", "3.1.4")  # < 3.1.5
    assert ids(ADVISORIES, "PyPI", "jinja2", "3.1.5") == {"GHSA-cpwx-vrp4-4pq7": ("3.1.6",)}
    assert ids(ADVISORIES, "PyPI", "jinja2", "3.1.6") == {}
    assert ids(ADVISORIES, "PyPI", "jinja2", "3.1.6.post1") == {}
    q2x7 = match(ADVISORIES, "PyPI", "jinja2", "3.1.4", "GHSA-q2x7-8rv6-6q7h").advisory
    assert q2x7.aliases == ("CVE-2024-56326",) and q2x7.published == "2024-12-23T17:56:08Z"
    assert q2x7.summary == "Jinja has a sandbox breakout through indirect reference to format method"
    assert q2x7.url == "https://nvd.nist.gov/vuln/detail/CVE-2024-56326"  # its first ADVISORY reference
    assert match(ADVISORIES, "PyPI", "jinja2", "3.1.3", "GHSA-h75v-3vvj-5mfj").advisory.url is None  # it has none


def ascending(ecosystem: str, *versions: str) -> bool:
    """Whether `versions` are in strictly ascending order in the ecosystem (each parsed by `osv.version_key`)."""
    keys = [osv.version_key(ecosystem, v) for v in versions]
    assert all(key is not None for key in keys), versions
    return all(a is not None and b is not None and a < b for a, b in itertools.pairwise(keys))


def test_version_order_in_one_place() -> None:
    assert ascending("PyPI", "3.1.5rc1", "3.1.5", "3.1.5.post1", "3.1.10", "2024.1")
    assert not ascending("PyPI", "3.1.4", "3.1.4.0")  # the same PEP 440 version
    assert osv.version_key("PyPI", "not a version") is None and osv.version_key("npm", "1.0.0") is None
    assert ascending("Debian:12", "3.0.11-1~deb12u2", "3.0.11-1~deb12u3", "3.0.11-1", "3.0.11-1+b1")
    assert ascending("Debian", "1.0~rc1", "1.0", "2.0", "1:1.0")  # tildes sort first; the epoch wins
    assert osv.version_key("Debian", "") is None


def test_names_compare_as_the_ecosystem_spells_them(tmp_path: Path) -> None:
    assert ids(ADVISORIES, "PyPI", "Jinja2", "3.1.4") == ids(ADVISORIES, "pypi", "JINJA2", "3.1.4") != {}
    zope = record("GHSA-h75v-3vvj-5mfj")
    zope["affected"][0]["package"]["name"] = "zope.interface"
    renamed = Advisories.load(write(tmp_path, zope))
    assert ids(renamed, "PyPI", "zope-interface", "3.1.3") == ids(renamed, "PyPI", "Zope_Interface", "3.1.3") == {
        "GHSA-h75v-3vvj-5mfj": ("3.1.4",)}
    assert osv.normalize_name("Debian:12", "OpenSSL") == "openssl"
    assert osv.normalize_name("npm", "Left-Pad") == "Left-Pad"  # no order or spelling known: as written


def test_two_affected_entries_each_name_their_own_fix() -> None:
    # GHSA-34jh-p97f-mpxf: urllib3 < 1.26.19, and 2.0.0 <= urllib3 < 2.2.2
    assert ids(ADVISORIES, "PyPI", "urllib3", "1.26.18") == {"GHSA-34jh-p97f-mpxf": ("1.26.19",)}
    assert ids(ADVISORIES, "PyPI", "urllib3", "2.1.0") == {"GHSA-34jh-p97f-mpxf": ("2.2.2",)}
    for safe in ("1.26.19", "2.0.0a1", "2.2.2", "2.3.0"):  # 2.0.0a1 comes before 2.0.0, where the second starts
        assert ids(ADVISORIES, "PyPI", "urllib3", safe) == {}, safe
    # GHSA-j8r2-6x86-q33q: 2.3.0 <= requests < 2.31.0
    assert ids(ADVISORIES, "PyPI", "requests", "2.2.1") == {}
    assert ids(ADVISORIES, "PyPI", "requests", "2.3.0") == ids(ADVISORIES, "PyPI", "requests", "2.30.0") == {
        "GHSA-j8r2-6x86-q33q": ("2.31.0",)}


def test_last_affected_is_inclusive_and_names_no_fix(tmp_path: Path) -> None:
    feed = Advisories.load(write(tmp_path, with_events([{"introduced": "0"}, {"last_affected": "3.1.3"}])))
    assert ids(feed, "PyPI", "jinja2", "3.1.3") == {"GHSA-h75v-3vvj-5mfj": ()}
    assert ids(feed, "PyPI", "jinja2", "3.1.3.post1") == ids(feed, "PyPI", "jinja2", "3.1.4") == {}


def test_introduced_without_an_end_affects_every_later_version(tmp_path: Path) -> None:
    feed = Advisories.load(write(tmp_path, with_events([{"introduced": "3.0.0"}])))
    assert ids(feed, "PyPI", "jinja2", "2.11.3") == ids(feed, "PyPI", "jinja2", "3.0.0rc1") == {}
    assert ids(feed, "PyPI", "jinja2", "3.0.0") == ids(feed, "PyPI", "jinja2", "99.1") == {"GHSA-h75v-3vvj-5mfj": ()}


def test_limit_ends_a_span_and_events_are_read_in_version_order(tmp_path: Path) -> None:
    limited = Advisories.load(write(tmp_path / "a", with_events([{"introduced": "0"}, {"limit": "3.0"}])))
    assert ids(limited, "PyPI", "jinja2", "2.9") == {"GHSA-h75v-3vvj-5mfj": ()}  # a limit is no fix
    assert ids(limited, "PyPI", "jinja2", "3.0") == {}
    shuffled = Advisories.load(write(tmp_path / "b", with_events(
        [{"fixed": "2.2"}, {"introduced": "2.0"}, {"fixed": "1.5"}, {"introduced": "0"}])))
    assert ids(shuffled, "PyPI", "jinja2", "1.4") == {"GHSA-h75v-3vvj-5mfj": ("1.5",)}
    assert ids(shuffled, "PyPI", "jinja2", "1.7") == {}
    assert ids(shuffled, "PyPI", "jinja2", "2.1") == {"GHSA-h75v-3vvj-5mfj": ("2.2",)}
    broken = Advisories.load(write(tmp_path / "c", with_events([{"introduced": "0"}, {"fixed": "not-a-version!"}])))
    assert ids(broken, "PyPI", "jinja2", "1.0") == {}  # a range that cannot be ordered is not evaluated: unchecked
    assert broken.unchecked(Query("PyPI", "jinja2", "1.0")) == [
        "jinja2 1.0: GHSA-h75v-3vvj-5mfj: fixed: 'not-a-version!' does not parse"]


def test_an_explicit_versions_list(tmp_path: Path) -> None:
    # PYSEC-2021-66 (CVE-2020-28493) lists every affected jinja2 release, 2.0rc1 to 2.11.2, beside its range.
    assert ids(ADVISORIES, "PyPI", "jinja2", "2.0rc1")["PYSEC-2021-66"] == ("2.11.3",)
    assert "PYSEC-2021-66" not in ids(ADVISORIES, "PyPI", "jinja2", "2.11.3")
    only_listed = record("PYSEC-2021-66")
    only_listed["affected"][0]["ranges"] = [{"type": "GIT", "repo": "https://github.com/pallets/jinja",
                                             "events": [{"introduced": "0"}, {"fixed": "abc123"}]}]
    only_listed["affected"][0]["versions"].append("2.11.2+vendored build")  # PEP 440 cannot parse it
    feed = Advisories.load(write(tmp_path / "a", only_listed))
    assert ids(feed, "PyPI", "jinja2", "2.10.1") == {"PYSEC-2021-66": ()}  # GIT ranges are not read
    assert ids(feed, "PyPI", "jinja2", "2.10.4") == {}
    assert ids(feed, "PyPI", "jinja2", "2.11.2+vendored build") == {"PYSEC-2021-66": ()}  # as written
    open_ended = Advisories.load(write(tmp_path / "b", with_events([{"introduced": "0"}])))
    assert ids(open_ended, "PyPI", "jinja2", "vendored build") == {}  # a version that does not parse: unchecked
    assert open_ended.unchecked(Query("PyPI", "jinja2", "vendored build")) == [
        "jinja2 vendored build: GHSA-h75v-3vvj-5mfj: the installed version 'vendored build' does not parse"]
    assert open_ended.unchecked(Query("PyPI", "jinja2", "3.1.4")) == []  # (matched, so checked)


def test_a_withdrawn_record_is_left_out_and_counted(tmp_path: Path) -> None:
    withdrawn = record("GHSA-h75v-3vvj-5mfj")
    withdrawn["withdrawn"] = "2024-06-01T00:00:00Z"
    feed = Advisories.load(write(tmp_path, withdrawn, record("GHSA-q2x7-8rv6-6q7h")))
    assert (feed.count, feed.withdrawn) == (1, 1)
    assert ids(feed, "PyPI", "jinja2", "3.1.3") == {"GHSA-q2x7-8rv6-6q7h": ("3.1.5",)}
    assert feed.summary().endswith("; 1 withdrawn left out")


def test_an_id_found_twice_keeps_the_version_modified_last(tmp_path: Path) -> None:
    older = record("GHSA-q2x7-8rv6-6q7h")
    older["modified"] = "2024-12-23T17:56:08Z"
    older["severity"] = older["severity"][1:]
    write(tmp_path, older, name="older.json")
    write(tmp_path, record("GHSA-q2x7-8rv6-6q7h"), name="newer.json")
    feed = Advisories.load(tmp_path)
    assert feed.count == 1 and feed.modified == "2025-11-03T22:50:50Z"
    assert feed.matching(Query("PyPI", "jinja2", "3.1.4"))[0].advisory.modified == "2025-11-03T22:50:50Z"


def test_dpkg_order_epochs_and_tildes_on_a_debian_advisory() -> None:
    # DSA-5532-1: openssl fixed in 3.0.11-1~deb12u2 for bookworm
    assert ids(ADVISORIES, "Debian:12", "openssl", "3.0.11-1~deb12u1") == {"DSA-5532-1": ("3.0.11-1~deb12u2",)}
    assert ids(ADVISORIES, "Debian:12", "openssl", "3.0.9-1") == {"DSA-5532-1": ("3.0.11-1~deb12u2",)}
    for fixed in ("3.0.11-1~deb12u2", "3.0.11-1~deb12u3", "3.0.11-1", "3.0.13-1~deb12u1", "1:3.0.0-1"):
        assert ids(ADVISORIES, "Debian:12", "openssl", fixed) == {}, fixed
    advisory = match(ADVISORIES, "Debian:12", "openssl", "3.0.9-1", "DSA-5532-1").advisory
    assert advisory.aliases == ("CVE-2023-5363",) and advisory.summary == "openssl - security update"
    assert advisory.url == "https://www.debian.org/security/2023/dsa-5532"


def test_a_debian_release_reads_its_own_records_and_release_less_ones(tmp_path: Path) -> None:
    # DSA-5514-1: glibc fixed in 2.31-13+deb11u7 (bullseye) and 2.36-9+deb12u3 (bookworm)
    assert ids(ADVISORIES, "Debian:12", "glibc", "2.36-9+deb12u2") == {"DSA-5514-1": ("2.36-9+deb12u3",)}
    assert ids(ADVISORIES, "Debian:12", "glibc", "2.36-9+deb12u3") == {}
    assert ids(ADVISORIES, "Debian:11", "glibc", "2.31-13+deb11u6") == {"DSA-5514-1": ("2.31-13+deb11u7",)}
    assert ids(ADVISORIES, "Debian:11", "glibc", "2.31-13+deb11u7") == {}
    assert ids(ADVISORIES, "Debian:11", "glibc", "2.36-9+deb12u2") == {}  # bullseye's range, bookworm's version
    assert ids(ADVISORIES, "Debian:11", "openssl", "3.0.11-1~deb12u1") == {}  # DSA-5532-1 is for bookworm only
    assert ids(ADVISORIES, "Debian", "glibc", "2.31-13+deb11u6") == {
        "DSA-5514-1": ("2.31-13+deb11u7", "2.36-9+deb12u3")}  # no release: every release's records
    assert ids(ADVISORIES, "Debian:12", "libc6", "2.36-9+deb12u2") == {}  # records name source packages
    assert ids(ADVISORIES, "PyPI", "glibc", "2.36-9+deb12u2") == {}
    plain = record("DSA-5532-1")
    plain["affected"][0]["package"]["ecosystem"] = "Debian"
    feed = Advisories.load(write(tmp_path, plain))
    assert feed.ecosystems == ("Debian",)
    assert ids(feed, "Debian:12", "openssl", "3.0.11-1~deb12u1") == ids(feed, "Debian:13", "openssl", "3.0.9-1") \
        == {"DSA-5532-1": ("3.0.11-1~deb12u2",)}


def test_zip_exports_and_folders_load(tmp_path: Path) -> None:
    export = tmp_path / "exports" / "all.zip"
    export.parent.mkdir()
    with zipfile.ZipFile(export, "w") as archive:
        for path in sorted(FEED.rglob("*.json")):
            archive.write(path, path.name)
        archive.writestr("README.txt", "not a record: not read")
    zipped = Advisories.load(export)
    assert zipped.count == 9 and zipped.sources == (str(export),)
    assert ids(zipped, "PyPI", "jinja2", "3.1.4") == ids(ADVISORIES, "PyPI", "jinja2", "3.1.4")
    write(tmp_path / "exports" / "more", record("DSA-5532-1"), name="DSA-5532-1.json")  # a folder: recursive
    mixed = Advisories.load(tmp_path / "exports")
    assert mixed.count == 9 and len(mixed.sources) == 2
    both = Advisories.load_all([FEED / "PyPI", FEED / "Debian" / "DSA-5514-1.json"])
    assert both.count == 8 and both.ecosystems == ("Debian:11", "Debian:12", "PyPI")


def test_a_file_that_is_not_osv_is_an_input_error_naming_it(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"id": "GHSA-h75v-3vvj-5mfj", "affected": [', encoding="utf-8")
    with pytest.raises(InputError) as caught:
        Advisories.load(tmp_path)
    assert caught.value.exit_code == 2 and "broken.json" in str(caught.value) and "not JSON" in str(caught.value)

    other = write(tmp_path / "b", {"name": "a package.json, not advisories"}, name="package.json")
    with pytest.raises(InputError, match=r"package\.json: not an OSV record: no `id`"):
        Advisories.load(other)
    bare = write(tmp_path / "c", {"id": "GHSA-xxxx"})
    with pytest.raises(InputError, match="neither `affected` nor `modified`"):
        Advisories.load(bare)
    listed = write(tmp_path / "d", record("GHSA-h75v-3vvj-5mfj"), "not a record")
    with pytest.raises(InputError, match="item 1: not an OSV record"):
        Advisories.load(listed)

    export = tmp_path / "e" / "all.zip"
    export.parent.mkdir()
    with zipfile.ZipFile(export, "w") as archive:
        archive.writestr("GHSA-h75v-3vvj-5mfj.json", json.dumps(record("GHSA-h75v-3vvj-5mfj")))
        archive.writestr("PYSEC-bad.json", "\x00\x01 not json")
    with pytest.raises(InputError) as in_zip:
        Advisories.load(export)
    assert "all.zip" in str(in_zip.value) and "member PYSEC-bad.json" in str(in_zip.value)
    (tmp_path / "f.zip").write_bytes(b"PK but not a zip")
    with pytest.raises(InputError, match="not a readable zip file"):
        Advisories.load(tmp_path / "f.zip")
    with pytest.raises(InputError, match="not found"):
        Advisories.load(tmp_path / "missing")
    (tmp_path / "feed.tar.gz").write_bytes(b"")
    with pytest.raises(InputError, match=r"must be an OSV \.json file"):
        Advisories.load(tmp_path / "feed.tar.gz")


def test_severity_from_a_cvss_vector_with_the_score_computed() -> None:
    h75v = match(ADVISORIES, "PyPI", "jinja2", "3.1.3", "GHSA-h75v-3vvj-5mfj").advisory
    assert h75v.severity == osv.Severity("medium", 5.4, "CVSS:3.1 5.4")  # AV:N/AC:L/PR:N/UI:R/S:U/C:L/I:L/A:N
    urllib3 = match(ADVISORIES, "PyPI", "urllib3", "2.1.0", "GHSA-34jh-p97f-mpxf").advisory
    assert urllib3.severity == osv.Severity("medium", 4.4, "CVSS:3.1 4.4")
    requests = match(ADVISORIES, "PyPI", "requests", "2.30.0", "GHSA-j8r2-6x86-q33q").advisory
    assert requests.severity == osv.Severity("medium", 6.1, "CVSS:3.1 6.1")
    # GHSA-q2x7-8rv6-6q7h states v3.1 (7.8) and v4.0 (5.4) vectors: v4 is read first
    q2x7 = match(ADVISORIES, "PyPI", "jinja2", "3.1.4", "GHSA-q2x7-8rv6-6q7h").advisory
    assert q2x7.severity == osv.Severity("medium", 5.4, "CVSS:4.0 5.4")
    assert osv.cvss_severity("CVSS_V3", "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H") == osv.Severity(
        "high", 7.8, "CVSS:3.1 7.8")
    assert osv.cvss_severity("CVSS_V3", "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H") == osv.Severity(
        "critical", 9.8, "CVSS:3.1 9.8")
    assert osv.cvss_severity("CVSS_V2", "AV:N/AC:L/Au:N/C:P/I:P/A:P") == osv.Severity("high", 7.5, "CVSS:2.0 7.5")
    assert osv.cvss_severity("CVSS_V3", "CVSS:3.1/AV:N/garbage") is None


@pytest.mark.parametrize(("score", "level"), [(0.0, "low"), (3.9, "low"), (4.0, "medium"), (6.9, "medium"),
                                              (7.0, "high"), (8.9, "high"), (9.0, "critical"), (10.0, "critical")])
def test_scores_map_to_cvss_v3_ratings(score: float, level: str) -> None:
    assert osv.level_of(score) == level


def test_severity_falls_back_to_the_database_then_debian_urgency_else_unknown(tmp_path: Path) -> None:
    no_vector = record("GHSA-h75v-3vvj-5mfj")
    del no_vector["severity"]
    broken = record("GHSA-gmj6-6f8f-6699")
    broken["severity"] = [{"type": "CVSS_V4", "score": "CVSS:4.0/AV:L/garbage"},
                          {"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:U/C:L/I:L/A:N"}]
    all_broken = record("GHSA-cpwx-vrp4-4pq7")
    all_broken["severity"] = [{"type": "CVSS_V4", "score": "not a vector"}]
    feed = Advisories.load(write(tmp_path / "a", no_vector, broken, all_broken))
    rated = {m.advisory.id: m.advisory.severity for m in feed.matching(Query("PyPI", "jinja2", "3.1.3"))}
    assert rated == {"GHSA-h75v-3vvj-5mfj": osv.Severity("medium", None, "GHSA database severity MODERATE"),
                     "GHSA-gmj6-6f8f-6699": osv.Severity("medium", 5.4, "CVSS:3.1 5.4"),
                     "GHSA-cpwx-vrp4-4pq7": osv.Severity("medium", None, "GHSA database severity MODERATE")}

    # PYSEC-2021-66 and the DSAs state no severity at all
    assert match(ADVISORIES, "PyPI", "jinja2", "2.10", "PYSEC-2021-66").advisory.severity == osv.UNKNOWN
    dsa = match(ADVISORIES, "Debian:12", "glibc", "2.36-9", "DSA-5514-1")
    assert dsa.rated.level is None and not dsa.rated.known and dsa.rated.source == "no severity stated"

    urgencies = {}
    for urgency in ("unimportant", "high", "not yet assigned", "end-of-life"):
        rated_dsa = record("DSA-5514-1")
        rated_dsa["affected"][1]["ecosystem_specific"] = {"urgency": urgency}  # bookworm's entry only
        feed = Advisories.load(write(tmp_path / urgency, rated_dsa))
        urgencies[urgency] = feed.matching(Query("Debian:12", "glibc", "2.36-9"))[0].rated
        assert feed.matching(Query("Debian:11", "glibc", "2.31-13"))[0].rated == osv.UNKNOWN  # bullseye's says none
    assert urgencies == {"unimportant": osv.Severity("low", None, "Debian urgency unimportant"),
                         "high": osv.Severity("high", None, "Debian urgency high"),
                         "not yet assigned": osv.Severity(None, None, "Debian urgency not yet assigned"),
                         "end-of-life": osv.Severity(None, None, "Debian urgency end-of-life")}


def test_a_vector_on_the_affected_entry_counts_for_that_package(tmp_path: Path) -> None:
    per_package = record("GHSA-34jh-p97f-mpxf")
    vector = per_package.pop("severity")
    per_package["affected"][1]["severity"] = copy.deepcopy(vector)  # on the 2.x entry only
    feed = Advisories.load(write(tmp_path, per_package))
    assert feed.matching(Query("PyPI", "urllib3", "2.1.0"))[0].rated == osv.Severity("medium", 4.4, "CVSS:3.1 4.4")
    assert feed.matching(Query("PyPI", "urllib3", "1.26.0"))[0].rated == osv.Severity(
        "medium", None, "GHSA database severity MODERATE")


def test_no_data() -> None:
    empty = Advisories.empty()
    assert (empty.count, empty.withdrawn, empty.modified, empty.ecosystems, empty.sources) == (0, 0, None, (), ())
    assert empty.summary() == "no vulnerability data"
    assert empty.matching(Query("PyPI", "jinja2", "3.1.3")) == []


def torch_advisory(events: list[dict[str, str]], versions: list[str]) -> dict[str, Any]:
    """A torch advisory shaped as OSV wrote GHSA-887c-mr87-cxwp (CVE-2025-3730, torch.nn.functional.ctc_loss) while no
    fix was published: `introduced: 0`, `last_affected`, and the affected releases listed. A fixture record with
    its package, events and versions changed (not a copy of that record)."""
    changed = with_events(events)
    changed["id"], changed["aliases"] = "GHSA-887c-mr87-cxwp", ["CVE-2025-3730"]
    changed["affected"][0]["package"]["name"] = "torch"
    changed["affected"][0]["versions"] = versions
    return changed


def test_a_local_version_label_matches_its_public_version(tmp_path: Path) -> None:
    """N6: PyTorch's own builds are `2.7.1+cpu`, `2.6.0+cu124`; PEP 440 orders them after `2.7.1`, so a `last_affected`
    range or a `versions` list missed them. They are compared by their public version; an advisory that names a
    labelled version itself is compared as written."""
    ranged = Advisories.load(write(tmp_path / "a", torch_advisory([{"introduced": "0"}, {"last_affected": "2.7.1"}],
                                                                 [])))
    listed = Advisories.load(write(tmp_path / "b", torch_advisory([], ["2.6.0", "2.7.0", "2.7.1"])))
    for feed in (ranged, listed):
        for version in ("2.7.1", "2.7.1+cpu", "2.6.0+cu124", "2.7.0+cu126"):
            assert ids(feed, "PyPI", "torch", version) == {"GHSA-887c-mr87-cxwp": ()}, version
        assert ids(feed, "PyPI", "torch", "2.8.0+cpu") == ids(feed, "PyPI", "torch", "2.8.0") == {}
    fixed = Advisories.load(write(tmp_path / "c", torch_advisory([{"introduced": "0"}, {"fixed": "2.8.0"}], [])))
    assert ids(fixed, "PyPI", "torch", "2.7.1+cu126") == {"GHSA-887c-mr87-cxwp": ("2.8.0",)}
    assert ids(fixed, "PyPI", "torch", "2.8.0+cpu") == {}  # the fixed release, whatever its build
    own = Advisories.load(write(tmp_path / "d", torch_advisory([], ["2.7.1+cu126"])))
    assert ids(own, "PyPI", "torch", "2.7.1+cu126") == {"GHSA-887c-mr87-cxwp": ()}
    assert ids(own, "PyPI", "torch", "2.7.1+cpu") == {}
    assert osv.public_version("PyPI", "2.13.0+cpu") == "2.13.0" and osv.public_version("Debian", "1.2+b1") == "1.2+b1"
