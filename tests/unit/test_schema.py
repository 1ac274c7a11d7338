"""The matrix schema is the one list of keys: the docs' table of keys is made from it (test_manual.py), the JSON
Schema for editors is made from it and accepts the project's matrices, and every entry says where each of its
values came from."""

from __future__ import annotations

import ast
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
import yaml

from imagebuilder.declarations import schema
from imagebuilder.errors import InputError
from imagebuilder.input import matrix
from imagebuilder.input.compat import CompatTable

ROOT = Path(__file__).resolve().parents[2]


def test_the_loader_knows_exactly_the_schema_keys() -> None:
    assert set(matrix.TOP_KEYS) == {k.name for k in schema.KEYS if k.parent is None and k.level != schema.INCLUDE}
    assert set(matrix.SMOKE_KEYS) == {k.leaf for k in schema.KEYS if k.parent == "smoke"}
    assert schema.names(schema.AXIS, under="matrix") == matrix.AXES


@pytest.mark.parametrize("path", sorted([*ROOT.glob("examples/*.yaml"), ROOT / "matrix.yaml"]),
                         ids=lambda p: p.name)
def test_the_json_schema_accepts_the_projects_matrices(path: Path) -> None:
    jsonschema.Draft202012Validator.check_schema(schema.json_schema())
    jsonschema.validate(yaml.safe_load(path.read_text(encoding="utf-8")), schema.json_schema())


def test_the_json_schema_refuses_what_the_loader_refuses() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "demo.yaml").read_text(encoding="utf-8"))
    for broken in ({**doc, "bulid": {}}, {**doc, "smoke": {"timeout": "soon"}},
                   {**doc, "matrix": {**doc["matrix"], "accelerator": ["rocm"]}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema.json_schema())


def test_every_default_is_what_the_loader_resolves(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("base_image: debian:bookworm\nregistry: r.example/ns\nrepository: x\nlayers: [base]\n"
                    "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n", encoding="utf-8")
    (e,) = matrix.load(path, CompatTable.load(None), env={}).entries
    origins = dict(e.origins)
    assert origins["torch"] == "m.yaml:5" and origins["registry"] == "m.yaml:2"
    assert origins["smoke.timeout"] == "default"
    smoke, user = e.smoke, e.user
    assert str(smoke.timeout) == schema.default("smoke.timeout") and smoke.shm_size == schema.default("smoke.shm_size")
    assert smoke.gpus == schema.default("smoke.gpus") and smoke.driver_dir == schema.default("smoke.driver_dir")
    assert float(schema.default("smoke.throughput_floor")) == smoke.throughput_floor
    assert float(schema.default("smoke.cpu_gflops_floor")) == smoke.cpu_gflops_floor
    assert (user.name, str(user.uid), str(user.gid), user.workdir) == tuple(
        schema.default(f"user.{k}") for k in ("name", "uid", "gid", "workdir"))
    assert e.build.index_url == schema.default("build.index_url") and e.build.network == schema.default("build.network")
    assert list(e.tags) == yaml.safe_load(schema.default("tags"))
    assert list(e.aliases) == yaml.safe_load(schema.default("aliases"))
    assert e.flavor == yaml.safe_load(schema.default("matrix.flavor"))[0]


def test_a_value_an_include_gives_is_named_at_the_include(tmp_path: Path) -> None:
    """Provenance: a value from an include is reported at the include's line (it was the top-level key's)."""
    path = tmp_path / "m.yaml"
    path.write_text("base_image: debian:bookworm\nregistry: r.example/ns\nrepository: x\nlayers: [base]\n"
                    "smoke: {timeout: 600}\n"
                    "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11', '3.12']}\n"
                    "include:\n  - {python: '3.12', smoke: {shm_size: 4g}, repository: y}\n", encoding="utf-8")
    entries = matrix.load(path, CompatTable.load(None), env={}).entries
    origins = [dict(e.origins) for e in entries]
    assert origins[0]["repository"] == "m.yaml:3" and origins[1]["repository"] == "m.yaml:8"
    assert origins[1]["smoke.shm_size"] == "m.yaml:8" and origins[1]["smoke.timeout"] == "m.yaml:5"
    assert origins[0]["smoke.shm_size"] == "default"
    path.write_text(path.read_text().replace("shm_size: 4g", "shm_size: lots"), encoding="utf-8")
    with pytest.raises(InputError) as info:
        matrix.load(path, CompatTable.load(None), env={})
    assert re.search(r"m\.yaml:8:\d+: include\[0\]\.smoke\.shm_size", str(info.value.where)), info.value.where


def test_schema_command_prints_the_table_and_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    from imagebuilder import cli

    assert cli.main(["schema", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["title"].startswith("imagebuilder matrix.yaml")
    assert cli.main(["schema", "--format", "markdown"]) == 0
    assert capsys.readouterr().out.strip() == schema.markdown().strip()


def test_the_entry_cap_counts_entries_not_include_rules(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    head = "base_image: debian:bookworm\nregistry: r.example/ns\nrepository: x\nlayers: [base]\n"
    path.write_text(head + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11', '3.12']}\n"
                    "include:\n  - {python: '3.12', repository: y}\n", encoding="utf-8")
    assert len(matrix.load(path, CompatTable.load(None), env={}, max_entries=2).entries) == 2
    path.write_text(head + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11', '3.12']}\n"
                    "include:\n  - {torch: 2.7.1, accelerator: cpu, python: '3.12'}\n", encoding="utf-8")
    with pytest.raises(InputError, match="makes 3 entries with its includes; at most 2"):
        matrix.load(path, CompatTable.load(None), env={}, max_entries=2)


def test_a_long_axis_is_refused_before_its_values_are_compared(tmp_path: Path) -> None:
    """An axis of 50 000 values (350 KB, inside the file limits) was compared with itself: ~10^9 steps."""
    path = tmp_path / "m.yaml"
    images = ", ".join(f"a{i}" for i in range(50_000))
    path.write_text("base_image: debian:bookworm\nregistry: r.example/ns\nrepository: x\nlayers: [base]\n"
                    f"matrix: {{torch: [2.6.0], accelerator: [cpu], base_image: [{images}]}}\n", encoding="utf-8")
    with pytest.raises(InputError, match="the axis has 50000 values; at most 1000 entries"):
        matrix.load(path, CompatTable.load(None), env={})


def test_vars_merge_key_by_key_and_a_bad_one_is_named_at_its_include(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("base_image: debian:bookworm\nregistry: r.example/ns\nrepository: x\nlayers: [base]\n"
                    "vars: {team: vision}\nmatrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n"
                    "include:\n  - {python: '3.11', vars: {tier: gold}}\n", encoding="utf-8")
    (e,) = matrix.load(path, CompatTable.load(None), env={}).entries
    assert dict(e.vars) == {"team": "vision", "tier": "gold"}
    path.write_text(path.read_text().replace("tier: gold", "tier: 'a b'"), encoding="utf-8")
    with pytest.raises(InputError) as info:
        matrix.load(path, CompatTable.load(None), env={})
    assert str(info.value.where).startswith(f"{path}:8:") and "include[0].vars.tier" in str(info.value.where)


# ---------------------------------------------------------------------------------------- one home per default
# Every matrix default and bound is declared once, in schema.KEYS; the loader, the dataclasses, the CLI and the
# runner read `schema.value` and `schema.bounds`. The scan below looks for a second copy in the package's code: a
# literal of a key's default or bound bound to the key's own name (an assignment, a parameter's default, a
# keyword, a click option `--name`), a path or tag-template default anywhere, or prose such as "5 is the default".
PACKAGE = ROOT / "imagebuilder"
ALIASES = {  # other names the code gives a key's value
    "smoke.throughput_floor": {"floor", "FLOOR_RANGE"},
    "smoke.cpu_gflops_floor": {"cpu_floor", "CPU_FLOOR_MIN"},
    "smoke.history_window": {"window", "WINDOW"},
    "tags": {"DEFAULT_TAGS"},
    "aliases": {"DEFAULT_ALIASES"},
}
# The suite runs inside images with their own Python and cannot import the schema: its fallback floor is a
# mirror, checked equal below (`test_the_suites_mirror_of_the_cpu_floor_is_the_schemas`).
MIRRORS = {"imagebuilder/smoke/suite.py", "imagebuilder/declarations/schema.py"}


def _plain_defaults() -> dict[str, Any]:
    out = {}
    for k in schema.KEYS:
        try:
            out[k.name] = schema.value(k.name)
        except KeyError:
            continue
    return out


def _same(node: ast.AST | None, value: Any) -> bool:
    """A literal (or a tuple/list of literals) equal to `value`, type for type (True is not 1)."""
    if isinstance(node, ast.Constant):
        if isinstance(value, bool) or isinstance(node.value, bool):
            return type(node.value) is type(value) and node.value == value
        if isinstance(value, int | float) and isinstance(node.value, int | float):
            return float(node.value) == float(value)
        return type(node.value) is type(value) and node.value == value
    if isinstance(node, ast.Tuple | ast.List) and isinstance(value, list | tuple):
        return len(node.elts) == len(value) and bool(value) \
            and all(_same(e, v) for e, v in zip(node.elts, value, strict=True))
    return False


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


@dataclass(frozen=True)
class _Default:
    name: str
    value: Any
    limits: tuple[float, ...]


@functools.cache
def _index() -> tuple[dict[str, list[_Default]], dict[str, list[_Default]], dict[str, list[_Default]], re.Pattern[str]]:
    """The defaults by the names the code may bind them to, by their click flag, by their literal text (paths and
    tag templates), and one pattern for prose that states a default."""
    by_name: dict[str, list[_Default]] = {}
    by_flag: dict[str, list[_Default]] = {}
    by_text: dict[str, list[_Default]] = {}
    texts = set()
    for name, value in _plain_defaults().items():
        leaf = name.rsplit(".", 1)[-1]
        d = _Default(name, value, tuple(b for b in schema.bounds(name) if b is not None))
        for n in {leaf, leaf.upper(), *ALIASES.get(name, set())}:
            by_name.setdefault(n, []).append(d)
        by_flag.setdefault(f"--{leaf.replace('_', '-')}", []).append(d)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item.startswith(("/", "{")):
                by_text.setdefault(item, []).append(d)
        if value not in ([], {}, False):
            texts.add(re.escape(str(value)))
    alternatives = "|".join(sorted(texts, key=len, reverse=True))
    prose = re.compile(rf"(?<![\w.])(?:{alternatives}) is the default|the default is (?:{alternatives})(?![\w.])")
    return by_name, by_flag, by_text, prose


def copies(source: str, filename: str) -> list[str]:
    """Where `source` holds a second copy of a matrix default or bound: `file:line: key (what)`."""
    by_name, by_flag, by_text, prose = _index()
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []

    def say(node: ast.AST, d: _Default, what: str) -> None:
        found.append(f"{filename}:{getattr(node, 'lineno', 0)}: {d.name} ({what})")

    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            for d in (d for t in targets for d in by_name.get(_name(t) or "", [])):
                if _same(node.value, d.value) or _same(node.value, list(d.limits)) \
                        or any(_same(node.value, b) for b in d.limits):
                    say(node, d, "assigned")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = node.args
            pairs = [*zip(args.args[len(args.args) - len(args.defaults):], args.defaults, strict=False),
                     *zip(args.kwonlyargs, args.kw_defaults, strict=False)]
            for a, default in pairs:
                for d in by_name.get(a.arg, []):
                    if _same(default, d.value):
                        say(node, d, "parameter default")
        elif isinstance(node, ast.Call):
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            for kw in node.keywords:
                for d in by_name.get(kw.arg or "", []):
                    if _same(kw.value, d.value):
                        say(node, d, "keyword")
                if kw.arg == "default":
                    for d in (d for f in flags for d in by_flag.get(f, [])):
                        if _same(kw.value, d.value):
                            say(node, d, "click option default")
        elif isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            for d in (d for p in parts for d in by_name.get(_name(p) or "", [])):
                if any(_same(p, b) for p in parts for b in d.limits):
                    say(node, d, "bound compared")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            for d in by_text.get(node.value, []):
                say(node, d, "literal")
            if prose.search(node.value):
                found.append(f"{filename}:{node.lineno}: a default stated in prose ({node.value[:60]!r})")
    return sorted(set(found))


def test_no_default_or_bound_has_a_second_copy_in_the_package() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in MIRRORS:
            found += copies(path.read_text(encoding="utf-8"), rel)
    assert not found, "defaults or bounds copied out of declarations/schema.py (read schema.value / schema.bounds):\n" \
        + "\n".join(found)


@pytest.mark.parametrize("snippet", [
    'class S:\n    driver_dir: str = "/usr/local/nvidia"\n',
    'import click\n@click.option("--timeout", default=900)\ndef f(timeout): ...\n',
    'def run(image, gpus="auto"): ...\n',
    "WINDOW = 5\n",
    "FLOOR_RANGE = (0.3, 1.0)\n",
    "CPU_FLOOR_MIN = 10.0\n",
    "def f(window):\n    return 1 <= window <= 50\n",
    'HINT = "0.6 is the default; a slower host still clears it"\n',
    'DEFAULT_TAGS = ("{entry}-{layer}-{key12}",)\n',
    'class P:\n    block: str = "high"\n',
    'WORKDIR = "/workspace"\n',
])
def test_the_scan_sees_a_second_copy(snippet: str) -> None:
    """The scan above, seen failing: each of these was in the package before the schema held them all."""
    assert copies(snippet, "x.py"), snippet


def test_the_scan_leaves_unrelated_numbers_alone() -> None:
    assert copies("def f(n):\n    return 1 <= n <= 50 and n != 5\nTIMEOUT_S = 30\nport = 900 + 1\n", "x.py") == []


def test_the_suites_mirror_of_the_cpu_floor_is_the_schemas() -> None:
    from imagebuilder.smoke import suite

    assert schema.value("smoke.cpu_gflops_floor") == suite.CPU_GFLOPS_FLOOR


def test_the_dataclasses_and_the_cli_read_the_schema() -> None:
    from imagebuilder.cli import cli
    from imagebuilder.declarations.vulnerabilities import Policy
    from imagebuilder.evidence import regression

    smoke = matrix.SmokeSettings(timeout=1, shm_size="1g", gpus="none")
    assert (smoke.driver_dir, smoke.throughput_floor, smoke.cpu_gflops_floor, smoke.history_window) == tuple(
        schema.value(f"smoke.{k}") for k in ("driver_dir", "throughput_floor", "cpu_gflops_floor", "history_window"))
    assert schema.value("smoke.history_window") == regression.WINDOW
    assert (Policy().block, Policy().unknown) == (schema.value("vulnerabilities.block"),
                                                  schema.value("vulnerabilities.unknown"))
    assert isinstance(cli, click.Group)
    options = {p.name: p for p in cli.commands["smoke"].params}
    for key in ("timeout", "shm_size", "gpus", "driver_dir"):
        assert options[key].default == schema.value(f"smoke.{key}"), key
