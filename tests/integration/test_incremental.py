"""Content-addressed rebuilds on the real engine and registry: a no-op run builds nothing, a changed
task template rebuilds only the task node, and a key tag in the registry counts as cached even when
the local image is gone."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.registry import Registry

from .conftest import SESSION, Chain, CliRun, cpu_matrix, public_key, registry_tags, report

ROOT = Path(__file__).resolve().parents[2]
ENTRY = "2.13.0-cpu-py3.11-runtime"


def statuses(folder: Path) -> dict[str, tuple[str, str | None, str | None]]:
    return {n["layer"]: (n["build"], n["smoke"], n["publish"]) for n in report(folder)["nodes"]}


def planned(cli: Callable[..., CliRun], matrix: Path) -> dict[str, dict[str, str]]:
    run = cli("plan", "--matrix", str(matrix), "--json")
    assert run.code == 0, run.text
    return {n["layer"]: n for n in json.loads(run.out)}


def test_noop_template_change_and_registry_only_cache(
        engine: DockerEngine, registry: str, cpu_chain: Chain, tmp_path: Path, cli: Callable[..., CliRun]) -> None:
    """On the session's chain (its own layer folder and repository): its first build, a no-op, the registry
    as the only cache, and a template change. The chain's template is put back at the end."""
    matrix, repository = cpu_chain.matrix, cpu_chain.repository
    template = cpu_chain.folder / "layers" / "task" / "Dockerfile.j2"
    original = template.read_text()
    try:
        check_rebuilds(engine, registry, cpu_chain, matrix, repository, template, tmp_path, cli)
    finally:
        template.write_text(original)


def check_rebuilds(engine: DockerEngine, registry: str, cpu_chain: Chain, matrix: Path, repository: str, template: Path,
                   tmp_path: Path, cli: Callable[..., CliRun]) -> None:
    # 1. First build (the chain's): everything builds, is smoke-tested and pushed, with a key tag per node.
    assert cpu_chain.planned == dict.fromkeys(("base", "business", "task"), "build")
    assert statuses(cpu_chain.folder / "report") == {"base": ("built", None, "pushed"),
                                                     "business": ("built", None, "pushed"),
                                                     "task": ("built", "passed", "pushed")}
    nodes = cpu_chain.nodes
    assert len({n["key"] for n in nodes.values()}) == 3
    for layer, n in nodes.items():
        assert engine.inspect(cpu_chain.image(engine, layer))["Config"]["Labels"]["io.imagebuilder.key"] == n["key"]

    # 2. Nothing changed: nothing builds, the smoke result is reused, every tag is already current.
    plan = planned(cli, matrix)
    assert {layer: n["status"] for layer, n in plan.items()} == dict.fromkeys(("base", "business", "task"), "cached")
    assert {layer: n["key"] for layer, n in plan.items()} == {layer: n["key"] for layer, n in nodes.items()}
    again = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r2"))
    assert again.code == 0, again.text[-3000:]
    assert statuses(tmp_path / "r2") == {"base": ("cached", None, "current"),
                                         "business": ("cached", None, "current"),
                                         "task": ("cached", "cached", "current")}
    assert "0 built, 3 cached" in again.out

    # 3. The local images are removed; the key tags in the registry still make every node cached, and
    # nothing is pulled when no child has to build on it.
    for n in reversed(nodes.values()):  # children first: an image with children cannot go
        engine.remove_image(n["image"])  # forced: every tag, the key tag included
    assert all(engine.image_id(n["image"]) is None for n in nodes.values())
    plan = planned(cli, matrix)
    for layer, n in plan.items():
        assert n["status"] == "cached", n
        assert n["reason"] == f"key tag {registry}/itest/{repository}:cache-{nodes[layer]['key'][:12]} is in the " \
            "registry"
    # A fresh cache folder (another machine): the leaf's pass is found in the registry from its image's
    # digest, and named in the report; no image is pulled and no smoke container starts.
    since = int(time.time()) - 1
    trusted = public_key(tmp_path / "session.pub")  # the other machine trusts the key that signed the pass
    remote = cli("--cache-dir", str(tmp_path / "other-machine"), "--trust-key", str(trusted), "build", "--matrix",
                 str(matrix), "--report", str(tmp_path / "r3"))
    assert remote.code == 0, remote.text[-3000:]
    assert [s[:2] for s in statuses(tmp_path / "r3").values()] == [("cached", None), ("cached", None),
                                                                    ("cached", "cached")]
    leaf = {n["layer"]: n for n in report(tmp_path / "r3")["nodes"]}["task"]
    assert leaf["pass_record"] == (f"registry {registry}/itest/{repository}:sha256-{nodes['task']['digest'][7:]}"
                                   f".pass-{leaf['pass_record'][-16:]}"), leaf["pass_record"]
    assert f"({leaf['pass_record']})" in remote.out and leaf["smoke_report"]["passed"] is True
    assert all(engine.image_id(n["image"]) is None for n in nodes.values())  # not pulled
    created = engine.api.events(since=since, until=int(time.time()) + 1, decode=True,
                                filters={"type": "container", "event": "create", "label": SESSION})
    assert list(created) == []  # no container of this session's: no smoke suite ran

    # 4. Only the task template changes: only the task node builds (on business, pulled by its key
    # tag), and the plan says why.
    template.write_text(template.read_text() + f"RUN echo {repository} > /etc/imagebuilder-itest\n")
    plan = planned(cli, matrix)
    assert {layer: n["status"] for layer, n in plan.items()} == {"base": "cached", "business": "cached",
                                                                  "task": "build"}
    assert re.fullmatch(rf"template {re.escape(str(template))} changed \(since (image [0-9a-f]{{12}} on this "
                        rf"engine|{re.escape(registry)}/\S+)\)", plan["task"]["reason"]), plan["task"]["reason"]
    # (no suite: the rebuild is what is tested here, and the suite ran on the chain's leaf, ~1 min of CPU again; so
    # the new task image is staged under its key tag, and the chain's public tags, which later tests promote from,
    # keep naming the tested one)
    changed = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r4"), "--no-smoke")
    assert changed.code == 0, changed.text[-3000:]
    got = statuses(tmp_path / "r4")
    assert {layer: s[:2] for layer, s in got.items()} == {"base": ("cached", None), "business": ("cached", None),
                                                          "task": ("built", "skipped")}
    assert got["task"][2] == "staged", got
    task = {n["layer"]: n for n in report(tmp_path / "r4")["nodes"]}["task"]
    assert task["key"] != nodes["task"]["key"]
    assert engine.image_id(nodes["business"]["image"]) is not None  # pulled to build on
    labels = engine.inspect(task["image"])["Config"]["Labels"]
    assert labels["org.opencontainers.image.base.digest"] == nodes["business"]["image"]
    assert f"cache-{task['key'][:12]}" in registry_tags(registry, f"itest/{repository}", cache=True)


def test_resmoke_and_no_cache(engine: DockerEngine, cpu_chain: Chain, tmp_path: Path, cli: Callable[...,
                                                                                                    CliRun]) -> None:
    # The chain's leaf passed its suite when the chain was built; --resmoke runs it again all the same.
    run = cli("build", "--matrix", str(cpu_chain.matrix), "--report", str(tmp_path / "r2"), "--no-push", "--resmoke")
    assert run.code == 0, run.text[-3000:]
    assert statuses(tmp_path / "r2") == {"base": ("cached", None, "tagged"), "business": ("cached", None, "tagged"),
                                         "task": ("cached", "passed", "tagged")}  # tested again
    plan = cli("plan", "--matrix", str(cpu_chain.matrix), "--json", "--no-cache")
    assert [n["status"] for n in json.loads(plan.out)] == ["build"] * 3


def test_an_immutable_tag_is_never_overwritten_and_the_entry_stays_untagged(
        engine: DockerEngine, registry: str, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    layers = tmp_path / "layers"
    shutil.copytree(ROOT / "layers" / "task", layers / "task")
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, task]",
                        extra='layers_path: [layers]\ntags: ["fixed-{entry}-{layer}"]\nsmoke: {timeout: 600}\n')
    first = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r1"), "--no-smoke", "--allow-untested")
    assert first.code == 0, first.text[-3000:]
    before = {n["layer"]: n["digest"] for n in report(tmp_path / "r1")["nodes"]}
    reg = Registry.for_host(registry)
    repo = f"itest/{repository}"

    template = layers / "task" / "Dockerfile.j2"
    template.write_text(template.read_text() + "RUN echo other > /etc/imagebuilder-itest\n")
    second = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r2"), "--no-smoke", "--allow-untested")
    assert second.code == 1
    nodes = {n["layer"]: n for n in report(tmp_path / "r2")["nodes"]}
    assert nodes["task"]["publish"] == "failed"
    assert f"immutable tag {registry}/{repo}:fixed-{ENTRY}-task already names {before['task']}" in \
        nodes["task"]["error"]
    assert nodes["base"]["publish"] == "held"
    assert "no tag of this entry was applied" in second.out
    # The registry still names the first build under the fixed tag and under the alias.
    assert reg.manifest_digest(repo, f"fixed-{ENTRY}-task") == before["task"]
    assert reg.manifest_digest(repo, f"{ENTRY}-task") == before["task"]
    assert nodes["task"]["aliases_held"] == [f"{registry}/{repo}:{ENTRY}-task"]
