"""Jinja (StrictUndefined) -> a Dockerfile plus its build context, for one node.

Templates see the resolved entry (both as `entry.X` and as bare names: `torch`, `cuda`, ...),
`parent_image`, the build settings (`build`), the layer's own settings (`layer`) and the node.
They can import macros from the project's `templates/` folder.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
from markupsafe import Markup

from ..errors import InputError, Where
from ..input import certs
from ..input.layers import Layer, project_dir
from ..input.lock import LockedInstall
from ..input.matrix import Entry
from .installs import KINDS, Install, file_text
from .quoting import Marks, Unquotable, quote_word


def stable_port(key: str) -> int:
    """A port that stays the same for the same folder or URL, so Docker's build cache (which sees build
    args) stays warm across runs; a busy one falls back to any free port."""
    return 20000 + zlib.crc32(key.encode()) % 20000


def wheelhouse_port(folder: Path) -> int:
    """The stable port of a wheelhouse (a build is given the port it really got as a build arg; the bake export
    names this one)."""
    return stable_port(str(folder.resolve()))


CONTEXT_DIR = "_imagebuilder"
DATA = Path(__file__).resolve().parents[1] / "data"  # files imagebuilder adds to build contexts
VERSIONS_PATH = "/opt/imagebuilder/versions.json"  # every image's versions manifest (label io.imagebuilder.versions)
VERSIONS_STEP = f"""
# imagebuilder: this image's versions manifest (pip and dpkg packages; CUDA, cuDNN, NCCL)
COPY {CONTEXT_DIR}/versions_manifest.py /opt/imagebuilder/versions_manifest.py
RUN python3 /opt/imagebuilder/versions_manifest.py > {VERSIONS_PATH}
"""
# Every layer's own steps run as root (a parent image ends with its non-root USER); the root layer creates
# the user, and every layer ends as that user, so no image runs as root and platform layers need no USER.
USER_STEP = f"""
# imagebuilder: the non-root user this image runs as (matrix `user:`), with a writable home and workdir
COPY {CONTEXT_DIR}/add_user.sh /opt/imagebuilder/add_user.sh
RUN sh /opt/imagebuilder/add_user.sh {{name}} {{uid}} {{gid}} {{home}} {{workdir}}
WORKDIR {{workdir}}
"""
FINAL_USER = "USER {uid}:{gid}\n"
HELPERS = ("cuda_prefix.py", "requires.py", "cuda_home.py")  # imagebuilder's scripts that macros.j2 COPYs
PARENT = "imagebuilder-parent-image-4f1c2a"  # stands in for parent_image while a template's output is reused
DIRECTIVE = re.compile(r"#\s*[A-Za-z][A-Za-z0-9_-]*\s*=")  # `# syntax=…`, `# escape=…`, `# check=…`
FIRST_FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+\S+)?\s*$", re.IGNORECASE)


FIND_LINKS_ARG = "IMAGEBUILDER_FIND_LINKS"  # the build arg that carries a served wheelhouse's URL
# pip's indexes reach the build as build args, declared with the matrix's URL as their default: the text (and
# so the key) names the index, a URL never stands in shell text (pip reads "${ARG}"), and an index that needs
# credentials is given to the build as imagebuilder's loopback proxy instead, with nothing in the text.
INDEX_ARG = "IMAGEBUILDER_INDEX_URL"
TORCH_INDEX_ARG = "IMAGEBUILDER_TORCH_INDEX_URL"


def arg_ref(name: str) -> Markup:
    """How a template reads a build arg in a RUN line: one shell word, expanded, never parsed as code."""
    return Markup(f'"${{{name}}}"')


def build_args(entry: Entry) -> dict[str, str]:
    """The build args a node of this entry may declare, with their values as the matrix gives them."""
    return {INDEX_ARG: entry.build.index_url, TORCH_INDEX_ARG: entry.build.torch_index_url}


@dataclass(frozen=True)
class RenderedNode:
    dockerfile: str
    files: tuple[tuple[str, bytes], ...] = field(default=())
    executables: frozenset[str] = frozenset()  # context files that keep their executable bit
    parent_image: str = ""  # the reference the first FROM names
    templates: tuple[tuple[str, str], ...] = ()  # (template file, sha256) that produced the Dockerfile
    installs: tuple[Install, ...] = ()  # the pip installs its template makes, in order (`plan/installs.py`)

    def for_parent(self, image_id: str) -> RenderedNode:
        """The text that is built: this one, with the parent's image ID written in for its reference (the
        only difference from the text the key covers, where the reference reads `<parent>`; the parent's
        key covers its image)."""
        text = self.dockerfile.replace(self.parent_image, image_id) if self.parent_image else self.dockerfile
        return RenderedNode(text, self.files, self.executables, image_id, self.templates, self.installs)

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "Dockerfile").write_text(self.dockerfile, encoding="utf-8")
        for rel, data in self.files:
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            if rel in self.executables:
                target.chmod(0o755)

    def tar(self) -> bytes:
        """The build context as a deterministic tar (sorted, fixed mtimes and owners)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel, data in sorted((("Dockerfile", self.dockerfile.encode()), *self.files)):
                info = tarfile.TarInfo(rel)
                info.size = len(data)
                info.mtime = 0
                info.mode = 0o755 if rel in self.executables else 0o644
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()


@dataclass
class Renderer:
    """Renders layer templates. Holds one Jinja environment per layer folder. `locked`: the installs the lock beside
    the matrix pins, by key (`plan/installs.py`): an install it pins takes only its wheels."""

    locked: dict[str, LockedInstall] = field(default_factory=dict)

    _envs: dict[Path, jinja2.Environment] = field(default_factory=dict)
    _marks: dict[Path, Marks] = field(default_factory=dict)
    _templates: dict[Path, jinja2.Template] = field(default_factory=dict)
    _sources: dict[Path, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    _files: dict[Path, tuple[tuple[tuple[str, bytes], ...], frozenset[str]]] = field(default_factory=dict)
    _blobs: dict[Path, bytes] = field(default_factory=dict)
    _bundles: dict[Path, bytes] = field(default_factory=dict)  # CA bundle -> its certificate blocks
    _reads: dict[Path, tuple[str, ...] | None] = field(default_factory=dict)
    _outputs: dict[tuple[Path, str], tuple[str, tuple[tuple[str, tuple[str, ...], str, tuple[str, ...]], ...]]] = \
        field(default_factory=dict)
    # the installs of the render in progress, as its template asked them (kind, requirements, index, overrides)
    _asked: list[tuple[str, tuple[str, ...], str, tuple[str, ...]]] = field(default_factory=list)
    _asking: dict[str, Any] = field(default_factory=dict)  # what they share: the entry's index, Python, ...
    _last: dict[str, str | None] = field(default_factory=dict)  # node id -> the key of its chain's last install

    def env(self, layer: Layer) -> jinja2.Environment:
        if layer.path not in self._envs:
            loader = jinja2.ChoiceLoader([
                jinja2.FileSystemLoader(str(layer.path)),
                jinja2.FileSystemLoader(str(layer.path.parent.parent / "templates")),
                jinja2.FileSystemLoader(str(project_dir("templates"))),
            ])
            # Every printed expression is quoted for the place it lands in (`quoting`): `finalize` marks it,
            # `Markup` (macro output, imagebuilder's own text) passes as it is; autoescape only makes macros
            # return Markup, the values themselves are never HTML-escaped.
            marks = Marks()
            env = jinja2.Environment(
                loader=loader, undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                trim_blocks=True, lstrip_blocks=True, autoescape=True, finalize=marks.finalize,
            )
            env.filters.update(join=marks.join, shquote=marks.shquote, tojson=marks.tojson)
            env.globals["imagebuilder_install"] = self.install
            self._envs[layer.path] = env
            self._marks[layer.path] = marks
        return self._envs[layer.path]

    def install(self, kind: str, requirements: Any, index_url: Any, overrides: Any = ()) -> Markup:
        """What `macros.j2` calls for each pip install it renders: the install recorded (`Install`), and the
        requirements file it takes under the lock (`""`: the lock does not pin it, and it installs by version)."""
        if kind not in KINDS:
            raise InputError(f"imagebuilder_install: kind {kind!r} is not one of {', '.join(KINDS)}")
        if str(index_url) not in self._asking["indexes"]:
            raise InputError(f"a pip install's index is {index_url!r}: a template installs from build.index_url or "
                             "build.torch_index_url", hint="pass one of them to the macro")
        over = (tuple(f"{name}=={version}" for name, version in sorted(overrides.items()))
                if isinstance(overrides, dict) else tuple(str(o) for o in overrides or ()))
        self._asked.append((kind, tuple(str(r) for r in requirements), str(index_url), over))
        one = self.installs()[-1]
        return Markup(f"{CONTEXT_DIR}/wheels-{len(self._asked)}.txt") if one.key in self.locked else Markup("")

    def installs(self) -> tuple[Install, ...]:
        """The installs of the render in progress, for its entry, each keyed after the one before it."""
        asking, out = self._asking, list[Install]()
        for kind, requirements, index, overrides in self._asked:
            after = out[-1].key if out else asking["after"]
            out.append(Install(kind, requirements, asking["indexes"][index], asking["python"],
                               asking["constraints"] if kind == "venv" else (), overrides, asking["wheelhouse"],
                               after))
        return tuple(out)

    def context(self, entry: Entry, layer: Layer, node_id: str, parent_image: str) -> dict[str, Any]:
        versions = entry.versions()
        wheelhouse = entry.build.wheelhouse
        build = {
            "ca_bundle": f"{CONTEXT_DIR}/ca-bundle.pem" if entry.build.ca_bundle else None,
            "find_links": arg_ref(FIND_LINKS_ARG) if wheelhouse else None,  # its URL comes as a build arg
            "torch_index_url": arg_ref(TORCH_INDEX_ARG),
            "index_url": arg_ref(INDEX_ARG),
            "constraints": f"{CONTEXT_DIR}/constraints.txt",
            "overrides": sorted(dict(entry.overrides)),  # every pip install's `pip check` allows torch's pins of these
        }
        return {
            **versions,
            "entry": {**versions, "id": entry.id, "pins": dict(entry.pins), "vars": dict(entry.vars),
                      "overrides": dict(entry.overrides)},
            "overrides": dict(entry.overrides),
            "toolkit": list(entry.toolkit),
            "cuda_libs": list(entry.cuda_libs),
            "user": entry.user.settings(),
            "vars": dict(entry.vars),
            "parent_image": parent_image,
            "build": build,
            "layer": layer.settings(),
            "node": {"id": node_id, "layer": layer.name},
        }

    def render_text(self, layer: Layer, context: dict[str, Any], parent_image: str) -> str:
        """The template's text for this context, blank lines tidied. Large matrices render the same layer
        for many entries that differ only in what the template never reads (a child layer: in its parent's
        tag): a template's output is kept per the values of the names it reads, with the parent's
        reference standing in as a marker, so each distinct output is rendered once."""
        names = self.reads(layer)
        if names is None:
            return self.quoted(layer, context)
        # (under a lock, whether an install is pinned, and so the text, follows its entry and the installs below it)
        asking = repr(sorted(self._asking.items())) if self.locked else None
        memo_key = (layer.path, repr([(name, context.get(name)) for name in names] + [asking]))
        memo = self._outputs.get(memo_key)
        if memo is None:
            memo = self._outputs[memo_key] = (self.quoted(layer, {**context, "parent_image": PARENT}),
                                              tuple(self._asked))
        else:  # the same installs asked, keyed for this entry and after this node's chain (`installs`)
            self._asked[:] = memo[1]
        return memo[0].replace(PARENT, parent_image)

    def quoted(self, layer: Layer, context: dict[str, Any]) -> str:
        """The template rendered, every printed value quoted for where it stands (`quoting`)."""
        template = self.template(layer)
        marks = self._marks[layer.path]
        marks.begin()
        try:
            return _tidy(marks.resolve(template.render(context)))
        except Unquotable as exc:
            raise InputError(str(exc), where=Where(str(layer.template)),
                             hint="a value from a matrix or layer file may not change what a Dockerfile line "
                                  "does; pass it through ENV, or print it where it can be quoted") from None

    def reads(self, layer: Layer) -> tuple[str, ...] | None:
        """The top-level names a layer's template reads, or None when its output may depend on more than
        those (an include, an extends, an import with context), or on `parent_image` other than by printing
        it as it is."""
        if layer.path not in self._reads:
            env = self.env(layer)
            assert env.loader is not None
            source = env.loader.get_source(env, "Dockerfile.j2")[0]
            printed = len(re.findall(r"{{-?\s*parent_image\s*-?}}", source))
            if re.search(r"{%-?\s*(include|extends)\b|\bwith\s+context\b", source) \
                    or source.count("parent_image") != printed:
                self._reads[layer.path] = None
            else:
                found = jinja2.meta.find_undeclared_variables(env.parse(source))
                self._reads[layer.path] = tuple(sorted(found - {"parent_image"}))
        return self._reads[layer.path]

    def template(self, layer: Layer) -> jinja2.Template:
        if layer.path not in self._templates:
            self._templates[layer.path] = self.env(layer).get_template("Dockerfile.j2")
        return self._templates[layer.path]

    def template_sources(self, layer: Layer) -> tuple[tuple[str, str], ...]:
        """The template files a layer's Dockerfile is rendered from (its Dockerfile.j2 and everything it
        imports or includes, found statically), each with the sha256 of its text."""
        if layer.path not in self._sources:
            env = self.env(layer)
            assert env.loader is not None
            seen: dict[str, str] = {}
            pending = ["Dockerfile.j2"]
            while pending:
                name = pending.pop()
                try:
                    text, filename, _ = env.loader.get_source(env, name)
                except jinja2.TemplateNotFound:
                    continue  # reported when rendering
                label = _display(Path(filename or name))
                if label in seen:
                    continue
                seen[label] = hashlib.sha256(text.encode()).hexdigest()
                try:
                    pending += [n for n in jinja2.meta.find_referenced_templates(env.parse(text)) if n]
                except jinja2.TemplateSyntaxError:
                    continue
            self._sources[layer.path] = tuple(sorted(seen.items()))
        return self._sources[layer.path]

    def layer_files(self, layer: Layer) -> tuple[tuple[tuple[str, bytes], ...], frozenset[str]]:
        """The layer folder's context files (read once per run) and which of them are executable."""
        if layer.path not in self._files:
            sources = layer.context_files()
            files = tuple((p.relative_to(layer.path).as_posix(), p.read_bytes()) for p in sources)
            executables = frozenset(p.relative_to(layer.path).as_posix() for p in sources if os.access(p, os.X_OK))
            self._files[layer.path] = (files, executables)
        return self._files[layer.path]

    def blob(self, path: Path) -> bytes:
        if path not in self._blobs:
            self._blobs[path] = path.read_bytes()
        return self._blobs[path]

    def certificates(self, bundle: Path) -> bytes:
        """What of a CA bundle goes into the image: its certificate blocks alone (`certs`; the loader checked it)."""
        if bundle not in self._bundles:
            try:
                self._bundles[bundle] = certs.certificates(self.blob(bundle))
            except certs.NotABundle as exc:  # (changed since the matrix was loaded)
                raise InputError(f"CA bundle {bundle} is not a CA bundle: {exc}") from None
        return self._bundles[bundle]

    def render(self, entry: Entry, layer: Layer, node_id: str, parent_image: str, *, root: bool,
               parent: str | None = None) -> RenderedNode:
        """`root`: the node builds FROM the base image (it creates the image's user); `parent`: the node it builds on
        (rendered before it: its installs come first in the chain)."""
        self._asked = []
        self._asking = {"indexes": {str(arg_ref(INDEX_ARG)): entry.build.index_url,
                                    str(arg_ref(TORCH_INDEX_ARG)): entry.build.torch_index_url},
                        "python": entry.python, "constraints": tuple(constraints(entry).splitlines()),
                        "wheelhouse": entry.build.wheelhouse.name if entry.build.wheelhouse else None,
                        "after": self._last.get(parent) if parent else None}
        try:
            text = self.render_text(layer, self.context(entry, layer, node_id, parent_image), parent_image)
        except jinja2.TemplateSyntaxError as exc:
            where = Where(exc.filename or str(layer.template), exc.lineno)
            raise InputError(f"template syntax error: {exc.message}", where=where) from None
        except jinja2.UndefinedError as exc:
            raise InputError(f"template error: {exc.message}", where=_template_where(exc, layer)) from None
        except jinja2.TemplateNotFound as exc:
            raise InputError(f"template {exc.name!r} not found", where=_template_where(exc, layer)) from None
        except jinja2.TemplateError as exc:
            raise InputError(f"template error: {exc}", where=_template_where(exc, layer)) from None
        line = check_first_from(text, parent_image, layer.template)
        lines = text.splitlines(keepends=True)
        text = with_args("".join([*lines[:line], "USER 0\n", *lines[line:]]), entry)
        user = {name: quote_word(str(value)) for name, value in entry.user.settings().items()}
        layer_files, executables = self.layer_files(layer)
        files = [*layer_files, (f"{CONTEXT_DIR}/versions_manifest.py", self.blob(DATA / "versions_manifest.py"))]
        # What a node's text COPYs from imagebuilder, and nothing else: a file in the context is part of the key,
        # so a node that copies no pins (the OS, the CUDA libraries) stays the same for every torch.
        if f"{CONTEXT_DIR}/constraints.txt" in text:
            files.append((f"{CONTEXT_DIR}/constraints.txt", constraints(entry).encode()))
        files += [(f"{CONTEXT_DIR}/{name}", self.blob(DATA / name)) for name in HELPERS
                  if f"{CONTEXT_DIR}/{name}" in text]
        installs = self.installs()
        self._last[node_id] = installs[-1].key if installs else self._asking["after"]
        files += [(f"{CONTEXT_DIR}/wheels-{n}.txt", file_text(self.locked[one.key]).encode())
                  for n, one in enumerate(installs, 1) if one.key in self.locked]
        if root:
            text += USER_STEP.format(**user)
            files.append((f"{CONTEXT_DIR}/add_user.sh", self.blob(DATA / "add_user.sh")))
        text += VERSIONS_STEP + FINAL_USER.format(**user)
        if entry.build.ca_bundle:
            files.append((f"{CONTEXT_DIR}/ca-bundle.pem", self.certificates(entry.build.ca_bundle)))
        return RenderedNode(text, tuple(files), executables, parent_image, self.template_sources(layer), installs)


_ARG_LINE = re.compile(r"^[ \t]*ARG[ \t]+(.+)$", re.MULTILINE | re.IGNORECASE)


def declared(text: str) -> set[str]:
    """Every build arg a text declares: `ARG NAME` or `ARG NAME=default`, the instruction in any case, one or
    several names a line, a line continued with a backslash."""
    joined = re.sub(r"\\[ \t]*\r?\n", " ", text)
    return {item.split("=", 1)[0] for line in _ARG_LINE.findall(joined) for item in line.split()}


def with_args(text: str, entry: Entry) -> str:
    """The text with an ARG line for every imagebuilder build arg it reads (`${NAME}`), right before the
    instruction that first reads it (so the steps before it stay shared: devel's text starts with runtime's),
    with the matrix's value as the default where there is one (a served wheelhouse's port may vary)."""
    defaults = build_args(entry)
    names = [name for name in (FIND_LINKS_ARG, INDEX_ARG, TORCH_INDEX_ARG) if f"${{{name}}}" in text]
    out: list[str] = []
    start = 0  # where the current instruction began in `out`
    continuing = False
    for line in text.splitlines(keepends=True):
        if not continuing:
            start = len(out)
        for name in [n for n in names if f"${{{n}}}" in line]:
            out.insert(start, f"ARG {name}={quote_word(defaults[name])}\n" if name in defaults else f"ARG {name}\n")
            start += 1
            names.remove(name)
        out.append(line)
        continuing = line.rstrip().endswith("\\") and not line.lstrip().startswith("#")
    return "".join(out)


def _tidy(text: str) -> str:
    """No runs of blank lines, one final newline."""
    return re.sub(r"\n[ \t]*(?:\n[ \t]*)+\n", "\n\n", text).strip("\n") + "\n"


def with_labels(rendered: RenderedNode, labels: dict[str, str]) -> RenderedNode:
    """The same node with one final LABEL instruction (one step, not one per label as the legacy
    builder does with the API's `labels`). Values are quoted; `$` and `\\` are escaped."""
    def quote(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("\n", " ") + '"'
    body = " \\\n      ".join(f"{key}={quote(value)}" for key, value in sorted(labels.items()))
    text = rendered.dockerfile.rstrip("\n") + f"\nLABEL {body}\n"
    return RenderedNode(text, rendered.files, rendered.executables, rendered.parent_image, rendered.templates,
                        rendered.installs)


def constraints(entry: Entry) -> str:
    """pip constraints that pin exactly the planned versions (torch, its companions, the nvidia wheels)."""
    lines = [f"torch=={entry.torch}"]
    lines += [f"{name}=={ver}" for name, ver in (("torchvision", entry.torchvision),
                                                  ("torchaudio", entry.torchaudio)) if ver]
    lines += [f"{name}=={ver}" for name, ver in sorted({**dict(entry.pins), **dict(entry.overrides)}.items())]
    return "\n".join(lines) + "\n"


def check_first_from(text: str, parent_image: str, template: Path) -> int:
    """The line number of the first instruction, which must be `FROM <parent_image>`. Before it only blank
    lines and plain comments may stand: no ARG, and no comment Docker could read as a parser directive."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if DIRECTIVE.match(stripped):
            raise InputError(f"{stripped[:60]!r} before the first FROM is a parser directive, which changes how the "
                             "whole Dockerfile is read; imagebuilder writes none", where=Where(str(template), number),
                             hint="reword the comment (no `name=` at its start), or move it below the FROM")
        if not stripped or stripped.startswith("#"):
            continue
        match = FIRST_FROM.match(stripped)
        if match and match.group(1) == parent_image:
            return number
        raise InputError(
            f"the first instruction must be `FROM {{{{ parent_image }}}}`; found {stripped[:60]!r}",
            where=Where(str(template), number))
    raise InputError("the template renders no FROM line; it must begin with `FROM {{ parent_image }}`",
                     where=Where(str(template), 1))


def _display(path: Path) -> str:
    """A template's path as users know it: relative to the working folder when it is inside it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def _template_where(exc: BaseException, layer: Layer) -> Where:
    """The innermost template frame of a Jinja exception: file and line."""
    best = Where(str(layer.template))
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.endswith((".j2", ".jinja", ".jinja2")) and frame.lineno:
            best = Where(frame.filename, frame.lineno)
    return best
