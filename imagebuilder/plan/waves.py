"""CI's view of a plan: stage waves (an entry that shares a node with an earlier one waits for that entry's
wave, so the shared node is staged once) and a GitHub Actions strategy matrix with one job per entry. Pure."""

from __future__ import annotations

import json
import math
from typing import Any

from ..choices import MAX_JOBS  # jobs one strategy matrix may make
from ..errors import InputError
from . import keys
from .plan import Plan, State


def waves(plan: Plan) -> dict[str, int]:
    """entry id -> the wave its stage job runs in: an entry that shares a node with an entry before it (one
    identity: `keys.identities`) waits for that entry's wave, which stages the shared node once; the later one
    finds it in the registry."""
    same = keys.identities(plan)
    owner: dict[str, str] = {}  # identity -> the entry that stages it
    out: dict[str, int] = {}
    for entry in plan.entries():
        wave = 0
        for node in (n for n in plan.nodes if n.entry.id == entry.id):
            first = owner.setdefault(same[node.id], entry.id)
            if first != entry.id:
                wave = max(wave, out[first] + 1)
        out[entry.id] = wave
    return out


def github_matrix(plan: Plan, *, gpu_runner: tuple[str, ...], cpu_runner: tuple[str, ...],
                  wave: int | None = None, verify_on: str | None = None, max_jobs: int = MAX_JOBS) -> dict[str, Any]:
    """A GitHub Actions `strategy.matrix` with one job per entry (`--only '<entry>/*'` stages or verifies it):
    each entry's `wave` (shared nodes are staged by the first wave that has them: `waves`), `gpu`, and the
    runners its verify job runs on (CUDA entries on GPU runners). `wave`: only the entries of that wave;
    `verify_on` (`gpu` or `cpu`): only the entries verified on those runners. Past `max_jobs` entries, entries
    are packed into at most `max_jobs` jobs (`--only 'a/*,b/*'`), never mixing runners: `pack`."""
    include = []
    entry_waves = waves(plan)
    for entry in plan.entries():
        if wave is not None and entry_waves[entry.id] != wave:
            continue
        if verify_on is not None and (entry.cuda is not None) != (verify_on == "gpu"):
            continue
        nodes = [n for n in plan.nodes if n.entry.id == entry.id]
        include.append({
            "id": entry.id,
            "only": f"{entry.id}/*",
            "torch": entry.torch,
            "accelerator": entry.accelerator,
            "python": entry.python,
            "flavor": entry.flavor,
            "cuda": entry.cuda or "",
            "gpu": entry.cuda is not None,
            "runs_on": list(gpu_runner if entry.cuda else cpu_runner),
            "nodes": len(nodes),
            "to_build": sum(n.status != State.CACHED for n in nodes),
            "wave": entry_waves[entry.id],
        })
    return {"include": pack(include, max_jobs, by=("gpu", "runs_on") if verify_on else ("gpu", "runs_on", "wave"))}


def pack(include: list[dict[str, Any]], max_jobs: int, by: tuple[str, ...] = ("gpu", "runs_on", "wave")
         ) -> list[dict[str, Any]]:
    """At most `max_jobs` jobs for the entries: as they are when they fit, else consecutive entries of one kind
    (the same values of `by`: GPU or CPU, runners, wave) in one job. Each kind gets one job, and the jobs left are
    shared in proportion to the kinds' entries (largest remainders first)."""
    if len(include) <= max_jobs:
        return include
    kinds: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for one in include:
        kinds.setdefault(tuple(json.dumps(one[k]) for k in by), []).append(one)
    if len(kinds) > max_jobs:
        raise InputError(f"{len(kinds)} kinds of entries (runners and waves) cannot share {max_jobs} jobs of one "
                         "strategy matrix", hint="pick fewer with --wave or --verify-on")
    spare = max_jobs - len(kinds)
    ideal = {kind: spare * (len(entries) - 1) / (len(include) - len(kinds)) for kind, entries in kinds.items()}
    share = {kind: 1 + math.floor(x) for kind, x in ideal.items()}
    for kind in sorted(ideal, key=lambda k: ideal[k] - math.floor(ideal[k]), reverse=True)[:max_jobs - sum(
            share.values())]:
        share[kind] += 1
    out = []
    for kind, entries in kinds.items():
        jobs = min(share[kind], len(entries))
        size = math.ceil(len(entries) / jobs)
        for start in range(0, len(entries), size):
            group = entries[start:start + size]
            out.append({**group[0], "id": f"{group[0]['id']}+{len(group) - 1}" if len(group) > 1 else group[0]["id"],
                        "only": ",".join(e["only"] for e in group), "entries": [e["id"] for e in group],
                        "nodes": sum(e["nodes"] for e in group), "to_build": sum(e["to_build"] for e in group)})
    return out
