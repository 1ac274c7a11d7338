"""Runs a decided plan: build each node that is not cached FROM its parent's image, smoke the leaves
(unless a passing result for the same leaf key is cached), then tag and push the entries whose every
leaf passed. Independent nodes run in parallel (`jobs`); one failure blocks only its descendants.
One `Result` per node."""

from __future__ import annotations

import contextlib
import datetime
import functools
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from . import keys, passes, redact, schedule
from . import tags as tagging
from .cache import Cache, Hit, cache_ref
from .engine import Engine, LineSink
from .errors import EngineError, ImageBuilderError, InputError
from .matrix import Entry
from .passes import LocalPasses, PassRecord, RegistryPasses
from .plan import Node, Plan
from .registry import split_reference
from .render import FIND_LINKS_ARG, wheelhouse_port, with_labels
from .report import Result, Status
from .smoke_runner import blocking_skips, run_smoke

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


def labels(node: Node, parent_id: str) -> dict[str, str]:
    """Everything the image carries: its content labels (part of the key), the key, the inputs the key
    was made of (so a later run can say what changed) and the parent it was built on."""
    out = keys.content_labels(node)
    out[keys.KEY_LABEL] = node.key
    out[keys.INPUTS_LABEL] = json.dumps(dict(node.inputs), sort_keys=True, separators=(",", ":"))
    out["org.opencontainers.image.base.digest"] = parent_id
    if node.base_image:
        out["org.opencontainers.image.base.name"] = node.base_image
    return out


def expectations(entry: Entry, extra: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """What the smoke suite checks in an entry's images: the resolved versions, floors, and overrides."""
    expect: dict[str, Any] = dict(entry.versions())
    user = entry.user.settings()
    expect["user"] = {"uid": user["uid"], "gid": user["gid"], "home": user["home"]}
    expect.update(driver_floor=entry.driver_floor, throughput_floor=entry.smoke.throughput_floor,
                  cpu_gflops_floor=entry.smoke.cpu_gflops_floor)
    if entry.smoke.gpu_floors:
        expect["gpu_floors"] = [[name, floor] for name, floor in entry.smoke.gpu_floors]
    if any(name.startswith("nvidia-cudnn") for name, _ in entry.overrides):
        expect["cudnn_override"] = True  # the loaded cuDNN is meant to differ from torch's build
    expect.update(dict(extra))
    return expect


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


@contextlib.contextmanager
def serve_wheelhouses(folders: set[Path]) -> Iterator[dict[Path, str]]:
    """Serve each wheelhouse over HTTP on 127.0.0.1 for the length of the run (builds use host networking),
    so wheels are offered to pip as find-links without ever being copied into a layer."""
    servers = []
    urls: dict[Path, str] = {}
    try:
        for folder in sorted(folders):
            handler = functools.partial(_Quiet, directory=str(folder))
            try:
                server = http.server.ThreadingHTTPServer(("127.0.0.1", wheelhouse_port(folder)), handler)
            except OSError:
                server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers.append(server)
            urls[folder] = f"http://127.0.0.1:{server.server_address[1]}/"
        yield urls
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


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
    hits: dict[str, Hit] = field(default_factory=dict)
    cache: Cache | None = None
    wheelhouse_urls: dict[Path, str] = field(default_factory=dict)  # served for the length of the run
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
    stopping: threading.Event = field(default_factory=threading.Event)  # set once the run ends or is interrupted

    def run(self) -> list[Result]:
        self.results = {n.id: Result(n.id, n.entry.id, n.layer.name, n.leaf, key=n.key or None, reason=n.reason)
                        for n in self.plan.nodes}
        self._pull_locks = {n.id: threading.Lock() for n in self.plan.nodes}
        self.engine.run_labels[RUN_LABEL] = self.run_id
        if self.cache is None:
            self.cache = Cache(self.engine)
        self.cache.on_retry = lambda line: self.say(f"[yellow]  {escape(line)}[/]")
        self.secrets = redact.known_secrets(os.environ, self.registry_passwords())
        self.signing = signing_status(self.options.push, os.environ)
        for node in self.plan.nodes:  # supply chain: what each root image was built on, by digest
            if node.base_image is not None:
                self.results[node.id].base = self.base_info(node.base_image)
        wheelhouses = {e.build.wheelhouse for e in self.plan.entries() if e.build.wheelhouse}
        mode = "none" if self.options.quiet else self.options.logs
        with serve_wheelhouses(wheelhouses) as urls, _Display(self.console, len(self.plan.nodes), mode) as display:
            self._display = display
            self.check_disk()
            self.wheelhouse_urls = urls
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
                out.append(schedule.Task(f"build:{node.id}", functools.partial(self.build_node, node), deps))
                steps.append(f"build:{node.id}")
                if node.leaf:
                    out.append(schedule.Task(f"smoke:{node.id}", functools.partial(self.smoke_node, node),
                                             (f"build:{node.id}",), exclusive="smoke"))
                    steps.append(f"smoke:{node.id}")
            out.append(schedule.Task(f"publish:{entry.id}", functools.partial(self.run_publish, entry, nodes),
                                     tuple(steps)))
        if self.plan.alias_cover:
            out.append(schedule.Task("aliases", self.move_aliases, tuple(t.id for t in out if t.id.startswith(
                "publish:"))))
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
                hit = self.hits[node.id]
                assert hit.ref is not None
                self.say(f"[dim]pulling {escape(hit.ref)} (cached {escape(node.id)})[/]")
                self.images[node.id] = self.worker_engine().pull(hit.ref, auth=self.auth(hit.ref))
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
        hit = self.hits.get(node.id)
        if node.status == "cached" and hit is not None:
            result.build = Status.CACHED
            result.cache = hit.where
            if hit.image:
                self.images[node.id] = result.image = hit.image
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
        rendered = with_labels(node.rendered.for_parent(parent_id), labels(node, parent_id))  # rendered once
        wheelhouse = node.entry.build.wheelhouse
        buildargs = {FIND_LINKS_ARG: self.wheelhouse_urls[wheelhouse]} if wheelhouse else {}
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
        leaks = redact.find_in_image(engine.inspect(image), engine.history(image), self.secrets)
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

    def check_disk(self) -> None:
        """Warn before anything builds when the engine's storage is short for what must be built: a CUDA
        layer is several GB and is written twice while the builder commits it."""
        building = [n for n in self.plan.nodes if n.status != "cached"]
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

    # -- smoke -------------------------------------------------------------------------------------------
    def smoke_spec(self, node: Node) -> dict[str, Any]:
        s = node.entry.smoke
        return {"expect": expectations(node.entry, self.options.expect), "gpus": s.gpus, "driver_dir": s.driver_dir,
                "shm_size": s.shm_size, "env": dict(s.env), "commands": self.layer_checks(node),
                "allow_skip": list(s.allow_skip)}

    def spec_key(self, node: Node) -> str:
        """What a pass of this node is a pass of (suite, expectations, settings, inherited layer checks)."""
        with self._lock:
            if node.id not in self.spec_keys:
                self.spec_keys[node.id] = passes.spec_key(self.smoke_spec(node))
            return self.spec_keys[node.id]

    def registry_passes(self, node: Node) -> tuple[RegistryPasses, str, str]:
        """The pass records of the node's repository: (store, host, repository path)."""
        assert self.cache is not None
        host, repo, _ = split_reference(cache_ref(node))
        return RegistryPasses(self.cache.registry(host)), host, repo

    def find_pass(self, node: Node, key: str) -> tuple[PassRecord, str] | None:
        """A pass of this suite for the node's very image: in the local mirror by image ID, else in the
        registry beside the image its key tag names (when that is this image, or the image is not here:
        then it is what this run would publish, and is never pulled)."""
        assert self.cache is not None
        image = self.images.get(node.id)
        if image is not None:
            local = LocalPasses(self.options.cache_dir).get(image, key)
            if local is not None:
                return local, f"local mirror {self.options.cache_dir}"
        if not self.cache.answers(split_reference(cache_ref(node))[0]):
            return None
        try:
            manifest = self.cache.digest(cache_ref(node))
            if manifest is None:
                return None
            store, host, repo = self.registry_passes(node)
            config = store.config_digest(repo, manifest)
            if config is None or (image is not None and config != image):
                return None  # the key tag names another image than this one: its passes are not ours
            record = store.find(repo, manifest, key, config)
        except ImageBuilderError:
            return None
        if record is None:
            return None
        self.tested_manifests[node.id] = manifest
        return record, f"registry {host}/{repo}:{passes.record_tag(manifest, key)}"

    def smoke_node(self, node: Node) -> bool:
        result = self.results[node.id]
        if result.build not in (Status.BUILT, Status.CACHED):
            return True  # the build already failed and said so
        spec = self.smoke_spec(node)
        key = self.spec_key(node)
        found = None if self.options.resmoke else self.find_pass(node, key)
        if found is not None:
            record, where = found
            result.smoke = Status.CACHED
            result.smoke_report = dict(record.report) if record.report else None
            result.gpu_verified = bool(record.gpu.get("verified")) if node.entry.cuda else None
            result.pass_record = where
            self.passes[node.id] = record
            self.say(f"[cyan]● smoke {escape(node.id)}: passed on {escape(record.date)} ({escape(where)}); "
                     "--resmoke runs it again[/]")
            return True
        if not self.options.smoke:
            result.smoke = Status.SKIPPED
            return True
        step = f"smoke {node.id}"
        start = time.monotonic()
        self.display.start(step)
        self.say(f"[bold]▶ smoke {escape(node.id)}[/]")
        if result.log is None:
            result.log = str(self.log_file(node))
            Path(result.log).write_text(f"# {node.id} key {node.key} (cached image)\n", encoding="utf-8")
        try:
            with open(result.log, "a", encoding="utf-8") as log:
                log.write("---- smoke ----\n")

                def to_log(line: str) -> None:  # the whole suite output goes to the node's log file
                    line = redact.mask(line, self.secrets)
                    log.write(line + "\n")
                    log.flush()
                    if self.display.mode == "tail":  # a progress row only: the suite's lines are not streamed
                        self.display.line(step, node.id, line)
                try:
                    image = self.local_image(node)
                    report = run_smoke(self.worker_engine(), image, spec["expect"],
                                       timeout=node.entry.smoke.timeout, shm_size=spec["shm_size"],
                                       gpus=spec["gpus"], driver_dir=spec["driver_dir"], env=spec["env"],
                                       commands=spec["commands"], sink=to_log)
                except ImageBuilderError as exc:
                    result.smoke = Status.FAILED
                    result.error = f"smoke: {exc.message}"
                    self.show_log(result)
                    return False
        finally:
            result.durations["smoke"] = time.monotonic() - start
            self.display.stop(step)
        result.smoke_report = report.to_json()
        for check in report.checks:
            mark = {"pass": "[green]✓[/]", "fail": "[red]✗[/]"}.get(str(check.get("status")), "[dim]-[/]")
            why = f" [dim]{escape(str(check.get('reason')))}[/]" if check.get("reason") else ""
            self.say(f"  {mark} {escape(node.id)} {escape(str(check.get('name')))}{why}")
        skipped = blocking_skips(report.checks, gpu_run=report.gpu_verified, allow=node.entry.smoke.allow_skip)
        if not report.passed or skipped:
            result.smoke = Status.FAILED
            result.error = ("; ".join(report.failures())[:300] or "smoke failed") if not report.passed else (
                "a skip is not a pass on a GPU run: " + "; ".join(skipped)[:300]
                + " (fix it, or name the check in smoke.allow_skip)")
            result.log_tail = report.log_tail
            self.show_log(result)
            return False
        result.smoke = Status.PASSED
        if node.entry.cuda and not report.gpu_verified:
            result.gpu_verified = False
            self.say(f"[yellow]  {escape(node.id)} is a CUDA image and was not GPU-verified (no GPU here)[/]")
        else:
            result.gpu_verified = report.gpu_verified if node.entry.cuda else None
        record = PassRecord(passes.PASSED, config=image, spec=key, node=node.id, entry=node.entry.id,
                            expect=spec["expect"], gpu=passes.gpu_facts(result.smoke_report, bool(node.entry.cuda)),
                            date=passes.now(), suite=passes.suite_hash(), report=result.smoke_report)
        self.passes[node.id] = record
        LocalPasses(self.options.cache_dir).put(record)
        result.pass_record = "this run"
        return True

    def layer_checks(self, node: Node) -> list[dict[str, str]]:
        """The leaf's own layer checks and every ancestor's: tests are inherited down the tree."""
        chain = [*reversed(self.plan.ancestors(node)), node]
        return [{"name": f"layer.{n.name}.{i}", "run": cmd} for n in chain for i, cmd in enumerate(n.layer.smoke)]

    # -- publish -----------------------------------------------------------------------------------------
    def run_publish(self, entry: Entry, nodes: list[Node]) -> bool:
        """The publishing rule: an entry's public tags are applied only when every node built and every leaf
        has a pass (run now, or found by its image's digest). Untested entries (--no-smoke and no pass found)
        are staged: pushed under their key tags only, unless --allow-untested says otherwise, loudly."""
        results = [self.results[n.id] for n in nodes]
        entry_ok = all(r.build in (Status.BUILT, Status.CACHED) for r in results) and all(
            r.smoke in (Status.PASSED, Status.SKIPPED, Status.CACHED) for r in results if r.leaf)
        if not entry_ok:
            for r in results:
                if r.build in (Status.BUILT, Status.CACHED):
                    r.publish = Status.HELD
            self.say(f"[yellow]{escape(entry.id)}: not every node passed; nothing of this entry is tagged or pushed[/]")
            return False
        untested = [r.node for r in results if r.leaf and r.smoke == Status.SKIPPED]
        if untested and not self.options.allow_untested:
            return self.stage(nodes, f"untested: {untested[0]} has no pass (--no-smoke), so no public tag "
                                     "(--allow-untested publishes anyway)")
        if untested:
            self.say(f"[bold yellow]! {escape(entry.id)}: publishing UNTESTED images (--allow-untested): "
                     f"{escape(', '.join(untested))}; recorded in report.json and beside each digest[/]")
        unverified = [r for r in results if r.gpu_verified is False]
        if unverified and self.options.push and not self.options.allow_untested_gpu:
            for r in results:
                r.publish = Status.HELD
                r.error = "not GPU-verified: no GPU on this host (--allow-untested-gpu pushes anyway)"
            self.say(f"[yellow]{escape(entry.id)}: CUDA images not GPU-verified are not pushed; "
                     "pass --allow-untested-gpu to push them anyway[/]")
            return False
        if not self.options.push:
            tagged = [self.tag_locally(node) for node in nodes]  # every node, even after one fails
            return all(tagged)
        return self.publish_entry(nodes, untested=bool(untested))

    def stage(self, nodes: list[Node], why: str) -> bool:
        """Push each node under its key tag only (no public tag): what a later verify or publish step, or
        another machine, starts from. Without --push nothing leaves the engine and nothing is tagged."""
        for i, node in enumerate(nodes):
            result = self.results[node.id]
            start = time.monotonic()
            try:
                if self.options.push:
                    result.digest = self.push_key_tag(node, self.worker_engine())
                    self.say(f"[cyan]● staged {escape(cache_ref(node))}@{result.digest}[/] [dim]({escape(why)})[/]")
                result.publish = Status.STAGED
                result.error = result.error or why
            except ImageBuilderError as exc:
                result.publish = Status.FAILED
                result.error = exc.message
                for rest in nodes[i + 1:]:
                    self.results[rest.id].publish = Status.HELD
                    self.results[rest.id].error = f"not staged: {node.id} could not be pushed"
                self.say(f"[bold red]✗ stage {escape(node.id)}: {escape(exc.message)}[/]")
                self.say(f"[yellow]{escape(node.entry.id)}: no tag of this entry was applied[/]")
                return False
            finally:
                result.durations["publish"] = time.monotonic() - start
        return True

    def tag_locally(self, node: Node) -> bool:
        result = self.results[node.id]
        try:
            image = self.local_image(node)
            for ref in node.tags:
                self.worker_engine().tag(image, ref)
        except ImageBuilderError as exc:
            result.publish = Status.FAILED
            result.error = exc.message
            return False
        result.tags = list(node.tags)
        result.publish = Status.TAGGED
        return True

    def publish_entry(self, nodes: list[Node], *, untested: bool = False) -> bool:
        """All or nothing per entry. First every image goes to the registry under its key tag (the image this
        run tested, compared by digest), every node's pass record is bound to that digest in the registry
        (written beside it when this run holds the pass) and every immutable tag is checked: one that already
        names another digest is never overwritten. Only when all of that held are the tags pointed at the
        digests (manifest copies inside the registry; a tag already there is left alone); local tags follow."""
        engine = self.worker_engine()
        starts = {n.id: time.monotonic() for n in nodes}
        digests: dict[str, str] = {}
        failure: tuple[Node, str] | None = None
        for node in nodes:
            try:
                digests[node.id] = self.push_key_tag(node, engine)
            except ImageBuilderError as exc:
                failure = (node, exc.message)
                break
        for node in nodes if failure is None else []:
            try:
                self.bind_pass(node, nodes, digests, untested=untested)
                for ref in node.tags:
                    held = self.registry_digest(ref)
                    if held is not None and held != digests[node.id]:
                        raise EngineError(f"immutable tag {ref} already names {held}; this build is "
                                          f"{digests[node.id]}: not overwritten (use {{key12}} or {{date}} in "
                                          "`tags:`, and `aliases:` for names that move)")
            except ImageBuilderError as exc:
                failure = (node, exc.message)
                break
        if failure is not None:
            bad, message = failure
            for node in nodes:
                result = self.results[node.id]
                result.durations["publish"] = time.monotonic() - starts[node.id]
                result.publish = Status.FAILED if node is bad else Status.HELD
                if node is bad:
                    result.error = message
                elif result.error is None:
                    result.error = f"not tagged: {bad.id} could not be published"
            self.say(f"[bold red]✗ publish {escape(bad.id)}: {escape(message)}[/]")
            self.say(f"[yellow]{escape(bad.entry.id)}: no tag of this entry was applied[/]")
            return False
        ok = True
        for node in nodes:
            result = self.results[node.id]
            try:
                moved = sum(self.point_tag(node, ref, digests[node.id]) for ref in node.tags)
                if node.id in self.images:
                    for ref in node.tags:
                        engine.tag(self.images[node.id], ref)
                result.tags = list(node.tags)
                result.digest = digests[node.id]
                result.publish = Status.PUSHED if moved else Status.CURRENT
                repo = tagging.repository_ref(node.entry.registry, node.entry.repository)
                self.sign(node, f"{repo}@{digests[node.id]}")
                self.say(f"[green]✓ {'pushed' if moved else 'up to date'} {escape(node.tags[0])}@{result.digest}[/]")
            except ImageBuilderError as exc:
                ok = False
                result.publish = Status.FAILED
                result.error = exc.message
                self.say(f"[bold red]✗ publish {escape(node.id)}: {escape(exc.message)}[/]")
            finally:
                result.durations["publish"] = time.monotonic() - starts[node.id]
        return ok

    def bind_pass(self, node: Node, nodes: list[Node], digests: Mapping[str, str], *, untested: bool) -> None:
        """The gate before any public tag: the node's digest must have a pass record for this suite and these
        expectations in the registry. One already there is used; else this run's pass is written beside the
        digest when the digest's image is the one that passed (leaves), or that a passing leaf was built on
        (ancestors). With --allow-untested an `untested` record is written instead. Otherwise: refused."""
        result = self.results[node.id]
        key = self.spec_key(node)
        store, host, repo = self.registry_passes(node)
        digest = digests[node.id]
        config = store.config_digest(repo, digest)
        if config is None:
            raise EngineError(f"{host}/{repo}@{digest} is not a single-platform image manifest; nothing to bind a "
                              "pass to")
        found = store.find(repo, digest, key, config)
        if found is not None:
            result.pass_record = f"registry {host}/{repo}:{passes.record_tag(digest, key)}"
            return
        record = self.pass_for(node, nodes, digests, config)
        if record is None and untested and self.options.allow_untested:
            spec = self.smoke_spec(node)
            tag = store.put(repo, PassRecord(passes.UNTESTED, config=config, spec=key, node=node.id,
                                             entry=node.entry.id, expect=spec["expect"], date=passes.now(),
                                             suite=passes.suite_hash(), allowed_by="--allow-untested")
                            .at(digest, f"{host}/{repo}"))
            result.pass_record = f"UNTESTED, published by --allow-untested: registry {host}/{repo}:{tag}"
            result.untested = True
            return
        if record is None:
            tested = self.passes.get(node.id)
            why = (f"this run tested image {tested.config}, and the registry's {digest} is image {config}"
                   if tested is not None else "and this run holds no pass for it")
            raise EngineError(f"{host}/{repo}@{digest} has no pass record for this suite and these expectations "
                              f"({why}): no public tag is pointed at it")
        tag = store.put(repo, record.at(digest, f"{host}/{repo}"))
        if store.find(repo, digest, key, config) is None:
            raise EngineError(f"the pass record {host}/{repo}:{tag} did not read back: not published")
        result.pass_record = f"registry {host}/{repo}:{tag} (written by this run)"

    def pass_for(self, node: Node, nodes: list[Node], digests: Mapping[str, str], config: str) -> PassRecord | None:
        """The pass this run holds for the image `config`: the leaf's own, or for an ancestor, one `via` a
        leaf whose passing image was built on this very image in this run."""
        own = self.passes.get(node.id)
        if node.leaf:
            return own if own is not None and own.config == config else None
        if self.images.get(node.id) not in (None, config):
            return None
        for leaf in nodes:
            record = self.passes.get(leaf.id)
            if not leaf.leaf or record is None or node not in self.plan.ancestors(leaf):
                continue
            spec = self.smoke_spec(node)
            return PassRecord(passes.PASSED, config=config, spec=self.spec_key(node), node=node.id,
                              entry=node.entry.id, expect=spec["expect"], gpu=record.gpu, date=passes.now(),
                              suite=passes.suite_hash(),
                              via={"node": leaf.id, "manifest": digests[leaf.id], "config": record.config,
                                   "record": passes.record_tag(digests[leaf.id], record.spec)})
        return None

    def move_aliases(self) -> bool:
        """After every entry: each alias moves to the last node it covers (in matrix order), and only when
        every node it covers in the whole matrix passed in this run."""
        ok_states = (Status.PUSHED, Status.CURRENT, Status.TAGGED)
        ok = True
        for ref, covered in self.plan.alias_cover:
            missing = [n for n in covered if n not in self.results]
            failed = [n for n in covered if n in self.results and self.results[n].publish not in ok_states]
            target = covered[-1]
            if missing or failed:
                why = (f"{failed[0]} did not pass" if failed else f"{missing[0]} is not part of this run (--only)")
                for node_id in covered:
                    if node_id in self.results:
                        self.results[node_id].aliases_held.append(ref)
                self.say(f"[yellow]alias {escape(ref)} not moved: {escape(why)}[/]")
                continue
            result = self.results[target]
            node = self.plan.node(target)
            try:
                if self.options.push:
                    assert result.digest is not None
                    self.point_tag(node, ref, result.digest)
                if node.id in self.images or not self.options.push:
                    self.worker_engine().tag(self.local_image(node), ref)
                result.aliases.append(ref)
            except ImageBuilderError as exc:
                ok = False
                result.aliases_held.append(ref)
                self.say(f"[bold red]✗ alias {escape(ref)}: {escape(exc.message)}[/]")
        return ok

    def registry_digest(self, ref: str) -> str | None:
        assert self.cache is not None
        return self.cache.digest(ref)

    def push_key_tag(self, node: Node, engine: Engine) -> str:
        """The node's manifest digest under its key tag, for the image this run holds: pushed when the key tag
        is missing or names another image (keys do not name content: the key tag moves to the image that was
        tested, and both digests are said). A node this run never pulled is what its key tag named when it
        was looked up (the manifest its pass was found beside, if any)."""
        ref = cache_ref(node)
        image = self.images.get(node.id)
        held = self.registry_digest(ref)
        if image is None:
            known = self.tested_manifests.get(node.id) or held
            if known is None:
                raise EngineError(f"{ref} is gone from the registry and {node.id} is not on this engine")
            return known
        store, _, repo = self.registry_passes(node)
        if held is not None:
            config = store.config_digest(repo, held)
            if config == image:
                return held
            self.say(f"[yellow]  {escape(ref)} names {held} (image {config}), not the image this run holds "
                     f"({image}): pushing this run's image over it[/]")
        engine.tag(image, ref)
        self.say(f"[bold]▶ push {escape(ref)}[/]")
        digest = engine.push(ref, sink=lambda line: self.say(f"[yellow]  {escape(line)}[/]"), auth=self.auth(ref))
        held = self.registry_digest(ref)
        if held != digest:
            raise EngineError(f"push {ref}: the registry holds {held}, not the pushed {digest}")
        config = store.config_digest(repo, digest)
        if config != image:
            raise EngineError(f"push {ref}: {digest} is image {config}, not this run's {image}")
        return digest

    def point_tag(self, node: Node, ref: str, digest: str) -> int:
        """Make `ref` name `digest` in the registry, copying the manifest from the node's key tag; 1 if it
        moved, 0 if it already did."""
        assert self.cache is not None
        if self.stopping.is_set():
            raise EngineError(f"tag {ref}: not moved, the run was interrupted")
        if self.registry_digest(ref) == digest:
            return 0
        host, repo, tag = split_reference(ref)
        self.cache.registry(host).copy(split_reference(cache_ref(node))[1], digest, repo, tag)
        held = self.registry_digest(ref)
        if held != digest:
            raise EngineError(f"tag {ref}: the registry holds {held}, not {digest}")
        return 1


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
