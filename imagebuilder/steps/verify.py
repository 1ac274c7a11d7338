"""Verify: the smoke step of a run. A leaf's pass belongs to its image, not its key: it is looked for in the
local mirror by image ID and in the registry beside the digest its key tag names (then the image is never
pulled), and only otherwise the suite runs in a container of the image. A skip on a GPU run is not a
pass. What a pass is a pass of (the spec key) is computed here for every node, leaves and ancestors."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rich.markup import escape

from ..errors import ImageBuilderError
from ..evidence import passes
from ..evidence.passes import LocalPasses, PassRecord, RegistryPasses
from ..input.compat import CompatTable
from ..input.matrix import VERSION_FIELDS, Entry, SmokeSettings
from ..plan.cache import Cache, cache_ref
from ..plan.keys import LABEL_PREFIX
from ..plan.plan import Node, Plan
from ..ports.engine import Engine
from ..ports.registry import Registry, split_reference
from ..report import Result, Status
from ..secrets import redact
from ..smoke.runner import gpu_mode, gpu_models, gpu_skips, nvidia_devices, run_smoke


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


CHECKS_LABEL = f"{LABEL_PREFIX}.checks"  # the layer checks an image inherits, as JSON (not part of the key)


def image_expectations(labels: dict[str, str], table: CompatTable) -> dict[str, Any] | None:
    """What the suite checks in an image built by imagebuilder, read from its own labels: the resolved
    versions (a version it has no label for is expected absent), the user, overrides, the driver floor of
    its CUDA, and the default floors. None when the image carries no imagebuilder version labels."""
    prefix = f"{LABEL_PREFIX}.version."
    if f"{prefix}torch" not in labels:
        return None
    expect: dict[str, Any] = {key: labels.get(prefix + key) for key in VERSION_FIELDS}
    uid, _, rest = labels.get(f"{LABEL_PREFIX}.user", "").partition(":")
    gid, _, home = rest.partition(":")
    if uid.isdigit() and gid.isdigit():
        expect["user"] = {"uid": int(uid), "gid": int(gid), "home": home}
    cuda = expect.get("cuda")
    expect.update(driver_floor=table.min_driver(cuda) if cuda else None,
                  throughput_floor=SmokeSettings.throughput_floor, cpu_gflops_floor=SmokeSettings.cpu_gflops_floor)
    if "nvidia-cudnn" in labels.get(f"{LABEL_PREFIX}.overrides", ""):
        expect["cudnn_override"] = True
    return expect


def image_checks(labels: dict[str, str]) -> list[dict[str, str]]:
    """The layer checks an image was built to pass (its label), for `smoke IMAGE`."""
    try:
        checks = json.loads(labels.get(CHECKS_LABEL) or "[]")
    except ValueError:
        return []
    return [c for c in checks if isinstance(c, dict) and all(isinstance(c.get(k), str) for k in ("name", "run"))]


class Display(Protocol):
    mode: str

    def start(self, step: str) -> None: ...

    def stop(self, step: str) -> None: ...

    def line(self, step: str, node_id: str, line: str) -> None: ...


class Run(Protocol):
    """What the smoke step needs of the run it is part of (the `Builder`)."""

    plan: Plan
    results: dict[str, Result]
    images: dict[str, str]
    passes: dict[str, PassRecord]
    tested_manifests: dict[str, str]
    secrets: dict[str, str]
    cache: Cache | None

    @property
    def display(self) -> Display: ...

    def say(self, text: str) -> None: ...

    def worker_engine(self) -> Engine: ...

    def local_image(self, node: Node) -> str: ...

    def log_file(self, node: Node) -> Path: ...

    def show_log(self, result: Result) -> None: ...

    def registry(self, host: str) -> Registry: ...


@dataclass
class Verifier:
    run: Run
    smoke: bool = True  # False (--no-smoke): only passes found by image are used; nothing runs
    resmoke: bool = False  # run the suite even where a pass of this very image exists
    step: str = "build"  # verify: a pass of another GPU model does not stand in for this host's
    expect: tuple[tuple[str, str], ...] = ()  # --expect overrides
    cache_dir: Path = Path(".imagebuilder-cache")  # the local mirror of pass records
    spec_keys: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def smoke_spec(self, node: Node) -> dict[str, Any]:
        s = node.entry.smoke
        return {"expect": expectations(node.entry, self.expect), "gpus": s.gpus, "driver_dir": s.driver_dir,
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
        host, repo, _ = split_reference(cache_ref(node))
        return RegistryPasses(self.run.registry(host)), host, repo

    def find_pass(self, node: Node, key: str) -> tuple[PassRecord, str] | None:
        """A pass of this suite for the node's very image: in the local mirror by image ID, else in the
        registry beside the image its key tag names (when that is this image, or the image is not here:
        then it is what this run would publish, and is never pulled)."""
        cache = self.run.cache
        assert cache is not None
        image = self.run.images.get(node.id)
        if image is not None:
            local = LocalPasses(self.cache_dir).get(image, key)
            if local is not None:
                return local, f"local mirror {self.cache_dir}"
        if not cache.answers(split_reference(cache_ref(node))[0]):
            return None
        try:
            manifest = cache.digest(cache_ref(node))
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
        self.run.tested_manifests[node.id] = manifest
        return record, f"registry {host}/{repo}:{passes.record_tag(manifest, key)}"

    def gpus_here(self, node: Node) -> bool:
        """Whether the suite would reach GPUs on this host for this node (its `smoke.gpus` setting)."""
        if not node.entry.cuda:
            return False
        engine = self.run.worker_engine()
        return gpu_mode(node.entry.smoke.gpus, has_toolkit=engine.has_nvidia_runtime(),
                        devices=nvidia_devices()) != "none"

    def smoke_node(self, node: Node) -> bool:
        result = self.run.results[node.id]
        if result.build not in (Status.BUILT, Status.CACHED):
            return True  # the build already failed and said so
        spec = self.smoke_spec(node)
        key = self.spec_key(node)
        found = None if self.resmoke else self.find_pass(node, key)
        if found is not None and not found[0].serves(gpus_here=self.gpus_here(node)):
            self.run.say(f"[yellow]  {escape(node.id)}: its pass ({escape(found[1])}) was without a GPU; GPUs are "
                         "here: testing again[/]")
            found = None
        models = gpu_models() if self.step == "verify" and node.entry.cuda else []
        if found is not None and models and sorted(found[0].gpu.get("models") or []) != models:
            self.run.say(f"[yellow]  {escape(node.id)}: its pass ({escape(found[1])}) was on "
                         f"{escape(', '.join(found[0].gpu.get('models') or ['no GPU']))}; this host has "
                         f"{escape(', '.join(models))}: testing here too[/]")
            found = None
        if found is not None:
            record, where = found
            result.smoke = Status.CACHED
            result.smoke_report = dict(record.report) if record.report else None
            result.gpu_verified = bool(record.gpu.get("verified")) if node.entry.cuda else None
            result.pass_record = where
            self.run.passes[node.id] = record
            self.run.say(f"[cyan]● smoke {escape(node.id)}: passed on {escape(record.date)} ({escape(where)}); "
                     "--resmoke runs it again[/]")
            return True
        if not self.smoke:
            result.smoke = Status.SKIPPED
            return True
        step = f"smoke {node.id}"
        start = time.monotonic()
        self.run.display.start(step)
        self.run.say(f"[bold]▶ smoke {escape(node.id)}[/]")
        if result.log is None:
            result.log = str(self.run.log_file(node))
            Path(result.log).write_text(f"# {node.id} key {node.key} (cached image)\n", encoding="utf-8")
        try:
            with open(result.log, "a", encoding="utf-8") as log:
                log.write("---- smoke ----\n")

                def to_log(line: str) -> None:  # the whole suite output goes to the node's log file
                    line = redact.mask(line, self.run.secrets)
                    log.write(line + "\n")
                    log.flush()
                    if self.run.display.mode == "tail":  # a progress row only: the suite's lines are not streamed
                        self.run.display.line(step, node.id, line)
                try:
                    image = self.run.local_image(node)
                    report = run_smoke(self.run.worker_engine(), image, spec["expect"],
                                       timeout=node.entry.smoke.timeout, shm_size=spec["shm_size"],
                                       gpus=spec["gpus"], driver_dir=spec["driver_dir"], env=spec["env"],
                                       commands=spec["commands"], sink=to_log)
                except ImageBuilderError as exc:
                    result.smoke = Status.FAILED
                    result.error = f"smoke: {exc.message}"
                    self.run.show_log(result)
                    return False
        finally:
            result.durations["smoke"] = time.monotonic() - start
            self.run.display.stop(step)
        result.smoke_report = report.to_json()
        for check in report.checks:
            mark = {"pass": "[green]✓[/]", "fail": "[red]✗[/]"}.get(str(check.get("status")), "[dim]-[/]")
            why = f" [dim]{escape(str(check.get('reason')))}[/]" if check.get("reason") else ""
            self.run.say(f"  {mark} {escape(node.id)} {escape(str(check.get('name')))}{why}")
        skipped, result.allowed_skips = gpu_skips(report.checks, gpu_run=report.gpu_verified,
                                                  allow=node.entry.smoke.allow_skip)
        if not report.passed or skipped:
            result.smoke = Status.FAILED
            result.error = ("; ".join(report.failures())[:300] or "smoke failed") if not report.passed else (
                "a skip is not a pass on a GPU run: " + "; ".join(skipped)[:300]
                + " (fix it, or name the check in smoke.allow_skip)")
            result.log_tail = report.log_tail
            self.run.show_log(result)
            return False
        result.smoke = Status.PASSED
        if node.entry.cuda and not report.gpu_verified:
            result.gpu_verified = False
            self.run.say(f"[yellow]  {escape(node.id)} is a CUDA image and was not GPU-verified (no GPU here)[/]")
        else:
            result.gpu_verified = report.gpu_verified if node.entry.cuda else None
        record = PassRecord(passes.PASSED, config=image, spec=key, node=node.id, entry=node.entry.id,
                            expect=spec["expect"], gpu=passes.gpu_facts(result.smoke_report, bool(node.entry.cuda)),
                            date=passes.now(), suite=passes.suite_hash(), report=result.smoke_report)
        self.run.passes[node.id] = record
        LocalPasses(self.cache_dir).put(record)
        result.pass_record = "this run"
        return True

    def layer_checks(self, node: Node) -> list[dict[str, str]]:
        """The leaf's own layer checks and every ancestor's: tests are inherited down the tree."""
        chain = [*reversed(self.run.plan.ancestors(node)), node]
        return [{"name": f"layer.{n.name}.{i}", "run": cmd} for n in chain for i, cmd in enumerate(n.layer.smoke)]
