"""Node keys: what changes them, what does not, and how a rebuild says why."""

from __future__ import annotations

import shutil
from pathlib import Path

from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.input.layers import project_dir
from imagebuilder.plan import keys
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.render import Renderer

from ..conftest import MatrixWriter

BASES = {"debian:bookworm": "sha256:" + "1" * 64}


def matrix_text(layers_path: str = "", tags: str = "", extra: str = "", registry: str = "127.0.0.1:5000/ml",
                repository: str = "pytorch") -> str:
    return f"""
base_image: debian:bookworm
registry: {registry}
repository: {repository}
{layers_path}
{tags}
layers: [base, business, task]
matrix: {{torch: [2.6.0, 2.7.1], accelerator: [cpu], python: ["3.11"]}}
{extra}
"""


def keyed(path: Path, table: CompatTable, bases: dict[str, str] | None = None) -> dict[str, plan_mod.Node]:
    plan = plan_mod.make(matrix_mod.load(path, table, env={}), Renderer())
    return {n.id: n for n in keys.assign(plan, BASES if bases is None else bases).nodes}


def local_task(tmp: Path, write_matrix: MatrixWriter) -> tuple[Path, Path]:
    """A copy of the task layer found through layers_path, and a matrix using it: (layers folder, matrix)."""
    layers = tmp / "team-layers"
    shutil.copytree(project_dir("layers") / "task", layers / "task")
    return layers, write_matrix(matrix_text(layers_path=f"layers_path: [{layers}]"))


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def test_keys_are_stable_distinct_and_chained(write_matrix: MatrixWriter, table: CompatTable) -> None:
    path = write_matrix(matrix_text())
    first, second = keyed(path, table), keyed(path, table)
    assert {k: n.key for k, n in first.items()} == {k: n.key for k, n in second.items()}
    assert len({n.key for n in first.values()}) == 6  # 2 entries x 3 layers, all different
    task = first["2.6.0-cpu-py3.11-runtime/task"]
    assert dict(task.inputs)["parent"] == first["2.6.0-cpu-py3.11-runtime/business"].key
    assert len(task.key) == 64 and keys.cache_tag(task.key) == f"cache-{task.key[:12]}"


def test_tag_templates_do_not_change_keys(write_matrix: MatrixWriter, table: CompatTable) -> None:
    plain = keyed(write_matrix(matrix_text()), table)
    renamed = keyed(write_matrix(matrix_text(tags='tags: ["nightly-{torch}-{layer}"]')), table)
    assert {k: n.key for k, n in plain.items()} == {k: n.key for k, n in renamed.items()}


def test_registry_and_repository_do_not_change_keys(write_matrix: MatrixWriter, table: CompatTable) -> None:
    """Images of one content share one key wherever they are pushed: no label or input names the place."""
    plain = keyed(write_matrix(matrix_text()), table)
    elsewhere = keyed(write_matrix(matrix_text(registry="registry.example.com:443/team", repository="other"),
                                   "elsewhere.yaml"), table)
    assert {k: n.key for k, n in plain.items()} == {k: n.key for k, n in elsewhere.items()}
    assert {k: n.inputs for k, n in plain.items()} == {k: n.inputs for k, n in elsewhere.items()}
    for node in elsewhere.values():
        labels = " ".join(keys.content_labels(node).values())
        assert "registry.example.com" not in labels and "other" not in labels.split()


def test_a_new_base_image_id_changes_every_key(write_matrix: MatrixWriter, table: CompatTable) -> None:
    path = write_matrix(matrix_text())
    old = keyed(path, table)
    new = keyed(path, table, {"debian:bookworm": "sha256:" + "2" * 64})
    assert all(old[k].key != new[k].key for k in old)
    assert keys.reason(new["2.6.0-cpu-py3.11-runtime/base"], dict(old["2.6.0-cpu-py3.11-runtime/base"].inputs),
                       None) == "base image debian:bookworm changed"


def test_unknown_base_gives_no_key(write_matrix: MatrixWriter, table: CompatTable) -> None:
    nodes = keyed(write_matrix(matrix_text()), table, {})
    assert all(n.key == "" and n.inputs == () for n in nodes.values())


def test_task_template_change_changes_only_task_keys(write_matrix: MatrixWriter, table: CompatTable,
                                                     tmp_path: Path) -> None:
    layers, path = local_task(tmp_path, write_matrix)
    before = keyed(path, table)
    template = layers / "task" / "Dockerfile.j2"
    append(template, "RUN true\n")
    after = keyed(path, table)
    changed = sorted(k for k in before if before[k].key != after[k].key)
    assert changed == ["2.6.0-cpu-py3.11-runtime/task", "2.7.1-cpu-py3.11-runtime/task"]
    node = after["2.6.0-cpu-py3.11-runtime/task"]
    why = keys.reason(node, dict(before[node.id].inputs), None)
    assert why == f"template {template} changed"


def test_a_jinja_comment_changes_no_key_but_a_context_file_does(write_matrix: MatrixWriter, table: CompatTable,
                                                                 tmp_path: Path) -> None:
    layers, path = local_task(tmp_path, write_matrix)
    before = keyed(path, table)
    append(layers / "task" / "Dockerfile.j2", "{# a note for readers; renders nothing #}\n")
    commented = keyed(path, table)
    assert {k: n.key for k, n in commented.items()} == {k: n.key for k, n in before.items()}

    (layers / "task" / "motd.txt").write_text("hello\n")
    after = keyed(path, table)
    node = after["2.7.1-cpu-py3.11-runtime/task"]
    assert node.key != before[node.id].key
    assert keys.reason(node, dict(commented[node.id].inputs), None) == f"file {layers / 'task'}/motd.txt added"


def test_reasons(write_matrix: MatrixWriter, table: CompatTable) -> None:
    nodes = keyed(write_matrix(matrix_text()), table)
    business = nodes["2.6.0-cpu-py3.11-runtime/business"]
    assert keys.reason(business, None, "build") == keys.NEVER_BUILT
    assert keys.reason(business, None, None) == "never built"
    assert keys.reason(business, dict(business.inputs), "build") == "parent rebuilt"
    assert keys.reason(business, dict(business.inputs), None) == "no image with this key locally or in the registry"
    base = nodes["2.6.0-cpu-py3.11-runtime/base"]  # the node that copies the pins in (business has them below)
    assert "file:_imagebuilder/constraints.txt" not in dict(business.inputs)
    pins = dict(base.inputs)
    pins["file:_imagebuilder/constraints.txt"] = "0" * 64
    assert keys.reason(base, pins, None) == "pins (constraints.txt) changed"


def test_a_layer_with_a_whole_tree_gets_one_input_per_folder() -> None:
    files = [(f"usr/include/h{i}.h", f"d{i}", False) for i in range(500)]
    files += [("usr/local/cuda/bin/nvcc", "n1", True), ("step.py", "s1", False),
              ("_imagebuilder/constraints.txt", "c1", False)]
    inputs = keys.file_inputs(files)
    assert set(inputs) == {"file:usr/include/**", "file:usr/local/**", "file:step.py",
                           "file:_imagebuilder/constraints.txt"}  # depth 3 would give 501 inputs
    assert inputs["file:_imagebuilder/constraints.txt"] == "c1" and inputs["file:step.py"] == "s1"
    changed = keys.file_inputs([("usr/include/h7.h", "other", False) if f[0] == "usr/include/h7.h" else f
                                for f in files])
    assert [k for k in inputs if inputs[k] != changed[k]] == ["file:usr/include/**"]
    said = keys.changes(inputs, changed, "layers/gpu-task")
    assert said == ["file layers/gpu-task/usr/include/** changed"]
    small = keys.file_inputs(files[:3])
    assert set(small) == {"file:usr/include/h0.h", "file:usr/include/h1.h", "file:usr/include/h2.h"}


def test_an_alias_with_key12_carries_the_key(write_matrix: MatrixWriter, table: CompatTable) -> None:
    nodes = keyed(write_matrix(matrix_text(extra='aliases: ["{entry}-{layer}-{key12}-latest"]')), table)
    task = nodes["2.6.0-cpu-py3.11-runtime/task"]
    assert task.aliases == (f"127.0.0.1:5000/ml/pytorch:2.6.0-cpu-py3.11-runtime-task-{task.key[:12]}-latest",)
    plan = keys.assign(plan_mod.make(matrix_mod.load(write_matrix(matrix_text(
        extra='aliases: ["{entry}-{layer}-{key12}-latest"]'), "again.yaml"), table, env={}), Renderer()), BASES)
    cover = dict(plan.alias_cover)
    assert cover[task.aliases[0]] == (task.id,)
    assert not [ref for ref in cover if "k3y12pending" in ref]
