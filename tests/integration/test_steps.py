"""stage, verify and publish on the real engine and registry, as three machines (issue 17): the registry is the
only hand-off. Two entries (one base image under two names); the second adds a leaf whose layer check fails.
Between the machines the local images and the cache folder are gone."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from imagebuilder.evidence import passes
from imagebuilder.evidence.passes import RegistryPasses
from imagebuilder.evidence.signing import Keys
from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.registry import Registry

from .conftest import SESSION, CliRun, cpu_matrix, job_key, public_key, registry_tags, report, salted_layers

COPY = "itest/debian-copy:bookworm"


def write_matrix(tmp_path: Path, repository: str, wheelhouse: Path) -> Path:
    layers = salted_layers(tmp_path / "layers", ["base"], f"itest steps {repository}")
    (layers / "leaf").mkdir()
    (layers / "leaf" / "Dockerfile.j2").write_text("FROM {{ parent_image }}\nRUN echo leaf > /opt/leaf\n")
    (layers / "failing").mkdir()
    # (with torch.compile switched off, so its suite fails in seconds, not after a ~50 s compiled FSDP step: what
    # fails here is the flow's subject, not how)
    (layers / "failing" / "Dockerfile.j2").write_text("FROM {{ parent_image }}\nENV TORCHDYNAMO_DISABLE=1\n")
    (layers / "failing" / "layer.yaml").write_text("smoke:\n  - sh -c 'echo this check fails on purpose; exit 3'\n")
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, leaf]", extra=f"""
layers_path: [layers]
aliases: ["latest-{{layer}}"]
include:
  - {{base_image: "{COPY}", layers: [base, leaf, failing]}}
""")
    axis = f'  python: ["3.11"]\n  base_image: [debian:bookworm, "{COPY}"]\n'
    text = matrix.read_text().replace('  python: ["3.11"]\n', axis)
    matrix.write_text(text)
    return matrix


def forget(engine: DockerEngine, tmp_path: Path, folder: str) -> None:
    """Another machine: the images a step's report names are removed from this engine."""
    for node in json.loads((tmp_path / folder / "report.json").read_text())["nodes"]:
        if node["image"]:
            engine.remove_image(node["image"])


def test_stage_verify_publish_as_three_machines(engine: DockerEngine, registry: str, wheelhouse: Path, base_image: str,
                                               repository: str, tmp_path: Path,
                                               cli: Callable[..., CliRun]) -> None:
    engine.tag(engine.image_id(base_image) or base_image, COPY)
    matrix = write_matrix(tmp_path, repository, wheelhouse)
    repo = f"itest/{repository}"
    reg = Registry.for_host(registry)

    # Machine 1 (CPU): stage. Every node is pushed under its key tag, the shared ones once; no public tag.
    staged = cli("--cache-dir", str(tmp_path / "m1"), "stage", "--matrix", str(matrix), "--report",
                 str(tmp_path / "stage"))
    assert staged.code == 0, staged.text[-3000:]
    nodes = report(tmp_path / "stage")["nodes"]
    assert {n["publish"] for n in nodes} == {"staged"} and all(n["digest"] for n in nodes)
    assert registry_tags(registry, repo) == []
    # The two entries' base nodes are one image (one base image under two names, a base layer that reads nothing
    # of the entry's identity), and so are their `leaf` nodes (a leaf in one entry, below `failing` in the other):
    # each staged once, under one key tag. Only `failing` is one entry's own.
    assert len(nodes) == 5 and len({n["key"] for n in nodes}) == 3
    for layer in ("base", "leaf"):
        one, other = (n for n in nodes if n["layer"] == layer)
        assert one["key"] == other["key"] and one["digest"] == other["digest"], layer
    assert all(n["smoke"] in (None, "skipped") for n in nodes)

    # Publishing what has no pass record: nothing moves, exit 1, and what lacks a pass is listed.
    early = cli("--cache-dir", str(tmp_path / "m1"), "publish", "--matrix", str(matrix), "--report",
                str(tmp_path / "early"))
    assert early.code == 1 and "2 entries have no pass record" in early.err, early.text[-2000:]
    assert registry_tags(registry, repo) == []

    # Machine 2 (GPU runner): verify. It pulls the leaves by digest, tests them, writes their records.
    forget(engine, tmp_path, "stage")
    builder = public_key(tmp_path / "builder.pub", tmp_path / "m1")  # the stager's build key: every later machine
    built = ("--trust-build-key", str(builder))  # names it, or nothing it staged is tested or published
    verified = cli("--cache-dir", str(tmp_path / "m2"), *built, "verify", "--matrix", str(matrix), "--report",
                   str(tmp_path / "verify"))
    assert verified.code == 1, verified.text[-3000:]  # the failing layer's check
    vnodes = {n["node"]: n for n in report(tmp_path / "verify")["nodes"]}
    assert sum(n["build"] == "built" for n in vnodes.values()) == 0  # verify builds nothing
    good = next(n for node_id, n in vnodes.items() if node_id.endswith("bookworm/leaf") and "copy" not in node_id)
    bad = next(n for node_id, n in vnodes.items() if node_id.endswith("/failing"))
    assert good["smoke"] == "passed" and good["pass_record"].endswith("(written by this run)"), good["error"]
    assert bad["smoke"] == "failed" and "layer.failing.0" in bad["error"]
    assert f"pulling {registry}/{repo}@sha256:" in verified.out  # by digest
    # The machines after it trust the verifier's public key (in CI: committed; its private key on GPU runners).
    verifier = public_key(tmp_path / "verifier.pub", tmp_path / "m2")
    # a second verify skips what already passed here, and says so; no smoke container starts for it
    again = cli("--cache-dir", str(tmp_path / "m2b"), "--trust-key", str(verifier), *built, "verify", "--matrix",
                str(matrix),
                "--only", f"{good['entry']}/*", "--report", str(tmp_path / "verify2"))
    assert again.code == 0 and "passed on" in again.out, again.text[-2000:]
    assert engine.managed_containers(SESSION) == []

    # Machine 3: publish, the whole matrix. The passing entry's tags name exactly its verified digests; the
    # failing entry gets none; latest-leaf covers both entries' leaf nodes and does not move.
    forget(engine, tmp_path, "verify")
    published = cli("--cache-dir", str(tmp_path / "m3"), "--trust-key", str(verifier), *built, "publish", "--matrix",
                    str(matrix), "--report", str(tmp_path / "publish"), env=job_key(tmp_path))
    assert published.code == 1, published.text[-3000:]
    pnodes = {n["node"]: n for n in report(tmp_path / "publish")["nodes"]}
    tags = registry_tags(registry, repo)
    assert tags and not any(t.startswith("latest-leaf") or "failing" in t for t in tags), tags
    trust = Keys.load(tmp_path / "m2" / "keys", {}).trust
    store, every = RegistryPasses(reg, trust), registry_tags(registry, repo, cache=True)
    for tag in tags:  # every public tag names a digest with a pass record of this suite, signed by the verifier
        digest = reg.manifest_digest(repo, tag)
        assert digest is not None, tag
        records = [store.read(repo, t).record for t in passes.tags_for(digest, every)]
        assert any(r is not None and r.passed and r.manifest == digest for r in records), tag
    assert all(n["publish"] in ("pushed", "current") for n in pnodes.values() if n["entry"] == good["entry"])
    assert all(n["publish"] not in ("pushed", "current") for n in pnodes.values() if n["entry"] == bad["entry"])
    assert any(n["digest"] == good["digest"] for n in pnodes.values() if n["node"] == good["node"])
    assert "latest-base" not in tags  # latest-base covers the failing entry's base node too

    # Idempotent: a second publish changes nothing and says so.
    second = cli("--cache-dir", str(tmp_path / "m4"), "--trust-key", str(verifier), *built, "publish", "--matrix",
                 str(matrix), "--only", f"{good['entry']}/*", "--report", str(tmp_path / "publish2"),
                 env=job_key(tmp_path))
    assert second.code == 0 and "nothing changed" in second.out, second.text[-2000:]
    assert registry_tags(registry, repo) == tags


def test_verify_of_an_unstaged_leaf_names_its_key_tag(engine: DockerEngine, registry: str, wheelhouse: Path,
                                                    base_image: str, repository: str, tmp_path: Path,
                                                    cli: Callable[..., CliRun]) -> None:
    salted_layers(tmp_path / "layers", ["base"], f"itest unstaged {repository}")
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base]", extra="layers_path: [layers]\n")
    run = cli("verify", "--matrix", str(matrix), "--report", str(tmp_path / "r"))
    assert run.code == 2 and "Traceback" not in run.text, run.text[-2000:]
    assert f"not staged: 1 node(s) of the plan have no key tag in the registry (first: {registry}/itest/" \
           f"{repository}:cache-" in run.err
    assert not (tmp_path / "r").exists()
