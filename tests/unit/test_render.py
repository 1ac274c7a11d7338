"""Rendering: golden Dockerfiles for the default matrix, and template errors that name file:line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from imagebuilder.errors import InputError
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.plan import keys
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.render import Renderer

from ..conftest import MatrixWriter

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"


def default_plan() -> plan_mod.Plan:
    m = matrix_mod.load(ROOT / "matrix.yaml", CompatTable.load(), env={})
    return plan_mod.make(m, Renderer())


def test_golden_dockerfiles_of_the_default_matrix(update_golden: bool) -> None:
    """Every distinct image's rendered Dockerfile of matrix.yaml equals tests/golden/<node id>/Dockerfile (a node
    that is the same image as an earlier one, a shared os, cuda or torch node, has the first one's golden file).
    After an intended template change: pytest tests/unit/test_render.py --update-golden, and review the diff."""
    plan = default_plan()
    first = keys.first_of(keys.identities(plan))
    nodes = [n for n in plan.nodes if first[n.id] == n.id]
    assert nodes, "the default matrix plans no nodes"
    expected_files = {GOLDEN / n.id / "Dockerfile" for n in nodes}
    if update_golden:
        for f in GOLDEN.rglob("Dockerfile"):
            if f not in expected_files:
                f.unlink()
        for n in nodes:
            (GOLDEN / n.id).mkdir(parents=True, exist_ok=True)
            (GOLDEN / n.id / "Dockerfile").write_text(n.rendered.dockerfile, encoding="utf-8")
    stale = sorted(str(f.relative_to(GOLDEN)) for f in GOLDEN.rglob("Dockerfile") if f not in expected_files)
    assert not stale, f"golden files for nodes the matrix no longer has: {stale}"
    for n in nodes:
        golden = GOLDEN / n.id / "Dockerfile"
        assert golden.is_file(), f"no golden file for {n.id}; run with --update-golden"
        assert n.rendered.dockerfile == golden.read_text(encoding="utf-8"), f"{n.id} differs from {golden}"


def test_rendered_torch_pins_exactly_the_planned_versions() -> None:
    plan = default_plan()
    node = plan.node("2.6.0-cu124-py3.11-runtime/torch")
    files = dict(node.rendered.files)
    constraints = files["_imagebuilder/constraints.txt"].decode().splitlines()
    assert "torch==2.6.0" in constraints
    assert "nvidia-cudnn-cu12==9.1.0.70" in constraints
    assert "nvidia-nccl-cu12==2.21.5" in constraints
    assert "torchvision==0.21.0" in constraints
    text = node.rendered.dockerfile
    assert text.startswith("FROM 127.0.0.1:5000/ml/pytorch:2.6.0-cu124-py3.11-runtime-cuda\n")
    assert "torch==2.6.0 torchvision==0.21.0 torchaudio==2.6.0" in text
    # pip reads the index from a build arg whose default is the matrix's URL (a URL never stands in shell text)
    assert '--no-cache-dir --index-url "${IMAGEBUILDER_TORCH_INDEX_URL}"' in text
    assert "\nARG IMAGEBUILDER_TORCH_INDEX_URL=https://pypi.org/simple\nRUN pip install" in text
    # the CUDA node below installs exactly torch's CUDA library pins, for every Python, and nothing of torch
    cuda = plan.node("2.6.0-cu124-py3.11-runtime/cuda")
    assert cuda.rendered.dockerfile.startswith("FROM 127.0.0.1:5000/ml/pytorch:2.6.0-cu124-py3.11-runtime-os\n")
    assert "--target /opt/imagebuilder/cuda " in cuda.rendered.dockerfile
    assert "nvidia-cudnn-cu12==9.1.0.70 nvidia-cufft-cu12==11.2.1.3" in cuda.rendered.dockerfile
    assert "torch==" not in cuda.rendered.dockerfile and "triton" not in cuda.rendered.dockerfile
    assert "_imagebuilder/constraints.txt" not in dict(cuda.rendered.files)


def test_entries_with_one_pin_set_share_the_cuda_node(write_matrix: MatrixWriter) -> None:
    """2.12.0 and 2.12.1 (cu130) pin the same CUDA libraries: one CUDA node for both releases and both
    Pythons; torch nodes are one per (torch, Python)."""
    path = write_matrix("""
        base_image: debian:bookworm
        registry: r:5000
        repository: p
        layers: [os, {layer: cuda, when: {accelerator: "cu*"}}, torch]
        torch_extras: []
        matrix: {torch: ["2.12.0", "2.12.1"], accelerator: [cu130], python: ["3.11", "3.12"]}
        """)
    matrix = matrix_mod.load(path, CompatTable.load(), env={})
    plan = keys.assign(plan_mod.make(matrix, Renderer()), {"debian:bookworm": "sha256:b"})
    by_layer: dict[str, set[str]] = {}
    for node in plan.nodes:
        by_layer.setdefault(node.layer.name, set()).add(node.key)
    assert {name: len(found) for name, found in by_layer.items()} == {"os": 1, "cuda": 1, "torch": 4}
    cuda = plan.node("2.12.1-cu130-py3.12-runtime/cuda")
    labels = keys.content_labels(cuda)
    assert "io.imagebuilder.entry" not in labels and "io.imagebuilder.version.torch" not in labels
    assert labels["io.imagebuilder.version.nccl"] == "2.29.7"
    assert labels["org.opencontainers.image.title"] == "cuda (accelerator cu130 cuda 13.0 cudnn 9.20.0.48 nccl 2.29.7)"


def test_a_runtime_leaf_is_the_image_its_devel_builds_on(write_matrix: MatrixWriter) -> None:
    """A leaf states only its scope, like any node: runtime's torch leaf and the torch node under devel are
    one key, one image, built once (devel's is `same_as` it), whatever the jobs or machines that build them.
    Entry-wide labels (entry, node id) would make two keys of one content, built twice, stored twice."""
    path = write_matrix("""
        base_image: debian:bookworm
        registry: r:5000
        repository: p
        layers: [os, {layer: cuda, when: {accelerator: "cu*"}}, torch, {layer: devel, when: {flavor: devel}}]
        torch_extras: []
        matrix: {torch: ["2.12.0"], accelerator: [cu130], python: ["3.11"], flavor: [runtime, devel]}
        """)
    plan = keys.assign(plan_mod.make(matrix_mod.load(path, CompatTable.load(), env={}), Renderer()),
                       {"debian:bookworm": "sha256:b"})
    runtime, under_devel = plan.node("2.12.0-cu130-py3.11-runtime/torch"), plan.node("2.12.0-cu130-py3.11-devel/torch")
    assert runtime.leaf and not under_devel.leaf
    assert runtime.key == under_devel.key
    assert keys.first_of(keys.identities(plan))[under_devel.id] == runtime.id
    labels = keys.content_labels(runtime)
    assert "io.imagebuilder.entry" not in labels and "io.imagebuilder.node" not in labels
    assert labels["org.opencontainers.image.title"].startswith("torch (accelerator cu130 ")
    assert plan.node("2.12.0-cu130-py3.11-devel/devel").key not in {runtime.key, under_devel.key}


def test_children_render_from_their_parent() -> None:
    node = next(n for n in default_plan().nodes if n.id == "2.6.0-cu124-py3.11-runtime/task")
    assert node.rendered.dockerfile.startswith(
        "FROM 127.0.0.1:5000/ml/pytorch:2.6.0-cu124-py3.11-runtime-business\n")
    assert dict(node.rendered.files)["evaluate.py"].startswith(b'"""Example team tool')


def test_the_devel_flavor_adds_a_toolchain() -> None:
    plan = default_plan()
    devel = plan.node("2.11.0-cu130-py3.11-devel/devel")
    assert devel.parent == "2.11.0-cu130-py3.11-devel/torch"
    # devel builds on the runtime chain: the same os, cuda and torch nodes (one image each)
    def keyed_text(node: plan_mod.Node) -> str:
        return node.rendered.dockerfile.replace(node.rendered.parent_image, "<parent>")

    for layer in ("os", "cuda", "torch"):
        node = plan.node(f"2.11.0-cu130-py3.11-devel/{layer}")
        assert keyed_text(node) == keyed_text(plan.node(f"2.11.0-cu130-py3.11-runtime/{layer}"))
    text = devel.rendered.dockerfile
    assert "install -y --no-install-recommends build-essential ninja-build git" in text
    assert not any("build-essential" in n.rendered.dockerfile for n in plan.nodes if n.entry.flavor == "runtime")
    # CUDA devel: nvcc and headers of the very toolkit torch pins, from NVIDIA's wheels, under CUDA_HOME
    assert "'cuda-toolkit[cccl,crt,nvcc,nvvm]==13.0.2'" in text  # quoted: a shell must not glob it
    assert "RUN python3 /opt/imagebuilder/cuda_home.py 13.0 /usr/local/cuda" in text
    assert "_imagebuilder/cuda_home.py" in dict(devel.rendered.files)
    cpu_devel = plan.node("2.8.0-cpu-py3.11-devel/devel").rendered.dockerfile
    assert "build-essential ninja-build" in cpu_devel and "CUDA_HOME" not in cpu_devel


def test_every_layer_runs_its_steps_as_root_and_ends_as_the_user() -> None:
    for node in default_plan().nodes:
        lines = node.rendered.dockerfile.splitlines()
        assert lines[1] == "USER 0", node.id
        assert lines[-1] == "USER 1000:1000", node.id
        creates = "RUN sh /opt/imagebuilder/add_user.sh ml 1000 1000 /home/ml /workspace" in lines
        assert creates == (node.parent is None), node.id  # only the root layer creates the user
        assert ("WORKDIR /workspace" in lines) == (node.parent is None), node.id


def team_layer(tmp_path: Path, template: str) -> Path:
    folder = tmp_path / "layers" / "team"
    folder.mkdir(parents=True)
    (folder / "Dockerfile.j2").write_text(textwrap.dedent(template).lstrip(), encoding="utf-8")
    return folder / "Dockerfile.j2"


def plan_with_team_layer(write_matrix: MatrixWriter, table: CompatTable, header: str) -> plan_mod.Plan:
    path = write_matrix(header.replace("layers: [base, business, task]", "layers: [base, team]\nlayers_path: [layers]")
                        + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n")
    return plan_mod.make(matrix_mod.load(path, table, env={}), Renderer())


@pytest.mark.parametrize(("template", "message", "line"), [
    ("FROM {{ parent_image }}\nRUN echo {{ torch }\n", "template syntax error", 2),
    ("FROM {{ parent_image }}\n\nRUN echo {{ no_such_thing }}\n", "'no_such_thing' is undefined", 3),
    ("FROM {{ parent_image }}\nRUN echo {{ layer.vars.missing }}\n", "has no attribute 'missing'", 2),
    ("FROM debian:bookworm\nRUN true\n", "the first instruction must be `FROM {{ parent_image }}`", 1),
    ("# only a comment\n", "renders no FROM line", 1),
])
def test_template_errors_name_file_and_line(write_matrix: MatrixWriter, table: CompatTable, header: str,
                                            tmp_path: Path, template: str, message: str, line: int) -> None:
    template_file = team_layer(tmp_path, template)
    with pytest.raises(InputError, match=message) as err:
        plan_with_team_layer(write_matrix, table, header)
    assert err.value.where is not None
    assert Path(err.value.where.file) == template_file
    assert err.value.where.line == line


def test_team_layers_can_use_the_shared_macros(write_matrix: MatrixWriter, table: CompatTable, header: str,
                                               tmp_path: Path) -> None:
    team_layer(tmp_path, """
        FROM {{ parent_image }}
        {% import "macros.j2" as m %}
        {{ m.apt_install(["curl"]) }}
        """)
    node = plan_with_team_layer(write_matrix, table, header).node("2.6.0-cpu-py3.11-runtime/team")
    assert "apt-get install -y --no-install-recommends curl" in node.rendered.dockerfile
    assert "rm -rf /var/lib/apt/lists/*" in node.rendered.dockerfile


def test_unknown_layer_suggests(write_matrix: MatrixWriter, table: CompatTable, header: str) -> None:
    path = write_matrix(header.replace("[base, business, task]", "[base, busines]")
                        + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n")
    with pytest.raises(InputError, match="unknown layer 'busines'") as err:
        plan_mod.make(matrix_mod.load(path, table, env={}), Renderer())
    assert err.value.hint == "did you mean 'business'?"


def test_labels_are_one_quoted_instruction() -> None:
    from imagebuilder.plan.render import RenderedNode, with_labels

    out = with_labels(RenderedNode("FROM x\n"), {"b": 'say "hi" $HOME\\n', "a": "1"})
    assert out.dockerfile == 'FROM x\nLABEL a="1" \\\n      b="say \\"hi\\" \\$HOME\\\\n"\n'


def test_reused_outputs_are_the_same_as_rendering_each_node(write_matrix: MatrixWriter, table: CompatTable,
                                                            header: str, tmp_path: Path) -> None:
    """Planning renders a layer's template once per distinct set of values it reads; a template that looks
    at parent_image (not only prints it) is rendered for every node."""
    folder = tmp_path / "layers" / "peek"
    folder.mkdir(parents=True)
    (folder / "Dockerfile.j2").write_text(
        'FROM {{ parent_image }}\n{% if "2.6.0" in parent_image %}RUN echo old\n{% else %}RUN echo new\n{% endif %}\n')
    path = write_matrix(header.replace("layers: [base, business, task]", "layers: [base, task, peek]\n"
                                       "layers_path: [layers]")
                        + "matrix: {torch: [2.6.0, 2.7.1], accelerator: [cpu], python: ['3.11']}\n")
    renderer = Renderer()
    plan = plan_mod.make(matrix_mod.load(path, table, env={}), renderer)
    fresh = {n.id: Renderer().render(n.entry, n.layer, n.id, n.rendered.parent_image, root=n.parent is None)
             for n in plan.nodes}
    assert {n.id: n.rendered.dockerfile for n in plan.nodes} == {k: v.dockerfile for k, v in fresh.items()}
    assert "RUN echo old" in plan.node("2.6.0-cpu-py3.11-runtime/peek").rendered.dockerfile
    assert "RUN echo new" in plan.node("2.7.1-cpu-py3.11-runtime/peek").rendered.dockerfile
    assert renderer.reads(plan.node("2.6.0-cpu-py3.11-runtime/peek").layer) is None
    assert renderer.reads(plan.node("2.6.0-cpu-py3.11-runtime/task").layer) == ()  # prints its parent, reads nothing


def test_a_link_out_of_a_layer_folder_is_refused_and_one_inside_it_is_copied(
        write_matrix: MatrixWriter, table: CompatTable, header: str, tmp_path: Path) -> None:
    """N10: a team layer's `notes.txt -> ~/.docker/config.json` would put that host file into the build context and,
    COPY'd, into the image: an input error naming the link. A link to a file of the folder itself is fine."""
    secret = tmp_path / "home" / ".docker" / "config.json"
    secret.parent.mkdir(parents=True)
    secret.write_text('{"auths": {"registry.corp.example": {"auth": "Y2ktYm90OnMzY3JldA=="}}}')
    template = team_layer(tmp_path, "FROM {{ parent_image }}\nCOPY notes.txt /opt/team/notes.txt\n")
    (template.parent / "notes.txt").symlink_to(secret)
    with pytest.raises(InputError, match=r"layer 'team': notes.txt is a symbolic link to .*/home/.docker/config.json, "
                       "outside the layer folder") as err:
        plan_with_team_layer(write_matrix, table, header)
    assert err.value.where is not None and err.value.where.file.endswith("team/notes.txt")
    (template.parent / "notes.txt").unlink()
    (template.parent / "real.txt").write_text("team notes\n")
    (template.parent / "notes.txt").symlink_to("real.txt")
    plan = plan_with_team_layer(write_matrix, table, header)
    assert any(n.layer.name == "team" for n in plan.nodes)


def test_every_pip_install_above_an_override_allows_torchs_own_pin_and_nothing_else(
        write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    """An entry that overrides NCCL breaks torch's own pin of it on purpose: the `pip check` of torch's install
    and of every install above it (the business layer's here; the devel toolkit's, a team layer's) lets exactly
    that requirement through. Before, only torch's install did, and the first pip layer above it failed to build
    (seen in tests/integration/test_cuda_image.py: the devel flavor of the override entry). Without an override,
    plain `pip check`."""
    from imagebuilder.input import lookups

    def index(index_url: str, project: str) -> list[str] | None:
        return {"nvidia-nccl-cu12": ["2.21.5", "2.23.4"]}.get(project)

    body = header + "matrix: {torch: [2.6.0], accelerator: [cu124], python: ['3.11']}\n"
    for extra, allowed in (("include: [{accelerator: cu124, nccl: 2.23.4}]\n", "nvidia-nccl-cu12"), ("", None)):
        path = write_matrix(body + extra)
        first = matrix_mod.load(path, table, env={})
        facts = lookups.answer(first.questions, base_python=lambda image: None, index_versions=index)
        plan = plan_mod.make(matrix_mod.load(path, table, env={}, facts=facts), Renderer())
        for layer in ("base", "business"):
            text = next(n for n in plan.nodes if n.layer.name == layer).rendered.dockerfile
            if allowed:
                assert f"torch [^ ]+ has requirement ({allowed})==" in text and "&& pip check \\" not in text, layer
            else:
                assert "&& pip check \\" in text and "has requirement" not in text, layer
