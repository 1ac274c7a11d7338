"""The vulnerability gate's rule (`supply.policy`) on the real advisories in data/osv/: what blocks, what an
exception lets through and until when, what a finding says."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from imagebuilder.declarations.vulnerabilities import LEVELS, Allowance, Policy
from imagebuilder.errors import InputError
from imagebuilder.supply.osv import Advisories, Query
from imagebuilder.supply.policy import Installed, Verdict, judge, no_data

ADVISORIES = Advisories.load(Path(__file__).parent / "data" / "osv")
TODAY = datetime.date(2026, 1, 15)
SITE = "/opt/venv/lib/python3.11/site-packages"


def pypi(name: str, version: str, layer: str = "task") -> Installed:
    return Installed(Query("PyPI", name, version), f"pypi {name} {version} in {SITE}", layer)


def deb(binary: str, source: str, version: str, release: str = "12") -> Installed:
    return Installed(Query(f"Debian:{release}", source, version),
                     f"deb {binary} {version} (source {source} {version})", "base image debian:bookworm")


def allow(advisory: str, expires: datetime.date = datetime.date(2026, 3, 31), *packages: str) -> Allowance:
    return Allowance(advisory, "our templates are trusted; upgrade planned", expires, packages, "matrix.yaml:14")


def outcomes(verdict: Verdict) -> dict[str, str]:
    return {f.id: f.outcome for f in verdict.findings}


JINJA_314 = [pypi("jinja2", "3.1.4")]  # GHSA-q2x7-8rv6-6q7h, GHSA-gmj6-6f8f-6699, GHSA-cpwx-vrp4-4pq7: medium 5.4


def test_the_threshold_decides_what_blocks() -> None:
    at_high = judge(JINJA_314, ADVISORIES, Policy(), TODAY)  # block: high, the default
    assert not at_high.blocked and at_high.blocking == ()
    assert outcomes(at_high) == {"GHSA-cpwx-vrp4-4pq7": "below", "GHSA-gmj6-6f8f-6699": "below",
                                 "GHSA-q2x7-8rv6-6q7h": "below"}
    assert at_high.why() == f"nothing blocks: 3 known (3 below the threshold; {ADVISORIES.summary()})"
    at_medium = judge(JINJA_314, ADVISORIES, Policy(block="medium"), TODAY)
    assert at_medium.blocked and len(at_medium.blocking) == 3
    first = at_medium.findings[0]
    assert first.why() == ("GHSA-cpwx-vrp4-4pq7 (CVE-2025-27516, medium 5.4): pypi jinja2 3.1.4 in "
                           f"{SITE} (layer task); fixed in 3.1.6")
    assert at_medium.why() == first.why() + " (and 2 more blocking findings)"
    assert not judge(JINJA_314, ADVISORIES, Policy(block="critical"), TODAY).blocked
    assert judge(JINJA_314, ADVISORIES, Policy(block="low"), TODAY).blocked
    assert judge([pypi("jinja2", "3.1.6")], ADVISORIES, Policy(block="low"), TODAY).why() == \
        f"no known vulnerability ({ADVISORIES.summary()})"


def test_block_none_reports_and_never_blocks() -> None:
    verdict = judge([pypi("jinja2", "2.10"), deb("libc6", "glibc", "2.36-9+deb12u2")], ADVISORIES,
                    Policy(block="none", allow=(allow("CVE-2023-4911", datetime.date(2020, 1, 1)),)), TODAY)
    assert not verdict.blocked and len(verdict.findings) == 6
    assert set(outcomes(verdict).values()) == {"below"}  # an expired exception does not block either


def test_an_unknown_severity_counts_as_high_unless_the_matrix_says_otherwise() -> None:
    # PYSEC-2021-66 (jinja2 < 2.11.3) and the DSAs state no severity
    old_jinja = [pypi("jinja2", "2.10")]
    verdict = judge(old_jinja, ADVISORIES, Policy(), TODAY)
    assert [f.id for f in verdict.blocking] == ["PYSEC-2021-66"]
    pysec = verdict.blocking[0]
    assert (pysec.level, pysec.level_known, pysec.score, pysec.source) == ("high", False, None, "no severity stated")
    assert pysec.why() == (f"PYSEC-2021-66 (CVE-2020-28493, severity unknown, counted as high): pypi jinja2 2.10 in "
                           f"{SITE} (layer task); fixed in 2.11.3")
    assert not judge(old_jinja, ADVISORIES, Policy(unknown="medium"), TODAY).blocked
    critical = judge(old_jinja, ADVISORIES, Policy(unknown="critical"), TODAY).findings[0]
    assert (critical.id, critical.level) == ("PYSEC-2021-66", "critical")

    glibc = judge([deb("libc6", "glibc", "2.36-9+deb12u2")], ADVISORIES, Policy(), TODAY)
    assert glibc.blocked and glibc.why() == (
        "DSA-5514-1 (CVE-2023-4911, severity unknown, counted as high): deb libc6 2.36-9+deb12u2 (source glibc "
        "2.36-9+deb12u2) (layer base image debian:bookworm); fixed in 2.36-9+deb12u3")
    assert not judge([deb("libc6", "glibc", "2.36-9+deb12u3")], ADVISORIES, Policy(), TODAY).findings


def test_an_exception_by_cve_alias_lets_the_advisory_through() -> None:
    policy = Policy(block="medium", allow=(allow("cve-2024-56326"),))  # GHSA-q2x7-8rv6-6q7h, any case
    verdict = judge(JINJA_314, ADVISORIES, policy, TODAY)
    assert outcomes(verdict) == {"GHSA-cpwx-vrp4-4pq7": "blocks", "GHSA-gmj6-6f8f-6699": "blocks",
                                 "GHSA-q2x7-8rv6-6q7h": "allowed"}
    allowed = verdict.findings[-1]
    assert allowed.allowance == policy.allow[0] and allowed.why().endswith(
        "; allowed by the exception cve-2024-56326 until 2026-03-31 (matrix.yaml:14): our templates are trusted; "
        "upgrade planned")
    everything = Policy(block="medium", allow=(allow("CVE-2024-56326"), allow("GHSA-gmj6-6f8f-6699"),
                                               allow("CVE-2025-27516")))
    assert not judge(JINJA_314, ADVISORIES, everything, TODAY).blocked
    dsa = judge([deb("libc6", "glibc", "2.36-9+deb12u2")], ADVISORIES, Policy(allow=(allow("CVE-2023-4911"),)), TODAY)
    assert outcomes(dsa) == {"DSA-5514-1": "allowed"}  # a DSA's CVE is in `upstream`


def test_an_expired_exception_blocks_and_says_so() -> None:
    expired = Policy(block="medium", allow=(allow("CVE-2024-56326", datetime.date(2026, 1, 14)),))
    verdict = judge(JINJA_314, ADVISORIES, expired, TODAY)
    assert verdict.blocked and outcomes(verdict)["GHSA-q2x7-8rv6-6q7h"] == "expired"
    finding = next(f for f in verdict.findings if f.outcome == "expired")
    assert finding.blocking and finding.why() == (
        f"GHSA-q2x7-8rv6-6q7h (CVE-2024-56326, medium 5.4): pypi jinja2 3.1.4 in {SITE} (layer task); "
        "fixed in 3.1.5; the exception CVE-2024-56326 expired on 2026-01-14 (matrix.yaml:14)")
    last_day = Policy(block="medium", allow=(allow("CVE-2024-56326", TODAY),))  # `expires` is the last valid day
    assert outcomes(judge(JINJA_314, ADVISORIES, last_day, TODAY))["GHSA-q2x7-8rv6-6q7h"] == "allowed"
    both = Policy(block="medium", allow=(allow("CVE-2024-56326", datetime.date(2025, 6, 1)),
                                         allow("GHSA-q2x7-8rv6-6q7h", datetime.date(2026, 6, 1))))
    assert outcomes(judge(JINJA_314, ADVISORIES, both, TODAY))["GHSA-q2x7-8rv6-6q7h"] == "allowed"  # the later one


def test_an_exception_that_names_packages_covers_only_those() -> None:
    urllib3 = [pypi("urllib3", "2.1.0")]  # GHSA-34jh-p97f-mpxf, medium 4.4
    other = Policy(block="medium", allow=(allow("GHSA-34jh-p97f-mpxf", datetime.date(2026, 3, 31), "requests"),))
    assert outcomes(judge(urllib3, ADVISORIES, other, TODAY)) == {"GHSA-34jh-p97f-mpxf": "blocks"}
    named = Policy(block="medium", allow=(allow("GHSA-34jh-p97f-mpxf", datetime.date(2026, 3, 31), "URLLib3"),))
    assert outcomes(judge(urllib3, ADVISORIES, named, TODAY)) == {"GHSA-34jh-p97f-mpxf": "allowed"}
    jinja = Policy(block="medium", allow=(allow("CVE-2024-56326", datetime.date(2026, 3, 31), "Jinja2"),))
    assert outcomes(judge(JINJA_314, ADVISORIES, jinja, TODAY))["GHSA-q2x7-8rv6-6q7h"] == "allowed"


def test_one_advisory_on_one_component_is_one_finding() -> None:
    twice = [pypi("jinja2", "3.1.4"), pypi("jinja2", "3.1.4", layer="task again")]
    assert len(judge(twice, ADVISORIES, Policy(), TODAY).findings) == 3
    two_places = [pypi("jinja2", "3.1.4"), Installed(Query("PyPI", "Jinja2", "3.1.4"), "pypi Jinja2 3.1.4 in /usr/lib/"
                                                    "python3/dist-packages", "base image debian:bookworm")]
    assert len(judge(two_places, ADVISORIES, Policy(), TODAY).findings) == 6
    any_release = [Installed(Query("Debian", "glibc", "2.31-13+deb11u6"), "deb libc6 2.31-13+deb11u6", "base")]
    findings = judge(any_release, ADVISORIES, Policy(), TODAY).findings  # bullseye's and bookworm's entries match
    assert [(f.id, f.fixed) for f in findings] == [("DSA-5514-1", ("2.31-13+deb11u7", "2.36-9+deb12u3"))]


def test_findings_are_sorted_blocking_first_then_worst_then_by_id() -> None:
    image = [pypi("jinja2", "2.10"), pypi("urllib3", "1.26.18"), pypi("requests", "2.30.0"),
             deb("libssl3", "openssl", "3.0.11-1~deb12u1"), deb("libc6", "glibc", "2.36-9+deb12u2")]
    verdict = judge(image, ADVISORIES, Policy(allow=(allow("PYSEC-2021-66", datetime.date(2026, 2, 1)),)), TODAY)
    assert [(f.id, f.outcome, f.level) for f in verdict.findings] == [
        ("DSA-5514-1", "blocks", "high"), ("DSA-5532-1", "blocks", "high"), ("PYSEC-2021-66", "allowed", "high"),
        ("GHSA-34jh-p97f-mpxf", "below", "medium"), ("GHSA-cpwx-vrp4-4pq7", "below", "medium"),
        ("GHSA-gmj6-6f8f-6699", "below", "medium"), ("GHSA-h75v-3vvj-5mfj", "below", "medium"),
        ("GHSA-j8r2-6x86-q33q", "below", "medium"), ("GHSA-q2x7-8rv6-6q7h", "below", "medium")]
    ranks = [(not f.blocking, -LEVELS.index(f.level), f.id) for f in verdict.findings]
    assert ranks == sorted(ranks)


def test_the_verdict_as_json() -> None:
    policy = Policy(block="medium", allow=(allow("CVE-2024-56326"),))
    verdict = judge([*JINJA_314, deb("libssl3", "openssl", "3.0.11-1~deb12u1")], ADVISORIES, policy, TODAY)
    document = json.loads(json.dumps(verdict.to_json()))  # JSON-safe
    assert set(document) == {"blocked", "data", "counts", "findings"}
    assert document["blocked"] is True and document["data"] == ADVISORIES.summary()
    assert document["counts"] == {"blocks": 3, "expired": 0, "allowed": 1, "below": 0}
    allowed = next(f for f in document["findings"] if f["outcome"] == "allowed")
    assert allowed == {
        "id": "GHSA-q2x7-8rv6-6q7h", "aliases": ["CVE-2024-56326"],
        "summary": "Jinja has a sandbox breakout through indirect reference to format method",
        "package": "jinja2", "version": "3.1.4", "ecosystem": "PyPI", "ref": f"pypi jinja2 3.1.4 in {SITE}",
        "layer": "task", "level": "medium", "level_known": True, "score": 5.4, "severity_source": "CVSS:4.0 5.4",
        "fixed": ["3.1.5"], "outcome": "allowed", "url": "https://nvd.nist.gov/vuln/detail/CVE-2024-56326",
        "allowance": {"id": "CVE-2024-56326", "reason": "our templates are trusted; upgrade planned",
                      "expires": "2026-03-31", "packages": [], "where": "matrix.yaml:14"},
        "exception": "CVE-2024-56326", "reason": "our templates are trusted; upgrade planned",
        "expires": "2026-03-31", "why": verdict.findings[-1].why()}
    openssl = document["findings"][0]
    assert (openssl["id"], openssl["ecosystem"], openssl["package"], openssl["fixed"], openssl["allowance"]) == (
        "DSA-5532-1", "Debian:12", "openssl", ["3.0.11-1~deb12u2"], None)
    assert judge([], Advisories.empty(), Policy(), TODAY).to_json() == {
        "blocked": False, "data": "no vulnerability data", "counts": {"blocks": 0, "expired": 0, "allowed": 0,
                                                                      "below": 0}, "findings": []}


def test_required_data_refuses_without_advisories(tmp_path: Path) -> None:
    required = Policy(require_data=True)
    why = no_data(required, Advisories.empty())
    assert why is not None and why.startswith("the matrix requires vulnerability data (vulnerabilities.require_data)")
    assert "https://osv-vulnerabilities.storage.googleapis.com/PyPI/all.zip" in why
    assert "https://osv-vulnerabilities.storage.googleapis.com/Debian/all.zip" in why
    assert no_data(Policy(), Advisories.empty()) is None
    assert no_data(required, ADVISORIES) is None
    (tmp_path / "empty").mkdir()
    nothing_read = Advisories.load(tmp_path / "empty")  # a folder with no records is no data either
    assert no_data(required, nothing_read) is not None


def test_a_policy_and_its_exceptions_are_checked() -> None:
    with pytest.raises(InputError, match=r"vulnerabilities\.block: 'severe' is not one of") as caught:
        Policy(block="severe")
    assert caught.value.exit_code == 2
    with pytest.raises(InputError, match="did you mean 'critical'"):
        Policy(unknown="criticl")
    assert Policy(block="HIGH").block == "high"
    with pytest.raises(InputError, match="needs a reason") as no_reason:
        Allowance("CVE-2024-56326", " ", TODAY, where="matrix.yaml:20")
    assert "matrix.yaml:20" in str(no_reason.value)
    with pytest.raises(InputError, match="needs the id"):
        Allowance("", "a reason", TODAY)
