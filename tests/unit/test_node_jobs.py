"""The node commands' checks (`run.handoff`) and the local executor (`emit.local`), on fakes: nothing to do only
when every key tag is there; a verify refuses a digest its key tag no longer names, and a node that is not a
leaf; the executor runs jobs in dependency order, hands each verify its stage job's digest, blocks what a failure
blocks, and counts "nothing to do"."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from imagebuilder.emit import local
from imagebuilder.emit.graph import VERIFY, graph
from imagebuilder.errors import InputError
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
    plan = unvouched.with_nodes([dataclasses.replace(n, decision=Decision(State.CACHED, "vouched", ref=cache_ref(n)))
                                 for n in unvouched.nodes])  # (as `decide` finds them: a trusted build record each)
    said = handoff.staged(plan, registry)  # type: ignore[arg-type]
    assert said is not None and said.startswith(local.NOTHING_TO_DO) and digest(2) in said
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
    node = args[-1]
    if node in os.environ.get("FAIL", "").split(","):
        sys.exit(1)
    if os.environ.get("DONE"):
        print("nothing to do: " + node)
    if "--digest-file" in args:
        path = Path(args[args.index("--digest-file") + 1])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("sha256:" + format(abs(hash(node)) % 2**60, "064x") + "\\n")
""")


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
    # a second run whose commands find their work done: nothing ran, every job says so
    outcome, _ = execute(tmp_path, write_matrix, table, DONE="1")
    assert set(outcome.values()) == {local.NOTHING}


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
