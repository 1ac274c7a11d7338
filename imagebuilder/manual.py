"""The reference pages of the docs site, made from the code where the code is the source: every command's help
(click), every matrix key (`declarations/schema.py`), report.json's fields (`ledger.py` through
`report/document.py`), the smoke checks (`smoke/judge.py`'s expected checks, the suite's own table of kinds and
the mutants that must be caught). `tests/unit/test_manual.py` fails when a committed page differs from what this
makes. Regenerate with `python -m imagebuilder.manual docs/reference` (or `make reference`). Prints nothing but
the pages it wrote; reads only the files it is given."""

from __future__ import annotations

import inspect
import io
import re
import sys
import tokenize
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import click
import yaml

from . import errors, ledger
from .declarations import schema
from .emit.local import NOTHING_TO_DO_FLAG
from .report.document import node_json
from .smoke import judge, runner

HEAD = "<!-- Made by `python -m imagebuilder.manual docs/reference` from the code: do not edit by hand. -->\n\n"
NOTHING_TO_DO = ("with `" + NOTHING_TO_DO_FLAG + "` ({commands}; `execute` passes it to each node command): its work "
                 "was done already (or, for `outdated`, nothing moved) and it says `nothing to do`; without the flag "
                 "such a command exits 0")
SIGNALS = ((130, "SIGINT (Ctrl-C): containers removed, nothing more tagged or pushed, reports written"),
           (143, "SIGTERM (a cancelled CI job): the same as SIGINT"))


def _cell(text: str) -> str:
    return _prose(" ".join(text.split())).replace("|", "\\|")


def _prose(text: str) -> str:
    """Text as Markdown that means what it says: a `*` outside a code span is a star, not emphasis."""
    parts = text.split("`")
    return "`".join(p.replace("*", "\\*") if i % 2 == 0 else p for i, p in enumerate(parts))


def commands_page(group: click.Group) -> str:
    """Every command of the CLI with its usage, its help and its options, then the exit codes."""
    out = [HEAD, "# Commands\n\n",
           "Every command's help, as `imagebuilder COMMAND --help` prints it. Global options come before the "
           "command (`imagebuilder --offline plan ...`).\n\n"]
    for path, command in _walk(group, ("imagebuilder",)):
        name = " ".join(path)
        ctx = click.Context(command, info_name=name)
        pieces = " ".join(command.collect_usage_pieces(ctx))
        out.append(f"## `{name}`\n\n" if len(path) > 1 else "## Global options\n\n")
        out.append(f"Usage: `{name} {pieces}`\n\n")
        helptext = inspect.cleandoc(command.help or "")
        if helptext:
            out.append(_plain(helptext) + "\n\n")
        rows = [record for param in command.get_params(ctx)
                if (record := param.get_help_record(ctx)) is not None and "--help" not in record[0]]
        for opts, text in rows:
            out.append(f"- `{opts}`: {_plain(text)}\n" if text else f"- `{opts}`\n")
        if rows:
            out.append("\n")
    out.append("## Exit codes\n\n| code | when | error classes (`imagebuilder/errors.py`) |\n|---|---|---|\n")
    flagged = [" ".join(path[1:]) for path, command in _walk(group, ("imagebuilder",))
               if any(NOTHING_TO_DO_FLAG in p.opts for p in command.params)]
    nothing = NOTHING_TO_DO.format(commands=", ".join(f"`{name}`" for name in flagged))
    codes = [(0, "everything asked for passed", ""), (errors.NOTHING_TO_DO, _cell(nothing), "")]
    for code, classes in _error_classes().items():
        when = "; ".join(_cell(_first_sentence(c.__doc__ or "")) for c in classes)
        codes.append((code, when, ", ".join(f"`{c.__name__}`" for c in classes)))
    codes += [(code, when, "`Terminated`" if code == 143 else "") for code, when in SIGNALS]
    out += [f"| {code} | {when} | {names} |\n" if names else f"| {code} | {when} | |\n"
            for code, when, names in sorted(codes)]
    return "".join(out)


def _walk(command: click.Command, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            if not command.commands[name].hidden:
                yield from _walk(command.commands[name], (*path, name))


def _plain(text: str) -> str:
    """Help text as Markdown: one paragraph per blank line, `\\b` blocks kept as they are."""
    return "\n\n".join(_prose(" ".join(p.replace("\b", "").split())) for p in re.split(r"\n\s*\n", text))


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    return text.split(". ", 1)[0].rstrip(".") + "."


def _error_classes() -> dict[int, list[type[errors.ImageBuilderError]]]:
    out: dict[int, list[type[errors.ImageBuilderError]]] = {}
    for value in vars(errors).values():
        if inspect.isclass(value) and issubclass(value, errors.ImageBuilderError) \
                and value is not errors.ImageBuilderError:
            out.setdefault(value.exit_code, []).append(value)
    return out


def matrix_page() -> str:
    """Every matrix key (`declarations/schema.py`)."""
    return (HEAD + "# Matrix keys\n\n"
            "Every key of `matrix.yaml` (version 1), from `imagebuilder/declarations/schema.py`, the one declaration "
            "the loader, this page and the JSON Schema for editors (`imagebuilder schema --format json`) are made "
            "from. A default or a bound written here is the one the loader, the dataclasses and the CLI use. "
            "`plan --explain` says where each entry's values came from (`file:line` or `default`). The guide "
            "explains them: [the matrix](../guide/matrix.md).\n\n"
            + schema.markdown())


def _field_comments(cls: type) -> dict[str, str]:
    """The comment at the end of each field's line in a class's source (`name: type = x  # what it is`)."""
    source = inspect.getsource(cls)
    out: dict[str, str] = {}
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            line = lines[tok.start[0] - 1]
            found = re.match(r"\s*(\w+)\s*[:=]", line)
            if found:
                out[found.group(1)] = tok.string.lstrip("# ").strip()
    return out


DERIVED = {  # report.json's node fields that are not a NodeRecord field of the same name
    "status": "One word: the first step that did not go well, else the last one that ran (`NodeRecord.outcome`).",
    "ok": "Built, verified (or not asked to) and not held or failed at publish (`NodeRecord.ok`).",
    "smoke": "The verify step's status (`VerifyStatus`, below).",
    "gpu": "The GPUs its pass ran on, from the pass record (`verified`, `kind`, `count`, `models`, `driver`).",
}


def report_page() -> str:
    """report.json's node fields, from the ledger's record and the document made of it."""
    record = ledger.NodeRecord("e/l", "e", "l", True)
    keys = list(node_json(record))
    fields = {f.name: f for f in ledger.NodeRecord.__dataclass_fields__.values()}
    comments = _field_comments(ledger.NodeRecord)
    missing = [k for k in keys if not comments.get(k) and k not in DERIVED]
    if missing:
        raise ValueError(f"report.json fields with no description: {', '.join(missing)} (a comment on the "
                         "NodeRecord field's line, or DERIVED)")
    out = [HEAD, "# report.json\n\n",
           "`--report DIR` gets `report.json`: the run's facts (`tool`, `version`, `command`, `matrix`, `registry`, "
           "`only`, `smoke`, `allow_untested`, `signing`, `finished`, `host`, `interrupted`), `ok` (every node ok) "
           "and `nodes`, one object per node in plan order, made from the run ledger's `NodeRecord` "
           "(`imagebuilder/ledger.py`) by `imagebuilder/report/document.py`. report.html, summary.md and "
           "junit.xml are made from it; `imagebuilder report DIR` remakes the page. See "
           "[reports](../guide/reports.md).\n\n",
           "| field | type | what |\n|---|---|---|\n"]
    for key in keys:
        if key in fields:
            kind = str(fields[key].type).replace("|", "or")
            out.append(f"| `{key}` | `{_cell(kind)}` | {_cell(comments[key])} |\n")
        else:
            out.append(f"| `{key}` | derived | {_cell(DERIVED[key])} |\n")
    for title, enum, field_name in (("Build statuses", ledger.BuildStatus, "build"),
                                    ("Smoke (verify) statuses", ledger.VerifyStatus, "smoke"),
                                    ("Publish statuses", ledger.PublishStatus, "publish")):
        out.append(f"\n## {title} (`{field_name}`)\n\n| value | means |\n|---|---|\n")
        notes = _field_comments(enum)
        for member in enum:
            out.append(f"| `{member.value}` | {_cell(notes.get(member.name, ''))} |\n")
    return "".join(out)


RUNS = (  # the kinds of run the reference's table of checks shows: (title, expectations, gpu run, GPUs)
    ("CPU runtime", {"accelerator": "cpu", "flavor": "runtime"}, False, 0),
    ("CPU devel", {"accelerator": "cpu", "flavor": "devel"}, False, 0),
    ("CUDA runtime, no GPU", {"accelerator": "cu130", "flavor": "runtime"}, False, 0),
    ("CUDA devel, 1 GPU", {"accelerator": "cu130", "flavor": "devel"}, True, 1),
    ("CUDA runtime, 2 GPUs", {"accelerator": "cu130", "flavor": "runtime"}, True, 2),
)


def smoke_page(suite_doc: str, mutants: list[Mapping[str, Any]]) -> str:
    """The smoke checks: the suite's table of kinds, the checks the host expects of each kind of run
    (`judge.expected_checks`) and the mutants that must be caught by each."""
    kinds = _suite_kinds(suite_doc)
    out = [HEAD, "# Smoke checks\n\n",
           "The suite (`imagebuilder/smoke/suite.py`) runs inside each leaf image and reports; the host "
           "(`imagebuilder/smoke/judge.py`) decides which checks it expects and judges the report. A check "
           "counts only if it has been seen failing: the last column names the mutants "
           "(`tests/mutants/mutants.yaml`) that must fail it.\n\n## Kinds\n\n"
           "`imagebuilder smoke IMAGE --only KINDS` runs some kinds only (a diagnostic, never a pass).\n\n"
           "| kind | what the suite checks |\n|---|---|\n"]
    for kind in runner.CHECK_KINDS:
        out.append(f"| `{kind}` | {_cell(kinds.get(kind, ''))} |\n")
    expect = dict.fromkeys(judge.VERSION_CHECKS, "x")
    runs = [judge.expected_checks({**expect, **fields, "user": {"uid": 1000}}, [{"name": "layer.task.0"}],
                                  gpu_run=gpu, gpus=gpus) for _, fields, gpu, gpus in RUNS]
    names = list(dict.fromkeys(name for run in runs for name in run))
    columns = [set(run) for run in runs]
    caught: dict[str, list[str]] = {}
    for mutant in mutants:
        for device, check in (mutant.get("catch") or {}).items():
            caught.setdefault(str(check), []).append(f"`{mutant['name']}` ({device})")
    out.append("\n## The checks the host expects\n\nA check the host expects and the report lacks fails the run, "
               "whatever the report says of itself. `layer.<layer>.<n>` stands for each layer's own `smoke:` "
               "commands, inherited down the tree.\n\n")
    out.append("| check | " + " | ".join(title for title, *_ in RUNS) + " | seen failing by |\n")
    out.append("|---|" + "---|" * len(RUNS) + "---|\n")
    for name in names:
        marks = " | ".join("yes" if name in column else "" for column in columns)
        mutants_here = [m for check, ms in caught.items() if _matches(check, name) for m in ms]
        out.append(f"| `{name}` | {marks} | {', '.join(mutants_here)} |\n")
    return "".join(out)


def _matches(check: str, name: str) -> bool:
    """A mutant's `catch` is a check name, or a prefix ending in ':' (`throughput.cuda:`)."""
    if check.endswith(":"):
        return name.startswith(check)
    return name == check or (check.startswith("layer.") and name.startswith("layer."))


def _suite_kinds(doc: str) -> dict[str, str]:
    """The suite docstring's table: a kind at the start of a line, its text indented below it."""
    out: dict[str, list[str]] = {}
    current = None
    for line in doc.splitlines():
        found = re.match(r"  (\w+)\s{2,}(.*)", line) or re.match(r"  (distributed) (.*)", line)
        if found and found.group(1) in (*runner.CHECK_KINDS, "layers"):
            current = found.group(1)
            out[current] = [found.group(2)]
        elif current and line.startswith(" " * 14):
            out[current].append(line.strip())
        elif current and not line.strip():
            current = None
    return {k: " ".join(v) for k, v in out.items()}


def pages(root: Path) -> dict[str, str]:
    """Every generated page, by its name under docs/reference/."""
    from .cli import cli

    suite = (root / "imagebuilder" / "smoke" / "suite.py").read_text(encoding="utf-8")
    suite_doc = suite.split('"""', 2)[1]
    mutants = yaml.safe_load((root / "tests" / "mutants" / "mutants.yaml").read_text(encoding="utf-8")) or []
    makers: dict[str, Callable[[], str]] = {
        "commands.md": lambda: commands_page(cli),
        "matrix-keys.md": matrix_page,
        "report-json.md": report_page,
        "smoke-checks.md": lambda: smoke_page(suite_doc, mutants),
    }
    return {name: make() for name, make in makers.items()}


def drift(root: Path, folder: Path) -> list[str]:
    """The generated pages whose committed copy in `folder` differs from what the code makes now."""
    return [name for name, text in pages(root).items()
            if not (folder / name).is_file() or (folder / name).read_text(encoding="utf-8") != text]


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[1]
    folder = Path(argv[0]) if argv else root / "docs" / "reference"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in pages(root).items():
        (folder / name).write_text(text, encoding="utf-8")
        print(folder / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
