"""`promote` on the real registry: tags move by digest, nothing is built or pulled."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from imagebuilder.engine import Engine
from imagebuilder.registry import Registry

from .conftest import Chain, CliRun, cpu_matrix, registry_tags, report


def test_promote_moves_tags_by_digest_without_a_build(
        engine: Engine, registry: str, wheelhouse: Path, cpu_chain: Chain, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    # The session chain's base and business layers (cached: nothing builds; the registry mounts their blobs
    # into this test's repository), published under nightly aliases.
    layers = cpu_chain.folder / "layers"
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, business]",
                        extra=f'layers_path: [{layers}]\naliases: ["nightly-{{entry}}-{{layer}}"]\n')
    built = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-smoke")
    assert built.code == 0, built.text[-3000:]
    digests = {n["layer"]: n["digest"] for n in report(tmp_path / "r")["nodes"]}
    repo = f"itest/{repository}"
    source = f"{registry}/{repo}:nightly-*"

    dry = cli("promote", "--from", source, "--to", "stable-{match}", "--dry-run")
    assert dry.code == 0, dry.text
    assert f"would promote {registry}/{repo}:nightly-2.13.0-cpu-py3.11-runtime-base -> " \
        f"{registry}/{repo}:stable-2.13.0-cpu-py3.11-runtime-base @{digests['base']} (new)" in dry.out
    assert "2 tags, 2 would change" in dry.out
    assert not any(t.startswith("stable-") for t in registry_tags(registry, repo))  # nothing moved

    real = cli("promote", "--from", source, "--to", "stable-{match}")
    assert real.code == 0, real.text
    reg = Registry.for_host(registry)
    for layer in ("base", "business"):
        assert reg.manifest_digest(repo, f"stable-2.13.0-cpu-py3.11-runtime-{layer}") == digests[layer]
    again = cli("promote", "--from", source, "--to", "stable-{match}")
    assert "2 tags, 0 changed" in again.out and "(unchanged)" in again.out

    # Into another repository of the same registry: the blobs are mounted, the digest is the same.
    other = cli("promote", "--from", f"{registry}/{repo}:nightly-*-base", "--to", f"{registry}/{repo}-stable:{{tag}}")
    assert other.code == 0, other.text
    assert reg.manifest_digest(f"{repo}-stable", "nightly-2.13.0-cpu-py3.11-runtime-base") == digests["base"]

    # Bad input: exit 2, one line, nothing moved.
    bad = cli("promote", "--from", source, "--to", "stable-{tga}")
    assert bad.code == 2 and "unknown field {tga}" in bad.err and "did you mean 'tag'" in bad.err.lower()
    none = cli("promote", "--from", f"{registry}/{repo}:release-*", "--to", "x-{match}")
    assert none.code == 2 and "matches no tag" in none.err
