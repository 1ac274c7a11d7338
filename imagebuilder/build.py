"""Walks the plan: build each node FROM its parent's image ID, smoke the leaves, then tag and push
the entries whose every leaf passed. One `Result` per node; one failure does not stop the others."""

from __future__ import annotations

import contextlib
import datetime
import functools
import http.server
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape

from .engine import Engine, LineSink
from .errors import EngineError, ImageBuilderError, InputError
from .matrix import Entry
from .plan import Node, Plan
from .render import Renderer, wheelhouse_port, with_labels
from .report import Result, Status
from .smoke_runner import run_smoke

LABEL_PREFIX = "io.imagebuilder"


@dataclass(frozen=True)
class BuildOptions:
    push: bool = True
    smoke: bool = True
    report_dir: Path = Path("imagebuilder-report")
    expect: tuple[tuple[str, str], ...] = ()
    quiet: bool = False
    no_cache: bool = False
    allow_untested_gpu: bool = False


def labels(node: Node, parent_ref: str, parent_id: str) -> dict[str, str]:
    entry = node.entry
    out = {
        "org.opencontainers.image.title": f"{entry.repository} {node.name}",
        "org.opencontainers.image.description": node.layer.description or f"imagebuilder layer {node.layer.name}",
        "org.opencontainers.image.version": node.tags[0].rsplit(":", 1)[-1],
        "org.opencontainers.image.ref.name": node.tags[0],
        "org.opencontainers.image.base.name": parent_ref,
        "org.opencontainers.image.base.digest": parent_id,
        "org.opencontainers.image.vendor": "imagebuilder",
        f"{LABEL_PREFIX}.node": node.id,
        f"{LABEL_PREFIX}.entry": entry.id,
        f"{LABEL_PREFIX}.layer": node.layer.name,
    }
    for key, value in entry.versions().items():
        if value is not None:
            out[f"{LABEL_PREFIX}.version.{key}"] = value
    return out


def expectations(entry: Entry, extra: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """What the smoke suite checks in an entry's images: the resolved versions, floors, and overrides."""
    expect: dict[str, Any] = {k: v for k, v in entry.versions().items() if k != "flavor"}
    expect.update(driver_floor=entry.driver_floor, throughput_floor=entry.smoke.throughput_floor,
                  cpu_gflops_floor=entry.smoke.cpu_gflops_floor)
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


@dataclass
class Builder:
    engine: Engine
    plan: Plan
    options: BuildOptions
    console: Console
    renderer: Renderer = field(default_factory=Renderer)
    results: dict[str, Result] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)

    def run(self) -> list[Result]:
        self.results = {n.id: Result(n.id, n.entry.id, n.layer.name, n.leaf) for n in self.plan.nodes}
        self.check_bases()
        wheelhouses = {e.build.wheelhouse for e in self.plan.entries() if e.build.wheelhouse}
        with serve_wheelhouses(wheelhouses) as urls:
            self.renderer = Renderer(wheelhouse_urls=urls)
            for entry in self.plan.entries():
                self.run_entry(entry)
        return list(self.results.values())

    def check_bases(self) -> None:
        """Every base image must be there (or pullable) before anything builds."""
        for base in sorted({n.base_image for n in self.plan.nodes if n.base_image}):
            if self.engine.image_id(base) is not None:
                continue
            self.say(f"[dim]pulling base image {escape(base)}[/]")
            try:
                self.engine.pull(base)
            except EngineError as exc:
                entry = next(n.entry for n in self.plan.nodes if n.base_image == base)
                raise InputError(f"base image {base!r} is not present and cannot be pulled ({exc.message})",
                                 where=entry.where, hint="pull or import it first (`make base-image` seeds "
                                 "debian:bookworm from Debian's mirror)") from None

    def say(self, text: str) -> None:
        if not self.options.quiet:
            self.console.print(text, highlight=False)

    def run_entry(self, entry: Entry) -> None:
        nodes = [n for n in self.plan.nodes if n.entry.id == entry.id]
        for node in nodes:
            self.build_node(node)
        for node in nodes:
            if node.leaf and self.results[node.id].build == Status.BUILT:
                if self.options.smoke:
                    self.smoke_node(node)
                else:
                    self.results[node.id].smoke = Status.SKIPPED
        entry_ok = all(self.results[n.id].build == Status.BUILT for n in nodes) and all(
            self.results[n.id].smoke in (Status.PASSED, Status.SKIPPED) for n in nodes if n.leaf)
        untested = [n for n in nodes if self.results[n.id].gpu_verified is False]
        if entry_ok and untested and self.options.push and not self.options.allow_untested_gpu:
            for node in nodes:
                self.results[node.id].publish = Status.HELD
                self.results[node.id].error = ("not GPU-verified: no GPU on this host "
                                               "(--allow-untested-gpu pushes anyway)")
            self.say(f"[yellow]{escape(entry.id)}: CUDA images not GPU-verified are not pushed; "
                     "pass --allow-untested-gpu to push them anyway[/]")
            return
        if not entry_ok:
            for node in nodes:
                if self.results[node.id].build == Status.BUILT:
                    self.results[node.id].publish = Status.HELD
            self.say(f"[yellow]{escape(entry.id)}: not every node passed; nothing of this entry is tagged or pushed[/]")
            return
        self.publish_entry(nodes)

    def log_file(self, node: Node) -> Path:
        path = self.options.report_dir / "logs" / (re.sub(r"[^A-Za-z0-9._-]+", "_", node.id) + ".log")
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def sink(self, node: Node, log: TextIO, tail: list[str]) -> LineSink:
        prefix = f"[dim]{escape(node.id)}[/] │ "

        def emit(line: str) -> None:
            log.write(line + "\n")
            log.flush()
            tail.append(line)
            del tail[:-40]
            if not self.options.quiet:
                self.console.print(prefix + escape(line), highlight=False, soft_wrap=True)
        return emit

    def build_node(self, node: Node) -> None:
        result = self.results[node.id]
        if node.parent is not None and self.results[node.parent].build != Status.BUILT:
            result.build = Status.BLOCKED
            result.error = f"parent {node.parent} did not build"
            return
        if node.base_image is not None:
            parent_ref = node.base_image
            parent_id = self.engine.image_id(node.base_image) or node.base_image
        else:
            assert node.parent is not None
            parent_ref = self.plan.node(node.parent).tags[0]
            parent_id = self.images[node.parent]
        rendered = with_labels(self.renderer.render(node.entry, node.layer, node.id, parent_id),
                               labels(node, parent_ref, parent_id))
        log_path = self.log_file(node)
        result.log = str(log_path)
        tail: list[str] = []
        start = time.monotonic()
        self.say(f"[bold]▶ build {escape(node.id)}[/] [dim]FROM {escape(parent_ref)} ({parent_id[:19]})[/]")
        with log_path.open("w", encoding="utf-8") as log:
            try:
                image = self.engine.build(rendered.tar(), network=node.entry.build.network,
                                          sink=self.sink(node, log, tail),
                                          nocache=self.options.no_cache)
            except ImageBuilderError as exc:
                log.write(f"ERROR: {exc.message}\n")
                result.build = Status.FAILED
                result.error = exc.message
                result.log_tail = "\n".join(tail[-25:])
                self.say(f"[bold red]✗ {escape(node.id)}: {escape(exc.message)}[/]")
                return
            finally:
                result.durations["build"] = time.monotonic() - start
        self.images[node.id] = image
        result.image = image
        result.build = Status.BUILT
        self.say(f"[green]✓ built {escape(node.id)}[/] [dim]{image[:19]} in {result.durations['build']:.1f}s[/]")

    def smoke_node(self, node: Node) -> None:
        result = self.results[node.id]
        start = time.monotonic()
        self.say(f"[bold]▶ smoke {escape(node.id)}[/]")
        assert result.log is not None
        with open(result.log, "a", encoding="utf-8") as log:
            log.write("---- smoke ----\n")

            def to_log(line: str) -> None:  # the whole suite output goes to the node's log file
                log.write(line + "\n")
            try:
                report = run_smoke(self.engine, self.images[node.id], expectations(node.entry, self.options.expect),
                                   timeout=node.entry.smoke.timeout, shm_size=node.entry.smoke.shm_size,
                                   gpus=node.entry.smoke.gpus, driver_dir=node.entry.smoke.driver_dir,
                                   env=dict(node.entry.smoke.env),
                                   commands=self.layer_checks(node), sink=to_log)
            except ImageBuilderError as exc:
                result.smoke = Status.FAILED
                result.error = f"smoke: {exc.message}"
                return
            finally:
                result.durations["smoke"] = time.monotonic() - start
        result.smoke_report = report.to_json()
        for check in report.checks:
            mark = {"pass": "[green]✓[/]", "fail": "[red]✗[/]"}.get(str(check.get("status")), "[dim]-[/]")
            reason = f" [dim]{escape(str(check.get('reason')))}[/]" if check.get("reason") else ""
            self.say(f"  {mark} {escape(str(check.get('name')))}{reason}")
        if report.passed:
            result.smoke = Status.PASSED
            if node.entry.cuda and not report.gpu_verified:
                result.gpu_verified = False
                self.say(f"[yellow]  {escape(node.id)} is a CUDA image and was not GPU-verified (no GPU here)[/]")
        else:
            result.smoke = Status.FAILED
            result.error = "; ".join(report.failures())[:300] or "smoke failed"
            result.log_tail = report.log_tail

    def layer_checks(self, node: Node) -> list[dict[str, str]]:
        """The leaf's own layer checks and every ancestor's: tests are inherited down the tree."""
        chain = [*reversed(self.plan.ancestors(node)), node]
        return [{"name": f"layer.{n.name}.{i}", "run": cmd} for n in chain for i, cmd in enumerate(n.layer.smoke)]

    def publish_entry(self, nodes: list[Node]) -> None:
        """Tag every node of a passing entry; push and verify each reference unless --no-push."""
        for node in nodes:
            result = self.results[node.id]
            start = time.monotonic()
            try:
                for ref in node.tags:
                    self.engine.tag(self.images[node.id], ref)
                result.tags = list(node.tags)
                if not self.options.push:
                    result.publish = Status.TAGGED
                    continue
                for ref in node.tags:
                    self.say(f"[bold]▶ push {escape(ref)}[/]")
                    digest = self.engine.push(ref, sink=lambda line: self.say(f"[yellow]  {escape(line)}[/]"))
                    held = self.engine.registry_digest(ref)
                    if held != digest:
                        raise EngineError(f"push {ref}: the registry holds {held}, not the pushed {digest}")
                    result.digest = digest
                result.publish = Status.PUSHED
                self.say(f"[green]✓ pushed {escape(node.tags[0])}@{result.digest}[/]")
            except ImageBuilderError as exc:
                result.publish = Status.FAILED
                result.error = exc.message
                self.say(f"[bold red]✗ publish {escape(node.id)}: {escape(exc.message)}[/]")
            finally:
                result.durations["publish"] = time.monotonic() - start


def run_meta(matrix_file: Path) -> dict[str, Any]:
    return {
        "tool": "imagebuilder",
        "matrix": str(matrix_file),
        "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
    }
