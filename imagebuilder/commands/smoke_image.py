"""`smoke IMAGE`: the smoke suite in an existing image, outside any run. What it checks comes from the image's own
labels (an image imagebuilder built carries its versions, user and layer checks); `--expect` adds to them or
overrides them, and may raise a floor, never lower it. It records no pass."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InputError, did_you_mean
from ..evidence import spec as spec_mod
from ..input.compat import CompatTable
from ..ports import Engine
from ..smoke.judge import judge
from ..smoke.runner import CHECK_KINDS, GpuHost, run_smoke


def kinds_of(only: str) -> tuple[str, ...]:
    """`--only`'s comma-separated kinds of checks (an input error naming an unknown one)."""
    kinds = tuple(k.strip() for k in only.split(",") if k.strip())
    unknown = [k for k in kinds if k not in CHECK_KINDS]
    if unknown:
        raise InputError(f"--only {only!r}: unknown kind {unknown[0]!r}",
                         hint=did_you_mean(unknown[0], CHECK_KINDS) or f"kinds: {', '.join(CHECK_KINDS)}")
    return kinds


@dataclass(frozen=True)
class Settings:
    """How the suite's container runs, and which skips a GPU run accepts (comma-separated, as `--allow-skip`)."""

    timeout: int
    shm_size: str
    gpus: str
    driver_dir: str
    allow_skip: str = ""


@dataclass(frozen=True)
class Smoked:
    """The suite's JSON report with the host's verdict (`document`), and why it failed (`failure`) or None."""

    document: dict[str, Any]
    failure: str | None = None


def smoke_image(engine: Engine, table: Callable[[], CompatTable], image: str, expect: tuple[tuple[str, str], ...],
                kinds: tuple[str, ...], settings: Settings) -> Smoked:
    """Run the suite in `image` (an input error when the engine lacks it, or nothing says what to expect of it)
    and judge it on this host. `table`: the compatibility table, read once the image is found. `kinds`: only
    these kinds of checks, a diagnostic run that accepts every skip."""
    given: dict[str, Any] = {key: None if value.lower() in ("none", "null") else value for key, value in expect}
    if engine.image_id(image) is None:
        raise InputError(f"image {image!r} is not present on the engine")
    labels = (engine.inspect(image).get("Config") or {}).get("Labels") or {}
    expected = spec_mod.image_expectations(labels, table())
    if expected is None and not given:
        raise InputError(f"image {image!r} carries no imagebuilder labels (io.imagebuilder.version.*) and no "
                         "--expect was given: the suite would have nothing to check its versions against",
                         hint="say what the image promises, e.g. --expect torch=2.6.0 --expect accelerator=cu124 "
                              "--expect python=3.11")
    source = "labels" if expected is not None and not given else "--expect" if expected is None else \
        "labels and --expect"
    expected = expected or {}
    spec_mod.check_floors(given, expected)
    expected.update(given)
    host = GpuHost.probe()
    commands = spec_mod.image_checks(labels)
    report = run_smoke(engine, image, expected, timeout=settings.timeout, shm_size=settings.shm_size,
                       gpus=settings.gpus, driver_dir=settings.driver_dir, only=kinds, commands=commands,
                       devices=host.devices)
    allowed = ("*",) if kinds else tuple(k.strip() for k in settings.allow_skip.split(",") if k.strip())  # a probe
    verdict = judge(report, expected, commands, host=host, allow_skip=allowed, kinds=kinds)
    document = {"image": image, "expect_from": source, "expect": expected, **({"only": list(kinds)} if kinds else {}),
                **report.to_json(), "gpu_verified": verdict.gpu_verified, "host_verdict": verdict.why(),
                **({"host_notes": list(verdict.notes)} if verdict.notes else {})}
    return Smoked(document, None if verdict.passed else
                  "smoke failed: " + verdict.why().replace("smoke.allow_skip", "--allow-skip"))
