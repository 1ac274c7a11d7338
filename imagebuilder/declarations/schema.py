"""The matrix file's keys, declared once: each key's kind, default, the levels it may appear at and how the
levels merge. The loader's key checks and defaults, its did-you-mean errors, the docs' table of keys
(`markdown`: docs/reference/matrix-keys.md) and the JSON Schema for editors (`json_schema`) all come from here;
a test fails when the docs' table differs from `markdown()`.

Levels: `top` (the file's top level only), `axis` (a `matrix:` axis: a list of values; an include may set
one value), `entry` (the top level, overridden per entry by an `include` that matches it), `include` (an
include only). A mapping key with `merge` merges level by level, key by key (`build`, `smoke`, `user`,
`vars`);
any other key is replaced whole.

This is the one home of every matrix default and bound: the loader, the dataclasses it fills, the CLI's
options of the same settings and the smoke runner read `value()` and `bounds()`; `tests/unit/test_schema.py`
scans the package for a second copy. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import grammar

TOP, AXIS, ENTRY, INCLUDE = "top", "axis", "entry", "include"
MAX_ENTRIES = 1000  # entries a matrix may make unless --max-entries raises it (the CLI's default)
ID_MAX = 2**31 - 1  # the largest user or group id (Linux's are signed 32-bit)


@dataclass(frozen=True)
class Key:
    name: str  # dotted below a mapping key: `build.ca_bundle`
    kind: str  # a grammar kind (`grammar.PATTERNS`), or: string, path, bool, int, float, list, mapping
    doc: str
    default: str | None = None  # as a matrix would write it; None: no default
    level: str = ENTRY
    required: bool = False
    merge: bool = False  # a mapping merged key by key over the levels
    items: str | None = None  # a list's item kind
    low: float | None = None  # the smallest value the loader accepts (inclusive)
    high: float | None = None  # the largest value the loader accepts (inclusive)

    @property
    def parent(self) -> str | None:
        return self.name.rsplit(".", 1)[0] if "." in self.name else None

    @property
    def leaf(self) -> str:
        return self.name.rsplit(".", 1)[-1]


KEYS: tuple[Key, ...] = (
    Key("version", "int", "The matrix format; this imagebuilder reads 1.", "1", TOP),
    Key("matrix", "mapping", "The axes crossed into entries (below).", None, TOP, required=True),
    Key("matrix.torch", "list", "torch releases (the compatibility table's).", None, AXIS, required=True,
        items="torch"),
    Key("matrix.accelerator", "list", "`cpu` or `cuNNN` variants of each release.", None, AXIS, required=True,
        items="accelerator"),
    Key("matrix.python", "list", "Python versions.", "the base image's Python", AXIS, items="python"),
    Key("matrix.flavor", "list", "`runtime` or `devel` (compilers, headers, nvcc).", "[runtime]", AXIS,
        items="flavor"),
    Key("matrix.base_image", "list", "Base images, when entries differ by base (the id gains its name).", None,
        AXIS, items="image"),
    Key("exclude", "list", "Entries to remove: each item's axis values must all match.", "[]", TOP,
        items="mapping"),
    Key("include", "list", "Keys added to matching entries, or a new entry when it matches none "
        "(GitHub Actions' rules).", "[]", TOP, items="mapping"),
    Key("not_secrets", "list", "Names in `vars`/`smoke.env` that look like secrets but are not.", "[]", TOP,
        items="varname"),
    Key("attestations", "layouts", "Where cosign-compatible copies of pass records, test results, VSAs and SBOMs "
        "go: `both` (Sigstore bundle referrers and cosign's `.att` tag), `bundle`, `att` or `off` (or "
        "--attestations).", "both", TOP),
    Key("name", "name", "The entry's id, instead of {torch}-{accelerator}-py{python}-{flavor}.", None, INCLUDE),
    Key("base_image", "image", "What root layers build FROM (resolved to its image ID).", None, ENTRY,
        required=True),
    Key("registry", "registry", "host[:port][/namespace] images are pushed to (or --registry).", None, ENTRY,
        required=True),
    Key("repository", "repository", "The repository under the registry.", None, ENTRY, required=True),
    Key("layers", "list", "The layer tree: folder names (a chain) or `{layer, name, parent, when}` items.", None,
        ENTRY, required=True, items="layer"),
    Key("layers_path", "list", "Folders searched for layers before the project's (relative to the file).", "[]",
        items="path"),
    Key("build", "mapping", "How images are built (below).", None, merge=True),
    Key("build.ca_bundle", "path", "PEM certificates for pip (only the certificates go into the image).",
        "$PIP_CERT, $REQUESTS_CA_BUNDLE or $SSL_CERT_FILE"),
    Key("build.wheelhouse", "path", "A folder of wheels offered to pip as find-links (served, never copied).",
        None),
    Key("build.pip_index_url", "url", "torch's index: one URL with {accelerator}, or a mapping per accelerator.",
        "PyTorch's index for the variant"),
    Key("build.index_url", "url", "The index for everything that is not torch.", "https://pypi.org/simple"),
    Key("build.network", "network", "The build containers' network.", "host"),
    Key("build.cuda_toolkit", "string", "devel flavor: nvcc from NVIDIA's wheels (`pip`, CUDA >= 13) or from "
        "the base image (`image`).", "pip"),
    Key("user", "mapping", "The non-root user every image runs as (below).", None, merge=True),
    Key("user.name", "username", "Its name (never root).", "ml"),
    Key("user.uid", "id", "Its UID (never 0).", "1000", high=ID_MAX),
    Key("user.gid", "id", "Its GID (never 0).", "1000", high=ID_MAX),
    Key("user.workdir", "abspath", "Its working folder (not a system folder).", "/workspace"),
    Key("tags", "list", "Immutable tag templates ({entry} {layer} {key12} {date} and versions).",
        '["{entry}-{layer}-{key12}"]', items="string"),
    Key("aliases", "list", "Floating tag templates, moved when every entry they cover passed ([] for none).",
        '["{entry}-{layer}"]', items="string"),
    Key("torch_extras", "list", "Companions installed with torch: torchvision, torchaudio.",
        "[torchvision, torchaudio]", items="string"),
    Key("vars", "mapping", "Free values for templates (names not like secrets; strict grammar).", "{}",
        merge=True),
    Key("nccl", "libversion", "Install this NCCL instead of torch's pin (same major, or allow_major_override).",
        None),
    Key("cudnn", "libversion", "Install this cuDNN instead of torch's pin.", None),
    Key("allow_major_override", "bool", "Let `nccl`/`cudnn` cross torch's pinned major version.", "false"),
    Key("smoke", "mapping", "The smoke suite (below).", None, merge=True),
    Key("smoke.timeout", "int", "Seconds the suite may run.", "900"),
    Key("smoke.shm_size", "size", "The container's /dev/shm.", "2g"),
    Key("smoke.gpus", "gpus", "How GPUs reach the container: auto, all, cdi, devices or none.", "auto"),
    Key("smoke.driver_dir", "abspath", "With `gpus: devices`: the host's driver folder, mounted read-only.",
        "/usr/local/nvidia"),
    Key("smoke.throughput_floor", "fraction", "bf16 matmul floor, a fraction of the GPU model's peak (lower, the "
        "check would pass a broken GPU; `smoke.gpu_floors` must lie within the same fractions of a known peak).",
        "0.6", low=0.3, high=1.0),
    Key("smoke.cpu_gflops_floor", "float", "fp32 GFLOP/s floor of a CPU run (lower, a matmul ten times slower "
        "than the CI machine's would pass: benchmarks/results/cpu_floor.json).", "25", low=10),
    Key("smoke.env", "mapping", "Extra environment for the smoke container.", "{}"),
    Key("smoke.allow_skip", "list", "Checks (names or globs) whose skip on a GPU run does not block publishing.",
        "[]", items="string"),
    Key("smoke.gpu_floors", "mapping", "bf16 TFLOP/s floors for GPUs missing from the suite's table.", "{}"),
    Key("smoke.history_window", "int", "The last N passes of an image's lineage whose median is its performance "
        "baseline.", "5", low=1, high=50),
    Key("vulnerabilities", "mapping", "The vulnerability gate on each image's SBOM before any public tag moves "
        "(below).", None, merge=True),
    Key("vulnerabilities.data", "list", "OSV advisories: .json records, OSV's per-ecosystem `all.zip` exports, or "
        "folders of them (relative to the file). Without any, the gate says it has no data.", "[]", items="path"),
    Key("vulnerabilities.block", "severity", "The lowest severity that blocks publishing (`none`: report only).",
        "high"),
    Key("vulnerabilities.unknown", "severity", "The severity assumed for an advisory that states none.", "high"),
    Key("vulnerabilities.require_data", "bool", "Refuse to publish when no vulnerability data is given.", "false"),
    Key("vulnerabilities.allow", "list", "Exceptions `{id, reason, expires: YYYY-MM-DD, packages: [...]}`; an "
        "expired one blocks again.", "[]", items="mapping"),
    Key("vulnerabilities.exception_days", "int", "How far out an exception's `expires` may be, in days from the day "
        "the matrix is read.", "365", low=1, high=365),
    Key("vulnerabilities.max_age", "int", "Days the data may be old (its newest record's `modified`); older data is "
        "said, and refused under `require_data`.", "7", low=1, high=3650),
    Key("runners", "mapping", "Where an engine runs each job of the graph (`plan --format github-actions`, "
        "`buildkite`, `argo`, `k8s-jobs`; below).", None, merge=True),
    Key("runners.build", "label", "The CPU queue (runner label, agent queue) stage jobs and CPU verify jobs run on.",
        "cpu"),
    Key("runners.gpu_queue", "label", "The queue of the GPU runners a CUDA leaf's verify job runs on.", "gpu"),
    Key("runners.gpu", "label", "The GPU model that verify needs (a runner label, a node selector value such as "
        "NVIDIA-H100-80GB-HBM3); `any`: no selector.", "any"),
    Key("runners.gpus", "id", "How many GPUs of that model it needs (e.g. 8 for an NCCL test across a node).", "1"),
)
_BY_NAME = {key.name: key for key in KEYS}


def key(name: str) -> Key:
    return _BY_NAME[name]


def default(name: str) -> str:
    """A key's default as a matrix would write it (for keys whose default is a plain value)."""
    value = _BY_NAME[name].default
    assert value is not None, name
    return value


_INTS, _FLOATS = ("int", "id"), ("float", "fraction")


def value(name: str) -> Any:
    """A key's default as the loader resolves it: an int, a float, a bool, a string, a list or a mapping. A key
    whose default is prose (`the base image's Python`) or that has none has no value here (a bug: KeyError)."""
    k = _BY_NAME[name]
    if k.default is None or _prose(k.default):
        raise KeyError(f"{name} has no plain default")
    if k.kind in _INTS:
        return int(k.default)
    if k.kind in _FLOATS:
        return float(k.default)
    if k.kind in ("bool", "list", "mapping"):
        import yaml  # (here: the command line's help reads plain defaults without loading a YAML parser)

        return yaml.safe_load(k.default)
    return k.default


def bounds(name: str) -> tuple[float | None, float | None]:
    """A key's bounds (inclusive; None: unbounded on that side)."""
    k = _BY_NAME[name]
    return k.low, k.high


def _prose(default: str) -> bool:
    return default.startswith("$") or (" " in default and default[0] not in "[{")


def _bounds_text(k: Key) -> str:
    if k.low is not None and k.high is not None:
        return f" in [{_number(k.low)}, {_number(k.high)}]"
    if k.low is not None:
        return f", at least {_number(k.low)}"
    return f", at most {_number(k.high)}" if k.high is not None else ""


def _number(bound: float) -> str:
    """A bound as the docs print it: a whole number in full (2147483647, not 2.14748e+09), else as `:g` does."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def names(*levels: str, under: str | None = None) -> tuple[str, ...]:
    """The names (last part) of the keys at these levels directly below `under` (None: the top level)."""
    return tuple(k.leaf for k in KEYS if k.parent == under and (not levels or k.level in levels))


def markdown() -> str:
    """The docs' table of matrix keys (docs/reference/matrix-keys.md)."""
    rows = ["| key | kind | default | where | what |", "|---|---|---|---|---|"]
    for k in KEYS:
        kind = f"list of {k.items}" if k.items else k.kind
        where = {TOP: "top level", AXIS: "`matrix:` axis; an include may set one value",
                 ENTRY: "top level or include", INCLUDE: "include"}[k.level]
        default_text = ("**required**" if k.required else "none" if k.default is None
                        else str(k.default) if _prose(k.default) else f"`{k.default}`")
        kind += _bounds_text(k)
        if k.merge:
            kind += " (merged key by key)"
        rows.append(f"| `{k.name}` | {kind} | {default_text} | {where} | {k.doc} |")
    return "\n".join(rows) + "\n"


def _fragment(kind: str) -> dict[str, Any]:
    if kind == "bool":
        return {"type": "boolean"}
    if kind == "mapping":
        return {"type": "object"}
    if kind in grammar.PATTERNS:
        text = {"type": "string", "pattern": f"^(?:{grammar.PATTERNS[kind]})$"}
        return {"anyOf": [{"type": "number"}, text]} if kind in _NUMERIC else text
    return {"type": "string"}


_NUMERIC = ("int", "float", "fraction", "id", "python")  # YAML reads `900`, `0.6` and `3.11` as numbers


def _properties(under: str | None, levels: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in KEYS:
        if k.parent != under or k.level not in levels:
            continue
        if k.items is not None and k.level != AXIS:
            schema: dict[str, Any] = {"type": "array", "items": _fragment(k.items)}
            if k.name == "layers":
                schema["items"] = {"anyOf": [_fragment("layer"), {"type": "object"}]}
        elif k.level == AXIS:
            schema = {"type": "array", "minItems": 1, "items": _fragment(k.items or "string")}
        else:
            schema = _fragment(k.kind)
        if k.name == "build.pip_index_url":
            schema = {"anyOf": [{"type": "string"}, {"type": "object", "additionalProperties": {"type": "string"}}]}
        if any(c.parent == k.name for c in KEYS) and k.kind == "mapping":
            schema = {"type": "object", "additionalProperties": False,
                      "properties": _properties(k.name, (ENTRY, AXIS, TOP, INCLUDE))}
            required = [c.leaf for c in KEYS if c.parent == k.name and c.required and c.level == AXIS]
            if required:
                schema["required"] = required
        schema["description"] = k.doc
        out[k.leaf] = schema
    return out


def json_schema() -> dict[str, Any]:
    """A JSON Schema (2020-12) of a matrix file, for editors: keys, kinds and grammar; the loader checks more
    (compatibility, cross-key rules) and is the authority."""
    entry = _properties(None, (ENTRY, INCLUDE))
    include_item = {"type": "object", "additionalProperties": False,
                    "properties": {**entry, **{k.leaf: _fragment(k.items or "string") for k in KEYS
                                               if k.level == AXIS}}}
    exclude_item = {"type": "object", "additionalProperties": False,
                    "properties": {k.leaf: _fragment(k.items or "string") for k in KEYS if k.level == AXIS}}
    properties = {**_properties(None, (TOP, ENTRY))}
    properties["include"] = {"type": "array", "items": include_item, "description": key("include").doc}
    properties["exclude"] = {"type": "array", "items": exclude_item, "description": key("exclude").doc}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://imagebuilder.dev/schema/matrix-1.json",
        "title": "imagebuilder matrix.yaml (version 1)",
        "type": "object",
        "additionalProperties": False,
        "required": [k.name for k in KEYS if k.required and k.parent is None and k.name != "registry"],
        "properties": properties,
    }
