"""Admission: may this digest run? What a deploy pipeline asks without a matrix (`imagebuilder check`): the evidence
beside one image digest in its registry, read with exactly the keys the user names, judged by a small policy.

Read: our native records (passes by runner, GPU models' failed verdicts) under the image's evidence tags, the
signed SBOM, and the VSAs in the Sigstore layouts. Only what a named key signed about this very digest counts;
what does not count is said. The policy (`POLICIES`, any of them, `pass` by default): `pass` a trusted pass of
the suite (any spec, or the one `spec` names), `gpu` such a pass on real GPUs, `sbom` a trusted SBOM, `vsa` a
trusted VSA that says PASSED; `gpu_model` asks for a pass on that GPU model. A trusted failed verdict beside the
digest refuses it, whatever passed elsewhere (on that model, when one is named).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import EngineError, ImageBuilderError
from . import passes, predicates, sigstore
from .passes import RecordRegistry, RegistryPasses, Signed
from .sboms import RegistrySboms
from .signing import Trust

POLICIES = ("pass", "gpu", "sbom", "vsa")


class Undecided(ImageBuilderError):
    """The evidence could not be read (the registry did not answer, or refused): neither admitted nor refused."""

    exit_code = 2


@dataclass(frozen=True)
class Verdict:
    image: str  # host/repo@digest
    admitted: bool
    why: tuple[str, ...]  # what refused it (empty when admitted)
    passes: tuple[str, ...] = ()  # the trusted passes, one line each
    failures: tuple[str, ...] = ()
    sbom: str = ""
    vsas: tuple[str, ...] = ()
    ignored: tuple[str, ...] = field(default=())  # evidence beside it that does not count, and why

    def lines(self) -> list[str]:
        head = f"{'ADMITTED' if self.admitted else 'REFUSED'} {self.image}"
        out = [head, *(f"  refused: {w}" for w in self.why)]
        out += [f"  pass: {p}" for p in self.passes] or ["  pass: none that counts"]
        out += [f"  FAILED: {f}" for f in self.failures]
        out += [f"  sbom: {self.sbom}", *(f"  vsa: {v}" for v in self.vsas)]
        out += [f"  not counted: {i}" for i in self.ignored]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "admitted": self.admitted, "why": list(self.why), "passes": list(self.passes),
                "failures": list(self.failures), "sbom": self.sbom, "vsas": list(self.vsas),
                "ignored": list(self.ignored)}


def _runner(found: Signed) -> str:
    return f"{predicates.runner(found.record)}{'' if found.record.gpu_verified else ' (not GPU-verified)'}"


def _on_model(found: Signed, model: str) -> bool:
    return any(model.lower() in str(m).lower() for m in found.record.gpu.get("models") or [])


def check(registry: RecordRegistry, repo: str, digest: str, trust: Trust, *, policy: Iterable[str] = ("pass",),
          gpu_model: str | None = None, spec: str | None = None) -> Verdict:
    """The verdict on `repo@digest` under `policy`, from the evidence beside it that `trust` counts."""
    try:
        return _check(registry, repo, digest, trust, set(policy), gpu_model, spec)
    except EngineError as exc:
        raise Undecided(f"{registry.host}/{repo}@{digest}: the evidence could not be read: {exc.message}") from None


def _check(registry: RecordRegistry, repo: str, digest: str, trust: Trust, policy: set[str], gpu_model: str | None,
           spec: str | None) -> Verdict:
    image = f"{registry.host}/{repo}@{digest}"
    if registry.manifest_digest(repo, digest) is None:
        raise Undecided(f"{image}: no such image in the registry")
    store = RegistryPasses(registry, trust)
    looked = [(tag, store.read(repo, tag)) for tag in passes.tags_for(digest, registry.tags(repo))]
    ignored = [got.rejected for _, got in looked if got.rejected]
    config = store.config_digest(repo, digest)
    counted = []
    for tag, got in looked:
        if got.found is None:
            continue
        if got.found.record.config != config:
            ignored.append(f"{tag}: about image {got.found.record.config}, not {config}")
        elif spec is None or got.found.record.spec.startswith(spec):
            counted.append((tag, got.found))
    good = [f for _, f in counted if f.record.passed]
    bad = [f for _, f in counted
           if f.record.verdict == passes.FAILED and (gpu_model is None or _on_model(f, gpu_model))]
    why = [f"failed on {_runner(f)} (spec {f.record.spec[:16]}, {f.record.date}, signed by {f.signer()})" for f in bad]
    if "pass" in policy and not good:
        why.append("no trusted pass of the suite" + (f" of spec {spec}" if spec else ""))
    if "gpu" in policy and not any(f.record.gpu.get("kind") == "gpu" and f.record.gpu_verified for f in good):
        why.append("no trusted pass on real GPUs")
    if gpu_model is not None and not any(_on_model(f, gpu_model) and f.record.gpu_verified for f in good):
        why.append(f"no trusted pass on {gpu_model}")
    sbom = RegistrySboms(registry, trust).lookup(repo, digest)
    if "sbom" in policy and sbom.sbom is None:
        why.append(f"no trusted SBOM ({sbom.rejected or 'none beside it'})")
    vsas, rejected = sigstore.read(registry, repo, digest, predicates.VSA, trust)
    ignored += rejected
    if "vsa" in policy and not any(v.predicate.get("verificationResult") == "PASSED" for v in vsas):
        why.append("no trusted VSA that says PASSED")
    return Verdict(
        image, not why, tuple(why),
        passes=tuple(f"{_runner(f)}, spec {f.record.spec[:16]}, {f.record.date}, signed by {f.signer()}" for f in good),
        failures=tuple(f"{_runner(f)}, spec {f.record.spec[:16]}" for _, f in counted
                       if f.record.verdict == passes.FAILED),
        sbom=f"signed by {sbom.sbom.signer()}" if sbom.sbom else (sbom.rejected or "none"),
        vsas=tuple(f"{v.predicate.get('verificationResult')} {', '.join(v.predicate.get('verifiedLevels') or [])} "
                   f"({v.where}, key {v.keyid[:16]})" for v in vsas),
        ignored=tuple(ignored))
