"""Admission: may this digest run? What a deploy pipeline asks without a matrix (`imagebuilder check`): the evidence
beside one image digest in its registry, read with exactly the keys the user names, judged by a small policy.

Read: everything beside the digest (`beside.read`: records, verdicts, the build record, the SBOM, the VSAs), with
the keys the user names and their roles; judged by the rule publish applies (`ruling.judge`). Only what a named key
signed about this very digest, within its roles, counts; what does not count is said. The policy
(`choices.POLICIES`, any of them, `pass` by default): `build` a trusted build record naming this image, `pass` a
trusted pass of the suite (any spec, or the one `spec` names), `gpu` such a pass on real GPUs, `sbom` a trusted
SBOM, `vsa` a trusted VSA that says PASSED; `gpu_model` asks for a pass on that GPU model. Verdicts fail closed, as
for publish: per GPU model the newest counts, and one that cannot be read refuses; a failure refuses whatever passed
elsewhere (on that model, when one is named). `RECOMMENDED` is what a deploy gate should ask.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import EngineError, ImageBuilderError
from . import beside, passes, predicates
from .passes import RecordRegistry, Signed
from .ruling import Ask, judge
from .signing import Trust

RECOMMENDED = ("build", "pass", "gpu")  # what a deploy gate should ask of a CUDA image (docs: trust.md)


class Undecided(ImageBuilderError):
    """The evidence could not be read (the registry did not answer, or refused): neither admitted nor refused."""

    exit_code = 2


@dataclass(frozen=True)
class Verdict:
    """`check`'s answer for one digest: admitted or not as the judge ruled (`ruling.judge`), every reason it was
    refused, and, one line each, the evidence that counted and what beside it did not. Says; decides nothing
    more."""

    image: str  # host/repo@digest
    admitted: bool
    why: tuple[str, ...]  # what refused it (empty when admitted)
    passes: tuple[str, ...] = ()  # the trusted passes, one line each
    failures: tuple[str, ...] = ()
    sbom: str = ""
    vsas: tuple[str, ...] = ()
    build: str = ""  # the build record that counts, or why none does
    ignored: tuple[str, ...] = field(default=())  # evidence beside it that does not count, and why

    def lines(self) -> list[str]:
        head = f"{'ADMITTED' if self.admitted else 'REFUSED'} {self.image}"
        out = [head, *(f"  refused: {w}" for w in self.why)]
        out += [f"  pass: {p}" for p in self.passes] or ["  pass: none that counts"]
        out += [f"  FAILED: {f}" for f in self.failures]
        out += [f"  build: {self.build}", f"  sbom: {self.sbom}", *(f"  vsa: {v}" for v in self.vsas)]
        out += [f"  not counted: {i}" for i in self.ignored]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "admitted": self.admitted, "why": list(self.why), "passes": list(self.passes),
                "failures": list(self.failures), "build": self.build, "sbom": self.sbom, "vsas": list(self.vsas),
                "ignored": list(self.ignored)}


def _runner(found: Signed) -> str:
    return f"{predicates.runner(found.record)}{'' if found.record.gpu_verified else ' (not GPU-verified)'}"


def check(registry: RecordRegistry, repo: str, digest: str, trust: Trust, *, policy: Iterable[str] = ("pass",),
          gpu_model: str | None = None, spec: str | None = None) -> Verdict:
    """The verdict on `repo@digest` under `policy`, from the evidence beside it that `trust` counts, ruled by the
    judge every command calls (`ruling.judge`)."""
    wanted = set(policy)
    try:
        if registry.manifest_digest(repo, digest) is None:
            raise Undecided(f"{registry.host}/{repo}@{digest}: no such image in the registry")
        found = beside.read(registry, repo, digest, trust, sbom=True, vsa=True)
    except EngineError as exc:
        raise Undecided(f"{registry.host}/{repo}@{digest}: the evidence could not be read: {exc.message}") from None
    ruling = judge(found, Ask(spec=spec, build="build" in wanted, passed="pass" in wanted, gpu="gpu" in wanted,
                              gpu_model=gpu_model, sbom="sbom" in wanted, vsa="vsa" in wanted))
    counted = [s for _, got in found.records if (s := got.found) is not None and s.record.manifest == digest
               and s.record.config == found.config]
    build = found.build
    return Verdict(
        found.image, ruling.admitted, ruling.why,
        passes=tuple(f"{_runner(f)}, spec {f.record.spec[:16]}, {f.record.date}, signed by {f.signer()}"
                     for _, f in ruling.passes),
        failures=tuple(f"{_runner(f)}, spec {f.record.spec[:16]}" for f in counted
                       if f.record.verdict == passes.FAILED),
        sbom=f"signed by {found.sbom.sbom.signer()}" if found.sbom.sbom else (found.sbom.rejected or "none"),
        vsas=tuple(f"{v.predicate.get('verificationResult')} {', '.join(v.predicate.get('verifiedLevels') or [])} "
                   f"({v.where}, key {v.keyid[:16]})" for v in found.vsas),
        build=(f"{build.build.node} (key {build.build.key[:12]}), built on {build.build.parent[:19]}, signed by "
               f"{build.signer}") if build else found.build_why,
        ignored=ruling.ignored)
