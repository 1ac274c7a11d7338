"""The matrix loader's second part: it resolves typed entries from what the reader read (`input/reader.py`, the
combinations of `input/combos.py`). Each combination is resolved against the compatibility table (its torch
release, accelerator variant and Python), given its layer tree, tags, variables, overrides and settings
(`input/settings.py`), and becomes a frozen `Entry` that says where each of its values was written. Every default
and bound is the schema's (`declarations.schema`), every value's grammar the grammar's (`declarations.grammar`).

What a first load cannot know from the file (a base image's Python, an index's versions of an overriding wheel)
is collected as questions (`lookups`), and the entries that need the answers are left out until a second load is
given them. Nothing here touches the engine or the network.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..declarations import grammar, schema
from ..errors import InputError, Where, did_you_mean
from ..secrets import index_auth
from . import lookups
from .combos import Crossing
from .compat import CompatTable, Variant, os_python
from .entry import WHEN_FIELDS, BuildSettings, Entry, LayerSpec, Matrix, cuda_toolkit, for_entry
from .reader import Combo, Merged, Path_, Reader
from .settings import Settings, ca_variable

OVERRIDABLE = {"nccl": "nvidia-nccl-cu", "cudnn": "nvidia-cudnn-cu"}  # entry key -> wheel name prefix
TORCH_EXTRAS = tuple(schema.value("torch_extras"))  # the companions torch may come with; the default is all
MAPPINGS = ("build", "smoke", "user", "vulnerabilities", "runners")  # the merged keys an entry's settings come from


@dataclass(frozen=True)
class Head:
    """What names an entry, each value of its kind: torch, accelerator, Python (written, or its base image's),
    flavor, base image; `where` its combination was written."""

    torch: str
    accelerator: str
    python: str
    flavor: str
    base_image: str
    where: Where

    @property
    def label(self) -> str:
        return f"torch {self.torch}/{self.accelerator}/py{self.python}"


class Resolver:
    """Resolves one read matrix file: `env` is the environment (CA variables, index credentials), `registry` the
    --registry that overrides the file's, `strict` makes a warning an error, `facts` are a first load's answers
    (None: a first load, which collects its questions)."""

    def __init__(self, read: Reader, compat: CompatTable, env: dict[str, str], registry: str | None, strict: bool,
                 max_entries: int, facts: lookups.Facts | None = None) -> None:
        self.read = read
        self.compat = compat
        self.env = env
        self.registry_override = registry
        self.strict = strict
        self.max_entries = max_entries
        self.facts = facts or lookups.Facts()
        self.asking = facts is None  # a first load: questions are collected, not answered
        self.base_images: set[str] = set()  # questions: base images whose Python is needed
        self.index: set[tuple[str, str]] = set()  # questions: (index url, project)
        self.warnings: list[str] = []
        self.settings = Settings(read, env)

    def matrix(self) -> Matrix:
        top = self.read.top(registry_given=self.registry_override is not None)
        crossed = Crossing(self.read, self.max_entries, self.strict).cross(top)
        self.warnings.extend(crossed.notes)
        entries = [e for combo in crossed.combos if (e := self.entry(top, combo)) is not None]
        check_unique(entries)
        self.check_index_credentials(entries)
        own = self.registry_override or (top["registry"] if isinstance(top.get("registry"), str) else None)
        return Matrix(Path(self.read.doc.file), tuple(entries), tuple(crossed.excluded), tuple(self.warnings),
                      lookups.Questions(frozenset(self.base_images), frozenset(self.index)), own,
                      self.read.scalar(top.get("attestations", schema.default("attestations")), "layouts",
                                       ("attestations",)))

    def check_index_credentials(self, entries: list[Entry]) -> None:
        """The environment's index credentials must say which hosts they are for, and never cross a network in clear
        text unless the environment says so."""
        urls = [(e, (e.build.index_url, e.build.torch_index_url)) for e in entries]
        problem = index_auth.scope_problem({url for _, pair in urls for url in pair}, self.env)
        if problem is not None:
            first = next(e for e, pair in urls if index_auth.scope_problem(pair, self.env) is not None)
            raise InputError(problem, where=first.where, hint="credentials go only to the index hosts they are "
                             "for: name them, or give each host its own in ~/.netrc")
        clear = index_auth.plain_http_problem({url for _, pair in urls for url in pair}, self.env)
        if clear is not None:
            first = next(e for e, pair in urls if index_auth.plain_http_problem(pair, self.env) is not None)
            raise InputError(clear, where=first.where)

    def entry(self, top: dict[str, Any], combo: Combo) -> Entry | None:
        """The combo resolved; None on a first load when it needs the engine's answer (its base image's Python)."""
        head = self.head(top, combo)
        if head is None:
            return None
        variant = self.variant(head)
        registry, repository = self.destination(top, combo)
        layers, layers_path = self.layers(top, combo, head, variant)
        mappings = {name: self.read.merged(top, combo, name, schema.names(under=name)) for name in MAPPINGS}
        build = self.settings.build(mappings["build"], variant)
        smoke = self.settings.smoke(top, mappings["smoke"])
        tags = self.templates(top, combo, "tags", nonempty=True)
        aliases = self.templates(top, combo, "aliases", nonempty=False)
        extras = self.extras(top, combo)
        release = self.compat.release(head.torch)
        assert release is not None  # variant() checked it
        var_pairs = self.variables(top, combo)
        overrides, resolved = self.overrides(top, combo, variant, head, build.torch_index_url)
        user = self.settings.user(mappings["user"])
        self.check_toolkit(head, variant, build)
        return Entry(
            id=self.entry_id(top, combo, head), torch=head.torch, accelerator=head.accelerator, python=head.python,
            flavor=head.flavor, cuda=variant.cuda, cudnn=resolved.get("cudnn", variant.cudnn),
            nccl=resolved.get("nccl", variant.nccl), triton=variant.triton,
            torchvision=release.torchvision if "torchvision" in extras else None,
            torchaudio=release.torchaudio if "torchaudio" in extras else None,
            pins=variant.packages, base_image=head.base_image, registry=registry, repository=repository,
            layers=layers, layers_path=layers_path, build=build, smoke=smoke, tags=tags,
            vars=var_pairs, where=head.where, overrides=overrides,
            driver_floor=self.compat.min_driver(variant.cuda) if variant.cuda else None, aliases=aliases,
            user=user, toolkit=cuda_toolkit(variant, build.cuda_toolkit) if head.flavor == "devel" else (),
            cuda_libs=variant.cuda_libs(overrides) if variant.cuda else (), origins=self.origins(top, combo, mappings),
            vulnerabilities=self.settings.vulnerabilities(mappings["vulnerabilities"]),
            runners=self.settings.runners(mappings["runners"]),
        )

    # -- what names the entry ----------------------------------------------------------------------
    def head(self, top: dict[str, Any], combo: Combo) -> Head | None:
        """The entry's names; None on a first load when its Python is its base image's and that is not known yet."""
        where = self.read.where(combo.origin)
        torch = self.read.own(combo, "torch", "torch")
        acc = self.read.own(combo, "accelerator", "accelerator")
        flavor = self.read.own(combo, "flavor", "flavor", schema.value("matrix.flavor")[0])
        base_raw, base_path = self.read.cascaded(top, combo, "base_image")
        base_image = self.read.scalar(base_raw, "image", base_path)
        if "python" in combo.values:
            python = self.read.own(combo, "python", "python")
        else:
            found = self.base_python(base_image, where)
            if found is None:
                return None  # (resolved when the engine has said)
            python = found
        return Head(torch, acc, python, flavor, base_image, where)

    def base_python(self, base_image: str, where: Where) -> str | None:
        """A base image's Python: the OS table's, else the engine's answer; None while it is a question."""
        found = os_python(base_image) or self.facts.base_python.get(base_image)
        if found is None and self.asking and base_image not in self.facts.base_python:
            self.base_images.add(base_image)
            return None
        if found is None:
            raise InputError(
                f"no `python` given and the Python of base image {base_image!r} is unknown",
                where=where, hint="add a `python:` axis, e.g. python: [\"3.11\"]")
        return found

    def variant(self, head: Head) -> Variant:
        """The compatibility table's variant of the entry's torch release and accelerator, for its Python."""
        torch, acc, label, where = head.torch, head.accelerator, head.label, head.where
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
        if not release.supports_python(head.python):
            offered = ", ".join(release.python) or release.requires_python or "?"
            raise InputError(f"{label}: torch {torch} supports Python {offered}; not {head.python}", where=where)
        return variant

    def destination(self, top: dict[str, Any], combo: Combo) -> tuple[str, str]:
        """The registry (--registry's, else the entry's) and repository its images go to."""
        reg_raw, reg_path = self.read.cascaded(top, combo, "registry")
        registry = self.registry_override or self.read.scalar(reg_raw, "registry", reg_path)
        if self.registry_override and not grammar.matches("registry", registry):
            raise InputError(f"invalid registry {registry!r} given by --registry",
                             hint=grammar.hint("registry"))
        repo_raw, repo_path = self.read.cascaded(top, combo, "repository")
        return registry, self.read.scalar(repo_raw, "repository", repo_path)

    def entry_id(self, top: dict[str, Any], combo: Combo, head: Head) -> str:
        """An include's `name:`, else {torch}-{accelerator}-py{python}-{flavor}[-{base image}]."""
        if combo.values.get("name") is not None:
            return self.read.scalar(combo.values["name"], "name", combo.paths["name"])
        entry_id = f"{head.torch}-{head.accelerator}-py{head.python}-{head.flavor}"
        if "base_image" in top.get("matrix", {}):
            entry_id += "-" + re.sub(r"[^a-z0-9.]+", "-", head.base_image.lower()).strip("-")
        return entry_id

    # -- the layer tree ----------------------------------------------------------------------------
    def layers(self, top: dict[str, Any], combo: Combo, head: Head,
               variant: Variant) -> tuple[tuple[LayerSpec, ...], tuple[Path, ...]]:
        """The entry's own layer tree (the nodes whose `when:` it matches) and the folders searched for layers."""
        layers_raw, layers_key = self.read.cascaded(top, combo, "layers")
        fields = {"torch": head.torch, "accelerator": head.accelerator, "python": head.python, "flavor": head.flavor,
                  "cuda": variant.cuda}
        layers = for_entry(self.layer_tree(layers_raw, layers_key), fields)
        if not layers:
            raise self.read.fail(f"{head.label}: no layer of the tree applies (every one has a `when:` this entry "
                                 "misses)", layers_key)
        lp_raw, lp_path = self.read.cascaded(top, combo, "layers_path")
        layers_path = tuple(
            self.read.path_value(p, (*lp_path, i), want_dir=True)
            for i, p in enumerate(self.read.listof(lp_raw or [], lp_path))
        )
        return layers, layers_path

    def layer_tree(self, raw: Any, path: Path_) -> tuple[LayerSpec, ...]:
        """`layers:` as nodes, parents first: folder names (a chain) or `{layer, name, parent, when}` items."""
        specs: list[LayerSpec] = []
        previous: str | None = None
        for i, item in enumerate(self.read.listof(raw, path, nonempty=True)):
            spec = self.layer_node(item, (*path, i), previous)
            if any(s.name == spec.name for s in specs):
                raise self.read.fail(f"layer node {spec.name!r} appears twice; give one a distinct `name:`",
                                     (*path, i))
            specs.append(spec)
            previous = spec.name
        names = [s.name for s in specs]
        for i, spec in enumerate(specs):
            if spec.parent is not None and spec.parent not in names:
                raise self.read.fail(f"parent {spec.parent!r} of layer {spec.name!r} is not in this layer tree",
                                     (*path, i), hint=did_you_mean(spec.parent, names))
        return tuple(_tree_order(specs, self.read.where(path)))

    def layer_node(self, item: Any, path: Path_, previous: str | None) -> LayerSpec:
        """One item of `layers:`; its parent is the item before it unless it names one (`parent: null`: a root)."""
        if isinstance(item, str):
            layer = self.read.scalar(item, "layer", path)
            return LayerSpec(layer, layer, previous)
        m = self.read.mapping(item, path, ("layer", "name", "parent", "when"))
        if "layer" not in m:
            raise self.read.fail("a layer mapping needs `layer:` (the folder name)", path)
        layer = self.read.scalar(m["layer"], "layer", (*path, "layer"))
        name = self.read.scalar(m.get("name", layer), "layer", (*path, "name"))
        parent = previous if "parent" not in m else (
            None if m["parent"] is None else self.read.scalar(m["parent"], "layer", (*path, "parent")))
        return LayerSpec(name, layer, parent, self.when(m.get("when"), (*path, "when")))

    def when(self, raw: Any, path: Path_) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """`when: {flavor: devel, accelerator: [cu*]}`: entry fields and the globs (one or a list) they match."""
        if raw is None:
            return ()
        m = self.read.mapping(raw, path, WHEN_FIELDS)
        out = []
        for name, value in m.items():
            globs = value if isinstance(value, list) else [value]
            if not globs:
                raise self.read.fail(f"`when: {name}` needs at least one value", (*path, name))
            out.append((name, tuple(self.read.scalar(g, "glob", (*path, name, i)) for i, g in enumerate(globs))))
        return tuple(sorted(out))

    # -- tags, companions, variables -----------------------------------------------------------------
    def templates(self, top: dict[str, Any], combo: Combo, key: str, *, nonempty: bool) -> tuple[str, ...]:
        """`tags:` or `aliases:`: tag templates, else the schema's."""
        raw, path = self.read.cascaded(top, combo, key)
        if raw is None:
            return tuple(schema.value(key))
        return tuple(self.read.tag_template(t, (*path, i))
                     for i, t in enumerate(self.read.listof(raw, path, nonempty=nonempty)))

    def extras(self, top: dict[str, Any], combo: Combo) -> set[str]:
        """`torch_extras:` the companions installed with torch, else the schema's (all of them)."""
        raw, path = self.read.cascaded(top, combo, "torch_extras")
        if raw is None:
            return set(schema.value("torch_extras"))
        return {self.read.choice(x, TORCH_EXTRAS, (*path, i)) for i, x in enumerate(self.read.listof(raw, path))}

    def variables(self, top: dict[str, Any], combo: Combo) -> tuple[tuple[str, str], ...]:
        """`vars:` merged key by key: names of the grammar's `varname`, none like a secret, values of `var`."""
        merged = self.read.merged(top, combo, "vars", None)
        pairs = []
        for k, v in sorted(merged.values.items()):
            if not grammar.matches("varname", k):
                raise self.read.fail(f"invalid variable name {k!r}", merged.path(k))
            self.read.not_a_secret(top, k, merged.path(k))
            pairs.append((k, self.read.scalar(v, "var", merged.path(k))))
        return tuple(pairs)

    # -- overrides and cross-key rules ---------------------------------------------------------------
    def overrides(self, top: dict[str, Any], combo: Combo, variant: Variant, head: Head,
                  index_url: str) -> tuple[tuple[tuple[str, str], ...], dict[str, str]]:
        """`nccl:`/`cudnn:` on an entry install that version of the nvidia wheel instead of torch's pin."""
        allow_raw, allow_path = self.read.cascaded(top, combo, "allow_major_override")
        allow = allow_raw is not None and self.read.flag(allow_raw, allow_path)
        out: list[tuple[str, str]] = []
        resolved: dict[str, str] = {}
        for key, prefix in OVERRIDABLE.items():
            raw, path = self.read.cascaded(top, combo, key)
            if raw is None:
                continue
            version = self.read.scalar(raw, "libversion", path)
            package = self.overridden(key, prefix, version, variant, head, allow)
            self.on_index(index_url, package, version, head)
            out.append((package, version))
            resolved[key] = version
        return tuple(out), resolved

    def overridden(self, key: str, prefix: str, version: str, variant: Variant, head: Head, allow: bool) -> str:
        """The wheel torch pins that an override of `key` replaces; across a major version only when allowed."""
        pinned = [(name, ver) for name, ver in variant.packages if name.startswith(prefix)]
        if not pinned:
            raise InputError(f"{head.label}: `{key}: {version}` overrides nothing; torch {variant.torch}/"
                             f"{variant.accelerator} installs no {prefix}* wheel", where=head.where)
        package, pin = pinned[0]
        if version.split(".")[0] != pin.split(".")[0] and not allow:
            raise InputError(
                f"{head.label}: {key} {version} crosses a major version from torch's pin {package}=={pin}",
                where=head.where, hint="set `allow_major_override: true` on the entry if you mean it")
        return package

    def on_index(self, index_url: str, package: str, version: str, head: Head) -> None:
        """An override's version must be on the entry's index: checked with a first load's answers, else asked (an
        index that did not answer is a warning)."""
        asked = (index_url, package)
        if asked in self.facts.index_errors:
            self.warnings.append(f"{head.where}: could not check {package}=={version} on {index_url}: "
                                 f"{self.facts.index_errors[asked]}")
        elif asked in self.facts.index_versions:
            known = self.facts.index_versions[asked]
            if known is None or version not in known:
                newest = ", ".join((known or [])[-4:]) or "none"
                raise InputError(f"{head.label}: {package}=={version} does not exist on {index_url}",
                                 where=head.where, hint=f"newest there: {newest}")
        elif self.asking:
            self.index.add(asked)

    def check_toolkit(self, head: Head, variant: Variant, build: BuildSettings) -> None:
        """A devel entry's nvcc from pip needs CUDA 13 or newer (NVIDIA publishes none for CUDA 12 on PyPI)."""
        if head.flavor == "devel" and variant.cuda and int(variant.cuda.split(".")[0]) < 13 \
                and build.cuda_toolkit == "pip":
            raise InputError(
                f"{head.label} devel: NVIDIA publishes no nvcc for CUDA {variant.cuda} on PyPI "
                "(nvidia-cuda-nvcc-cu12 holds only ptxas); the pip toolkit needs CUDA 13 or newer",
                where=head.where, hint="use a cu13x entry, or a base_image with nvcc (e.g. nvidia/cuda:"
                f"{variant.cuda}.1-devel-ubuntu24.04) and `build: {{cuda_toolkit: image}}`")

    def origins(self, top: dict[str, Any], combo: Combo, mappings: Mapping[str, Merged]) -> tuple[tuple[str, str], ...]:
        """Where each key of the entry came from: `file:line`, `$VARIABLE`, `--registry` or `default` (the schema's);
        `mappings`: the entry's merged mapping keys."""
        out = []
        for key in schema.KEYS:
            if key.merge or key.level == schema.TOP or key.name == "matrix.base_image":  # (as `base_image`)
                continue
            parent = key.parent
            if parent is None:
                value, path = self.read.cascaded(top, combo, key.name)
                found = value is not None
            elif parent == "matrix":
                found, path = key.leaf in combo.values, combo.paths.get(key.leaf, ())
            else:
                found, path = key.leaf in mappings[parent].values, mappings[parent].path(key.leaf)
            name = key.leaf if parent == "matrix" else key.name
            if key.name == "registry" and self.registry_override:
                out.append((name, "--registry"))
            elif found:
                out.append((name, self.read.written(path)))
            elif key.name == "build.ca_bundle" and ca_variable(self.env) is not None:
                out.append((name, f"${ca_variable(self.env)}"))
            elif key.level != schema.INCLUDE:
                out.append((name, "default"))
        return tuple(out)


def check_unique(entries: list[Entry]) -> None:
    """No two entries share an id: the same entry twice, or two that need a distinct `name:`."""
    seen: dict[str, Entry] = {}
    for e in entries:
        if e.id in seen:
            first = seen[e.id]
            same = first.versions() == e.versions() and first.layers == e.layers and first.build == e.build
            what = "duplicate entries" if same else "two entries share the id"
            raise InputError(f"{what} {e.id!r} (first from {first.where})", where=e.where,
                             hint="remove one, or give one a distinct `name:` in its include")
        seen[e.id] = e


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
