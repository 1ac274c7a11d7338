"""Render once: the builder builds the very text the key covers. The only difference is the parent's image
ID written in for its reference (covered by the parent's key), plus the closing LABEL block that records
the key; a wheelhouse reaches pip as a build arg, so the port it is served on never enters the text."""

from __future__ import annotations

import io
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from rich.console import Console

from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.plan import keys
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.plan import Plan
from imagebuilder.plan.render import FIND_LINKS_ARG, Renderer, with_labels
from imagebuilder.ports.engine import Engine
from imagebuilder.report import Result, Status
from imagebuilder.steps.build import Builder, BuildOptions, _Display, labels

from ..conftest import MatrixWriter

BASE_ID = "sha256:" + "1" * 64


class RecordingEngine(Engine):
    """Just enough of an engine for one build: keeps the context and build args it was given."""

    def __init__(self) -> None:  # no connection: nothing here talks to an engine
        self.contexts: list[tuple[bytes, dict[str, str]]] = []

    def clone(self) -> RecordingEngine:
        return self

    def image_id(self, ref: str) -> str | None:
        return BASE_ID

    def build(self, context: bytes, *, network: str, sink: Any, nocache: bool = False,
              buildargs: dict[str, str] | None = None) -> str:
        self.contexts.append((context, dict(buildargs or {})))
        return "sha256:" + "2" * 64

    def inspect(self, image: str) -> dict[str, Any]:
        return {"Config": {"Env": [], "Labels": {}}}

    def history(self, image: str) -> list[dict[str, Any]]:
        return []

    def layer_files(self, image: str, top: int) -> Iterator[tuple[str, int, BinaryIO]]:
        return iter(())


def wheelhouse_plan(write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> Plan:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    path = write_matrix(header + f"build: {{wheelhouse: {wheels}}}\n"
                        "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n")
    return keys.assign(plan_mod.make(matrix_mod.load(path, table, env={}), Renderer()), {"debian:bookworm": BASE_ID})


def dockerfile_of(context: bytes) -> str:
    with tarfile.open(fileobj=io.BytesIO(context)) as tar:
        member = tar.extractfile("Dockerfile")
        assert member is not None
        return member.read().decode()


def test_the_builder_builds_the_keyed_text_with_only_the_parent_id_written_in(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    plan = wheelhouse_plan(write_matrix, header, table, tmp_path)
    root = plan.nodes[0]
    engine = RecordingEngine()
    builder = Builder(engine, plan, BuildOptions(report_dir=tmp_path / "r"), Console(file=io.StringIO()))
    assert root.entry.build.wheelhouse is not None
    builder.wheelhouse_urls = {root.entry.build.wheelhouse: "http://127.0.0.1:45678/"}
    builder._display = _Display(builder.console, 1, "none")
    builder._pull_locks = {root.id: threading.Lock()}
    result = Result(root.id, root.entry.id, root.name, root.leaf)
    assert builder._build(root, result) and result.build == Status.BUILT

    (context, buildargs) = engine.contexts[0]
    built = dockerfile_of(context)
    assert built == with_labels(root.rendered.for_parent(BASE_ID), labels(root, BASE_ID)).dockerfile
    body, _, block = built.rpartition("\nLABEL ")
    assert body + "\n" == root.rendered.dockerfile.replace("debian:bookworm", BASE_ID)  # the keyed text
    assert f"io.imagebuilder.key=\"{root.key}\"" in block
    # The wheelhouse: named only as a build arg, whatever port it is served on.
    assert buildargs == {FIND_LINKS_ARG: "http://127.0.0.1:45678/"}
    assert "45678" not in built and f"ARG {FIND_LINKS_ARG}\n" in built and '"${IMAGEBUILDER_FIND_LINKS}"' in built


def test_a_wheelhouse_port_never_changes_the_text_or_the_key(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    plan = wheelhouse_plan(write_matrix, header, table, tmp_path)
    for node in plan.nodes:
        assert "127.0.0.1:2" not in node.rendered.dockerfile and "127.0.0.1:3" not in node.rendered.dockerfile
        assert keys.node_key(node, "p" * 64)[0] == keys.node_key(node, "p" * 64)[0]
    child = plan.nodes[1]
    built = child.rendered.for_parent("sha256:" + "3" * 64)
    assert built.dockerfile.replace("sha256:" + "3" * 64, child.rendered.parent_image) == child.rendered.dockerfile
