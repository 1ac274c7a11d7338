"""The node commands' checks (`run.handoff`) and the local executor (`emit.local`), on fakes: nothing to do only
when every key tag is there; a verify refuses a digest its key tag no longer names, and a node that is not a
leaf; the executor runs jobs in dependency order, hands each verify its stage job's digest, blocks what a failure
blocks, and counts "nothing to do" by exit code (`errors.NOTHING_TO_DO`), not by what a command prints."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.emit import local
from imagebuilder.emit.graph import VERIFY, graph
from imagebuilder.errors import NOTHING_TO_DO, InputError
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.plan import keys
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.keys import cache_ref
from imagebuilder.plan.plan import Decision, State
from imagebuilder.plan.render import Renderer
from imagebuilder.run.handoff import Handoff, selector, staged_digests

from ..conftest import MatrixWriter

MATRIX = """
version: 1
base_image: debian:bookworm
registry: registry.example/ml
repository: pytorch
torch_extras: []
layers: [base, business, task]
matrix: {torch: ["2.6.0"], accelerator: [cpu], python: ["3.11"]}
"""


@dataclass
class Registry:
    """The registry's key tags: reference -> digest."""

    tags: dict[str, str] = field(default_factory=dict)

    def digest(self, ref: str) -> str | None:
        return self.tags.get(ref)


def planned(write_matrix: MatrixWriter, table: CompatTable, only: str | None = None) -> plan_mod.Plan:
    plan = plan_mod.make(matrix_mod.load(write_matrix(MATRIX), table, env={}), Renderer()).only(only)
    return keys.assign(plan, {"debian:bookworm": "sha256:" + "1" * 64})


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


def test_nothing_to_do_only_when_every_key_tag_is_there(write_matrix: MatrixWriter, table: CompatTable) -> None:
    unvouched = planned(write_matrix, table, selector("2.6.0-cpu-py3.11-runtime/task"))
    registry = Registry({cache_ref(n): digest(i) for i, n in enumerate(unvouched.nodes)})
    handoff = Handoff("2.6.0-cpu-py3.11-runtime/task")
    assert handoff.staged(unvouched, registry) is None  # type: ignore[arg-type]  # key tags no build record vouches for
    assert not handoff.done
    plan = unvouched.with_nodes([dataclasses.replace(n, decision=Decision(State.CACHED, "vouched", ref=cache_ref(n)))
                                 for n in unvouched.nodes])  # (as `decide` finds them: a trusted build record each)
    said = handoff.staged(plan, registry)  # type: ignore[arg-type]
    assert said is not None and said.startswith("nothing to do: ") and digest(2) in said and handoff.done
    del registry.tags[cache_ref(plan.nodes[1])]  # a parent's key tag is gone: staging has work
    assert handoff.staged(plan, registry) is None  # type: ignore[arg-type]
    entry = Handoff("2.6.0-cpu-py3.11-runtime")
    assert selector(entry.name) == "2.6.0-cpu-py3.11-runtime/*"
    entry.staged(plan, registry)  # type: ignore[arg-type]
    assert entry.node == "2.6.0-cpu-py3.11-runtime/task" and entry.digest({}) == digest(2)


def test_verify_refuses_a_moved_key_tag_and_a_node_that_is_not_a_leaf(write_matrix: MatrixWriter,
                                                                     table: CompatTable) -> None:
    plan = planned(write_matrix, table, selector("2.6.0-cpu-py3.11-runtime/task"))
    leaf = plan.node("2.6.0-cpu-py3.11-runtime/task")
    registry = Registry({cache_ref(leaf): digest(7)})
    Handoff(leaf.id).handed(plan, registry, digest(7))  # type: ignore[arg-type]
    with pytest.raises(InputError, match="handed over; nothing was tested"):
        Handoff(leaf.id).handed(plan, registry, digest(8))  # type: ignore[arg-type]
    with pytest.raises(InputError, match="not a leaf"):
        Handoff("2.6.0-cpu-py3.11-runtime/business").handed(plan, registry, None)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="is not staged"):
        staged_digests(plan, Registry())  # type: ignore[arg-type]


FAKE = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    args = sys.argv[1:]
    with open(os.environ["CALLS"], "a") as out:
        out.write(json.dumps(args) + "\\n")
    asked = "%(flag)s" in args
    node = args[-1]
    if node in os.environ.get("FAIL", "").split(","):
        sys.exit(1)
    if os.environ.get("DONE") or os.environ.get("SAYS_DONE"):
        print("nothing to do: " + node)
    if "--digest-file" in args:
        path = Path(args[args.index("--digest-file") + 1])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("sha256:" + format(abs(hash(node)) %% 2**60, "064x") + "\\n")
    if os.environ.get("DONE") and asked:
        sys.exit(%(code)d)
""") % {"flag": local.NOTHING_TO_DO_FLAG, "code": NOTHING_TO_DO}


def execute(tmp_path: Path, write_matrix: MatrixWriter, table: CompatTable, **env: str) -> tuple[
        dict[str, str], list[list[str]]]:
    the_graph = graph(planned(write_matrix, table), "matrix.yaml")
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE, encoding="utf-8")
    calls = tmp_path / "calls.jsonl"
    calls.unlink(missing_ok=True)
    events = (tmp_path / "events.jsonl").open("w", encoding="utf-8")
    executor = local.Executor(the_graph, (sys.executable, str(fake)), {"CALLS": str(calls), **env}, lambda _: None,
                              events, logs=tmp_path / "logs")
    here = Path.cwd()
    os.chdir(tmp_path)
    try:
        outcome = executor.run()
    finally:
        os.chdir(here)
        events.close()
    return outcome, [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def test_the_executor_runs_in_order_and_hands_on_digests(tmp_path: Path, write_matrix: MatrixWriter,
                                                         table: CompatTable) -> None:
    outcome, calls = execute(tmp_path, write_matrix, table)
    assert set(outcome.values()) == {local.DONE}
    assert [c[:2] for c in calls] == [["node", "stage"]] * 3 + [["node", "verify"], ["publish", "--matrix"]]
    verify = calls[3]
    stage_digest = (tmp_path / calls[2][calls[2].index("--digest-file") + 1]).read_text().strip()
    assert verify[verify.index("--digest") + 1] == stage_digest and verify[-1] == "2.6.0-cpu-py3.11-runtime/task"
    assert all(local.NOTHING_TO_DO_FLAG in c for c in calls)  # every command asked for the exit code
    # a second run whose commands find their work done: nothing ran, every job says so
    outcome, _ = execute(tmp_path, write_matrix, table, DONE="1")
    assert set(outcome.values()) == {local.NOTHING}


def test_the_executor_counts_nothing_to_do_by_exit_code_not_by_text(tmp_path: Path, write_matrix: MatrixWriter,
                                                                     table: CompatTable) -> None:
    outcome, _ = execute(tmp_path, write_matrix, table, SAYS_DONE="1")  # says it, exits 0: it ran
    assert set(outcome.values()) == {local.DONE}
    outcome, _ = execute(tmp_path, write_matrix, table, DONE="1")  # exits NOTHING_TO_DO: nothing to do
    assert set(outcome.values()) == {local.NOTHING}
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert {e["code"] for e in lines if e["event"] == local.NOTHING} == {NOTHING_TO_DO}


def test_a_failed_job_blocks_what_needs_it(tmp_path: Path, write_matrix: MatrixWriter, table: CompatTable) -> None:
    outcome, calls = execute(tmp_path, write_matrix, table, FAIL="2.6.0-cpu-py3.11-runtime/business")
    assert list(outcome.values()) == [local.DONE, local.FAILED, local.BLOCKED, local.BLOCKED, local.BLOCKED]
    assert len(calls) == 2  # nothing after the failure started
    assert not any(c[1] == VERIFY for c in calls)


def test_execute_refuses_what_is_not_a_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from imagebuilder.cli import main

    bad = tmp_path / "graph.json"
    bad.write_text('{"jobs": [{"id": "x"}]}', encoding="utf-8")
    assert main(["--cache-dir", str(tmp_path / "c"), "execute", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not a graph of `plan --format graph`" in err and str(bad) in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["node stage", "node verify", "publish"])
def test_a_node_command_exits_nothing_to_do_only_when_asked(command: str, tmp_path: Path, write_matrix: MatrixWriter,
                                                            table: CompatTable, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Its work done already: 0 without --exit-code-nothing-to-do (an engine's job passes), NOTHING_TO_DO with it;
    it says "nothing to do" either way."""
    from imagebuilder.cli import main, nodes, running
    from imagebuilder.ledger import BuildStatus, NodeRecord, PublishStatus, VerifyStatus

    plan = planned(write_matrix, table)
    done = plan.with_nodes([dataclasses.replace(n, decision=Decision(State.CACHED, "vouched", ref=cache_ref(n)))
                            for n in plan.nodes])
    registry = Registry({cache_ref(n): digest(i) for i, n in enumerate(plan.nodes)})
    leaf = [n.id for n in plan.nodes if n.leaf][-1]

    def run_steps(*_: object, before: Any = None, **__: object) -> list[NodeRecord]:
        if command == "node stage":
            said = before(done, registry)
            print(said)
            return []
        return [dataclasses.replace(NodeRecord.of(n), build=BuildStatus.CACHED, verify=VerifyStatus.FOUND,
                                    publish=PublishStatus.CURRENT) for n in done.nodes]

    monkeypatch.setattr(nodes, "run_steps", run_steps)
    monkeypatch.setattr(running, "run_steps", run_steps)
    argv = [*command.split(), "--matrix", str(write_matrix(MATRIX)), "--report", str(tmp_path / "r"),
            *([leaf] if command.startswith("node") else [])]
    for flag, code in (((), 0), ((local.NOTHING_TO_DO_FLAG,), NOTHING_TO_DO)):
        assert main(["--cache-dir", str(tmp_path / "c"), *argv, *flag]) == code
        assert "nothing to do: " in capsys.readouterr().out


def test_the_emitted_pipelines_never_ask_for_the_exit_code_of_nothing_to_do() -> None:
    """An engine's job that finds its work done must pass: no emitted command line asks for NOTHING_TO_DO (the
    golden files are what `plan --format ...` emits, tests/unit/test_emit.py)."""
    golden = Path(__file__).resolve().parents[1] / "golden" / "engines"
    documents = sorted(golden.iterdir())
    assert {p.name for p in documents} >= {"graph.json", "github-actions.yaml", "buildkite.yaml", "argo.yaml",
                                           "k8s-jobs.yaml"}
    for path in documents:
        assert local.NOTHING_TO_DO_FLAG not in path.read_text(encoding="utf-8"), path
