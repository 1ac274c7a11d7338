"""Render once: the stage step builds the very text the key covers. The only difference is the parent's image
ID written in for its reference (covered by the parent's key), plus one closing LABEL block that records the
key, the inputs it was made of and the parent; a wheelhouse reaches pip as a build arg, so the port it is served
on never enters the text."""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
from pathlib import Path

from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.ledger import BuildStatus
from imagebuilder.plan import keys
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.plan import Plan
from imagebuilder.plan.render import FIND_LINKS_ARG, Renderer, wheelhouse_port
from imagebuilder.run.loopback import Served
from imagebuilder.steps.stage import Stage

from ..conftest import MatrixWriter
from .fakes import FakeEngine, FakeRegistry, context

BASE = "debian:bookworm"


def wheelhouse_plan(write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path,
                    base_id: str, *, make_folder: bool = True) -> Plan:
    wheels = tmp_path / "wheels"
    if make_folder:
        wheels.mkdir()
    path = write_matrix(header + f"build: {{wheelhouse: {wheels}}}\n"
                        "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n")
    return keys.assign(plan_mod.make(matrix_mod.load(path, table, env={}), Renderer()), {BASE: base_id})


def dockerfile_of(context: bytes) -> str:
    with tarfile.open(fileobj=io.BytesIO(context)) as tar:
        member = tar.extractfile("Dockerfile")
        assert member is not None
        return member.read().decode()


def test_the_stage_builds_the_keyed_text_with_only_the_parent_id_written_in(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    engine = FakeEngine(FakeRegistry())
    base_id = engine.add({"config": {"Labels": {}}}, BASE)
    plan = wheelhouse_plan(write_matrix, header, table, tmp_path, base_id)
    root = plan.nodes[0]
    assert root.entry.build.wheelhouse is not None
    run = dataclasses.replace(context(plan, engine, tmp_path),
                              served=Served(wheelhouses={root.entry.build.wheelhouse: "http://127.0.0.1:45678/"},
                                            token="run-token", port=45678))
    assert Stage().build(run, root) and run.ledger[root.id].build == BuildStatus.BUILT

    (context_tar, buildargs) = engine.builds[0]
    built = dockerfile_of(context_tar)
    body, _, block = built.rpartition("\nLABEL ")
    assert body + "\n" == root.rendered.dockerfile.replace(BASE, base_id)  # the keyed text, the parent's ID in
    assert "LABEL " not in body.rsplit("\n", 1)[-1] and block.count("\n") == block.count("\\\n") + 1  # one step
    labels = engine.images[str(run.ledger[root.id].image)]["config"]["Labels"]
    assert labels[keys.KEY_LABEL] == root.key
    assert json.loads(labels[keys.INPUTS_LABEL]) == dict(root.inputs)
    assert labels["org.opencontainers.image.base.digest"] == base_id == run.ledger[root.id].parent_image
    assert labels["org.opencontainers.image.base.name"] == BASE
    assert set(labels) == {*keys.content_labels(root), keys.KEY_LABEL, keys.INPUTS_LABEL,
                           "org.opencontainers.image.base.digest", "org.opencontainers.image.base.name"}
    # The wheelhouse: named only as a build arg, whatever port it is served on; the run's token, which it asks for,
    # only in Docker's predefined proxy args (in no history, no cache key).
    proxy = "http://imagebuilder:run-token@127.0.0.1:45678"
    assert buildargs == {FIND_LINKS_ARG: "http://127.0.0.1:45678/", "http_proxy": proxy, "HTTP_PROXY": proxy}
    assert "45678" not in built and f"ARG {FIND_LINKS_ARG}\n" in built and '"${IMAGEBUILDER_FIND_LINKS}"' in built


def test_a_wheelhouse_port_never_changes_the_text_or_the_key(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    """Two wheelhouses with the same wheels in other folders (so served on other stable ports) give the same text
    and the same keys; another wheel gives other keys."""
    plans = []
    for name in ("one", "two"):
        folder = tmp_path / name
        (folder / "wheels").mkdir(parents=True)
        (folder / "wheels" / "filelock-3.0-py3-none-any.whl").write_bytes(b"x" * 10)
        plans.append(wheelhouse_plan(write_matrix, header, table, folder, "sha256:" + "1" * 64, make_folder=False))
    one, two = plans
    assert wheelhouse_port(tmp_path / "one" / "wheels") != wheelhouse_port(tmp_path / "two" / "wheels")
    assert [n.key for n in one.nodes] == [n.key for n in two.nodes]
    assert [n.rendered.dockerfile for n in one.nodes] == [n.rendered.dockerfile for n in two.nodes]
    assert not any(f"127.0.0.1:{p}" in n.rendered.dockerfile for n in one.nodes for p in (2, 3))  # no served port
    (tmp_path / "two" / "wheels" / "torch-2.6.0-cp311-none-any.whl").write_bytes(b"y")
    other = wheelhouse_plan(write_matrix, header, table, tmp_path / "two", "sha256:" + "1" * 64, make_folder=False)
    assert [n.key for n in other.nodes] != [n.key for n in one.nodes]
