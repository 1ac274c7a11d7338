"""Verify: the smoke step. A leaf's pass belongs to its image, not its key: it is looked for in the local mirror
by image ID and in the registry beside the digest its key tag names (then the image is never pulled), and only
otherwise the suite runs in a container of the image. A pass found may stand in for running the suite only
where it says as much as a run here would (`refusal`). A skip on a GPU run is not a pass. With `record`
(`imagebuilder verify`), each leaf's pass is written beside the digest its key tag names: verify owns pass
records from the suite to the registry; publish only binds them to tags."""

from __future__ import annotations

import functools
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.markup import escape

from ..errors import EngineError, ImageBuilderError, Refused
from ..evidence import passes, regression
from ..evidence.history import Point, cell_of, line, pins_of
from ..evidence.passes import PassRecord, Signed
from ..ledger import VerifyStatus
from ..plan.keys import cache_ref
from ..plan.plan import Node
from ..ports import LineSink
from ..run.ancestors import via
from ..run.context import RunContext
from ..run.schedule import Task
from ..smoke.judge import judge
from ..smoke.metrics import metrics_of
from ..smoke.pod import Requested
from ..smoke.pod import read as read_pod
from ..smoke.runner import GpuHost, Runner, SmokeReport, gpu_mode, run_smoke
from ..smoke.spec import Spec


def refusal(record: PassRecord, where: str, *, gpus_here: bool, models_here: Collection[str],
            host: GpuHost | None = None) -> str | None:
    """Why a pass found for this image may not stand in for running the suite here; None when it may.
    A CUDA image's pass without a GPU does not where GPUs are (the suite runs again and can verify it: CPU
    fleets build, GPU fleets test); with `models_here` (a verify on a GPU runner), a pass of other GPU models,
    of fewer GPUs, over another interconnect or under other forwarded NCCL settings (`host`) does not stand in
    for this host's."""
    if not record.serves(gpus_here=gpus_here):
        return f"its pass ({where}) was without a GPU; GPUs are here: testing again"
    models = sorted(record.gpu.get("models") or [])
    if models_here and models != sorted(models_here):
        return (f"its pass ({where}) was on {', '.join(models) or 'no GPU'}; this host has "
                f"{', '.join(sorted(models_here))}: testing here too")
    if not models_here or host is None:
        return None
    count = int(record.gpu.get("count") or 0)
    if count < host.gpus:
        return (f"its pass ({where}) was on {count or 'an unknown number of'} GPU(s); this host gives the suite "
                f"{host.gpus}: a pass on fewer GPUs does not stand in for more, testing here")
    link = str(record.gpu.get("interconnect") or "")
    if host.interconnect and link != host.interconnect:
        return f"its pass ({where}) was over {link or 'an unknown interconnect'}; this host's GPUs use " \
               f"{host.interconnect}: testing here too"
    if dict(record.gpu.get("env") or {}) != dict(host.env):
        return f"its pass ({where}) ran with other forwarded NCCL/NVSHMEM settings than this host's: testing here too"
    return None


@dataclass(frozen=True)
class Verify:
    """The smoke step: a `verify:<leaf>` task per leaf, after its build, one suite at a time. A pass of this spec
    for the leaf's very image (the local mirror by image ID, else beside the digest its key tag names) stands in
    for the suite where `refusal` lets it, never with `resmoke`. Otherwise the suite runs (without `run_suite`
    the leaf is `skipped`), the host judges its report, a regression against the lineage fails it unless
    `accept_regression`, and a pass goes to the ledger and, signed, to the local mirror. It writes to the
    registry only with `record`: this GPU model's verdict, then the leaf's pass beside its digest."""

    run_suite: bool = True  # False (--no-smoke, publish): only passes found by image count; nothing runs
    resmoke: bool = False  # run the suite even where a pass of this very image exists
    same_gpu_model: bool = False  # verify on a GPU runner: a pass of other GPU models does not stand in
    record: bool = False  # verify: write each leaf's pass beside the digest its key tag names
    host: GpuHost = field(default_factory=GpuHost)  # the CLI passes `GpuHost.probe()`: no GPU unless it does
    accept_regression: bool = False  # a performance regression is recorded as accepted, and the image passes
    thresholds: regression.Thresholds = field(default_factory=regression.Thresholds.measured)
    pod: Requested | None = None  # the suite ran in this pod's leaf container: judge what it left (`smoke.pod`)

    def start(self, run: RunContext) -> None:
        """With `record`: whether this run may write each leaf's pass record is asked before anything runs (once
        per repository), so that credentials the registry refuses stop the run here (`RegistryAccess`); a
        pull-only answer stops only the leaves that would need a suite (`unwritable`)."""
        if self.record:
            for node in run.plan.nodes:
                if node.leaf:
                    self.unwritable(run, node)

    def tasks(self, run: RunContext) -> list[Task]:
        """verify:<leaf> after its build; one at a time: suites share the GPUs and measure throughput."""
        return [Task(f"verify:{n.id}", functools.partial(self.leaf, run, n), (f"build:{n.id}",), exclusive="smoke")
                for n in run.plan.nodes if n.leaf]

    def interrupted(self, run: RunContext) -> None:
        for record in run.ledger.records():
            if record.leaf and record.built and record.verify is None:
                run.ledger.fail(record.node, "the run was interrupted before this leaf's suite finished; nothing of "
                                "its entry was tagged", verify=VerifyStatus.INTERRUPTED)

    def cancelled(self, run: RunContext, task_ids: Collection[str]) -> None:
        for record in run.ledger.records():
            if f"verify:{record.node}" in task_ids and record.built and record.verify is None:
                run.ledger.fail(record.node, "not started: --fail-fast stopped the run after a failure",
                                verify=VerifyStatus.CANCELLED)

    def leaf(self, run: RunContext, node: Node) -> bool:
        if not run.ledger[node.id].built:
            return True  # the build already failed and said so
        key = run.specs.key(node)
        run.ledger.update(node.id, spec=key)
        found = None if self.resmoke else self.find(run, node, key)
        if found is not None:
            why = refusal(found[0].record, found[1], gpus_here=self.gpus_here(run, node),
                          models_here=self.host.models if self.same_gpu_model and node.entry.cuda else (),
                          host=self.host)
            if why is not None:
                run.logs.say(f"[yellow]  {escape(node.id)}: {escape(why)}[/]")
                found = None
        if found is not None:
            signed, where = found
            record = signed.record
            run.ledger.update(node.id, verify=VerifyStatus.FOUND, record=record, pass_record=where,
                              signer=signed.signer(),
                              smoke_report=dict(record.report) if record.report else None,
                              performance=self.shown(run, node, record),
                              gpu_verified=bool(record.gpu.get("verified")) if node.entry.cuda else None)
            run.logs.say(f"[cyan]● smoke {escape(node.id)}: passed on {escape(record.date)} ({escape(where)}); "
                         "--resmoke runs it again[/]")
        elif not self.run_suite:
            run.ledger.update(node.id, verify=VerifyStatus.SKIPPED)
            return True
        elif self.record and (why := self.unwritable(run, node)):  # before the suite: it would be run for nothing
            run.ledger.update(node.id, verify=VerifyStatus.FAILED, error=f"not tested: its pass record could not be "
                              f"written ({why})")
            run.logs.say(f"[bold red]✗ verify {escape(node.id)}: not tested, its pass record could not be written: "
                         f"{escape(why)}[/]")
            return False
        elif not self.test(run, node, key):
            if self.record:  # this GPU model's failure, beside the digest: it blocks publishing it
                self.record_verdict(run, node, key, passed=False)
            return False
        if self.record and found is None:
            self.record_verdict(run, node, key, passed=True)
        return self.bind(run, node) if self.record else True

    @staticmethod
    def unwritable(run: RunContext, node: Node) -> str | None:
        """Why this run could not write the leaf's pass record beside its digest (verify needs push to the
        repository of its key tag, and a signing key whose records count); None when it can. (The registry's
        answer is kept: `start` asked first.)"""
        if run.keys.signer is None:
            return ("this run has no signing key whose records count: keys are named with --trust-key, and "
                    "IMAGEBUILDER_SIGNING_KEY is not set")
        host, repo, _ = run.key_tag(node)
        return run.registries(host).can_push(repo)

    def record_verdict(self, run: RunContext, node: Node, key: str, *, passed: bool) -> None:
        """The verdict of this host's GPU model on the image, passed or failed, beside the digest its key tag
        names (a run without GPUs records none: its pass, or failure, is the node's own)."""
        record = run.ledger[node.id]
        report = record.smoke_report or {}
        if not node.entry.cuda or report.get("gpu_mode") in (None, "none") or not self.host.models \
                or record.image is None:
            return
        host, repo, _ = run.key_tag(node)
        try:
            digest = record.digest or run.registries.digest(cache_ref(node))
            if digest is None:
                return
            verdict = PassRecord(passes.PASSED if passed else passes.FAILED, config=record.image, spec=key,
                                 node=node.id, entry=node.entry.id, expect=dict(run.specs.told(node).expect),
                                 gpu={"kind": "gpu", "verified": bool(record.gpu_verified), **self.host.facts()},
                                 date=passes.now(), suite=passes.suite_hash(), report=report,
                                 performance=record.performance)
            tag = run.passes(host).put(repo, verdict.at(digest, f"{host}/{repo}"), per_model=True)
        except ImageBuilderError as exc:
            run.logs.say(f"[yellow]  {escape(node.id)}: the verdict of {escape(', '.join(self.host.models))} was "
                         f"not recorded: {escape(exc.message)}[/]")
            return
        run.logs.say(f"[dim]  {escape(node.id)}: {'passed' if passed else 'FAILED'} on "
                     f"{escape(', '.join(self.host.models))}, recorded beside {digest} ({tag})[/]")

    def find(self, run: RunContext, node: Node, key: str) -> tuple[Signed, str] | None:
        """A pass of this spec for the node's very image: in the local mirror by image ID, else in the
        registry beside the image its key tag names (when that is this image, or the image is not here:
        then it is what this run would publish, and is never pulled)."""
        image = run.ledger[node.id].image
        if image is not None:
            local = run.mirror().found(image, key)
            if local is not None:
                return local, f"local mirror {run.cache_dir}"
        host, repo, _ = run.key_tag(node)
        if not run.registries.answers(host):
            return None
        try:
            manifest = run.registries.digest(cache_ref(node))
            if manifest is None:
                return None
            store = run.passes(host)
            config = store.config_digest(repo, manifest)
            if config is None or (image is not None and config != image):
                return None  # the key tag names another image than this one: its passes are not ours
            got = store.lookup(repo, manifest, key, config)
        except ImageBuilderError:
            return None
        if got.rejected is not None:  # named, never counted: the reason stays on the node
            run.ledger.fail(node.id, f"no pass record that counts beside {manifest}: {got.rejected}")
            run.logs.say(f"[yellow]  {escape(node.id)}: {escape(got.rejected)}[/]")
        if got.found is None:
            return None
        run.ledger.update(node.id, digest=manifest)
        return got.found, f"registry {host}/{repo}:{passes.record_tag(manifest, key)}"

    def gpus_here(self, run: RunContext, node: Node) -> bool:
        """Whether the suite would reach GPUs on this host for this node (its `smoke.gpus` setting)."""
        if not node.entry.cuda:
            return False
        if self.pod is not None:
            return self.pod.gpus > 0
        return gpu_mode(node.entry.smoke.gpus, has_toolkit=run.images.worker().has_nvidia_runtime(),
                        devices=list(self.host.devices)) != "none"

    def test(self, run: RunContext, node: Node, key: str) -> bool:
        """Run the suite in a container of the node's image; a pass goes to the ledger and the local mirror."""
        spec = run.specs.told(node)
        step = f"smoke {node.id}"
        start = time.monotonic()
        run.logs.display.start(step)
        run.logs.say(f"[bold]▶ smoke {escape(node.id)}[/]")
        log = run.ledger[node.id].log
        if log is None:
            log = str(run.logs.path(node.id))
            run.ledger.update(node.id, log=log)
            with open(log, "w", encoding="utf-8") as out:
                out.write(f"# {node.id} key {node.key} (cached image)\n")
        try:
            with open(log, "a", encoding="utf-8") as out:
                out.write("---- smoke ----\n")
                try:
                    image, report = self.ran(run, node, spec, run.logs.sink(step, node.id, out, shown=False))
                except ImageBuilderError as exc:
                    run.ledger.update(node.id, verify=VerifyStatus.FAILED, error=f"smoke: {exc.message}")
                    run.logs.show(node.id, log)
                    return False
        finally:
            run.ledger.timed(node.id, "smoke", time.monotonic() - start)
            run.logs.display.stop(step)
        for check in report.checks:
            mark = {"pass": "[green]✓[/]", "fail": "[red]✗[/]"}.get(str(check.get("status")), "[dim]-[/]")
            why = f" [dim]{escape(str(check.get('reason')))}[/]" if check.get("reason") else ""
            run.logs.say(f"  {mark} {escape(node.id)} {escape(str(check.get('name')))}{why}")
        verdict = judge(report, spec.expect, spec.commands, host=self.host, allow_skip=spec.allow_skip)
        smoke_report = {**report.to_json(), "gpu_verified": verdict.gpu_verified, "host_verdict": verdict.why(),
                        **({"host_notes": list(verdict.notes)} if verdict.notes else {})}
        for note in verdict.notes:
            run.logs.say(f"[yellow]  {escape(node.id)}: {escape(note)}[/]")
        run.ledger.update(node.id, smoke_report=smoke_report, allowed_skips=verdict.allowed_skips)
        if not verdict.passed:
            run.ledger.update(node.id, verify=VerifyStatus.FAILED, error=verdict.why(), log_tail=report.log_tail)
            run.logs.show(node.id, log)
            return False
        if node.entry.cuda and not verdict.gpu_verified:
            run.logs.say(f"[yellow]  {escape(node.id)} is a CUDA image and was not GPU-verified (no GPU here)[/]")
        performance = self.performance(run, node, image, smoke_report, spec.expect)
        if performance is not None and performance.regressed:
            if not self.accept_regression:
                run.ledger.update(node.id, verify=VerifyStatus.FAILED, error=performance.why(),
                                  performance=performance.report_json(), log_tail=report.log_tail)
                run.logs.say(f"[bold red]✗ {escape(node.id)}: {escape(performance.why())}[/] [dim](--accept-"
                             "regression records it as accepted: the lineage's new normal)[/]")
                return False
            performance = performance.accepted()
            run.logs.say(f"[yellow]  {escape(node.id)}: accepted (--accept-regression): "
                         f"{escape(performance.why())}[/]")
        perf = performance.to_json() if performance is not None else None
        record = PassRecord(passes.PASSED, config=image, spec=key, node=node.id, entry=node.entry.id,
                            expect=dict(spec.expect), gpu=self.gpu_facts(smoke_report, bool(node.entry.cuda)),
                            date=passes.now(), suite=passes.suite_hash(), report=smoke_report, performance=perf)
        run.mirror().put(record)
        run.ledger.update(node.id, verify=VerifyStatus.PASSED, record=record, pass_record="this run", error=None,
                          signer=run.keys.signer.public.label() if run.keys.signer else None,
                          performance=performance.report_json() if performance is not None else None,
                          gpu_verified=verdict.gpu_verified if node.entry.cuda else None)  # (a rejected record's note)
        return True

    def ran(self, run: RunContext, node: Node, spec: Spec, sink: LineSink) -> tuple[str, SmokeReport]:
        """The image tested and the suite's report: run here in a container of the node's image, or, in a verify
        pod (`pod`), what the pod's leaf container left, the image being the one its key tag's digest names (the
        pod's container is pinned to that digest)."""
        if self.pod is None:
            image = run.images.local(node)
            return image, run_smoke(run.images.worker(), image, dict(spec.expect), timeout=node.entry.smoke.timeout,
                                    shm_size=spec.shm_size, gpus=spec.gpus, driver_dir=spec.driver_dir,
                                    env=dict(spec.env), commands=[dict(c) for c in spec.commands],
                                    devices=self.host.devices, sink=sink)
        host, repo, _ = run.key_tag(node)
        digest = run.ledger[node.id].digest or run.registries.digest(cache_ref(node))
        config = run.passes(host).config_digest(repo, digest) if digest else None
        if digest is None or config is None:
            raise EngineError(f"{cache_ref(node)} is not in the registry: the image the pod tested is unknown")
        run.ledger.update(node.id, image=config, digest=digest)
        unlike = self.pod.unlike(self.host)
        if unlike is not None:
            raise Refused(unlike)
        report = read_pod(self.pod.folder, gpu_mode=self.pod.mode)
        for said in report.log_tail.splitlines():
            sink(said)
        return config, report

    def gpu_facts(self, report: Mapping[str, Any], cuda: bool) -> dict[str, Any]:
        """What a pass record says of where its suite ran: a GPU-verified run's runner is this host's, as the
        host names it (the judge held the report against it), never the report's."""
        facts = passes.gpu_facts(report, cuda)
        return {**facts, **self.host.facts()} if cuda and report.get("gpu_verified") else facts

    def runner(self, report: Mapping[str, Any]) -> Runner:
        """What the suite ran on, as the host knows it: its GPUs (models, count, driver, interconnect, as this
        host's driver names them), or this host's CPU."""
        return self.host.runner(gpu=bool(report.get("gpu_verified") and self.host.models))

    @staticmethod
    def shown(run: RunContext, node: Node, record: PassRecord) -> dict[str, Any] | None:
        """A found pass's performance as the run's report shows it: the gate's finding when it was verified, and
        the lineage before it in the registry (for the report's plots; none when the registry does not answer)."""
        if not isinstance(record.performance, Mapping):
            return None
        runner = Runner.from_json(record.performance.get("runner"))
        points = Verify.lineage(run, node, runner, record.config)[0] if runner is not None else []
        points = line(points, pins_of(record.expect))
        return {**record.performance, "history": regression.history_json([p for p in points if p.date < record.date])}

    @staticmethod
    def lineage(run: RunContext, node: Node, runner: Runner, image: str) -> tuple[list[Point], str]:
        """The node's lineage on `runner` before `image`, read from its registry; when it cannot be read, none
        and why."""
        host, repo, _ = run.key_tag(node)
        if not run.registries.answers(host):
            return [], f"the registry {host} does not answer: no performance history"
        try:
            return run.history(host).lineage(repo, cell_of(node), runner, image=image), ""
        except ImageBuilderError as exc:
            return [], f"the performance history is unreadable ({exc.message})"

    def performance(self, run: RunContext, node: Node, image: str, report: dict[str, Any],
                    expect: Mapping[str, Any]) -> regression.Performance | None:
        """The regression gate's finding for the image just tested: its metrics against its lineage's history
        in the registry. None when the report measured nothing."""
        metrics = metrics_of(report.get("checks") or [])
        if not metrics:
            return None
        runner = self.runner(report)
        history, unread = self.lineage(run, node, runner, image)
        if unread:
            run.logs.say(f"[yellow]  {escape(node.id)}: {escape(unread)}; only the floors judge this image[/]")
        found = regression.judge(metrics, runner, line(history, pins_of(expect)), pins_of(expect), self.thresholds,
                                 node.entry.smoke.history_window, cell_of(node))
        run.logs.say(f"[dim]  {escape(node.id)} performance on {escape(runner.label())} (lineage "
                     f"{escape(found.cell)}): {found.verdict}"
                     + (f" against {len(found.baseline_of)} earlier pass(es): {escape(found.summary())}"
                        if found.summary() else " (the first of its line: the floors judge it)") + "[/]")
        return found

    def bind(self, run: RunContext, node: Node) -> bool:
        """The leaf's pass beside the digest its key tag names, once the image tested is shown to be that
        digest's (one already there of this spec is kept, unless this run's is on GPUs and it was not). No tag
        moves; ancestors get theirs `via` the leaf when they are published."""
        host, repo, tag = run.key_tag(node)
        record = run.ledger[node.id]
        try:
            digest = record.digest or run.registries(host).manifest_digest(repo, tag)
            if digest is None:
                raise EngineError(f"{cache_ref(node)} is not in the registry")
            store = run.passes(host)
            key = run.specs.key(node)
            config = store.config_digest(repo, digest)
            there = store.find(repo, digest, key, config) if config is not None else None
            own = record.record
            bound = there
            if passes.stands(there, own):
                where = f"registry {host}/{repo}:{passes.record_tag(digest, key)}"
            elif own is not None and own.config == config:
                bound = own
                where = f"registry {host}/{repo}:{store.write(repo, own.at(digest, f'{host}/{repo}'))} " \
                        "(written by this run)"
            else:
                raise Refused(f"{host}/{repo}@{digest} is image {config}; this run tested "
                              f"{own.config if own else 'no image'}: no pass record is written beside it")
        except ImageBuilderError as exc:
            run.ledger.update(node.id, verify=VerifyStatus.FAILED, error=f"its pass was not recorded: {exc.message}")
            run.logs.say(f"[bold red]✗ verify {escape(node.id)}: {escape(exc.message)}[/]")
            return False
        run.ledger.update(node.id, digest=digest, pass_record=where)
        run.logs.say(f"[green]✓ verified {escape(node.id)}@{digest}[/] [dim]{escape(where)}[/]")
        return self.bind_ancestors(run, node, bound, digest) if bound is not None else True

    @staticmethod
    def bind_ancestors(run: RunContext, leaf: Node, passed: PassRecord, leaf_digest: str) -> bool:
        """Each ancestor's `via` record beside the digest its key tag names, when the leaf was built on it."""
        ok = True
        host, repo, _ = run.key_tag(leaf)
        store = run.passes(host)
        for node in run.plan.ancestors(leaf):
            try:
                digest = run.ledger[node.id].digest or run.registries.digest(cache_ref(node))
                config = store.config_digest(repo, digest) if digest else None
                if digest is None or config is None:
                    raise EngineError(f"{cache_ref(node)} is not in the registry")
                key = run.specs.key(node)
                if store.find(repo, digest, key, config) is None:
                    store.write(repo, via(run, node, leaf, passed, leaf_digest, digest, config).at(digest,
                                                                                           f"{host}/{repo}"))
                run.ledger.update(node.id, digest=digest,
                                  pass_record=f"registry {host}/{repo}:{passes.record_tag(digest, key)}")
            except ImageBuilderError as exc:
                ok = False
                run.ledger.fail(node.id, exc.message, verify=VerifyStatus.FAILED)
                run.logs.say(f"[bold red]✗ verify {escape(node.id)}: {escape(exc.message)}[/]")
        return ok
