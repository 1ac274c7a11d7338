"""`plan`'s machine formats: the decided plan as JSON, a GitHub Actions strategy matrix, or an engine's documents
(`emit`). The formats a person reads (tree, table) are the command's to print."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from ..choices import EMIT_FORMATS, MAX_JOBS
from ..errors import InputError
from ..plan import bases, keys
from ..plan import plan as plan_mod
from ..plan import waves as waves_mod
from ..ports.registry import Registries


@dataclass(frozen=True)
class Formatting:
    """What the machine formats are told besides the plan: where it came from, and each format's flags."""

    matrix_file: Path
    registry: str | None
    only: str | None
    gpu_runner: str  # runs-on labels, comma-separated
    cpu_runner: str
    wave: int | None = None  # github-matrix: only this stage wave's entries
    verify_on: str | None = None  # github-matrix: only the entries verified on GPU (or CPU) runners
    max_jobs: int = MAX_JOBS  # github-matrix: jobs per strategy matrix; github-actions: jobs per workflow run
    part: int | None = None  # an engine's format: only its Nth document
    tool_image: str | None = None
    kueue_queue: str | None = None
    global_args: tuple[str, ...] = ()  # the global options the plan was made with (a later part is made with them)
    base_ids: tuple[tuple[str, str], ...] = ()  # --base-image-id (the verify pods' judges, where no engine resolved)

    def labels(self) -> dict[str, tuple[str, ...]]:
        return {name: tuple(x.strip() for x in value.split(",") if x.strip())
                for name, value in (("gpu", self.gpu_runner), ("cpu", self.cpu_runner))}


def undecided(plan: plan_mod.Plan) -> plan_mod.Plan:
    """The plan without an engine: every node's status unknown, and its key too unless a lock pins the bases (the
    lock is the input: every key follows from it, no engine needed). A node shared with an earlier one is known to
    be the same."""
    if plan.locked:
        plan = bases.keyed(plan)
    unknown = plan_mod.Decision(plan_mod.State.UNKNOWN, "no engine to ask what is cached" if plan.locked else
                                "no engine to resolve the base image")
    first = keys.first_of(keys.identities(plan))
    return plan.with_nodes([dataclasses.replace(n, decision=dataclasses.replace(
        unknown, same_as=None if first[n.id] == n.id else first[n.id])) for n in plan.nodes])


def document(plan: plan_mod.Plan, fmt: str, how: Formatting, registries: Registries | None) -> str | None:
    """The plan as `fmt` says, ending in a newline; None for tree and table. `registries`: the decided plan's
    (None without an engine; an engine whose documents pin each leaf's staged digest, k8s-jobs, needs them)."""
    if fmt == "json":
        return json.dumps([n.to_json() for n in plan.nodes], indent=2) + "\n"
    labels = how.labels()
    if fmt in EMIT_FORMATS:
        return _emitted(plan, fmt, how, labels, registries)
    if fmt == "github-matrix":
        return json.dumps(waves_mod.github_matrix(plan, gpu_runner=labels["gpu"], cpu_runner=labels["cpu"],
                                                  wave=how.wave, verify_on=how.verify_on,
                                                  max_jobs=how.max_jobs)) + "\n"
    return None


def base_ids(plan: plan_mod.Plan, given: tuple[tuple[str, str], ...] = ()) -> tuple[str, ...]:
    """`IMAGE=ID` of each base image the decided plan resolved (its roots' parent input), else as `given`
    (`--base-image-id`): what a verify pod's judge, which has no engine, is given."""
    found = {**dict(given), **{n.base_image: dict(n.inputs).get("parent", "") for n in plan.nodes
                               if n.parent is None and n.base_image and dict(n.inputs).get("parent")}}
    return tuple(f"{image}={image_id}" for image, image_id in sorted(found.items()) if image_id.startswith("sha256:"))


def _emitted(plan: plan_mod.Plan, fmt: str, how: Formatting, labels: dict[str, tuple[str, ...]],
             registries: Registries | None) -> str:
    from ..emit import formats
    from ..emit.graph import graph
    from ..emit.settings import Settings
    from ..run.handoff import staged_digests

    pins = formats.ENGINES[fmt].pins_staged_digests
    if pins and registries is None:
        raise InputError(f"--format {fmt} pins each leaf's staged digest: it needs the engine and registry")
    args = ("--matrix", str(how.matrix_file), *(("--registry", how.registry) if how.registry else ()),
            *(("--only", how.only) if how.only else ()))
    settings = Settings(cpu_runner=labels["cpu"], gpu_runner=labels["gpu"], plan_args=args,
                        global_args=how.global_args, max_jobs=how.max_jobs,
                        base_ids=base_ids(plan, how.base_ids),
                        bases=tuple(sorted({n.base_image for n in plan.nodes if n.parent is None and n.base_image})),
                        tool_image=how.tool_image, kueue_queue=how.kueue_queue,
                        digests=staged_digests(plan, registries) if pins and registries else {})
    docs = formats.documents(fmt, graph(plan, str(how.matrix_file), registry=how.registry, only=how.only), settings)
    if how.part is not None and how.part > len(docs):
        raise InputError(f"--part {how.part}: --format {fmt} makes {len(docs)} document(s) for this plan")
    return formats.text(fmt, docs[how.part - 1:how.part] if how.part else docs)
