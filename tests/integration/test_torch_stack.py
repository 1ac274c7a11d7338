"""The torch stack is checked in `stage`, on CPU, before any GPU time (issue 42): a team layer on the session's
CPU chain whose requirements pull another torch build (here a small wheel the test builds, `torch 2.12.0`,
installed over the chain's torch 2.13.0+cpu) fails in stage, naming the package, both versions and the layer;
its image is removed and nothing of it is pushed. The chain's own nodes are cached (the session built them)."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

from imagebuilder.ports.engine import DockerEngine

from .conftest import Chain, CliRun, registry_tags, report, run_cli


def fake_torch(folder: Path, version: str) -> str:
    """A tiny `torch` wheel of another version: what a team's requirements would pull."""
    name = f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    files = {"torch/__init__.py": f"__version__ = '{version}'\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: itest\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()}"
              f",{len(text)}" for path, text in files.items()] + [f"{info}/RECORD,,"]
    with zipfile.ZipFile(folder / name, "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)
        wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return name


def staged_on_the_chain(cpu_chain: Chain, layer: str, tmp_path: Path) -> CliRun:
    """`stage` of the session chain with `layer` (a folder of the chain's layers) in place of its task layer."""
    layers = cpu_chain.folder / "layers"
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(cpu_chain.matrix.read_text().replace("layers: [base, business, task]",
                                                           f"layers: [base, business, {layer}]")
                      .replace("layers_path: [layers]", f"layers_path: [{layers}]"))
    return run_cli("stage", "--matrix", str(matrix), "--report", str(tmp_path / "report"))


def test_a_team_layer_that_pulls_another_torch_fails_in_stage(cpu_chain: Chain, engine: DockerEngine,
                                                             registry: str, tmp_path: Path) -> None:
    layers = cpu_chain.folder / "layers"
    team = layers / "team-torch"
    team.mkdir(exist_ok=True)
    wheel = fake_torch(team, "2.12.0")
    (team / "Dockerfile.j2").write_text(
        f"FROM {{{{ parent_image }}}}\nCOPY {wheel} /tmp/{wheel}\n"
        f"RUN python -m pip install --no-deps --no-index --target /opt/team /tmp/{wheel}\nENV PYTHONPATH=/opt/team\n")
    (team / "layer.yaml").write_text("description: a team's layer whose requirements pull another torch build\n")
    run = staged_on_the_chain(cpu_chain, "team-torch", tmp_path)
    assert run.code == 1, run.text[-3000:]
    nodes = {n["layer"]: n for n in report(tmp_path / "report")["nodes"]}
    assert nodes["business"]["build"] == "cached" and nodes["base"]["build"] == "cached"
    leaf = nodes["team-torch"]
    assert leaf["build"] == "failed" and leaf["image"] is None
    assert "layer team-torch adds a second copy of torch: 2.12.0 in /opt/team/torch-2.12.0.dist-info and 2.13.0+cpu " \
           "in /opt/venv/" in leaf["error"], json.dumps(leaf)[:2000]
    assert "(2.13.0-cpu-py3.11-runtime/business has 2.13.0+cpu)" in leaf["error"]
    assert not any(t for t in registry_tags(registry, f"itest/{cpu_chain.repository}", cache=True)
                   if leaf["key"][:12] in t)  # nothing of it was pushed


def test_a_team_layer_that_edits_a_file_of_torch_fails_in_stage(cpu_chain: Chain, engine: DockerEngine,
                                                               registry: str, tmp_path: Path) -> None:
    """Issue 48, what is locked stays as locked: a team layer appends a line to torch/functional.py (torch's version
    and RECORD untouched; the list of distributions is the same) and fails in stage, naming the file and the
    layer; nothing of it is pushed."""
    layers = cpu_chain.folder / "layers"
    team = layers / "team-patch"
    team.mkdir(exist_ok=True)
    (team / "Dockerfile.j2").write_text(
        "FROM {{ parent_image }}\nUSER root\n"
        "RUN f=$(python -c 'import torch.functional as m; print(m.__file__)') && echo '# patched' >> \"$f\"\n")
    (team / "layer.yaml").write_text("description: a team's layer that patches a file of torch in place\n")
    run = staged_on_the_chain(cpu_chain, "team-patch", tmp_path)
    assert run.code == 1, run.text[-3000:]
    leaf = {n["layer"]: n for n in report(tmp_path / "report")["nodes"]}["team-patch"]
    assert leaf["build"] == "failed" and leaf["image"] is None
    assert "layer team-patch edits torch/functional.py of torch 2.13.0+cpu in /opt/venv/" in leaf["error"], \
        json.dumps(leaf)[:2000]
    assert "no longer matches the sha256 its RECORD gives" in leaf["error"]
    assert not any(t for t in registry_tags(registry, f"itest/{cpu_chain.repository}", cache=True)
                   if leaf["key"][:12] in t)  # nothing of it was pushed
