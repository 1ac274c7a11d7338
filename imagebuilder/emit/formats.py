"""`plan --format graph|github-actions|buildkite|argo|k8s-jobs`: the one graph (`emit.graph`) in an engine's
documents, each engine's emitter found in one table (`ENGINES`), as the text `plan` prints: JSON for the graph,
YAML documents (`---` between them) for the engines, each engine document that must be a file of its own headed
by a comment naming it. Pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from ..choices import EMIT_FORMATS
from . import argo, buildkite, github, kubejobs
from .graph import Graph
from .settings import Document, Emitter, Settings


def graph_documents(graph: Graph, settings: Settings) -> list[Document]:
    """`--format graph`: the graph itself (what `imagebuilder execute` runs), every command given the global
    options the plan was made with (`--max-entries`, `--compat`, `--offline`), as every engine's are."""
    return [(None, graph.with_options(tuple(settings.global_args)).to_json())]


@dataclass(frozen=True)
class Engine:
    """One format `plan --format` emits: its emitter, and what it needs of the plan beyond the graph."""

    emit: Emitter
    pins_staged_digests: bool = False  # its documents name each leaf's staged digest (the engine and registry asked)
    as_json: bool = False  # its one document is JSON (else YAML documents)


ENGINES: dict[str, Engine] = {  # every format `plan --format` emits: one engine each
    "graph": Engine(graph_documents, as_json=True),
    "github-actions": Engine(github.documents),
    "buildkite": Engine(buildkite.documents),
    "argo": Engine(argo.documents),
    "k8s-jobs": Engine(kubejobs.documents, pins_staged_digests=True),
}
FORMATS = EMIT_FORMATS  # ENGINES' names, declared where the help reads them (a test holds the two equal)


def documents(fmt: str, graph: Graph, settings: Settings) -> list[Document]:
    """(the file it goes in, or None; the document) for each document of the format."""
    return ENGINES[fmt].emit(graph, settings)


class _Dumper(yaml.SafeDumper):
    """YAML without anchors and aliases (a value used twice is written twice: some engines' parsers refuse them)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def text(fmt: str, docs: Sequence[tuple[str | None, Any]]) -> str:
    if ENGINES[fmt].as_json:
        return json.dumps(docs[0][1], indent=2) + "\n"
    out = []
    for name, doc in docs:
        head = f"# {name}\n" if name else ""
        out.append(head + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True))
    return "---\n".join(out)
