"""ARCHITECTURE.md's rules, checked on the package's own imports (AST, no import runs). A rule that does not hold
yet says so here and there: its known exceptions are listed, and a new one fails."""

from __future__ import annotations

import ast
import dataclasses
import functools
import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "imagebuilder"
STEPS = {"stage", "verify", "publish", "supply"}  # steps/ modules that are steps (or a step's gate)
KNOWN_DOCKER_USERS: set[str] = set()


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def imports() -> dict[str, set[str]]:
    """Each package module and the package modules it imports (a `from . import x` names the module x)."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")
                base = base[:len(base) - node.level + 1] if node.level else []
                target = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    found.add(full if full in modules else target)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        out[name] = {m for m in found if m in modules and m != name}
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Module import cycles (strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def package_loops(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Each set of packages whose imports lead from any one of them to any other and back: a pair that imports each
    other, or a longer ring. No import is exempt: the declarations (`declarations/`) are a package of their own."""
    packages: dict[str, set[str]] = {}
    for a, bs in graph.items():
        packages.setdefault(_package(a), set()).update(_package(b) for b in bs if _package(b) != _package(a))
    return {frozenset(loop) for loop in cycles(packages)}


def wing_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(module, step) pairs where a module of the run wing or the commands imports a step."""
    return {(a, b) for a, bs in graph.items() for b in bs
            if a.startswith(("imagebuilder.run.", "imagebuilder.commands.")) and b.startswith("imagebuilder.steps.")}


def step_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(step, step) pairs where one step module imports another."""
    return {(a.rsplit(".", 1)[1], b.rsplit(".", 1)[1]) for a, bs in graph.items() for b in bs
            if a.startswith("imagebuilder.steps.") and b.startswith("imagebuilder.steps.")
            and a.rsplit(".", 1)[1] in STEPS and b.rsplit(".", 1)[1] in STEPS}


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert cycles(imports()) == []


def test_no_import_loop_between_packages() -> None:
    assert package_loops(imports()) == set()


def test_nothing_imports_the_suite_that_runs_in_images() -> None:
    """smoke/suite.py runs inside the images under test and is copied there as a file (`smoke.suite_source`, its
    data files beside it): no module of the package imports it (the matrix loader reads the GPU peak table from
    data/gpu_peaks.json through `input.gpus`, as the suite does)."""
    assert {a for a, bs in imports().items() if "imagebuilder.smoke.suite" in bs} == set()


def test_no_step_imports_another_step() -> None:
    assert step_imports(imports()) == set()


def test_the_run_wing_and_the_commands_import_no_step() -> None:
    """run/ is what the steps share and commands/ what is not a step: neither reaches into a step (the command
    line composes them: `steps.run`)."""
    assert wing_imports(imports()) == set()


def test_only_the_cli_runs_the_steps() -> None:
    runners = {a for a, bs in imports().items() if "imagebuilder.steps.run" in bs}
    assert runners and all(a.startswith("imagebuilder.cli.") for a in runners), runners


def test_the_pure_modules_do_no_io_of_their_own() -> None:
    """input/ reads files only in the loader (source, the matrix loader's modules, layers, certs) and asks the world
    only in lookups; the matrix loader (`LOADER`, and entry.py), plan/ but cache.py, and evidence/spec.py, import
    neither docker, requests, socket nor subprocess."""
    worldly = {"docker", "requests", "socket", "subprocess", "urllib.request", "http.client"}
    loader = {f"imagebuilder.input.{name.removesuffix('.py')}" for name in (*LOADER, "entry.py")}
    pure = [m for m in imports() if (m.startswith("imagebuilder.plan.") and m != "imagebuilder.plan.cache")
            or m in ("imagebuilder.evidence.spec", "imagebuilder.declarations.schema",
                     "imagebuilder.declarations.grammar", *loader)]
    assert loader <= set(pure), loader - set(pure)
    for module in pure:
        path = PACKAGE.parent / (module.replace(".", "/") + ".py")
        names = {a.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                  if isinstance(n, ast.ImportFrom) and not n.level}
        assert not names & worldly, f"{module} imports {names & worldly}"


def test_no_module_rebinds_a_global() -> None:
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Global)], path


def test_only_the_ports_talk_to_docker_and_http() -> None:
    """The steps depend on the ports alone: docker-py and requests are imported in ports/ and nowhere else."""
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
                  if isinstance(n, ast.ImportFrom) and not n.level}
        if names & {"docker", "requests"} and path.relative_to(ROOT).as_posix() not in KNOWN_DOCKER_USERS:
            assert path.parent.name == "ports", path


def test_resolved_things_are_frozen() -> None:
    from imagebuilder.input.matrix import BuildSettings, Entry, SmokeSettings, UserSpec
    from imagebuilder.ledger import NodeRecord
    from imagebuilder.plan.plan import Decision, Node
    from imagebuilder.smoke.runner import Runner
    from imagebuilder.smoke.spec import Spec

    for cls in (Entry, Node, Decision, NodeRecord, BuildSettings, SmokeSettings, UserSpec, Spec, Runner):
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]


def test_only_the_cli_turns_an_error_into_an_exit_code() -> None:
    """`exc.exit_code` of a caught error is read in cli/main.py alone (`_invoke`, under `main`)."""
    readers = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for handler in (n for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.name):
            if any(isinstance(n, ast.Attribute) and n.attr == "exit_code" and isinstance(n.value, ast.Name)
                   and n.value.id == handler.name for n in ast.walk(handler)):
                readers.add(path.relative_to(ROOT).as_posix())
    assert readers == {"imagebuilder/cli/main.py"}


LOOSE = re.compile(r"\b(dict|Dict|Mapping|MutableMapping)\[str, *Any\]")  # a value that is any document
TYPED = re.compile(r"(^|_)(spec|runner)$")  # names of the values that have a frozen type: `Spec`, `Runner`
NAMED = re.compile(r"(^|_)(spec|runner)s?(_|$)")  # a function named for one (`spec_of`, `runner`; not `inspect`)


def loose_signatures(source: str) -> list[str]:
    """`function(arg)` (or `function -> `) for each public function or method of a module (what other modules
    call) that takes a spec or a runner as a document (`dict[str, Any]`, `Mapping[str, Any]`) or, named for one,
    returns one."""
    tree = ast.parse(source)
    publics = [(f"{c.name}.", f) for c in tree.body if isinstance(c, ast.ClassDef) and not c.name.startswith("_")
               for f in c.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    publics += [("", f) for f in tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    found = []
    for owner, func in publics:
        if func.name.startswith("_"):
            continue
        args = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
        found += [f"{owner}{func.name}({a.arg})" for a in args
                  if TYPED.search(a.arg) and a.annotation is not None and LOOSE.search(ast.unparse(a.annotation))]
        if NAMED.search(func.name) and func.returns is not None \
                and LOOSE.search(ast.unparse(func.returns)):
            found.append(f"{owner}{func.name} -> ")
    return found


def test_no_spec_or_runner_crosses_a_module_as_a_dict() -> None:
    """The spec (`smoke.spec.Spec`) and the runner (`smoke.runner.Runner`) are frozen types from where they are made
    to where they are read; their JSON forms are made at the edges (files, signatures, the in-image suite), by
    `to_json`, and never handed from one module to another as a document."""
    found = [f"{p.relative_to(ROOT).as_posix()}: {s}" for p in sorted(PACKAGE.rglob("*.py"))
             for s in loose_signatures(p.read_text(encoding="utf-8"))]
    assert found == []
    named: dict[str, list[str]] = {"Runner": [], "Spec": []}  # one of each name: a CI job's is `CiRunner`
    for path in sorted(PACKAGE.rglob("*.py")):
        for n in ast.parse(path.read_text(encoding="utf-8")).body:
            names = [n.name] if isinstance(n, ast.ClassDef) else \
                [t.id for t in n.targets if isinstance(t, ast.Name)] if isinstance(n, ast.Assign) else []
            for name in set(names) & set(named):
                named[name].append(path.relative_to(ROOT).as_posix())
    assert named == {"Runner": ["imagebuilder/smoke/runner.py"], "Spec": ["imagebuilder/smoke/spec.py"]}


def test_the_checks_see_what_they_guard() -> None:
    """Each graph check above, seen failing on a graph with the fault added."""
    graph = {k: set(v) for k, v in imports().items()}
    graph["imagebuilder.declarations.grammar"].add("imagebuilder.input.matrix")  # matrix imports grammar: a cycle
    assert any("imagebuilder.declarations.grammar" in c for c in cycles(graph))
    ring = {k: set(v) for k, v in imports().items()}  # declarations -> secrets -> ports: a ring, no pair in it
    ring["imagebuilder.ports.reference"].add("imagebuilder.declarations.grammar")
    assert frozenset({"declarations", "secrets", "ports"}) in package_loops(ring)
    graph["imagebuilder.evidence.spec"].add("imagebuilder.steps.stage")  # steps import evidence: a package loop
    assert any({"evidence", "steps"} <= loop for loop in package_loops(graph))
    graph["imagebuilder.steps.publish"].add("imagebuilder.steps.stage")  # what publish imported before the run wing
    assert ("publish", "stage") in step_imports(graph)
    graph["imagebuilder.run.keytags"].add("imagebuilder.steps.stage")
    assert ("imagebuilder.run.keytags", "imagebuilder.steps.stage") in wing_imports(graph)
    loose = ("def files(spec: Mapping[str, Any], env: dict[str, str]) -> None: ...\n"  # what pod.files took
             "class Verify:\n    def ran(self, spec: dict[str, Any] | None) -> None: ...\n"
             "    def _own(self, spec: dict[str, Any]) -> None: ...\n"  # (a module's own: not checked)
             "def gpu_runner(*, host_runner: 'Mapping[str, Any]') -> None: ...\n"
             "def spec_of(node: str) -> dict[str, Any]: ...\n")
    assert loose_signatures(loose) == ["Verify.ran(spec)", "files(spec)", "gpu_runner(host_runner)", "spec_of -> "]


def test_the_cli_is_a_thin_front_door() -> None:
    """A command parses its flags, calls one function and prints: no file of cli/ over 250 lines, no click command's
    body (its docstring aside) over 30."""
    long = []
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= 250, path
        for func in (n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)):
            if not any(isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
                       and d.func.attr in ("command", "group") for d in func.decorator_list):
                continue
            body = func.body[1:] if ast.get_docstring(func) is not None else func.body
            if body and (body[-1].end_lineno or 0) - body[0].lineno + 1 > 30:
                long.append(func.name)
    assert long == []


def undocumented(text: str) -> list[str]:
    """The public classes of a module's source (top level, no leading underscore) that have no docstring."""
    return [n.name for n in ast.parse(text).body
            if isinstance(n, ast.ClassDef) and not n.name.startswith("_") and ast.get_docstring(n) is None]


def test_the_steps_the_run_context_and_the_evidence_say_what_holds() -> None:
    """Every public class of steps/, run/context.py and evidence/ has a docstring (what holds: who makes it, what
    it guarantees). Seen failing with `Verify`'s removed."""
    paths = [*sorted((PACKAGE / "steps").glob("*.py")), PACKAGE / "run" / "context.py",
             *sorted((PACKAGE / "evidence").glob("*.py"))]
    missing = [f"{p.relative_to(PACKAGE)}: {name}" for p in paths
               for name in undocumented(p.read_text(encoding="utf-8"))]
    assert missing == []
    assert undocumented('class Shown:\n    """Says."""\nclass Bare:\n    x: int\nclass _Own:\n    y: int\n') == ["Bare"]


INPUT = PACKAGE / "input"
LOADER = ("matrix.py", "reader.py", "combos.py", "settings.py", "resolver.py")  # the matrix loader: read, then resolved
MAX_INPUT_LINES, MAX_LOADER_FUNCTION = 600, 40


def long_functions(source: str, limit: int) -> list[str]:
    """`name (N lines)` for each function and method (`Class.name`) of a module's source that is longer than `limit`
    lines, counted from its `def` line to its last."""
    tree = ast.parse(source)
    functions = [("", f) for f in tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    functions += [(f"{c.name}.", f) for c in tree.body if isinstance(c, ast.ClassDef)
                  for f in c.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return [f"{owner}{f.name} ({n} lines)" for owner, f in functions
            if (n := (f.end_lineno or f.lineno) - f.lineno + 1) > limit]


def test_the_input_modules_are_short_and_the_loaders_functions_shorter() -> None:
    """No module of input/ over 600 lines; no function or method of the matrix loader's modules (`LOADER`: the reader
    that reads the file and says where each value was written, the resolver that makes typed entries of it, and their
    parts) over 40 lines. Seen failing on the tree before the split (matrix.py 1021 lines, compat_refresh.py 1185,
    `_Loader.entry` 97 lines, and more), and with the limit set to 30 on the tree after it."""
    long_files = [f"{p.name} ({n} lines)" for p in sorted(INPUT.glob("*.py"))
                  if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_INPUT_LINES]
    assert long_files == []
    long = [f"{name}: {found}" for name in LOADER
            for found in long_functions((INPUT / name).read_text(encoding="utf-8"), MAX_LOADER_FUNCTION)]
    assert long == []
    body = "        x = 1\n" * 39
    source = f"def f():\n{body}class L:\n    def g(self):\n{body}        y = 2\n"  # f: 40 lines, L.g: 41
    assert long_functions(source, 40) == ["L.g (41 lines)"]


BASE_HOME = "imagebuilder/plan/bases.py"  # the one place a base image's name is resolved (issue 48)


def base_lookups(source: str) -> list[str]:
    """`line: call` for each call of the engine that resolves a base image by its name (`image_id`, `inspect` or
    `pull` of an argument that names `base_image`, or is a name `base`) in a module's source."""
    found = []
    for call in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)):
        if isinstance(call.func, ast.Attribute) and call.func.attr in ("image_id", "inspect", "pull") \
                and any("base_image" in ast.unparse(a) or ast.unparse(a) == "base" for a in call.args):
            found.append(f"{call.lineno}: {ast.unparse(call)}")
    return found


def test_base_images_are_resolved_in_one_place() -> None:
    """A base image's name is resolved by `plan/bases.py` alone (from the lock beside the matrix, else the engine),
    once per command; the keys, a root's FROM, the run's records and build records read `Plan.bases`. Seen failing on
    the tree before issue 48, where plan/cache.py (`base_ids`), steps/stage.py (`check_bases`, `record_bases`,
    `Stage.build`) and run/keytags.py (`built_on`) each asked the engine (the self-check below is stage.py's)."""
    found = [f"{p.relative_to(ROOT).as_posix()}:{line}" for p in sorted(PACKAGE.rglob("*.py"))
             if p.relative_to(ROOT).as_posix() != BASE_HOME for line in base_lookups(p.read_text(encoding="utf-8"))]
    assert found == []
    before = ("def build(run, node):\n    parent_id = engine.image_id(node.base_image) or node.base_image\n"
              "def base_ids(plan, engine):\n    for base in bases:\n        image = engine.image_id(base)\n")
    assert base_lookups(before) == ["2: engine.image_id(node.base_image)", "5: engine.image_id(base)"]


UNNAMED = {"imagebuilder", "imagebuilder.errors", "imagebuilder.choices"}  # what every module may import unnamed
MODULE_TABLE = "| module | noun | imports"  # ARCHITECTURE.md's table of modules


def module_table(text: str) -> list[tuple[str, str]]:
    """(the modules cell, the imports cell) of each row of ARCHITECTURE.md's module table."""
    lines = text[text.index(MODULE_TABLE):].splitlines()[2:]
    rows = []
    for line in itertools.takewhile(lambda s: s.startswith("|"), lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((cells[0], cells[-1]))
    return rows


def row_modules(cell: str, modules: set[str]) -> set[str]:
    """The package modules a row names: `a/b.py` a module, `a/` every module of the folder, and a bare `c.py`
    after `a/b.py` a module of the same folder."""
    out: set[str] = set()
    folder = ""
    for name in re.findall(r"`([^`]+)`", cell):
        path = f"{folder}/{name}" if "/" not in name and folder else name
        folder = path.rstrip("/").rsplit("/", 1)[0] if path.endswith(".py") and "/" in path else path.rstrip("/")
        dotted = ("imagebuilder." + path.rstrip("/").removesuffix(".py").replace("/", ".")).removesuffix(".__init__")
        found = {m for m in modules if m == dotted or (path.endswith("/") and m.startswith(dotted + "."))}
        assert found, f"ARCHITECTURE.md names {name!r} ({cell[:40]}...): no such module"
        out |= found
    return out


LISTED = re.compile(r"([a-z_][a-z_.]*) \(([a-z_]+(?:, [a-z_]+)*)\)")  # `evidence (passes, signing)`: those modules


def named_imports(cell: str, package: str, modules: set[str]) -> dict[str, set[str]] | None:
    """Each name of an imports cell and the package modules it stands for; None for `everything`. A name stands
    for one module: `x` a module of the row's own package, else a top-level module, else package `x`'s own
    `__init__`; `a.b` that module; `pkg (a, b)` those modules of that package (`__init__` its own); any other
    parenthesis is a remark; `the steps` and `the engines` their modules. A name that stands for nothing stands for
    the empty set."""
    text = cell.replace("`", "").strip()
    if text == "everything":
        return None
    listed = {m.group(1): m.group(2).split(", ") for m in LISTED.finditer(text)}
    text = re.sub(r"\([^)]*\)", "", text)
    packages = {m.rsplit(".", 1)[0] for m in modules}
    out: dict[str, set[str]] = {}
    for name in (n.strip() for n in text.split(",") if n.strip() not in ("", "—")):
        if name == "the engines":
            out[name] = {f"imagebuilder.emit.{e}" for e in ("github", "buildkite", "argo", "kubejobs")}
        elif name == "the steps":
            out[name] = {m for m in modules if m.startswith("imagebuilder.steps.")}
        elif name in listed:
            found = next((p for p in (f"imagebuilder.{name}", f"{package}.{name}") if p in packages), None)
            wanted = {found if m == "__init__" else f"{found}.{m}" for m in listed[name]} if found else set()
            out[name] = wanted if wanted <= modules and len(wanted) == len(listed[name]) else set()
        else:
            out[name] = {next((m for m in (f"{package}.{name}", f"imagebuilder.{name}") if m in modules and
                               m not in packages), None) or f"imagebuilder.{name}"} & modules
    return out


def with_code(path: Path) -> bool:
    """Whether a package's `__init__.py` holds more than a docstring and `from __future__`."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
               and not (isinstance(n, ast.ImportFrom) and n.module == "__future__") for n in body)


def table_errors(text: str, graph: dict[str, set[str]], coded: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """What ARCHITECTURE.md's module table says falsely of `graph`: a module no row names (a package's `__init__`
    only where it holds code, `coded`), a name in an imports cell that stands for no module or that no module of
    its row imports, an import no name of its row covers."""
    modules = set(graph)
    errors, named = [], set()
    for cell, imports_cell in module_table(text):
        mine = row_modules(cell, modules)
        named |= mine
        first = re.findall(r"`([^`]+)`", cell)[0]
        package = ("imagebuilder." + first.rstrip("/").replace("/", ".")) if first.endswith("/") else \
            min(mine).rsplit(".", 1)[0]
        imported = {m for own in mine for m in graph[own]} - mine
        actual = imported - UNNAMED - {package}
        names = named_imports(imports_cell, package, modules)
        if names is None:
            continue
        where = cell.split(",")[0].split(":")[0][:40]
        for name, stands_for in names.items():
            if not stands_for & imported:
                errors.append(f"{where}: names {name!r}, which it does not import")
        covered = set().union(*names.values()) if names else set()
        errors += [f"{where}: imports {m.removeprefix('imagebuilder.')}, unnamed" for m in sorted(actual - covered)]
    packages = {m.rsplit(".", 1)[0] for m in modules} - set(coded)  # (an empty `__init__` needs no row)
    errors += [f"{m.removeprefix('imagebuilder.')}: in no row" for m in sorted(modules - named - packages)]
    return errors


def test_architectures_module_table_says_what_each_module_imports() -> None:
    """Every row of ARCHITECTURE.md's module table is true of the package's imports: each module is in a row (a
    package's `__init__` where it holds code); each name in its imports column stands for a module its row
    imports; each package module a row imports is named there, a module by its name and a package's modules by
    a list (`evidence (passes, signing)`; `errors`, `choices` and the row's own package go unnamed). Seen failing
    on the table before this test (`run/context.py` named `ledger, ports` and imported twelve more modules, among
    them); with four false imports put into the graph (`run/context.py` and `steps/stage.py` of
    `evidence.admission`, `plan/cache.py` of `plan.bake`, `ledger` of `plan.cache`) it names each."""
    coded = {_module(p) for p in PACKAGE.rglob("__init__.py") if with_code(p)}
    assert table_errors((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"), imports(), coded) == []
    graph = {"imagebuilder.a.x": {"imagebuilder.a.y", "imagebuilder.b.z"}, "imagebuilder.a.y": set(),
             "imagebuilder.b.z": set(), "imagebuilder.b.w": set(), "imagebuilder.c.u": {"imagebuilder.b.w"},
             "imagebuilder.d.v": {"imagebuilder.b.z", "imagebuilder.b"}, "imagebuilder.b": set()}
    table = (f"{MODULE_TABLE} |\n|---|---|---|\n| `a/x.py` | x | y, c |\n| `a/y.py` | y | — |\n"
             "| `b/` | b | — |\n| `c/u.py` | u | b (z) |\n| `d/v.py` | v | b |\n")
    assert table_errors(table, graph) == ["`a/x.py`: names 'c', which it does not import",
                                          "`a/x.py`: imports b.z, unnamed",
                                          "`c/u.py`: names 'b', which it does not import",
                                          "`c/u.py`: imports b.w, unnamed",  # (a package's list is exact)
                                          "`d/v.py`: imports b.z, unnamed"]  # (a bare package is its __init__)
