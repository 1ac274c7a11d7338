"""The front door loads only the front door (issue 52): importing the command line and drawing its help, in a
fresh interpreter, leaves none of what the commands run in `sys.modules`: no docker-py (and its paramiko), no
requests, jinja2, YAML parser or cryptography, none of the steps, the run wing or the flows of `commands/`. A
command imports what it uses when it runs. Without timing: the wall times are benchmarks/cli_startup.py's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("docker", "paramiko", "requests", "jinja2", "yaml", "cryptography", "imagebuilder.steps", "imagebuilder.run",
         "imagebuilder.commands", "imagebuilder.plan", "imagebuilder.evidence", "imagebuilder.input.matrix")
# the top-level help is drawn before the group's callback runs, which makes the consoles: not even rich for it
HEAVY_AND_RICH = (*HEAVY, "rich")

PROBE = """
import contextlib, io, json, sys
import imagebuilder.cli
from imagebuilder.cli import cli, main
wanted = json.loads(sys.argv[1])
every = [[*path, "--help"] for path in [[]] + [[name] for name in cli.commands]
         + [[name, sub] for name, group in cli.commands.items() for sub in getattr(group, "commands", {})]]
helps = {"all": every, "none": []}.get(sys.argv[2], [sys.argv[2:]])
for argv in helps:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(argv)
    assert code == 0 and ("Usage:" in out.getvalue() or "--help" not in argv), (argv, code, out.getvalue())
print(json.dumps(sorted(m for m in sys.modules if any(m == w or m.startswith(w + ".") for w in wanted))))
"""


def loaded(heavy: tuple[str, ...], *argv: str) -> list[str]:
    """The modules of `heavy` a fresh interpreter holds after importing imagebuilder.cli and running `argv`
    (`all`: every command's --help, one after another; `none`: nothing)."""
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(heavy), *argv], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout))


@pytest.mark.parametrize(("argv", "heavy"), [
    (("none",), HEAVY_AND_RICH),  # import imagebuilder.cli: what the console script does first
    (("--help",), HEAVY_AND_RICH),
    (("plan", "--help"), HEAVY),
    (("all",), HEAVY),
])
def test_the_help_loads_none_of_what_the_commands_run(argv: tuple[str, ...], heavy: tuple[str, ...]) -> None:
    assert loaded(heavy, *argv) == []


def test_the_probe_sees_what_a_command_loads() -> None:
    """The check, seen failing: a command that runs (`compat show`) loads its flow, which its help does not."""
    assert loaded(HEAVY, "compat", "show", "--json", "--help") == []
    assert "imagebuilder.commands.compat" in loaded(HEAVY, "compat", "show", "--json")
