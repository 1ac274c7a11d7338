"""`promote`: point new tags at manifests that are already in the registry, by digest, without a build
(e.g. nightly -> stable). Within one registry; across repositories the blobs are mounted, not copied.

The publishing rule holds here too: a source digest moves only when a pass record of the current suite
sits beside it (`passes`); its records go along to another repository. `--allow-untested` moves it anyway
and writes an `untested` record beside it in the target."""

from __future__ import annotations

import datetime
import fnmatch
import re
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..declarations.vulnerabilities import Policy
from ..errors import EngineError, InputError, Refused, RegistryAccess, did_you_mean
from ..evidence import attestation, beside, passes, provenance, referrers, ruling, sboms
from ..evidence.passes import PassRecord, RegistryPasses, Signed
from ..evidence.signing import Keys, Trust
from ..evidence.spec import Specs
from ..input.matrix import VulnerabilitySettings
from ..plan.plan import Node, Plan
from ..plan.tags import TAG_RE
from ..ports.reference import split_reference
from ..ports.registry import Registry
from ..supply import osv
from ..supply.policy import installed, judge, stale

FIELDS = ("tag", "match", "repository")


@dataclass(frozen=True)
class Move:
    source: str  # host/repo:tag
    target: str  # host/repo:tag
    digest: str
    previous: str | None  # what the target named before (None: a new tag)

    @property
    def state(self) -> str:
        if self.previous is None:
            return "new"
        return "unchanged" if self.previous == self.digest else f"moves from {self.previous[:19]}"


def template_problem(template: str) -> str | None:
    """What is wrong with a `--to` template (braces that do not pair, a field other than FIELDS, a conversion
    or format a tag cannot take), or None."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
        unknown = next((name for name in names if name not in FIELDS), None)
        if unknown is not None:
            return f"uses unknown field {{{unknown}}}: " + (did_you_mean(unknown, FIELDS) or
                                                            f"fields: {', '.join(FIELDS)}")
        template.format(**{name: name for name in FIELDS})
    except (ValueError, KeyError, IndexError) as exc:
        return f"is not a template: {exc}"
    return None


def _target(template: str, source_repo: str, tag: str, match: str) -> tuple[str, str]:
    """The (repository, tag) a source tag is promoted to; `template` is a tag template, or a whole
    reference `host/repo:tag-template` in the same registry."""
    problem = template_problem(template)
    if problem is not None:
        raise InputError(f"--to {template!r}: {problem}")
    filled = template.format(tag=tag, match=match, repository=source_repo)
    repo, _, new_tag = filled.rpartition(":") if ":" in filled.rsplit("/", 1)[-1] else ("", "", filled)
    if not TAG_RE.fullmatch(new_tag):
        raise InputError(f"--to {template!r} gives {new_tag!r} for {tag!r}, which is not a valid tag")
    return repo, new_tag


def plan_moves(registry: Registry, pattern: str, template: str) -> list[Move]:
    host, repo, glob = split_reference(pattern)
    if "*" not in glob and "?" not in glob and "[" not in glob and pattern.rsplit(":", 1)[-1] != glob:
        raise InputError(f"--from {pattern!r} must end in :TAG-GLOB, e.g. {pattern}:nightly-*")
    regex = re.compile(fnmatch.translate(glob))
    star = glob.find("*")
    moves = []
    for tag in registry.tags(repo):
        if tag.startswith("cache-") or attestation.is_evidence_tag(tag) or not regex.match(tag):
            continue
        match = tag[star:len(tag) - (len(glob) - star - 1)] if star >= 0 else tag
        target_repo, new_tag = _target(template, repo, tag, match)
        if target_repo:
            target_host, target_repo, _ = split_reference(f"{target_repo}:x")
            if target_host != host:
                raise InputError(f"--to {template!r} names registry {target_host}; promote stays in {host}",
                                 hint="copy between registries with a registry tool (skopeo, crane)")
        else:
            target_repo = repo
        digest = registry.manifest_digest(repo, tag)
        if digest is None:
            continue  # deleted while listing
        moves.append(Move(f"{host}/{repo}:{tag}", f"{host}/{target_repo}:{new_tag}", digest,
                          registry.manifest_digest(target_repo, new_tag)))
    targets = [m.target for m in moves]
    clash = sorted({t for t in targets if targets.count(t) > 1})
    if clash:
        raise InputError(f"--to {template!r} gives the same tag to several sources: {', '.join(clash[:3])}",
                         hint="use {tag} or {match} in the template")
    return moves


@dataclass(frozen=True)
class Evidence:
    """Why a source digest may move: its pass record (current suite, signed by a trusted key), or why it may
    not."""

    record: PassRecord | None
    tag: str | None  # the record's tag beside the source
    why: str  # a pass: where, when and who signed it; none: what is missing
    node: str | None = None  # the node a trusted record beside the digest names (a pass's, or an untested one's)

    @property
    def passed(self) -> bool:
        return self.record is not None


def evidence(registry: Registry, trust: Trust, move: Move, tags: list[str],
             spec_of: Callable[[str], str | None]) -> Evidence:
    """`spec_of(node id)`: the spec the current matrix expects of that node (None: it has no such node). What is
    beside the digest is read once (`beside.read`) and ruled on by the judge publish applies (`ruling.judge`): a
    trusted build record names this image, no GPU model's verdict of the spec stands against it, and a trusted
    pass of that spec, on GPUs where the image is a CUDA image, is beside it."""
    repo = split_reference(move.source)[1]
    found = beside.read(registry, repo, move.digest, trust, tags=tags)
    expected: list[tuple[str, Signed]] = []
    rejected: list[str] = []
    for tag, got in found.records:
        record = got.record
        if got.found is not None and record is not None and record.manifest == move.digest and \
                record.config == found.config:
            wanted = spec_of(record.node) if record.verdict != passes.UNTESTED else record.spec
            if wanted == record.spec:
                expected.append((tag, got.found))
            else:
                rejected.append(f"its pass ({tag}) is of another spec than the current matrix expects of "
                                f"{record.node}" if wanted else f"its pass is of {record.node}, which the current "
                                "matrix does not have")
        elif got.rejected is not None:
            rejected.append(got.rejected)
    refusal = None
    for spec in sorted({s.record.spec for _, s in expected if s.record.verdict != passes.UNTESTED}):
        ruled = ruling.judge(found, ruling.Ask(spec=spec, verified=True))
        best = ruled.best()
        if ruled.admitted and best is not None:
            tag, signed = best
            record = signed.record
            gpu = ", ".join(record.gpu.get("models") or []) or str(record.gpu.get("kind") or "?")
            return Evidence(record, tag, f"passed {record.date} on {gpu} ({tag}, signed by {signed.signer()}; built "
                                         f"as {found.build.build.node if found.build else '?'}, vouched by "
                                         f"{found.build.signer if found.build else '?'})")
        refusal = refusal or (ruled.first() or "", ruled.best())
    if refusal is not None:
        why, best = refusal
        return Evidence(None, None, why, best[1].record.node if best is not None else None)
    if any(s.record.verdict == passes.UNTESTED for _, s in expected):
        return Evidence(None, None, "it was only ever published untested (--allow-untested)",
                        next(s.record.node for _, s in expected if s.record.verdict == passes.UNTESTED))
    if rejected:
        return Evidence(None, None, f"no pass record that counts: {rejected[0]}")
    return Evidence(None, None, "no pass record beside this digest")


def check_target(registry: Registry, trust: Trust, move: Move, tags: list[str]) -> None:
    """A promotion writes public tags only: never a key tag or a record tag, and never a tag that names an image
    recorded as another node's (it would take that node's name)."""
    target_repo, tag = split_reference(move.target)[1:]
    if tag.startswith("cache-") or attestation.is_evidence_tag(tag):
        raise InputError(f"--to gives {move.target}: a {'key' if tag.startswith('cache-') else 'pass record or SBOM'} "
                         "tag, which only imagebuilder's own steps write")
    if move.previous is None or move.previous == move.digest:
        return
    store, source_repo = RegistryPasses(registry, trust), split_reference(move.source)[1]
    owners = {got.found.record.node for t in passes.tags_for(move.previous, registry.tags(target_repo))
              if (got := store.read(target_repo, t)).found is not None}
    mine = {got.found.record.node for t in passes.tags_for(move.digest, tags)
            if (got := store.read(source_repo, t)).found is not None}
    if owners and mine and not owners & mine:
        raise InputError(f"--to gives {move.target}, which names {move.previous[:19]}, recorded as "
                         f"{', '.join(sorted(owners))}; {move.source} is {', '.join(sorted(mine))}: not overwritten")


def require_push(registry: Registry, moves: list[Move]) -> None:
    """Before any tag moves: the credentials may push to every repository a tag moves into (`RegistryAccess`
    naming the first that refuses, and why)."""
    for repo in sorted({split_reference(m.target)[1] for m in moves}):
        why = registry.can_push(repo)
        if why is not None:
            raise RegistryAccess(f"promote needs push to {registry.host}/{repo}: {why}; nothing moved",
                                 hint=f"give it credentials that may push to {registry.host}/{repo}")


def apply(registry: Registry, keys: Keys, move: Move, proof: Evidence, *, allow_untested: bool = False) -> bool:
    """Move the tag; bring its SBOM (first) and pass record along into another repository, or, for an untested
    digest moved by --allow-untested, leave an `untested` record beside it in the target (signed by this machine).
    Whether an SBOM that counts is beside the digest in the target."""
    store = RegistryPasses(registry, keys.trust, keys.signer)
    source_repo = split_reference(move.source)[1]
    host, target_repo, tag = split_reference(move.target)
    if proof.record is None and not allow_untested:
        raise Refused(f"promote {move.source}: {proof.why}; not moved")
    has_sbom = carry_sbom(registry, keys.trust, move.digest, source_repo, target_repo)  # (before the tag moves)
    carry_verdicts(registry, move.digest, source_repo, target_repo)  # (so is every verdict: failures block there too)
    if move.previous != move.digest:
        registry.copy(source_repo, move.digest, target_repo, tag)
        held = registry.manifest_digest(target_repo, tag)
        if held != move.digest:
            raise EngineError(f"promote {move.target}: the registry holds {held}, not {move.digest}")
    if proof.record is not None and proof.tag is not None:
        return has_sbom
    config = store.config_digest(source_repo, move.digest) or ""
    store.put(target_repo, PassRecord(passes.UNTESTED, config=config, spec="0" * 64, node=move.source,
                                      entry="", date=passes.now(), suite=passes.suite_hash(),
                                      allowed_by="--allow-untested (promote)").at(move.digest, f"{host}/{target_repo}"))
    return has_sbom


def carry_verdicts(registry: Registry, digest: str, source_repo: str, target_repo: str) -> None:
    """Its build record and every record tag beside the digest (its passes, per-GPU-model verdicts, failed ones
    included) go along into
    another repository, where the target lacks it: a failure recorded before the promotion blocks promotions from
    there as it does here. (One recorded after it is only in the repository it was written to.)"""
    if target_repo == source_repo:
        return
    held = set(registry.tags(target_repo))
    build = provenance.tag(digest)  # (its build record too: what `check --policy build` asks there)
    if build not in held and (found := registry.manifest_digest(source_repo, build)) is not None:
        copy_referrer(registry, source_repo, found, target_repo, build, digest)
    for record_tag in passes.tags_for(digest, registry.tags(source_repo)):
        if record_tag not in held and (found := registry.manifest_digest(source_repo, record_tag)) is not None:
            copy_referrer(registry, source_repo, found, target_repo, record_tag, digest)  # (and its referrers entry)


def carry_sbom(registry: Registry, trust: Trust, digest: str, source_repo: str, target_repo: str) -> bool:
    """The image's SBOM goes along into another repository when the one beside it counts (signed by a trusted
    key, about this digest), over whatever does not count there; whether one that counts is there now."""
    target = sboms.RegistrySboms(registry, trust)
    if target.lookup(target_repo, digest).sbom is not None:
        return True
    if target_repo == source_repo or target.lookup(source_repo, digest).sbom is None:
        return False
    tag = sboms.sbom_tag(digest)
    artifact = registry.manifest_digest(source_repo, tag)
    if artifact is None:
        return False
    copy_referrer(registry, source_repo, artifact, target_repo, tag, digest)
    return target.lookup(target_repo, digest).sbom is not None


def copy_referrer(registry: Registry, source_repo: str, artifact: str, target_repo: str, tag: str,
                  subject: str) -> None:
    """Copy an attestation of `subject` into another repository under `tag`, listed among the image's referrers
    there (the fallback index, where the registry has no referrers API)."""
    registry.copy(source_repo, artifact, target_repo, tag)
    if registry.referrers(target_repo, subject) is None:
        body, media_type = registry.manifest(target_repo, artifact)
        referrers.add(registry, target_repo, subject, referrers.descriptor(body, artifact, media_type))


def vulnerable(registry: Registry, trust: Trust, move: Move, policy: Policy, advisories: osv.Advisories,
               today: datetime.date) -> str | None:
    """The vulnerability gate on a promotion, with the current data and the matrix's policy for the digest's node:
    why its (trusted) SBOM blocks it, or why it cannot be judged when the policy requires data; None when it may
    move. A digest without an SBOM that counts is judged by nothing (said when it moves)."""
    aged = stale(policy, advisories, today)
    if aged is not None and policy.require_data:
        return f"it cannot be judged: {aged}"
    found = sboms.RegistrySboms(registry, trust).lookup(split_reference(move.source)[1], move.digest)
    if found.sbom is None:
        return "it has no SBOM that counts, and the matrix requires vulnerability data to judge it" \
            if policy.require_data else None
    looked_up, _ = installed(found.sbom.document)
    verdict = judge(looked_up, advisories, policy, today)
    return f"blocked by the vulnerability gate: {verdict.why()}" if verdict.blocked else None


def settings_for(node: Node | None, plan: Plan) -> list[VulnerabilitySettings]:
    """The vulnerability settings a move is judged by: its node's; for a digest whose node the matrix does not know
    (no trusted record names one, or another matrix's), every distinct setting of the matrix's entries, any of which
    that blocks keeps it back (so `require_data` refuses it where it has no SBOM that counts)."""
    if node is not None:
        return [node.entry.vulnerabilities]
    return list(dict.fromkeys(entry.vulnerabilities for entry in plan.entries()))


class Gate(Protocol):
    """The vulnerability gate a promotion asks (the supply chain's, `SupplyChain`: the command composes it in)."""

    @property
    def today(self) -> datetime.date:
        """The day that decides which exceptions expired."""
        ...

    def advisories(self, data: tuple[Path, ...]) -> osv.Advisories:
        """The vulnerability data of these files (none: the packaged data)."""
        ...


@dataclass(frozen=True)
class Promotion:
    """A promotion decided, before any tag moves: each move with its evidence, and the targets the vulnerability
    gate keeps back (with why). Its `failure`, when there is one, means nothing may move."""

    registry: Registry
    keys: Keys
    moves: list[Move]
    proofs: list[Evidence]
    blocked: dict[str, str]  # target -> why the gate keeps it back
    dry_run: bool = False
    allow_untested: bool = False

    @property
    def untested(self) -> list[Move]:
        """The moves without a pass record of the current suite."""
        return [m for m, p in zip(self.moves, self.proofs, strict=True) if not p.passed]

    def failure(self) -> str | None:
        """Why nothing moves (a move the gate blocks; an untested one without --allow-untested), or None."""
        nothing = f"nothing {'would move' if self.dry_run else 'moved'}"
        if self.blocked:
            first = next(iter(self.blocked))
            return (f"{len(self.blocked)} of {len(self.moves)} source tags are kept back by the vulnerability gate "
                    f"(first: {first}: {self.blocked[first]}): {nothing}")
        refused = self.untested
        if refused and not self.allow_untested:
            return (f"{len(refused)} of {len(self.moves)} source tags have no pass record of the current suite "
                    f"(first: {refused[0].source}): {nothing} (--allow-untested moves them anyway, recorded beside "
                    "each digest)")
        return None

    def summary(self) -> str:
        changed = sum(m.previous != m.digest for m in self.moves)
        untested = f", {len(self.untested)} UNTESTED (--allow-untested)" if self.untested else ""
        return f"{len(self.moves)} tags, {changed} {'would change' if self.dry_run else 'changed'}{untested}"


def prepare(registry: Registry, keys: Callable[[], Keys], plan: Plan, pattern: str, template: str, gate: Gate, *,
            dry_run: bool = False, allow_untested: bool = False) -> Promotion:
    """Decide a promotion of the tags `pattern` matches to `template`'s: the moves (an input error when none
    matches, or a target is no tag to write), each move's evidence against the spec `plan` expects of its node,
    and what the vulnerability gate keeps back under each node's policy. `keys`: loaded once there are moves."""
    moves = plan_moves(registry, pattern, template)
    if not moves:
        raise InputError(f"--from {pattern!r} matches no tag")
    tags = registry.tags(split_reference(pattern)[1])
    loaded = keys()
    for move in moves:
        check_target(registry, loaded.trust, move, tags)
    specs = Specs(plan)
    known = {n.id: n for n in plan.nodes}

    def spec_of(node_id: str) -> str | None:
        return specs.key(known[node_id]) if node_id in known else None

    keyring = loaded.trust.plus(loaded.build_trust)  # (each key within its roles: `signing`)
    proofs = [evidence(registry, keyring, move, tags, spec_of) for move in moves]
    blocked = {}
    for move, proof in zip(moves, proofs, strict=True):
        node = known.get(proof.record.node if proof.record is not None else proof.node or "")
        for settings in settings_for(node, plan):  # (a node it does not know: every policy's)
            why = vulnerable(registry, loaded.trust, move, settings.policy, gate.advisories(settings.data), gate.today)
            if why is not None:
                blocked[move.target] = why
                break
    return Promotion(registry, loaded, moves, proofs, blocked, dry_run=dry_run, allow_untested=allow_untested)


def carry_out(promotion: Promotion) -> Iterator[Move]:
    """Move every tag of a promotion that has no `failure` (push rights first: nothing moves without them), one
    by one as this is iterated; yields each move whose digest has no SBOM that counts in the target, once moved."""
    require_push(promotion.registry, promotion.moves)
    for move, proof in zip(promotion.moves, promotion.proofs, strict=True):
        if not apply(promotion.registry, promotion.keys, move, proof, allow_untested=promotion.allow_untested):
            yield move
