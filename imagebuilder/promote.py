"""`promote`: point new tags at manifests that are already in the registry, by digest, without a build
(e.g. nightly -> stable). Within one registry; across repositories the blobs are mounted, not copied."""

from __future__ import annotations

import fnmatch
import re
import string
from dataclasses import dataclass

from .errors import EngineError, InputError, did_you_mean
from .registry import Registry, split_reference
from .tags import TAG_RE

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


def _target(template: str, source_repo: str, tag: str, match: str) -> tuple[str, str]:
    """The (repository, tag) a source tag is promoted to; `template` is a tag template, or a whole
    reference `host/repo:tag-template` in the same registry."""
    names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    for name in names:
        if name not in FIELDS:
            raise InputError(f"--to {template!r} uses unknown field {{{name}}}",
                             hint=did_you_mean(name, FIELDS) or f"fields: {', '.join(FIELDS)}")
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
        if tag.startswith("cache-") or not regex.match(tag):
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


def apply(registry: Registry, move: Move) -> None:
    if move.previous == move.digest:
        return
    source_repo = split_reference(move.source)[1]
    _, target_repo, tag = split_reference(move.target)
    registry.copy(source_repo, move.digest, target_repo, tag)
    held = registry.manifest_digest(target_repo, tag)
    if held != move.digest:
        raise EngineError(f"promote {move.target}: the registry holds {held}, not {move.digest}")
