from __future__ import annotations

import pytest

from imagebuilder.errors import InputError
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan import tags
from imagebuilder.plan.render import Renderer

from ..conftest import MatrixWriter

TREE = """
base_image: debian:bookworm
registry: 127.0.0.1:5000/ml
repository: pytorch
layers:
  - base
  - business
  - task
  - {layer: task, name: eval, parent: business}
matrix: {torch: [2.6.0, 2.7.1], accelerator: [cpu], python: ["3.11"]}
"""


def make(path: object, table: CompatTable) -> plan_mod.Plan:
    return plan_mod.make(matrix_mod.load(path, table, env={}), Renderer())  # type: ignore[arg-type]


def test_node_contract_and_shared_parents(write_matrix: MatrixWriter, table: CompatTable) -> None:
    plan = make(write_matrix(TREE), table)
    assert [n.id for n in plan.nodes[:4]] == [
        "2.6.0-cpu-py3.11-runtime/base", "2.6.0-cpu-py3.11-runtime/business",
        "2.6.0-cpu-py3.11-runtime/task", "2.6.0-cpu-py3.11-runtime/eval"]
    base, business, task, ev = (n.to_json() for n in plan.nodes[:4])
    assert base["parent"] is None and base["base_image"] == "debian:bookworm"
    assert business["parent"] == base["id"] and business["base_image"] is None
    assert task["parent"] == ev["parent"] == business["id"]  # both task layers share one business node
    assert sum(1 for n in plan.nodes if n.name == "business") == 2  # once per entry, not once per leaf
    assert [task["leaf"], ev["leaf"], business["leaf"]] == [True, True, False]
    assert set(base) >= {"id", "layer", "parent", "base_image", "entry", "tags", "status"}
    assert base["entry"] == {"id": "2.6.0-cpu-py3.11-runtime", "torch": "2.6.0", "accelerator": "cpu",
                             "python": "3.11", "flavor": "runtime", "cuda": None, "cudnn": None, "nccl": None,
                             "triton": None, "torchvision": "0.21.0", "torchaudio": "2.6.0"}
    # The default immutable tag carries the content key (known once keys are assigned); the alias floats.
    assert ev["tags"] == ["127.0.0.1:5000/ml/pytorch:2.6.0-cpu-py3.11-runtime-eval-" + tags.KEY_PENDING]
    assert ev["aliases"] == ["127.0.0.1:5000/ml/pytorch:2.6.0-cpu-py3.11-runtime-eval"]
    assert base["status"] == "build"


def test_only_keeps_ancestors(write_matrix: MatrixWriter, table: CompatTable) -> None:
    plan = make(write_matrix(TREE), table).only("2.7.1-*/eval")
    assert [n.id for n in plan.nodes] == ["2.7.1-cpu-py3.11-runtime/base", "2.7.1-cpu-py3.11-runtime/business",
                                          "2.7.1-cpu-py3.11-runtime/eval"]
    assert [n.leaf for n in plan.nodes] == [False, False, True]
    with pytest.raises(InputError, match="--only 'nothing\\*' selects no node"):
        make(write_matrix(TREE), table).only("nothing*")
    # several globs, separated by commas (an entry's publish job, a packed strategy-matrix job): their union
    both = make(write_matrix(TREE), table).only("2.7.1-*/eval,2.6.0-*/task")
    assert [n.id for n in both.nodes if n.leaf] == ["2.6.0-cpu-py3.11-runtime/task", "2.7.1-cpu-py3.11-runtime/eval"]
    with pytest.raises(InputError, match="selects no node with 'nothing'"):
        make(write_matrix(TREE), table).only("2.7.1-*/eval,nothing")
    bracket = make(write_matrix(TREE), table).only("2.[67].1-*/eval,2.6.0-*/[t,x]ask")  # a comma of a [...] set
    assert [n.id for n in bracket.nodes if n.leaf] == ["2.6.0-cpu-py3.11-runtime/task", "2.7.1-cpu-py3.11-runtime/eval"]


@pytest.mark.parametrize(("template", "message"), [
    ("'{torch}-{acclerator}'", "unknown field {acclerator}"),
    ("'{torch}/{layer}'", "characters Docker does not allow"),
    ("'{torch}'", "would both be tagged"),
    ("'" + "x" * 130 + "'", "Docker allows 128"),
])
def test_tag_templates_are_validated(write_matrix: MatrixWriter, table: CompatTable, template: str,
                                     message: str) -> None:
    with pytest.raises(InputError, match=message):
        make(write_matrix(TREE + f"tags: [{template}]\n"), table)


def test_aliases_cover_nodes_and_never_equal_an_immutable_tag(write_matrix: MatrixWriter, table: CompatTable) -> None:
    plan = make(write_matrix(TREE + 'aliases: ["{entry}-{layer}", "latest-{layer}"]\n'), table)
    cover = dict(plan.alias_cover)
    assert cover["127.0.0.1:5000/ml/pytorch:latest-task"] == ("2.6.0-cpu-py3.11-runtime/task",
                                                               "2.7.1-cpu-py3.11-runtime/task")
    assert cover["127.0.0.1:5000/ml/pytorch:2.6.0-cpu-py3.11-runtime-base"] == ("2.6.0-cpu-py3.11-runtime/base",)
    assert dict(plan.only("2.6.0-*/task").alias_cover) == cover  # coverage stays whole under --only
    with pytest.raises(InputError, match="is also the immutable tag of"):
        make(write_matrix(TREE + 'tags: ["{entry}-{layer}"]\naliases: ["{entry}-{layer}"]\n'), table)


def test_keys_fill_the_key_field_of_tags(write_matrix: MatrixWriter, table: CompatTable) -> None:
    from imagebuilder.plan import keys
    plan = keys.assign(make(write_matrix(TREE + 'tags: ["{torch}-{layer}-{key12}-{date}"]\n'), table),
                       {"debian:bookworm": "sha256:" + "1" * 64})
    node = plan.nodes[0]
    today = plan_mod.datetime.datetime.now(plan_mod.datetime.timezone.utc).strftime("%Y%m%d")
    assert node.tags[0].endswith(f"2.6.0-base-{node.key[:12]}-{today}")


def test_tag_fields() -> None:
    values = tags.fields({"torch": "2.6.0", "cudnn": "9.1.0.70", "cuda": None}, entry="e", layer="base", node="e/b")
    assert tags.render("{torch_minor}-{cudnn_major}-{cuda}-{layer}", values) == "2.6-cudnn9-none-base"
