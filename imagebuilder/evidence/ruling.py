"""The one judge of evidence beside a digest: what verify, publish, promote and `check` each ask (`Ask`), ruled on
what `beside.read` found (`Beside`), by one set of rules. Pure: no I/O, so a rule cannot differ between commands,
and each is unit-tested and seen failing when removed (tests/unit/test_ruling.py, benchmarks/rule_mutants_i50.py).

The rules, in the order a refusal names them:
1. provenance: a build record signed by a key trusted for `build` names this digest's image (its config digest),
   the node's key where one is asked, and the image it was built on where one is asked;
2. records count only about this very image: subject, manifest and config digest (`Beside` keeps the rest as
   ignored, with why) and, where a spec is asked, of that spec;
3. verdicts fail closed: per GPU model the newest verdict counts (by its signed time), and a verdict tag whose
   record does not verify, or is not the verdict its tag names, blocks as a failure would (`passes.Verdicts`);
   with a GPU model asked, only that model's failures (and every unreadable verdict) block;
4. a pass: a trusted pass of the spec under its pass tag (a GPU model's verdict is not the pass); `verified`: on
   GPUs where the image is a CUDA image; `gpu`: on real GPUs (its pass, or a model's verdict);
   `gpu_model`: on that model (its pass, or its verdict);
5. `sbom`: a signed SBOM that counts; `vsa`: a trusted VSA that says PASSED.
A VSA written beside a published digest says PASSED exactly when rules 1-4 admit it (`vsa_result`).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import passes
from .beside import Beside
from .passes import Signed, gpu_model
from .provenance import Vouched

RULES = ("provenance", "about-this-image", "spec", "verdicts", "pass", "verified", "gpu", "gpu-model", "sbom", "vsa")


@dataclass(frozen=True)
class Ask:
    """What must stand beside a digest for it to be used."""

    spec: str | None = None  # the spec key (or, from `check --spec`, a prefix of it); None: any spec
    key: str | None = None  # the node key its build record must name; None: any
    parent: str | None = None  # the image ID it must be built on; None: not asked (a root's base is in its key)
    build: bool = True  # a trusted build record naming this image
    passed: bool = True  # a trusted pass
    verified: bool = False  # a CUDA image's pass must be on GPUs (a CPU image's needs none)
    gpu: bool = False  # a pass on real GPUs
    gpu_model: str | None = None  # a pass on this GPU model (a substring of its name); its failures refuse
    sbom: bool = False
    vsa: bool = False


@dataclass(frozen=True)
class Ruling:
    """The judgement: admitted or not, every reason it was not (in rule order), and what counted."""

    admitted: bool
    why: tuple[str, ...]
    passes: tuple[tuple[str, Signed], ...] = ()  # the trusted passes of the spec asked, (tag, signed record)
    failed: tuple[Signed, ...] = ()  # each GPU model whose newest verdict failed
    build: Vouched | None = None
    ignored: tuple[str, ...] = ()  # what is beside it and does not count, and why

    def best(self) -> tuple[str, Signed] | None:
        """The pass that says most: on GPUs first, a pass tag before a model's verdict."""
        ranked = sorted(self.passes, key=lambda p: (not p[1].record.gpu_verified, ".pass-" not in p[0]))
        return ranked[0] if ranked else None

    def first(self) -> str | None:
        return self.why[0] if self.why else None


def provenance(beside: Beside, ask: Ask) -> str | None:
    """Rule 1: why no trusted build record names this image as asked; None when one does."""
    found = beside.build
    if found is None:
        return f"no trusted build record names it: {beside.build_why}"
    build = found.build
    if ask.key is not None and build.key != ask.key:
        return f"its build record (signed by {found.signer}) is of key {build.key[:12]}, not {ask.key[:12]}"
    if beside.config is None or build.config != beside.config:
        return f"its build record (signed by {found.signer}) is about image {build.config}, not {beside.config}"
    if ask.parent is not None and build.parent != ask.parent:
        return (f"it was built on image {build.parent} (its build record, signed by {found.signer}); its parent "
                f"here is image {ask.parent}")
    return None


def _of_spec(spec: str, asked: str | None) -> bool:
    return asked is None or spec == asked or (len(asked) < 64 and spec.startswith(asked))


def _on_model(found: Signed, model: str) -> bool:
    return _on_gpus(found) and any(model.lower() in str(m).lower() for m in found.record.gpu.get("models") or [])


def _on_gpus(found: Signed) -> bool:
    """A pass of a run on real GPUs (the record says so, and its key may say it: `passes.role_of`)."""
    return found.record.gpu.get("kind") == "gpu" and bool(found.record.gpu.get("verified"))


def _verified(found: Signed) -> bool:
    """A pass that says as much as its image needs: on real GPUs for a CUDA image (its expectations, part of the
    spec it is a pass of, say CUDA; never the record's own `kind`), any pass for a CPU image."""
    return _on_gpus(found) if found.record.expect.get("cuda") else found.record.gpu_verified


def judge(beside: Beside, ask: Ask) -> Ruling:
    """Rule on `beside` for `ask`."""
    why: list[str] = []
    ignored = list(beside.unread)
    if ask.build:
        problem = provenance(beside, ask)
        if problem is not None:
            why.append(problem)
    counted: list[tuple[str, Signed]] = []
    for tag, got in beside.records:
        if got.found is None:
            if got.rejected:
                ignored.append(got.rejected)
            continue
        record = got.found.record
        if record.manifest != beside.digest or record.config != beside.config:
            ignored.append(f"{tag}: about image {record.config}, not {beside.config}")
        elif _of_spec(record.spec, ask.spec):
            counted.append((tag, got.found))
    specs = sorted({s.record.spec for _, s in counted} | ({ask.spec} if ask.spec and len(ask.spec) == 64 else set()))
    failed: list[Signed] = []
    unreadable: list[str] = []
    for spec in specs:
        verdicts = passes.Verdicts.of(beside.digest, spec, [
            (tag, got) for tag, got in beside.records if ".gpu" in tag and passes.spec16(tag) == spec[:16]])
        failed += [f for f in verdicts.failed if ask.gpu_model is None or _on_model(f, ask.gpu_model)]
        unreadable += verdicts.unreadable
    why += [f"failed this spec's suite on {gpu_model(f.record.gpu)} (spec {f.record.spec[:16]}, {f.record.date}, "
            f"signed by {f.signer()})" for f in failed]
    why += [f"a GPU verdict beside it does not count ({u}); a verdict that cannot be read blocks as a failure would"
            for u in unreadable]
    good = tuple((t, s) for t, s in counted if s.record.passed and passes.is_pass_tag(t))  # (a verdict is no pass)
    on_models = [s for _, s in counted if s.record.passed]  # (a model's verdict says it passed on that model)
    if ask.passed and not good:
        untested = any(s.record.verdict == passes.UNTESTED for _, s in counted)
        why.append("no trusted pass of the suite" + (f" of spec {ask.spec[:16]}" if ask.spec else "")
                   + (" (it was only ever published untested)" if untested else ""))
    if ask.verified and good and not any(_verified(s) for _, s in good):
        why.append("it passed without a GPU only (not GPU-verified; verify it on a GPU host)")
    if ask.gpu and not any(_on_gpus(s) for s in on_models):
        why.append("no trusted pass on real GPUs")
    if ask.gpu_model is not None and not any(_on_model(s, ask.gpu_model) for s in on_models):
        why.append(f"no trusted pass on {ask.gpu_model}")
    if ask.sbom and beside.sbom.sbom is None:
        why.append(f"no trusted SBOM ({beside.sbom.rejected or 'none beside it'})")
    if ask.vsa and not any(v.predicate.get("verificationResult") == "PASSED" for v in beside.vsas):
        why.append("no trusted VSA that says PASSED")
    return Ruling(not why, tuple(why), good, tuple(failed), beside.build, tuple(ignored))


def vsa_result(beside: Beside, spec: str, key: str | None) -> Ruling:
    """What a VSA beside a published digest says for `spec`: the ruling publish applied (provenance, verdicts, a
    pass of the spec), so a VSA never says FAILED beside a digest this rule published, nor PASSED beside one it
    would refuse."""
    return judge(beside, Ask(spec=spec, key=key))
