"""Runs a decided plan: build each node that is not cached FROM its parent's image (the planned text, the
parent's image ID written in), verify the leaves (`verify`: unless a pass of that very image exists), then
publish the entries whose every leaf passed (`publish`: only digests with a pass record get tags).
Independent nodes run in parallel (`jobs`); one failure blocks only its descendants. One `Result` per node."""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from ..errors import EngineError, ImageBuilderError, InputError
from ..evidence.passes import PassRecord
from ..plan import keys
from ..plan import tags as tagging
from ..plan.cache import Cache
from ..plan.plan import Node, Plan, State
from ..plan.render import FIND_LINKS_ARG, build_args, declared, with_labels
from ..ports.engine import Engine, LineSink
from ..ports.registry import Registry, split_reference
from ..report import Result, Status
from ..secrets import redact
from ..secrets.scan import Findings, Scanner
from . import schedule
from .loopback import Credentials, index_credentials, serve_indexes, serve_wheelhouses
from .publish import Publisher
from .verify import CHECKS_LABEL, Verifier
from .verify import expectations as expectations  # re-exported (benchmarks/gpu_smoke.py imports it from here)

LABEL_PREFIX = keys.LABEL_PREFIX
RUN_LABEL = f"{LABEL_PREFIX}.run"
LOG_MODES = ("stream", "tail", "none")
CUDA_BUILD_SPACE = 20 * 2**30  # a CUDA base layer (~6 GB) plus its downloaded wheels and the commit's copy
CPU_BUILD_SPACE = 4 * 2**30
_NO_SPACE = re.compile(r"no space left on device|ENOSPC|disk quota exceeded", re.IGNORECASE)


@dataclass(frozen=True)
class BuildOptions:
    push: bool = True
    smoke: bool = True
    report_dir: Path = Path("imagebuilder-report")
    expect: tuple[tuple[str, str], ...] = ()
    quiet: bool = False
    no_cache: bool = False
    allow_untested_gpu: bool = False
    allow_untested: bool = False  # publish what has no pass record (loud; recorded beside each digest)
    jobs: int = 1
    fail_fast: bool = False
    resmoke: bool = False
    logs: str = "stream"  # stream: every log line, prefixed by node id; tail: the progress rows only
    cache_dir: Path = Path(".imagebuilder-cache")
    # build: stage + verify + publish in one process; stage: build and push key tags only, no suite; verify:
    # build nothing, test the staged leaves and write their pass records; publish: build and test nothing,
    # point tags at staged digests that have pass records
    step: str = "build"
    dry_run: bool = False  # publish: say what would move, move nothing


STEPS = ("build", "stage", "verify", "publish")


def labels(node: Node, parent_id: str, checks: list[dict[str, str]] | None = None) -> dict[str, str]:
    """Everything the image carries: its content labels (part of the key), the key, the inputs the key
    was made of (so a later run can say what changed), the parent it was built on, and the layer checks it
    was built to pass (for `smoke IMAGE`; not part of the key: an image cached by key keeps the checks of
    the build that made it)."""
    out = keys.content_labels(node)
    out[keys.KEY_LABEL] = node.key
    out[keys.INPUTS_LABEL] = json.dumps(dict(node.inputs), sort_keys=True, separators=(",", ":"))
    if checks:
        out[CHECKS_LABEL] = json.dumps(checks, separators=(",", ":"))
    out["org.opencontainers.image.base.digest"] = parent_id
    if node.base_image:
        out["org.opencontainers.image.base.name"] = node.base_image
    return out


def check_bases(plan: Plan, engine: Engine, say: LineSink) -> None:
    """Every base image must be there (or pullable) before anything builds."""
    for base in sorted({n.base_image for n in plan.nodes if n.base_image}):
        if engine.image_id(base) is not None:
            continue
        say(f"[dim]pulling base image {escape(base)}[/]")
        try:
            engine.pull(base)
        except EngineError as exc:
            entry = next(n.entry for n in plan.nodes if n.base_image == base)
            raise InputError(f"base image {base!r} is not present and cannot be pulled ({exc.message})",
                             where=entry.where, hint="pull or import it first (`make base-image` seeds "
                             "debian:bookworm from Debian's mirror)") from None


class _Display:
    """The terminal side of a run: a rich progress display over the nodes (on a terminal), one row per
    running step with its latest log line, and, in `stream` mode, every log line prefixed by node id."""

    def __init__(self, console: Console, total: int, mode: str) -> None:
        self.console = console
        self.mode = mode
        self.lock = threading.Lock()
        self.counts = {"built": 0, "cached": 0, "failed": 0}
        self.progress: Progress | None = None
        self.rows: dict[str, TaskID] = {}
        if mode != "none" and console.is_terminal:
            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False)
            self.overall = self.progress.add_task(self._summary(), total=total)

    def _summary(self) -> str:
        c = self.counts
        return f"nodes: {c['built']} built · {c['cached']} cached · {c['failed']} failed"

    def __enter__(self) -> _Display:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def say(self, text: str) -> None:
        if self.mode != "none":
            self.console.print(text, highlight=False, soft_wrap=True)

    def line(self, step: str, node_id: str, line: str) -> None:
        if self.mode == "stream":
            self.console.print(f"[dim]{escape(node_id)}[/] │ " + escape(line), highlight=False, soft_wrap=True)
        if self.progress is not None and step in self.rows:
            self.progress.update(self.rows[step], description=f"{escape(step)} [dim]│ {escape(line[:100])}[/]")

    def start(self, step: str) -> None:
        if self.progress is not None:
            with self.lock:
                self.rows[step] = self.progress.add_task(escape(step), total=None)

    def stop(self, step: str) -> None:
        if self.progress is not None:
            with self.lock:
                row = self.rows.pop(step, None)
                if row is not None:
                    self.progress.remove_task(row)

    def node_done(self, outcome: str) -> None:
        with self.lock:
            if outcome in self.counts:
                self.counts[outcome] += 1
            if self.progress is not None:
                self.progress.update(self.overall, advance=1, description=self._summary())


@dataclass
class Builder:
    engine: Engine
    plan: Plan
    options: BuildOptions
    console: Console
    cache: Cache | None = None
    wheelhouse_urls: dict[Path, str] = field(default_factory=dict)  # served for the length of the run
    index_auth: dict[str, Credentials] = field(default_factory=dict)  # index URL -> its credentials (never logged)
    index_urls: dict[str, str] = field(default_factory=dict)  # index URL -> its loopback proxy, for the run
    results: dict[str, Result] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    _local: threading.local = field(default_factory=threading.local)
    _pull_locks: dict[str, threading.Lock] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _display: _Display | None = None
    spec_keys: dict[str, str] = field(default_factory=dict)  # node id -> what its pass is a pass of
    passes: dict[str, PassRecord] = field(default_factory=dict)  # leaf id -> its pass (found or made), not yet bound
    tested_manifests: dict[str, str] = field(default_factory=dict)  # node id -> the manifest whose record passed
    secrets: dict[str, str] = field(default_factory=dict)  # what must never be in an image, a log or a report
    signing: dict[str, str] = field(default_factory=dict)  # cosign: on (key given), or why not
    _bases: dict[str, dict[str, Any]] = field(default_factory=dict)
    scanner: Scanner = field(default_factory=lambda: Scanner({}))
    stopping: threading.Event = field(default_factory=threading.Event)  # set once the run ends or is interrupted

    @functools.cached_property
    def verifier(self) -> Verifier:
        """The smoke step of this run (it keeps the spec key of each node)."""
        return Verifier(self, smoke=self.options.smoke and self.options.step != "publish",
                        resmoke=self.options.resmoke, expect=self.options.expect, cache_dir=self.options.cache_dir,
                        step=self.options.step)

    @property
    def publisher(self) -> Publisher:
        """The publishing step of this run (stateless: it works on this run's results)."""
        return Publisher(self, push=self.options.push, allow_untested=self.options.allow_untested,
                         allow_untested_gpu=self.options.allow_untested_gpu, step=self.options.step,
                         dry_run=self.options.dry_run)

    def run(self) -> list[Result]:
        self.results = {n.id: Result(n.id, n.entry.id, n.layer.name, n.leaf, key=n.key or None, reason=n.reason)
                        for n in self.plan.nodes}
        self._pull_locks = {n.id: threading.Lock() for n in self.plan.nodes}
        self.engine.run_labels[RUN_LABEL] = self.run_id
        if self.cache is None:
            self.cache = Cache(self.engine)
        self.cache.on_retry = lambda line: self.say(f"[yellow]  {escape(line)}[/]")
        self.index_auth = self.index_credentials()
        index_passwords = [(f"the password for index {url} ({creds.source})", creds.password)
                           for url, creds in self.index_auth.items()]
        self.secrets = redact.known_secrets(os.environ, [*self.registry_passwords(), *index_passwords])
        self.scanner = Scanner(self.secrets)
        self.signing = signing_status(self.options.push, os.environ)
        for node in self.plan.nodes:  # supply chain: what each root image was built on, by digest
            if node.base_image is not None:
                self.results[node.id].base = self.base_info(node.base_image)
        wheelhouses = {e.build.wheelhouse for e in self.plan.entries() if e.build.wheelhouse}
        cafile = next((e.build.ca_bundle for e in self.plan.entries() if e.build.ca_bundle), None)
        mode = "none" if self.options.quiet else self.options.logs
        with serve_wheelhouses(wheelhouses) as urls, serve_indexes(self.index_auth, cafile) as proxied, \
                _Display(self.console, len(self.plan.nodes), mode) as display:
            self._display = display
            self.check_disk()
            self.wheelhouse_urls = urls
            self.index_urls = proxied
            for url, creds in self.index_auth.items():
                self.say(f"[dim]index {escape(url)}: credentials from {escape(creds.source)}, served to builds "
                         f"through {escape(proxied[url])} (they never enter an image)[/]")
            try:
                outcome = schedule.run(self.tasks(), jobs=self.options.jobs, fail_fast=self.options.fail_fast)
            finally:  # also on Ctrl-C: no container of this run outlives it, no worker starts another, and no
                self.stopping.set()  # worker still running moves a tag
                self.engine.close_containers()
                self.engine.remove_containers(f"{RUN_LABEL}={self.run_id}")
        if outcome.error is not None:
            raise outcome.error
        for task_id in outcome.not_started:
            kind, _, name = task_id.partition(":")
            for result in self.results.values():
                if (kind == "build" and result.node == name and result.build is None) or \
                        (kind == "publish" and result.entry == name and result.publish is None and result.build):
                    result.error = result.error or "not started: --fail-fast stopped the run after a failure"
                    if kind == "build":
                        result.build = Status.CANCELLED
        return self.scrubbed()

    def interrupted(self) -> list[Result]:
        """The results of a run stopped by Ctrl-C or SIGTERM: what finished stays as it is; every step that
        had not finished is `interrupted`, and an entry that was not published has no tag applied."""
        for result in self.results.values():
            if result.build is None:
                result.build = Status.INTERRUPTED
            elif result.leaf and result.build in (Status.BUILT, Status.CACHED) and result.smoke is None \
                    and self.options.smoke:
                result.smoke = Status.INTERRUPTED
            if result.publish is None and result.build in (Status.BUILT, Status.CACHED):
                result.publish = Status.HELD
            if Status.INTERRUPTED in (result.build, result.smoke) or result.publish == Status.HELD:
                result.error = result.error or ("the run was interrupted before this entry was published; "
                                                "nothing of it was tagged")
        return self.scrubbed()

    def scrubbed(self) -> list[Result]:
        """The results, with every known secret value masked: nothing secret reaches the summary or reports."""
        if self.secrets:
            for result in self.results.values():
                result.error = redact.mask(result.error, self.secrets) if result.error else result.error
                result.log_tail = redact.mask(result.log_tail, self.secrets) if result.log_tail else result.log_tail
                if result.smoke_report is not None:
                    result.smoke_report = json.loads(redact.mask(json.dumps(result.smoke_report), self.secrets))
        return list(self.results.values())

    def tasks(self) -> list[schedule.Task]:
        """build:<node> after its parent's build; smoke:<leaf> after its build (one smoke at a time: they
        share the GPUs and measure throughput); publish:<entry> after all of the entry's steps."""
        out = []
        for entry in self.plan.entries():
            nodes = [n for n in self.plan.nodes if n.entry.id == entry.id]
            steps = []
            for node in nodes:
                deps = (f"build:{node.parent}",) if node.parent else ()
                if node.decision.same_as:  # one image for nodes of one content: the first builds it
                    deps = (*deps, f"build:{node.decision.same_as}")
                out.append(schedule.Task(f"build:{node.id}", functools.partial(self.build_node, node), deps))
                steps.append(f"build:{node.id}")
                if node.leaf:
                    out.append(schedule.Task(f"smoke:{node.id}", functools.partial(self.verifier.smoke_node, node),
                                             (f"build:{node.id}",), exclusive="smoke"))
                    steps.append(f"smoke:{node.id}")
            out.append(schedule.Task(f"publish:{entry.id}", functools.partial(self.publisher.run_publish, entry, nodes),
                                     tuple(steps)))
        if self.plan.alias_cover:
            out.append(schedule.Task("aliases", self.publisher.move_aliases, tuple(t.id for t in out if t.id.startswith(
                "publish:"))))
        return out

    def index_credentials(self) -> dict[str, Credentials]:
        """The index URLs of this plan's builds that have credentials (environment or ~/.netrc)."""
        urls = {url for node in self.plan.nodes if node.status != State.CACHED
                for name, url in build_args(node.entry).items() if name in declared(node.rendered.dockerfile)}
        return {url: creds for url in sorted(urls) if (creds := index_credentials(url, os.environ)) is not None}

    def build_args(self, node: Node) -> dict[str, str]:
        """The build args a node's build is given: the served wheelhouse's URL, and the loopback proxy of each
        index that needs credentials (the text's ARG defaults name the index itself)."""
        names = declared(node.rendered.dockerfile)
        out = {name: self.index_urls[url] for name, url in build_args(node.entry).items()
               if name in names and url in self.index_urls}
        if FIND_LINKS_ARG in names and node.entry.build.wheelhouse:
            out[FIND_LINKS_ARG] = self.wheelhouse_urls[node.entry.build.wheelhouse]
        return out

    def registry_passwords(self) -> list[tuple[str, str]]:
        assert self.cache is not None
        hosts = {split_reference(tagging.reference(e.registry, e.repository, "latest"))[0] for e in self.plan.entries()}
        return [(f"the password for registry {host}", auth[1]) for host in sorted(hosts)
                if (auth := self.cache.registry(host).auth) is not None]

    def base_info(self, ref: str) -> dict[str, Any]:
        if ref not in self._bases:
            info = self.engine.inspect(ref) if self.engine.image_id(ref) else {}
            self._bases[ref] = {"name": ref, "id": info.get("Id"), "repo_digests": info.get("RepoDigests") or []}
        return self._bases[ref]

    def sign(self, node: Node, ref: str) -> None:
        """Sign a published image by digest with cosign, where it is installed and a key is given; a failed
        signature is noted on the node, never a failure of the run."""
        if self.signing.get("status") != "on":
            return
        proc = subprocess.run(["cosign", "sign", "--yes", "--tlog-upload=false", "--key", self.signing["key"], ref],
                              capture_output=True, text=True, timeout=300, env={**os.environ, "COSIGN_YES": "true"})
        result = self.results[node.id]
        result.signed = "signed" if proc.returncode == 0 else \
            f"not signed: cosign exited {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:200]}"

    def auth(self, ref: str) -> tuple[str, str] | None:
        """The credentials for the registry a reference names (for the engine's push and pull)."""
        assert self.cache is not None
        return self.cache.registry(split_reference(ref)[0]).auth

    # -- shared helpers ------------------------------------------------------------------------------
    @property
    def display(self) -> _Display:
        assert self._display is not None
        return self._display

    def say(self, text: str) -> None:
        self.display.say(redact.mask(text, self.secrets))

    def worker_engine(self) -> Engine:
        """This thread's own connection to the engine."""
        engine = getattr(self._local, "engine", None)
        if engine is None:
            engine = self._local.engine = self.engine.clone()
        assert isinstance(engine, Engine)
        return engine

    def log_file(self, node: Node) -> Path:
        path = self.options.report_dir / "logs" / (re.sub(r"[^A-Za-z0-9._-]+", "_", node.id) + ".log")
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def sink(self, step: str, node: Node, log: TextIO, tail: list[str]) -> LineSink:
        def emit(line: str) -> None:
            line = redact.mask(line, self.secrets)
            log.write(line + "\n")
            log.flush()
            tail.append(line)
            del tail[:-40]
            self.display.line(step, node.id, line)
        return emit

    def show_log(self, result: Result) -> None:
        """On a failure in `tail` mode the terminal has not seen the log: show it now (its last 200 lines)."""
        if self.display.mode != "tail" or not result.log:
            return
        lines = Path(result.log).read_text(encoding="utf-8", errors="replace").splitlines()
        self.console.rule(f"[red]{escape(result.node)}: log ({len(lines)} lines, {result.log})")
        self.console.print("\n".join(lines[-200:]), markup=False, highlight=False)

    def local_image(self, node: Node) -> str:
        """The node's image on this engine, pulled from its key tag when it is only in the registry."""
        with self._pull_locks[node.id]:
            if node.id not in self.images:
                ref = node.decision.ref
                assert ref is not None, f"{node.id} is neither on the engine nor in the registry"
                digest = self.cache.digest(ref) if self.cache is not None else None
                by_digest = f"{ref.rsplit(':', 1)[0]}@{digest}" if digest else ref  # exactly what the tag named
                self.say(f"[dim]pulling {escape(by_digest)} (cached {escape(node.id)})[/]")
                self.images[node.id] = self.worker_engine().pull(by_digest, auth=self.auth(ref))
                if digest:
                    self.tested_manifests.setdefault(node.id, digest)
                self.results[node.id].image = self.images[node.id]
            return self.images[node.id]

    # -- build -------------------------------------------------------------------------------------------
    def build_node(self, node: Node) -> bool:
        result = self.results[node.id]
        try:
            return self._build(node, result)
        finally:
            self.display.node_done({Status.BUILT: "built", Status.CACHED: "cached"}.get(result.build, "failed")
                                   if result.build else "failed")

    def _build(self, node: Node, result: Result) -> bool:
        if node.parent is not None and self.results[node.parent].build not in (Status.BUILT, Status.CACHED):
            result.build = Status.BLOCKED
            result.error = f"parent {node.parent} did not build"
            return False
        decision = node.decision
        if decision.same_as and decision.state == State.BUILD:
            return self.reuse(node, decision.same_as, result)
        if self.options.step in ("verify", "publish") and decision.state != State.CACHED:
            result.build = Status.FAILED  # `imagebuilder verify` and `publish` build nothing
            result.error = f"not staged: {node.reason or 'no key tag in the registry'} (run `imagebuilder stage`)"
            return False
        if decision.state == State.CACHED and decision.where is not None:
            result.build = Status.CACHED
            result.cache = decision.where
            if decision.image:
                self.images[node.id] = result.image = decision.image
            self.say(f"[cyan]● cached {escape(node.id)}[/] [dim]{escape(node.reason)}[/]")
            return True
        engine = self.worker_engine()
        if node.base_image is not None:
            parent_ref = node.base_image
            parent_id = engine.image_id(node.base_image) or node.base_image
        else:
            assert node.parent is not None
            parent_ref = node.parent
            try:
                parent_id = self.local_image(self.plan.node(node.parent))
            except ImageBuilderError as exc:
                result.build = Status.FAILED
                result.error = f"cannot get the cached parent: {exc.message}"
                return False
        rendered = with_labels(node.rendered.for_parent(parent_id),  # rendered once
                               labels(node, parent_id, self.verifier.layer_checks(node)))
        buildargs = self.build_args(node)
        leaked = redact.find_in_build_args(buildargs, self.secrets)
        if leaked:  # nothing here should ever carry one: a gate, so that no later change can slip one in
            result.build = Status.FAILED
            result.error = "not built: " + "; ".join(leaked)
            return False
        log_path = self.log_file(node)
        result.log = str(log_path)
        tail: list[str] = []
        step = f"build {node.id}"
        start = time.monotonic()
        self.display.start(step)
        self.say(f"[bold]▶ build {escape(node.id)}[/] [dim]FROM {escape(parent_ref)} ({parent_id[:19]}) · "
                 f"{escape(node.reason)}[/]")
        try:
            with log_path.open("w", encoding="utf-8") as log:
                log.write(f"# {node.id} key {node.key}\n# why: {node.reason}\n")
                try:
                    image = engine.build(rendered.tar(), network=node.entry.build.network, buildargs=buildargs,
                                         sink=self.sink(step, node, log, tail), nocache=self.options.no_cache)
                except ImageBuilderError as exc:
                    log.write(f"ERROR: {exc.message}\n")
                    result.build = Status.FAILED
                    result.error = self.explain_build_error(exc.message, tail)
                    result.log_tail = "\n".join(tail[-25:])
                    self.say(f"[bold red]✗ {escape(node.id)}: {escape(exc.message)}[/]")
                    self.show_log(result)
                    return False
        finally:
            result.durations["build"] = time.monotonic() - start
            self.display.stop(step)
        self.images[node.id] = result.image = image
        leaks = self.leaks(node, image=image, parent=parent_id)
        if leaks:  # removed, so that no later run finds it by its key; nothing of its entry is published
            engine.remove_image(image)
            self.images.pop(node.id, None)
            result.image = None
            result.build = Status.FAILED
            result.error = "a secret was baked into the image (it was removed): " + "; ".join(leaks)
            self.say(f"[bold red]✗ {escape(node.id)}: {escape(result.error)}[/]")
            return False
        result.build = Status.BUILT
        self.say(f"[green]✓ built {escape(node.id)}[/] [dim]{image[:19]} in {result.durations['build']:.1f}s[/]")
        return True

    def reuse(self, node: Node, twin: str, result: Result) -> bool:
        """A node whose content another node of this run has (the same key: entries that share the OS, the
        CUDA libraries or torch): that node's image, built once."""
        built = self.results[twin]
        if built.build not in (Status.BUILT, Status.CACHED) or twin not in self.images:
            result.build = Status.BLOCKED
            result.error = f"{twin}, the same image, did not build"
            return False
        self.images[node.id] = result.image = self.images[twin]
        result.build = Status.CACHED
        result.cache = "local"
        result.secret_scan = built.secret_scan
        self.say(f"[cyan]● same image as {escape(twin)}[/] [dim]{escape(node.id)}: built once[/]")
        return True

    def leaks(self, node: Node, *, image: str | None = None, parent: str | None = None) -> list[str]:
        """What the secret scan (`scan`) finds in a node's image: the one on this engine, else its
        configuration in the registry. Its coverage goes to the node's result."""
        image = image or self.images.get(node.id) or node.decision.image
        if image is not None:
            findings = self.scanner.image(self.worker_engine(), image, parent)
        elif node.decision.ref is not None:
            host, repo, tag = split_reference(node.decision.ref)
            config = self.registry(host).config(repo, tag)
            findings = self.scanner.config(config) if config is not None else Findings((), "not found")
        else:
            return []
        if node.id in self.results:
            self.results[node.id].secret_scan = findings.covered
        return list(findings.found)

    def check_disk(self) -> None:
        """Warn before anything builds when the engine's storage is short for what must be built: a CUDA
        layer is several GB and is written twice while the builder commits it."""
        building = [n for n in self.plan.nodes if n.status != State.CACHED]
        if not building:
            return
        root, free = self.engine.storage()
        need = (CUDA_BUILD_SPACE if any(n.entry.cuda for n in building) else CPU_BUILD_SPACE)
        if free is not None and free < need:
            self.say(f"[yellow]warning: only {free / 2**30:.1f} GiB free in {escape(root)}; building these images "
                     f"needs about {need / 2**30:.0f} GiB while they build, and a full disk fails the build[/]")

    def explain_build_error(self, message: str, tail: list[str]) -> str:
        """A build error as users can act on it: a full disk is said as such, with where and what to do."""
        if not any(_NO_SPACE.search(line) for line in [message, *tail]):
            return message
        root, free = self.worker_engine().storage()
        where = f" ({root}, {free / 2**30:.1f} GiB free now)" if free is not None else (f" ({root})" if root else "")
        return (f"out of disk space: the engine's storage{where} filled up during this build; free space "
                "(docker image prune, docker builder prune) and run again: finished nodes are cached. "
                f"Engine said: {message}")

    def registry(self, host: str) -> Registry:
        assert self.cache is not None
        return self.cache.registry(host)

    def spec_key(self, node: Node) -> str:
        return self.verifier.spec_key(node)

    def smoke_spec(self, node: Node) -> dict[str, Any]:
        return self.verifier.smoke_spec(node)


def signing_status(push: bool, env: Mapping[str, str]) -> dict[str, str]:
    """Whether published images are signed with cosign (optional: where it is installed and given a key
    in IMAGEBUILDER_COSIGN_KEY), and why not otherwise; never a reason to fail."""
    if not push:
        return {"tool": "cosign", "status": "skipped", "reason": "nothing is pushed (--no-push)"}
    if shutil.which("cosign") is None:
        return {"tool": "cosign", "status": "skipped", "reason": "cosign is not installed; images are not signed"}
    if not env.get("IMAGEBUILDER_COSIGN_KEY"):
        return {"tool": "cosign", "status": "skipped", "reason": "set IMAGEBUILDER_COSIGN_KEY to sign with cosign"}
    return {"tool": "cosign", "status": "on", "key": env["IMAGEBUILDER_COSIGN_KEY"]}


def run_meta(matrix_file: Path, *, interrupted: bool = False, signing: Mapping[str, str] | None = None,
             options: BuildOptions | None = None) -> dict[str, Any]:
    return {
        "allow_untested": bool(options and options.allow_untested),
        "smoke": bool(options.smoke) if options else True,
        "tool": "imagebuilder",
        "matrix": str(matrix_file),
        "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "interrupted": interrupted,
        "signing": {k: v for k, v in (signing or {}).items() if k != "key"},
    }
