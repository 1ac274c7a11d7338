"""`promote` on the real registry: tags move by digest, nothing is built or pulled, and only digests with
a pass record of the current suite move (their records go along)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from imagebuilder.evidence import passes
from imagebuilder.evidence.passes import RegistryPasses
from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.registry import Registry

from .conftest import Chain, CliRun, cpu_matrix, registry_tags, report, session_trust


def test_promote_moves_tested_tags_by_digest_without_a_build(
        registry: str, cpu_chain: Chain, cli: Callable[..., CliRun]) -> None:
    # The session chain's aliases: its run tested and recorded every node.
    repo = f"itest/{cpu_chain.repository}"
    digests = {layer: n["digest"] for layer, n in cpu_chain.nodes.items()}
    source = f"{registry}/{repo}:2.13.0-cpu-py3.11-runtime-b*"  # base and business: aliases and {key12} tags

    dry = cli("promote", "--matrix", str(cpu_chain.matrix), "--from", source, "--to", "stable-{tag}", "--dry-run")
    assert dry.code == 0, dry.text
    assert f"would promote {registry}/{repo}:2.13.0-cpu-py3.11-runtime-base -> " \
        f"{registry}/{repo}:stable-2.13.0-cpu-py3.11-runtime-base @{digests['base']} (new) passed " in dry.out
    assert "4 tags, 4 would change" in dry.out
    assert not any(t.startswith("stable-") for t in registry_tags(registry, repo))  # nothing moved

    real = cli("promote", "--matrix", str(cpu_chain.matrix), "--from", source, "--to", "stable-{tag}")
    assert real.code == 0, real.text
    reg = Registry.for_host(registry)
    for layer in ("base", "business"):
        tag = f"stable-2.13.0-cpu-py3.11-runtime-{layer}"
        assert reg.manifest_digest(repo, tag) == digests[layer]
        assert reg.manifest_digest(repo, f"{tag}-{cpu_chain.nodes[layer]['key'][:12]}") == digests[layer]
    again = cli("promote", "--matrix", str(cpu_chain.matrix), "--from", source, "--to", "stable-{tag}")
    assert "4 tags, 0 changed" in again.out and "(unchanged)" in again.out

    # Into another repository of the same registry: the blobs are mounted, the digest is the same, and the
    # pass record comes along, so the target can tell what passed too.
    other = cli("promote", "--matrix", str(cpu_chain.matrix),
                "--from", f"{registry}/{repo}:*-business", "--to", f"{registry}/{repo}-stable:{{tag}}")
    assert other.code == 0, other.text
    assert reg.manifest_digest(f"{repo}-stable", "2.13.0-cpu-py3.11-runtime-business") == digests["business"]
    records = passes.tags_for(digests["business"], registry_tags(registry, f"{repo}-stable", cache=True))
    assert len(records) == 1 and RegistryPasses(reg, session_trust()).read(f"{repo}-stable", records[0]).record

    # Bad input: exit 2, one line, nothing moved.
    bad = cli("promote", "--matrix", str(cpu_chain.matrix), "--from", source, "--to", "stable-{tga}")
    assert bad.code == 2 and "unknown field {tga}" in bad.err and "did you mean 'tag'" in bad.err.lower()
    none = cli("promote", "--matrix", str(cpu_chain.matrix), "--from", f"{registry}/{repo}:release-*", "--to",
               "x-{match}")
    assert none.code == 2 and "matches no tag" in none.err
    key_tag = cli("promote", "--matrix", str(cpu_chain.matrix), "--from", source, "--to", "cache-{match}")
    assert key_tag.code == 2 and "a key tag, which only imagebuilder's own steps write" in key_tag.err, key_tag.text
    assert not any(t.startswith("cache-2.13.0") for t in registry_tags(registry, repo, cache=True))


def test_promote_refuses_a_pass_of_another_spec(registry: str, cpu_chain: Chain, tmp_path: Path,
                                               cli: Callable[..., CliRun]) -> None:
    """The chain passed with the matrix's floors; a matrix that now asks more of its images (a higher throughput
    floor) does not promote what passed the old one."""
    stricter = tmp_path / "matrix.yaml"
    text = cpu_chain.matrix.read_text().replace("torch_extras: []", "torch_extras: []\nsmoke: {throughput_floor: 0.7}")
    stricter.write_text(text.replace("layers_path: [layers]", f"layers_path: [{cpu_chain.folder / 'layers'}]"))
    repo = f"itest/{cpu_chain.repository}"
    run = cli("promote", "--matrix", str(stricter), "--from", f"{registry}/{repo}:2.13.0-cpu-py3.11-runtime-task",
              "--to", "strict-{tag}")
    assert run.code == 1, run.text
    assert "is of another spec than the current matrix expects of 2.13.0-cpu-py3.11-runtime/task" in run.out
    assert not any(t.startswith("strict-") for t in registry_tags(registry, repo))


def test_promote_refuses_untested_digests_unless_told_and_then_records_it(
        engine: DockerEngine, registry: str, wheelhouse: Path, cpu_chain: Chain, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    # The chain's base and business layers (on the engine: nothing builds), published without a suite by
    # an explicit --allow-untested under nightly aliases.
    for layer in ("base", "business"):
        cpu_chain.image(engine, layer)
    layers = cpu_chain.folder / "layers"
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, business]",
                        extra=f'layers_path: [{layers}]\naliases: ["nightly-{{entry}}-{{layer}}"]\n')
    built = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-smoke", "--allow-untested")
    assert built.code == 0, built.text[-3000:]
    data = report(tmp_path / "r")
    assert data["allow_untested"] is True and data["smoke"] is False
    nodes = {n["layer"]: n for n in data["nodes"]}
    assert all(n["untested"] and n["pass_record"].startswith("UNTESTED") for n in nodes.values()), nodes
    assert "publishing UNTESTED images (--allow-untested)" in built.out
    repo = f"itest/{repository}"
    source = f"{registry}/{repo}:nightly-*"

    refused = cli("promote", "--matrix", str(matrix), "--from", source, "--to", "stable-{match}")
    assert refused.code == 1, refused.text
    assert "refused: no pass record" not in refused.out  # an untested record is there, and it says so
    assert "refused: it was only ever published untested (--allow-untested)" in refused.out
    assert "2 of 2 source tags have no pass record of the current suite" in refused.err
    assert "Traceback" not in refused.text
    assert not any(t.startswith("stable-") for t in registry_tags(registry, repo))  # nothing moved

    forced = cli("promote", "--matrix", str(matrix), "--from", source, "--to", "stable-{match}", "--allow-untested")
    assert forced.code == 0, forced.text
    assert "UNTESTED, moved anyway" in forced.out and "2 UNTESTED (--allow-untested)" in forced.out
    reg = Registry.for_host(registry)
    store = RegistryPasses(reg, session_trust())
    every = registry_tags(registry, repo, cache=True)
    for layer in ("base", "business"):
        digest = nodes[layer]["digest"]
        assert reg.manifest_digest(repo, f"stable-2.13.0-cpu-py3.11-runtime-{layer}") == digest
        kinds = sorted((r.record.verdict, r.record.allowed_by) for r in store.all_for(repo, digest, every) if r.record)
        assert ("untested", "--allow-untested (promote)") in kinds and all(v == "untested" for v, _ in kinds)
