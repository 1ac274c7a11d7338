"""Layer folders: where they are found (`layers_path`, then the project's `layers/`) and what they hold.

A layer folder holds `Dockerfile.j2` (which begins with `FROM {{ parent_image }}`), an optional
`layer.yaml` (description and the layer's own settings) and any files its Dockerfile COPYs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..declarations import grammar
from ..errors import InputError, Where, did_you_mean, unknown_key
from ..secrets.redact import looks_secret
from . import source

LAYER_KEYS = ("description", "packages", "pip", "vars", "smoke")
NOT_CONTEXT = ("Dockerfile.j2", "layer.yaml", "README.md")


def project_dir(name: str) -> Path:
    """The project's shipped `templates/` or `layers/`: next to the package in a checkout, or inside it."""
    here = Path(__file__).resolve().parents[1]  # the package folder
    for candidate in (here.parent / name, here / "_data" / name):
        if candidate.is_dir():
            return candidate
    raise InputError(f"the imagebuilder installation has no {name}/ folder (looked beside {here})")


@dataclass(frozen=True)
class Layer:
    name: str
    path: Path
    description: str
    packages: tuple[str, ...]
    pip: tuple[str, ...]
    vars: tuple[tuple[str, str], ...]
    smoke: tuple[str, ...] = ()

    @property
    def template(self) -> Path:
        return self.path / "Dockerfile.j2"

    def context_files(self) -> list[Path]:
        """Files of the folder that go into the build context (everything but the template and metadata). A
        symbolic link whose target is outside the folder is an input error naming it: it would put a file of the
        build host (say ~/.docker/config.json) into the context, and a COPY into the image."""
        files = sorted(
            p for p in self.path.rglob("*")
            if p.is_file() and p.relative_to(self.path).as_posix() not in NOT_CONTEXT
            and "__pycache__" not in p.parts
        )
        inside = self.path.resolve()
        for path in files:
            if not path.resolve().is_relative_to(inside):
                raise InputError(f"layer {self.name!r}: {path.relative_to(self.path)} is a symbolic link to "
                                 f"{path.resolve()}, outside the layer folder", where=Where(str(path)),
                                 hint="copy the file into the layer folder; links may only point inside it")
        return files

    def settings(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "packages": list(self.packages),
            "pip": list(self.pip),
            "vars": dict(self.vars),
        }


@dataclass(frozen=True)
class LayerCatalog:
    """Layer folders, searched in order: each `layers_path` folder, then the project's `layers/`."""

    search_path: tuple[Path, ...]
    _found: dict[str, Layer] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def for_paths(cls, extra: tuple[Path, ...]) -> LayerCatalog:
        return cls((*extra, project_dir("layers")))

    def names(self) -> list[str]:
        return sorted({p.name for d in self.search_path if d.is_dir() for p in d.iterdir()
                       if (p / "Dockerfile.j2").is_file()})

    def find(self, name: str, where: Where | None = None) -> Layer:
        if name in self._found:  # each layer folder is read once per catalog
            return self._found[name]
        for folder in self.search_path:
            path = folder / name
            if (path / "Dockerfile.j2").is_file():
                self._found[name] = _read_layer(name, path)
                return self._found[name]
            if path.is_dir():
                raise InputError(f"layer folder {path} has no Dockerfile.j2", where=where)
        searched = ", ".join(str(p) for p in self.search_path)
        hint = did_you_mean(name, self.names()) or f"searched: {searched}"
        raise InputError(f"unknown layer {name!r}", where=where, hint=hint)


def _read_layer(name: str, path: Path) -> Layer:
    meta_file = path / "layer.yaml"
    meta: dict[str, Any] = {}
    doc = None
    if meta_file.is_file():
        doc = source.load(meta_file)
        if doc.value is not None:
            if not isinstance(doc.value, dict):
                raise InputError("layer.yaml must be a mapping", where=Where(str(meta_file), 1))
            meta = doc.value
    for key in meta:
        assert doc is not None
        if key not in LAYER_KEYS:
            raise unknown_key(key, LAYER_KEYS, doc.where((key,)))

    def strings(key: str) -> tuple[str, ...]:
        value = meta.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            assert doc is not None
            raise InputError(f"`{key}` must be a list of strings", where=doc.where((key,)))
        return tuple(value)

    def refuse(message: str, path: tuple[str | int, ...], hint: str | None = None) -> InputError:
        assert doc is not None
        return InputError(message, where=doc.where(path), hint=hint)

    # Values reach the layer's Dockerfile: each must match its grammar (`grammar`); `quoting` then quotes it.
    packages = strings("packages")
    for i, package in enumerate(packages):
        if not grammar.matches("debian", package):
            raise refuse(f"invalid Debian package {package!r}", ("packages", i), grammar.hint("debian"))
    pip = strings("pip")
    for i, requirement in enumerate(pip):
        problem = grammar.requirement_problem(requirement)
        if problem is not None:
            raise refuse(problem, ("pip", i), "one PEP 508 requirement per item, e.g. transformers==5.23.0")
    raw_vars = meta.get("vars") or {}
    if not isinstance(raw_vars, dict):
        raise refuse("`vars` must be a mapping", ("vars",))
    for key, value in raw_vars.items():
        if not grammar.matches("varname", str(key)):
            raise refuse(f"invalid variable name {key!r}", ("vars", key), grammar.hint("varname"))
        if looks_secret(str(key)):
            raise refuse(f"{key!r} looks like a secret; a layer's vars are rendered into its image", ("vars", key),
                         "give secrets to containers at run time")
        if isinstance(value, (dict, list, bool)) or value is None or not grammar.matches("var", str(value)):
            raise refuse(f"invalid var {value!r}", ("vars", key), grammar.hint("var"))
    description = str(meta.get("description") or "")
    if re.search(r"[\x00-\x08\x0b-\x1f\x7f]", description):
        raise refuse("the description holds a control character", ("description",))
    return Layer(
        name=name,
        path=path,
        description=description,
        packages=packages,
        pip=pip,
        vars=tuple(sorted((str(k), str(v)) for k, v in raw_vars.items())),
        smoke=strings("smoke"),
    )
