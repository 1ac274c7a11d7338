"""Standard predicates: what our records say, in predicate types other tools' policies already read.

- in-toto test-result v0.1 (`TEST_RESULT`), one per suite × runner: a pass record (or a GPU model's verdict)
  as `result`, the checks by name (`passedTests`, `warnedTests`: skipped, `failedTests`), and the suite and spec
  as `configuration` (resource descriptors named by their hashes).
- SLSA Verification Summary v1 (`VSA`), one per published digest: which of our levels the trusted passes beside
  it reach (`verifiedLevels`: `IMAGEBUILDER_SUITE_PASSED`, `IMAGEBUILDER_GPU_VERIFIED`, `IMAGEBUILDER_GPU_<MODEL>`;
  never a `SLSA_` name, which the spec reserves), `resourceUri` the image by digest, `policy` the spec.

Pure: no I/O. The JSON Schemas in tests/schemas/ (written from the specs) check both in tests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .. import __version__
from .passes import FAILED, PassRecord, gpu_model

TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
VSA = "https://slsa.dev/verification_summary/v1"
VERIFIER = "https://imagebuilder.dev/verifier"
SUITE_PASSED, GPU_VERIFIED = "IMAGEBUILDER_SUITE_PASSED", "IMAGEBUILDER_GPU_VERIFIED"


def runner(record: PassRecord) -> str:
    """Where a record's suite ran, as one name: the GPU model(s), or cpu."""
    return gpu_model(record.gpu) or "cpu"


def model_level(model: str) -> str:
    """The level a pass on one GPU model reaches: `IMAGEBUILDER_GPU_<MODEL>` (letters and digits, upper case)."""
    return "IMAGEBUILDER_GPU_" + re.sub(r"[^A-Z0-9]+", "_", model.upper()).strip("_")


def test_result(record: PassRecord) -> dict[str, Any]:
    """The record as an in-toto test-result v0.1 predicate."""
    checks = [c for c in (record.report or {}).get("checks") or [] if isinstance(c, Mapping)]
    names = {status: sorted(str(c.get("name")) for c in checks if c.get("status") == status)
             for status in ("pass", "skip", "fail")}
    result = "FAILED" if record.verdict == FAILED or names["fail"] else "WARNED" if names["skip"] else "PASSED"
    if not record.passed and record.verdict != FAILED:
        result = "WARNED"  # an untested record: published without a pass
    configuration = [{"name": "imagebuilder smoke suite", "digest": {"sha256": record.suite}} if record.suite else
                     {"name": "imagebuilder smoke suite", "uri": f"pkg:pypi/imagebuilder@{__version__}"},
                     {"name": f"spec {record.spec[:16]} on {runner(record)}", "digest": {"sha256": record.spec},
                      "annotations": {"node": record.node, "entry": record.entry, "runner": runner(record),
                                      "expect": dict(record.expect)}}]
    return {"result": result, "configuration": configuration, "passedTests": names["pass"],
            "warnedTests": names["skip"], "failedTests": names["fail"]}


def levels(records: Iterable[PassRecord]) -> list[str]:
    """The levels the passes among `records` reach (failed verdicts and untested records reach none)."""
    out: set[str] = set()
    for record in records:
        if not record.passed:
            continue
        out.add(SUITE_PASSED)
        model = gpu_model(record.gpu)
        if model is not None and record.gpu_verified:
            out |= {GPU_VERIFIED, *(model_level(m) for m in record.gpu.get("models") or [])}
    return sorted(out)


def vsa(resource: str, digest: str, spec: str, records: Iterable[PassRecord], inputs: Iterable[tuple[str, str]],
        when: str, *, admitted: bool) -> dict[str, Any]:
    """A VSA v1 predicate for the image `resource@digest` under the spec `spec`: PASSED exactly when the judge
    admitted it (`ruling.vsa_result`: provenance, verdicts, a pass), with the levels the passes it counted
    (`records`) reach; `inputs` are the records it read ((uri, manifest digest))."""
    ours = [r for r in records if r.spec == spec]
    return {"verifier": {"id": VERIFIER, "version": {"imagebuilder": __version__}},
            "timeVerified": when,
            "resourceUri": f"oci://{resource}@{digest}",
            "policy": {"uri": f"https://imagebuilder.dev/spec/{spec[:16]}", "digest": {"sha256": spec}},
            "inputAttestations": [{"uri": uri, "digest": {"sha256": d.partition(":")[2]}} for uri, d in inputs],
            "verificationResult": "PASSED" if admitted else "FAILED",
            "verifiedLevels": levels(ours) if admitted else [],
            "slsaVersion": "1.0"}
