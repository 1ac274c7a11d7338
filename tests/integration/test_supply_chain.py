"""The supply-chain gate on the real engine and registry: each published image's SBOM is what its own files say
(dpkg's database, `pip list` of every environment), signed beside its digest and computed once for a node that
two entries share; a feed of real published advisories (jinja2's, for the older wheel a test layer installs)
blocks that image, an exception lets it through, and an expired one blocks again. Nothing blocked is tagged."""

from __future__ import annotations

import base64
import datetime
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from imagebuilder.evidence import attestation
from imagebuilder.evidence.sboms import ARTIFACT_TYPE, PREDICATE_TYPE, RegistrySboms, sbom_tag
from imagebuilder.evidence.signing import Signer
from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.registry import Registry
from imagebuilder.steps.supply import image_layers
from imagebuilder.supply import cyclonedx
from imagebuilder.supply.inventory import read_folder, read_layer

from .conftest import ROOT, Chain, CliRun, cpu_matrix, public_key, registry_tags, report, session_trust

FEED = ROOT / "tests" / "unit" / "data" / "osv"
OLDER = "3.1.4"  # fixed in 3.1.5 (GHSA-q2x7-8rv6-6q7h, GHSA-gmj6-6f8f-6699) and 3.1.6 (GHSA-cpwx-vrp4-4pq7)
JINJA2 = ("GHSA-cpwx-vrp4-4pq7", "GHSA-gmj6-6f8f-6699", "GHSA-q2x7-8rv6-6q7h")  # (GHSA-h75v-3vvj-5mfj: < 3.1.4)
UNTESTED = ("--no-smoke", "--allow-untested")
TWIN = "itest/bookworm-twin:latest"  # debian:bookworm under a second name: a second entry on the same base image
IN_FORCE = (datetime.datetime.now(datetime.timezone.utc).date() + datetime.timedelta(days=300)).isoformat()

# What the image's own tools say is installed: every Debian package dpkg calls installed, and `pip list` of every
# folder that holds a Python distribution (found by its metadata folder, wherever it is).
INSIDE = r"""
dpkg-query -W -f '${db:Status-Abbrev}\t${Package}\t${Version}\n' | awk -F'\t' '$1 ~ /^ii/ {print "deb\t" $2 "\t" $3}'
find / -xdev \( -name '*.dist-info' -o -name '*.egg-info' \) -prune -print 2>/dev/null | xargs -n1 dirname | sort -u |
while read -r dir; do
  /opt/venv/bin/python -m pip list --disable-pip-version-check --path "$dir" --format freeze |
    sed "s|==|\t|; s|$|\t$dir|; s|^|python\t|"
done
"""


def write_matrix(folder: Path, repository: str, wheelhouse: Path, allow: str = "") -> Path:
    """Two entries: the chain's on debian:bookworm, and one on the same image under a second name whose leaf
    installs the older jinja2; they share the base and business nodes. The gate blocks from `medium` up and
    requires data (`max_age` covers the fixture feed: a fixed snapshot of published records)."""
    return cpu_matrix(folder, repository, wheelhouse, layers="[base, business, task]", base_images=(
        "debian:bookworm", TWIN), extra=f"""
layers_path: [layers]
include:
  - base_image: {TWIN}
    layers: [base, business, older]
vulnerabilities:
  data: [feed]
  block: medium
  require_data: true
  max_age: 3650
  allow: [{allow}]
""")


def feed(folder: Path) -> Path:
    """The jinja2 advisories of the fixture feed (copies of published records): five, of which three affect
    3.1.4."""
    out = folder / "feed"
    out.mkdir()
    for record in FEED.rglob("*.json"):
        doc = json.loads(record.read_text(encoding="utf-8"))
        if any(a["package"]["name"].lower() == "jinja2" for a in doc.get("affected") or []):
            shutil.copy(record, out / record.name)
    assert len(list(out.iterdir())) == 5
    return out


TORCH_ADVISORY = "GHSA-itest-torch-nofix"


def torch_advisory() -> dict[str, object]:
    """A critical advisory against torch with no fix, shaped as OSV writes GHSA-887c-mr87-cxwp (CVE-2025-3730) while
    it had none: `introduced: 0`, `last_affected`, and the releases listed; written for this test (modified now)."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"schema_version": "1.6.0", "id": TORCH_ADVISORY, "modified": now, "published": now,
            "summary": "a test advisory: torch <= 2.13.0, no fix", "database_specific": {"severity": "CRITICAL"},
            "affected": [{"package": {"ecosystem": "PyPI", "name": "torch"},
                          "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"},
                                                                     {"last_affected": "2.13.0"}]}],
                          "versions": ["2.12.0", "2.13.0"]}]}


def inside(engine: DockerEngine, image: str) -> set[tuple[str, str, str, str]]:
    result = engine.run(image, ["sh", "-c", INSIDE], timeout=120, user="root")
    assert result.exit_code == 0, result.logs[-2000:]
    out = set()
    for line in result.logs.splitlines():
        fields = line.split("\t")
        if fields[0] == "deb":
            out.add(("deb", fields[1], fields[2], "/var/lib/dpkg/status"))
        elif fields[0] == "python":
            out.add(("python", fields[1].lower().replace("_", "-"), fields[2], fields[3]))
    return out


def listed(document: dict[str, object]) -> set[tuple[str, str, str, str]]:
    return {(kind, name.lower().replace("_", "-") if kind == "python" else name, version,
             path if kind == "python" else "/var/lib/dpkg/status")
            for kind, name, version, path, _ in cyclonedx.components_of(document)}


def test_sboms_and_the_vulnerability_gate(engine: DockerEngine, registry: str, wheelhouse: Path, cpu_chain: Chain,
                                         repository: str, tmp_path: Path, cli: Callable[..., CliRun]) -> None:
    for layer in ("base", "business", "task"):
        cpu_chain.image(engine, layer)  # (on the engine: the chain's images, nothing of A builds)
    engine.tag(engine.image_id("debian:bookworm") or "", TWIN)
    layers = tmp_path / "layers"
    shutil.copytree(cpu_chain.folder / "layers", layers)
    (layers / "older").mkdir()
    (layers / "older" / "Dockerfile.j2").write_text(
        "FROM {{ parent_image }}\n"
        f"RUN PIP_CERT=/etc/ssl/certs/ca-certificates.crt /opt/venv/bin/pip install --no-deps jinja2=={OLDER}\n")
    feed(tmp_path)
    matrix = write_matrix(tmp_path, repository, wheelhouse)
    repo = f"itest/{repository}"

    # 1. A build of both entries: the twin entry's leaf has the older jinja2, which the feed says is vulnerable.
    # (--no-smoke --allow-untested: the twin's leaf is published untested, so no suite runs; the gate is the same
    # for a tested image, tests/unit/test_supply.py)
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r1"), *UNTESTED)
    assert run.code == 1, run.text[-3000:]
    nodes = {n["node"]: n for n in report(tmp_path / "r1")["nodes"]}
    twin = {n["layer"]: n for n in nodes.values() if "twin" in n["entry"]}
    stock = {n["layer"]: n for n in nodes.values() if "twin" not in n["entry"]}
    assert [n["publish"] for n in stock.values()] == ["pushed"] * 3, run.text[-3000:]
    assert twin["older"]["publish"] == "failed" and twin["base"]["publish"] == "held", run.text[-3000:]
    found = {f["id"]: f for f in twin["older"]["vulnerabilities"]["findings"]}
    assert set(found) == set(JINJA2) and {f["outcome"] for f in found.values()} == {"blocks"}
    assert {f["layer"] for f in found.values()} == {"older"} and found["GHSA-q2x7-8rv6-6q7h"]["fixed"] == ["3.1.5"]
    assert "blocked by the vulnerability gate" in twin["older"]["error"] and JINJA2[0] in twin["older"]["error"]
    assert stock["task"]["vulnerabilities"]["findings"] == []  # torch's own jinja2 is newer than every fix
    published = registry_tags(registry, repo)
    assert [t for t in published if "twin" in t] == [] and all(t.split(":")[-1] in published
                                                              for n in stock.values() for t in n["tags"])
    # The shared nodes' SBOMs were made once: the second entry reused the first's.
    assert all(twin[layer]["digest"] == stock[layer]["digest"] for layer in ("base", "business"))
    for layer in ("base", "business"):
        sources = sorted([twin[layer]["sbom"]["source"], stock[layer]["sbom"]["source"]])
        assert sources == ["computed", "reused"], (layer, sources)
        assert run.out.count(f"signed beside {stock[layer]['digest'][:19]}") == 1
    # Each SBOM is what the image's own files say, components attributed to the layer that brought them.
    client = Registry.for_host(registry)
    store = RegistrySboms(client, session_trust())
    for node in (stock["task"], twin["older"]):
        signed = store.lookup(repo, node["digest"]).sbom
        assert signed is not None
        document = dict(signed.document)
        assert cyclonedx.validate(document) is None
        if node is twin["older"]:  # (the one with a wheel replaced: a whiteout over the layer below)
            assert listed(document) == inside(engine, node["image"])
        brought = {c.name.lower(): c.layer for c in cyclonedx.components_of(document)}
        assert brought["libc6"] == "base image debian:bookworm" and brought["torch"] == "base"
        assert brought["transformers"] == "business" and brought["jinja2"] == ("older" if node is twin["older"]
                                                                                else "base")
    # The older layer as this engine stores it (overlay2's folder, what the SBOM was read from) and as the registry
    # holds it (its blob, what another machine reads) say the same, its whiteout of torch's jinja2 included.
    layers, diff_ids, _ = image_layers(client, repo, twin["older"]["digest"])
    below = len(image_layers(client, repo, twin["business"]["digest"]).diff_ids)
    folders = engine.layer_folders(twin["older"]["image"])
    assert folders is not None and len(folders) == len(diff_ids) > below
    whiteouts = []
    for layer, folder in zip(layers[below:], folders[below:], strict=True):
        with client.open_blob(repo, layer["digest"]) as blob:
            from_blob = read_layer(blob)
        assert read_folder(folder) == from_blob
        whiteouts += from_blob.whiteouts
    assert any(re.search(r"/jinja2-[0-9.]+\.dist-info$", w) for w in whiteouts), whiteouts  # (torch's jinja2)
    shown = cli("sbom", f"{registry}/{repo}@{stock['task']['digest']}")
    assert shown.code == 0 and json.loads(shown.out)["metadata"]["component"]["version"] == stock["task"]["digest"]

    # 2. An exception that expired: blocked again, and it says so.
    expired = ", ".join(f"{{id: {i}, reason: 'no template from users', expires: 2025-01-31}}" for i in JINJA2)
    write_matrix(tmp_path, repository, wheelhouse, expired)
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r2"), *UNTESTED)
    assert run.code == 1 and "expired" in run.text, run.text[-3000:]
    older = next(n for n in report(tmp_path / "r2")["nodes"] if n["layer"] == "older")
    assert {(f["outcome"], f["expires"]) for f in older["vulnerabilities"]["findings"]} == {("expired", "2025-01-31")}
    assert older["sbom"]["source"] == "found" and "expired on 2025-01-31" in older["error"]  # (signed by the build)
    assert [t for t in registry_tags(registry, repo) if "twin" in t] == []

    # 3. Exceptions in force: published (untested, as asked), each finding saying which exception let it through.
    write_matrix(tmp_path, repository, wheelhouse, expired.replace("2025-01-31", IN_FORCE))
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r3"), *UNTESTED)
    assert run.code == 0, run.text[-3000:]
    older = next(n for n in report(tmp_path / "r3")["nodes"] if n["layer"] == "older")
    assert {(f["outcome"], f["expires"]) for f in older["vulnerabilities"]["findings"]} == {("allowed", IN_FORCE)}
    assert older["publish"] == "pushed" and older["untested"]
    assert all(t.split(":")[-1] in registry_tags(registry, repo) for t in older["tags"])

    # Promotion moves a public tag too: with the exceptions expired it is kept back, in force it moves.
    source = f"{registry}/{repo}:*-twin-latest-older"
    write_matrix(tmp_path, repository, wheelhouse, expired)
    kept = cli("promote", "--from", source, "--to", "stable-older", "--matrix", str(matrix))
    assert kept.code == 1 and "vulnerability gate" in kept.text and "stable-older" not in registry_tags(registry, repo)
    write_matrix(tmp_path, repository, wheelhouse, expired.replace("2025-01-31", IN_FORCE))
    moved = cli("promote", "--from", source, "--to", "stable-older", "--matrix", str(matrix), *UNTESTED[1:])
    assert moved.code == 0, moved.text[-3000:]
    assert client.manifest_digest(repo, "stable-older") == older["digest"]

    # A no-fix advisory against torch <= 2.13.0, as OSV writes one (`last_affected`, the releases listed): the
    # chain's real torch is 2.13.0+cpu (PyTorch's CPU build), and the gate keeps its image back (audit N6).
    (tmp_path / "feed" / "torch.json").write_text(json.dumps(torch_advisory()), encoding="utf-8")
    task_tag = stock["task"]["tags"][0].rsplit(":", 1)[1]
    torch = cli("promote", "--from", f"{registry}/{repo}:{task_tag}", "--to", "stable-torch", "--matrix", str(matrix))
    assert torch.code == 1 and "vulnerability gate" in torch.text and TORCH_ADVISORY in torch.text, torch.text[-3000:]
    assert "torch 2.13.0+cpu" in torch.text and "stable-torch" not in registry_tags(registry, repo)
    # The SBOM it was judged by reads back on a second machine (a fresh cache folder) that trusts only the key the
    # publishing run signed with (audit N4), and on none that trusts another key only.
    ci_key = public_key(tmp_path / "ci.pub")
    second = ("--cache-dir", str(tmp_path / "second-machine"))
    shown = cli(*second, "--trust-key", str(ci_key), "sbom", f"{registry}/{repo}@{stock['task']['digest']}")
    assert shown.code == 0 and json.loads(shown.out)["metadata"]["component"]["version"] == stock["task"]["digest"]
    stranger = tmp_path / "stranger.pub"
    stranger.write_bytes(Signer.generate("a stranger").public.pem())
    refused = cli(*second, "--trust-key", str(stranger), "sbom", f"{registry}/{repo}@{stock['task']['digest']}")
    assert refused.code == 1 and "untrusted key" in refused.err, refused.text[-2000:]

    # 4. The SBOM counts only as signed by a trusted key, about this digest: one changed after it was signed, or
    # signed by a key nobody here trusts, is refused, naming why (the rules of pass records).
    digest = stock["task"]["digest"]
    stored = attestation.read(client, repo, sbom_tag(digest), ARTIFACT_TYPE)
    assert stored is not None
    envelope = stored[1]
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["components"] = statement["predicate"]["components"][1:]  # one component hidden
    tampered = {**envelope, "payload": base64.b64encode(json.dumps(statement).encode()).decode()}
    foreign = Signer.generate("a stranger").sign(json.dumps(statement).encode())
    for forged, why in ((tampered, "does not verify"), (foreign, "untrusted key")):
        attestation.put(client, repo, sbom_tag(digest), forged, artifact_type=ARTIFACT_TYPE, subject=digest,
                        predicate_type=PREDICATE_TYPE, annotations={})
        found = store.lookup(repo, digest)
        assert found.sbom is None and found.rejected is not None and why in found.rejected, found
        shown = cli("sbom", f"{registry}/{repo}@{digest}")
        assert shown.code == 1 and why in shown.err and "Traceback" not in shown.err, shown.text[-2000:]
