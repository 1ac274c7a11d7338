"""junit.xml: a test suite per image, a test case per build and per smoke check."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..ledger import BuildStatus, NodeRecord, VerifyStatus


def junit_xml(results: list[NodeRecord]) -> bytes:
    """One test suite per image; a `build` test case per node and one test case per smoke check of a leaf."""
    suites = ET.Element("testsuites", name="imagebuilder")
    for r in results:
        suite = ET.SubElement(suites, "testsuite", name=r.node)
        cases: list[ET.Element] = []
        build = ET.SubElement(suite, "testcase", classname=r.node, name="build",
                              time=f"{r.durations.get('build', 0.0):.3f}")
        cases.append(build)
        if r.build in (BuildStatus.FAILED, BuildStatus.BLOCKED, BuildStatus.CANCELLED):
            _fail(build, r.error or r.build.value, r.log_tail)
        elif r.build is None:
            ET.SubElement(build, "skipped", message="not run")
        checks = (r.smoke_report or {}).get("checks") or []
        for check in checks:
            case = ET.SubElement(suite, "testcase", classname=r.node, name=str(check.get("name")),
                                 time=f"{float(check.get('duration') or 0):.3f}")
            cases.append(case)
            status = check.get("status")
            if status == "fail":
                log = check.get("log") or ""
                _fail(case, str(check.get("reason") or "failed"), "\n".join(log) if isinstance(log, list) else str(log))
            elif status == "skip":
                ET.SubElement(case, "skipped", message=str(check.get("reason") or "skipped"))
            elif check.get("reason"):
                ET.SubElement(case, "system-out").text = str(check.get("reason"))
        if r.leaf and not checks and r.verify is not None:
            case = ET.SubElement(suite, "testcase", classname=r.node, name="smoke")
            cases.append(case)
            if r.verify == VerifyStatus.FAILED:
                _fail(case, r.error or "smoke failed", r.log_tail)
            elif r.verify == VerifyStatus.SKIPPED:
                ET.SubElement(case, "skipped", message="--no-smoke")
            else:
                ET.SubElement(case, "system-out").text = f"smoke {r.verify.value}"
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
        suite.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))
    suites.set("tests", str(sum(int(s.get("tests", 0)) for s in suites)))
    suites.set("failures", str(sum(int(s.get("failures", 0)) for s in suites)))
    ET.indent(suites)
    return bytes(ET.tostring(suites, encoding="utf-8", xml_declaration=True)) + b"\n"


def _fail(case: ET.Element, message: str, text: str) -> None:
    failure = ET.SubElement(case, "failure", message=message[:500])
    failure.text = text or message
