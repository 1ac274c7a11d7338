"""An entry's settings, resolved: its merged mapping keys (`build`, `smoke`, `user`, `runners`, `vulnerabilities`;
the entry's keys over the top level's, located by the reader) made the typed settings an `Entry` holds. Each value
is of its kind and within the schema's bounds, else an error names where it was written; a key not written is the
schema's default. Reads only the files a setting names (a CA bundle is read once per file).
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..declarations import grammar, schema
from ..declarations.vulnerabilities import Allowance, Policy, too_far
from ..errors import InputError
from . import certs
from .compat import Variant, torch_index_url
from .entry import BuildSettings, RunnerSettings, SmokeSettings, UserSpec, VulnerabilitySettings
from .gpus import gpus_matching
from .reader import Merged, Path_, Reader, describe

CA_ENV = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
ALLOWANCE_KEYS = ("id", "reason", "expires", "packages")
SYSTEM_FOLDERS = ("", "/usr", "/etc", "/bin", "/lib", "/opt", "/var", "/tmp")  # never a user's workdir


def ca_variable(env: Mapping[str, str]) -> str | None:
    """The first of CA_ENV this environment sets: the CA bundle when the matrix names none."""
    return next((name for name in CA_ENV if env.get(name)), None)


@dataclass
class Settings:
    """Makes an entry's settings from its merged mappings; `env` is the environment the CA bundle may come from,
    `bundles` the CA bundles already checked."""

    read: Reader
    env: Mapping[str, str]
    bundles: set[Path] = field(default_factory=set)

    # -- build -------------------------------------------------------------------------------------
    def build(self, merged: Merged, variant: Variant) -> BuildSettings:
        ca = self.ca(merged)
        wheelhouse = None
        if merged.values.get("wheelhouse") is not None:
            wheelhouse = self.read.path_value(merged.values["wheelhouse"], merged.path("wheelhouse"), want_dir=True)
        index_url = self.read.setting(merged, "build.index_url")
        torch_url = self.torch_url(merged, variant)
        network = self.read.setting(merged, "build.network")
        toolkit = self.read.choice(merged.values.get("cuda_toolkit", schema.default("build.cuda_toolkit")),
                                   ("pip", "image"), merged.path("cuda_toolkit"))
        return BuildSettings(ca, wheelhouse, torch_url, index_url, network, toolkit)

    def ca(self, merged: Merged) -> Path | None:
        """`build.ca_bundle`, else the bundle of the first CA variable the environment sets."""
        if merged.values.get("ca_bundle") is not None:
            ca = self.read.path_value(merged.values["ca_bundle"], merged.path("ca_bundle"), want_dir=False)
            self.ca_bundle(ca, f"CA bundle {merged.values['ca_bundle']!r}", merged.path("ca_bundle"))
            return ca
        name = ca_variable(self.env)
        if name is None:
            return None
        ca = Path(self.env[name])
        if not (ca.is_file() and os.access(ca, os.R_OK)):
            raise InputError(f"CA bundle {ca} from ${name} is not a readable file",
                             where=self.read.where(("build",)), hint="set build.ca_bundle, or unset the variable")
        self.ca_bundle(ca, f"CA bundle {ca} from ${name}", ("build",))
        return ca

    def ca_bundle(self, path: Path, what: str, key: Path_) -> None:
        """A CA bundle goes into every image: PEM certificates only (`certs`), checked once per file."""
        if path in self.bundles:
            return
        try:
            with open(path, "rb") as handle:
                certs.certificates(handle.read(certs.MAX_BYTES + 1))
        except (OSError, certs.NotABundle) as exc:
            raise self.read.fail(f"{what} is not a CA bundle: {exc}", key,
                                 hint="name a file of PEM certificates (-----BEGIN CERTIFICATE-----), such as "
                                      "/etc/ssl/certs/ca-certificates.crt") from None
        self.bundles.add(path)

    def torch_url(self, merged: Merged, variant: Variant) -> str:
        """torch's index: `build.pip_index_url` (one URL with `{accelerator}`, or one per accelerator), else
        PyTorch's index for the variant."""
        piu = merged.values.get("pip_index_url")
        piu_path = merged.path("pip_index_url")
        if isinstance(piu, dict):
            piu = self.read.mapping(piu, piu_path, tuple(piu))
            piu_path = (*piu_path, variant.accelerator)
            piu = piu.get(variant.accelerator)
        if piu is None:
            return torch_index_url(variant)
        if not isinstance(piu, str):
            raise self.read.fail(f"expected a url value, got {describe(piu)}", piu_path)
        unknown = sorted(set(re.findall(r"{([^{}]*)}", piu)) - {"accelerator"})
        if unknown and not grammar.has_credentials(piu):
            raise self.read.fail(f"unknown placeholder {{{unknown[0]}}} in {piu!r}; only {{accelerator}} is known",
                                 piu_path)
        return self.read.url(piu, piu_path, ("accelerator",)).replace("{accelerator}", variant.accelerator)

    # -- smoke -------------------------------------------------------------------------------------
    def smoke(self, top: dict[str, Any], merged: Merged) -> SmokeSettings:
        timeout = int(self.read.setting(merged, "smoke.timeout"))
        shm = self.read.setting(merged, "smoke.shm_size")
        gpus = self.read.setting(merged, "smoke.gpus")
        driver_dir = self.read.setting(merged, "smoke.driver_dir")
        floor = float(self.read.bounded(merged, "smoke.throughput_floor", "a fraction of the GPU model's dense bf16 "
                                        "peak", hint="a slower GPU host still clears the lowest"))
        cpu_floor = float(self.read.bounded(merged, "smoke.cpu_gflops_floor", "GFLOP/s, where the check would pass a "
                                            "broken image", hint="benchmarks/results/cpu_floor.json"))
        env = self.smoke_env(top, merged)
        allow_skip = self.allow_skip(merged)
        gpu_floors = self.gpu_floors(merged)
        window = int(self.read.bounded(merged, "smoke.history_window", "the passes whose median is an image's "
                                       "performance baseline"))
        return SmokeSettings(timeout, shm, gpus, driver_dir, floor, cpu_floor, env, allow_skip, gpu_floors, window)

    def smoke_env(self, top: dict[str, Any], merged: Merged) -> tuple[tuple[str, str], ...]:
        """`smoke.env`: variable names of the smoke container's environment, none like a secret, and their values."""
        raw_env = merged.values.get("env") or {}
        if not isinstance(raw_env, dict):
            raise self.read.fail(f"expected a mapping of variables, got {describe(raw_env)}", merged.path("env"))
        env = []
        for k, v in sorted(raw_env.items()):
            if not grammar.matches("envname", k):
                raise self.read.fail(f"invalid variable name {k!r}", (*merged.path("env"), k))
            self.read.not_a_secret(top, k, (*merged.path("env"), k))
            env.append((k, self.read.scalar(v, "var", (*merged.path("env"), k))))
        return tuple(env)

    def allow_skip(self, merged: Merged) -> tuple[str, ...]:
        """`smoke.allow_skip`: check names (or globs of them)."""
        allow_skip = []
        for i, name in enumerate(self.read.listof(merged.values.get("allow_skip") or [], merged.path("allow_skip"))):
            if not isinstance(name, str) or not grammar.matches("check", name):
                raise self.read.fail(f"expected a check name such as 'throughput' or 'versions.driver', got "
                                     f"{describe(name)}", (*merged.path("allow_skip"), i))
            allow_skip.append(name)
        return tuple(allow_skip)

    def gpu_floors(self, merged: Merged) -> tuple[tuple[str, float], ...]:
        """`smoke.gpu_floors`: GPU name -> bf16 TFLOP/s floor (`gpu_floor`)."""
        raw_floors = merged.values.get("gpu_floors") or {}
        if not isinstance(raw_floors, dict):
            raise self.read.fail(f"expected a mapping of GPU name to TFLOP/s, got {describe(raw_floors)}",
                                 merged.path("gpu_floors"))
        return tuple((name, self.gpu_floor(name, value, (*merged.path("gpu_floors"), name)))
                     for name, value in raw_floors.items())

    def gpu_floor(self, name: Any, value: Any, path: Path_) -> float:
        """One GPU's floor: above 0, and within the throughput floor's bounds of the peak of every GPU the name
        matches, as the suite matches it."""
        if not isinstance(name, str) or not name.strip():
            raise self.read.fail(f"expected a GPU name, got {describe(name)}", path)
        tflops = float(self.read.scalar(value, "float", path))
        if tflops <= 0:
            raise self.read.fail(f"floor {tflops:g} TFLOP/s for {name!r} must be above 0 (it is the bf16 matmul "
                                 "throughput a GPU of this name must reach)", path)
        low, high = (float(b or 0) for b in schema.bounds("smoke.throughput_floor"))
        for model, peak in gpus_matching(name):  # every GPU the pattern matches, as the suite matches it
            if not low * peak <= tflops <= high * peak:
                raise self.read.fail(f"floor {tflops:g} TFLOP/s for {name!r} is outside [{low * peak:g}, "
                                     f"{high * peak:g}] for {model}, which it matches: {low:g} to {high:g} of its "
                                     "dense bf16 peak, the bounds of throughput_floor", path,
                                     hint="name the GPU model in full (e.g. 'H100 PCIe'), one floor per model")
        return tflops

    # -- user and runners --------------------------------------------------------------------------
    def user(self, merged: Merged) -> UserSpec:
        """`user: {name, uid, gid, workdir}` (entry keys override the top-level ones); never root."""
        name = self.read.setting(merged, "user.name")
        if name == "root":
            raise self.read.fail("images run as a non-root user; `root` is not allowed here", merged.path("name"))
        ids = {}
        for key in ("uid", "gid"):
            raw = merged.values.get(key, schema.default(f"user.{key}"))
            if raw == 0 or raw == "0":
                raise self.read.fail(f"{key} 0 is root; images run as a non-root user", merged.path(key),
                                     hint=f"the default is {schema.value('user.' + key)}; use the UID your cluster "
                                          "or volumes expect")
            ids[key] = int(self.read.setting(merged, f"user.{key}"))
            _, high = schema.bounds(f"user.{key}")
            if high is not None and ids[key] > high:
                raise self.read.fail(f"{key} {ids[key]} is out of range", merged.path(key))
        workdir = self.read.setting(merged, "user.workdir")
        if workdir.rstrip("/") in SYSTEM_FOLDERS:
            raise self.read.fail(f"workdir {workdir!r} is a system folder; it becomes the user's",
                                 merged.path("workdir"))
        return UserSpec(name, ids["uid"], ids["gid"], workdir)

    def runners(self, merged: Merged) -> RunnerSettings:
        """`runners: {build, gpu_queue, gpu, gpus}` (an entry's keys over the top level's)."""
        return RunnerSettings(build=self.read.setting(merged, "runners.build"),
                              gpu_queue=self.read.setting(merged, "runners.gpu_queue"),
                              gpu=self.read.setting(merged, "runners.gpu"),
                              gpus=int(self.read.setting(merged, "runners.gpus")))

    # -- vulnerabilities ---------------------------------------------------------------------------
    def vulnerabilities(self, merged: Merged) -> VulnerabilitySettings:
        """`vulnerabilities: {data, block, unknown, require_data, allow}` (an entry's keys over the top level's)."""
        data = self.advisories(merged)
        require = self.read.flag(merged.values.get("require_data", schema.value("vulnerabilities.require_data")),
                                 merged.path("require_data"))
        allow = [self.allowance(item, (*merged.path("allow"), i))
                 for i, item in enumerate(self.read.listof(merged.values.get("allow") or [], merged.path("allow")))]
        if require and not data:
            raise self.read.fail("`require_data: true` and no `data:`: the vulnerability gate would have nothing to "
                                 "judge with", merged.path("require_data"),
                                 hint="download OSV's export of each ecosystem the images hold (e.g. "
                                      "https://osv-vulnerabilities.storage.googleapis.com/PyPI/all.zip) in the nightly "
                                      "and name it in vulnerabilities.data")
        days = {}
        for key in ("max_age", "exception_days"):
            days[key] = int(self.read.bounded(merged, f"vulnerabilities.{key}", "days"))
        today = datetime.datetime.now(datetime.timezone.utc).date()
        for i, allowance in enumerate(allow):
            why = too_far(allowance, days["exception_days"], today)
            if why is not None:
                raise self.read.fail(why, (*merged.path("allow"), i, "expires"))
        policy = Policy(block=self.read.setting(merged, "vulnerabilities.block"),
                        unknown=self.read.setting(merged, "vulnerabilities.unknown"), allow=tuple(allow),
                        require_data=require, max_age=days["max_age"], exception_days=days["exception_days"])
        return VulnerabilitySettings(data, policy)

    def advisories(self, merged: Merged) -> tuple[Path, ...]:
        """`vulnerabilities.data`: one path or a list of them, each a file or a folder that exists."""
        raw_data = merged.values.get("data") or []
        items = [raw_data] if isinstance(raw_data, str) else self.read.listof(raw_data, merged.path("data"))
        data = []
        for i, item in enumerate(items):
            path = merged.path("data") if isinstance(raw_data, str) else (*merged.path("data"), i)
            folder = not isinstance(item, str) or self.read.resolved(item).is_dir()
            data.append(self.read.path_value(item, path, want_dir=folder))
        return tuple(data)

    def allowance(self, item: Any, path: Path_) -> Allowance:
        """An exception to the gate: its advisory id, a one-line reason, the day it expires, the packages it covers."""
        m = self.read.mapping(item, path, ALLOWANCE_KEYS)
        for needed in ("id", "reason", "expires"):
            if needed not in m:
                raise self.read.fail(f"an exception needs `{needed}:` (id, reason and expires: every exception says "
                                     "why and until when)", path)
        reason = m["reason"]
        if not isinstance(reason, str) or not reason.strip() or "\n" in reason.strip():
            raise self.read.fail(f"expected a one-line reason, got {describe(reason)}", (*path, "reason"))
        expires = m["expires"]
        if isinstance(expires, datetime.date):  # YAML reads 2027-01-31 as a date
            expires = expires.isoformat()
        text = self.read.scalar(expires, "date", (*path, "expires"))
        try:
            day = datetime.date.fromisoformat(text)
        except ValueError:
            raise self.read.fail(f"{text!r} is not a date", (*path, "expires"), hint=grammar.hint("date")) from None
        packages = m.get("packages") or []
        names = tuple(self.read.scalar(p, "package", (*path, "packages", j))
                      for j, p in enumerate([packages] if isinstance(packages, str) else
                                            self.read.listof(packages, (*path, "packages"))))
        return Allowance(self.read.scalar(m["id"], "advisory", (*path, "id")), reason.strip(), day, names,
                         self.read.written(path))
