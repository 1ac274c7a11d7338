"""CI's view of a plan: stage waves (an entry that shares a node with an earlier one waits for that entry's
wave, so the shared node is staged once) and a GitHub Actions strategy matrix with one job per entry. Pure."""

from __future__ import annotations

from typing import Any

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
                  wave: int | None = None) -> dict[str, Any]:
    """A GitHub Actions `strategy.matrix` with one job per entry (`--only '<entry>/*'` stages or verifies it):
    each entry's `wave` (shared nodes are staged by the first wave that has them: `waves`), `gpu`, and the
    runners its verify job runs on (CUDA entries on GPU runners). `wave`: only the entries of that wave."""
    include = []
    entry_waves = waves(plan)
    for entry in plan.entries():
        if wave is not None and entry_waves[entry.id] != wave:
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
    return {"include": include}
