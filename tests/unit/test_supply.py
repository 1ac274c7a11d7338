"""The supply-chain gate of publish on the fakes: each image's SBOM is read from the layers of the digest being
published (a parent's once, its children built on it), signed beside that digest and counted only as signed by a
trusted key about that digest; the vulnerability gate blocks an entry on a finding at or above the matrix's
severity, lets an unexpired exception through, blocks again once it expired, and tags nothing it blocks."""

from __future__ import annotations

import base64
import copy
import datetime
import hashlib
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from imagebuilder.commands.promote import Move, carry_sbom, vulnerable
from imagebuilder.declarations.vulnerabilities import Allowance, Policy
from imagebuilder.errors import InputError
from imagebuilder.evidence import attestation, passes, referrers
from imagebuilder.evidence.passes import PassRecord
from imagebuilder.evidence.sboms import ARTIFACT_TYPE, PREDICATE_TYPE, RegistrySboms, sbom_tag
from imagebuilder.evidence.signing import Signer, Trust, statement
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.ledger import BuildStatus, PublishStatus, VerifyStatus
from imagebuilder.plan import keys
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.render import Renderer
from imagebuilder.run.context import RunContext
from imagebuilder.steps.publish import Publish
from imagebuilder.steps.supply import SupplyChain
from imagebuilder.supply import cyclonedx, osv
from imagebuilder.supply.policy import installed, uncovered
from imagebuilder.supply.policy import judge as judge_

from ..conftest import HEADER, MatrixWriter
from .fakes import FakeDisplay, FakeEngine, FakeRegistry, context, layer_tar

REPO = "ml/pytorch"
FEED = Path(__file__).parent / "data" / "osv"
STATUS = """Package: libc6
Status: install ok installed
Architecture: amd64
Source: glibc
Version: 2.36-9+deb12u2

Package: zlib1g
Status: install ok installed
Architecture: amd64
Source: zlib
Version: 1:1.2.13.dfsg-1
"""
LAYERS: dict[str, dict[str, bytes]] = {  # what each node's own layer holds
    "base": {"var/lib/dpkg/status": STATUS.encode(),
             "usr/lib/os-release": b'ID=debian\nVERSION_ID="12"\n'},
    "business": {"opt/venv/lib/python3.11/site-packages/jinja2-3.1.4.dist-info/METADATA":
                 b"Metadata-Version: 2.1\nName: Jinja2\nVersion: 3.1.4\nLicense-Expression: BSD-3-Clause\n\n"},
    "task": {"opt/venv/lib/python3.11/site-packages/.wh.jinja2-3.1.4.dist-info": b"",
             "opt/venv/lib/python3.11/site-packages/jinja2-3.1.6.dist-info/METADATA":
             b"Metadata-Version: 2.1\nName: Jinja2\nVersion: 3.1.6\n\n"},
}
GLIBC = "DSA-5514-1"  # glibc, fixed in 2.36-9+deb12u3 for Debian 12: no severity stated (`unknown` rates it)
JINJA2 = ("GHSA-cpwx-vrp4-4pq7", "GHSA-gmj6-6f8f-6699", "GHSA-q2x7-8rv6-6q7h")  # jinja2 < 3.1.5 / 3.1.6, medium


@dataclass
class Machine:
    run: RunContext
    engine: FakeEngine
    registry: FakeRegistry
    display: FakeDisplay

    def publish(self, **options: Any) -> bool:
        nodes = list(self.run.plan.nodes)
        return Publish(**{"supply": SupplyChain(), **options}).entry(self.run, nodes)

    def node(self, layer: str) -> dict[str, Any]:
        record = next(r for r in self.run.ledger.records() if r.layer == layer)
        return {"publish": record.publish, "sbom": record.sbom, "vulnerabilities": record.vulnerabilities,
                "digest": record.digest, "error": record.error}

    def public_tags(self) -> dict[str, str]:
        return self.registry.public_tags(REPO)


def make(write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path, vulnerabilities: str,
         registry: FakeRegistry | None = None, base: dict[str, bytes] | None = None) -> Machine:
    """A run whose three nodes were built here, each image its parent's layers and one of its own; with `base`,
    the base image (debian:bookworm on this engine) holds one layer of these files below them all."""
    path = write_matrix(header + "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n"
                        + vulnerabilities)
    plan = keys.assign(plan_mod.make(matrix_mod.load(path, table, env={}), Renderer()),
                       {"debian:bookworm": "sha256:" + "f" * 64})
    registry = registry or FakeRegistry()
    engine, display = FakeEngine(registry), FakeDisplay()
    run = context(plan, engine, tmp_path / "machine", display=display)
    layers: list[str] = []
    below = "sha256:" + "f" * 64
    if base is not None:
        tar = layer_tar(base)
        layers = ["sha256:" + hashlib.sha256(tar).hexdigest()]
        engine.layer_tars[layers[0]] = tar
        below = engine.add({"config": {}, "layers": layers, "rootfs": {"type": "layers", "diff_ids": layers}},
                           "debian:bookworm")
    for node in plan.nodes:  # each node's image: its parent's layers and one of its own, and what it was built on
        tar = layer_tar(LAYERS[node.layer.name])
        diff_id = "sha256:" + hashlib.sha256(tar).hexdigest()
        engine.layer_tars[diff_id] = tar
        layers = [*layers, diff_id]
        parent_image = below
        image = below = engine.add({"config": {"Labels": {"node": node.id,
                                                          "org.opencontainers.image.base.digest": below}},
                                    "layers": layers, "rootfs": {"type": "layers", "diff_ids": layers}})
        run.ledger.update(node.id, build=BuildStatus.BUILT, image=image, parent_image=parent_image,
                          verify=VerifyStatus.PASSED if node.leaf else None)
        if node.leaf:
            run.ledger.update(node.id, record=PassRecord(passes.PASSED, config=image, spec=run.specs.key(node),
                                                         node=node.id, entry=node.entry.id, date="2026-11-26",
                                                         suite=passes.suite_hash()))
    return Machine(run, engine, registry, display)


def gate(allow: str = "", block: str = "medium") -> str:
    return f"vulnerabilities:\n  data: [{FEED}]\n  block: {block}\n  allow: [{allow}]\n"


IN_FORCE = (datetime.datetime.now(datetime.timezone.utc).date() + datetime.timedelta(days=300)).isoformat()


def exception(ids: tuple[str, ...], expires: str) -> str:
    return ", ".join(f"{{id: {i}, reason: 'templates are ours only', expires: {expires}}}" for i in ids)


def test_a_vulnerable_image_blocks_its_entry_and_nothing_is_tagged(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    m = make(write_matrix, header, table, tmp_path, gate())
    assert not m.publish()
    assert m.public_tags() == {}
    base, business, task = m.node("base"), m.node("business"), m.node("task")
    assert base["publish"] == PublishStatus.FAILED and business["publish"] == task["publish"] == PublishStatus.HELD
    assert "blocked by the vulnerability gate" in str(base["error"]) and GLIBC in str(base["error"])
    found = {f["id"]: f for f in business["vulnerabilities"]["findings"]}
    assert set(found) == {GLIBC, *JINJA2} and {f["outcome"] for f in found.values()} == {"blocks"}
    assert found[GLIBC]["layer"] == "base" and found[GLIBC]["level"] == "high" and not found[GLIBC]["level_known"]
    assert found["GHSA-q2x7-8rv6-6q7h"]["layer"] == "business" and found["GHSA-q2x7-8rv6-6q7h"]["fixed"] == ["3.1.5"]
    # the task layer replaced jinja2 3.1.4 by 3.1.6 (a whiteout and a new dist-info): only glibc is left on it
    assert {f["id"] for f in task["vulnerabilities"]["findings"]} == {GLIBC}
    assert any("DSA-5514-1" in line and "libc6" in line for line in m.display.said)


def test_each_sbom_is_of_its_own_layers_signed_beside_its_digest_and_a_parents_is_made_once(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    m = make(write_matrix, header, table, tmp_path, gate(exception((GLIBC, *JINJA2), IN_FORCE)))
    opened: list[str] = []
    real = m.registry.open_blob
    m.registry.open_blob = lambda repo, digest: (opened.append(digest), real(repo, digest))[1]  # type: ignore[method-assign]
    assert m.publish(), m.display.said
    assert len(opened) == len(set(opened)) == 3  # every layer read once: children start from their parent's
    store = RegistrySboms(m.registry, m.run.keys.trust)
    task = store.lookup(REPO, m.node("task")["digest"]).sbom
    assert task is not None and cyclonedx.validate(dict(task.document)) is None
    assert [(c.kind, c.name, c.version, c.path, c.layer) for c in cyclonedx.components_of(task.document)] == [
        ("deb", "libc6", "2.36-9+deb12u2", "/var/lib/dpkg/status", "base"),
        ("deb", "zlib1g", "1:1.2.13.dfsg-1", "/var/lib/dpkg/status", "base"),
        ("python", "Jinja2", "3.1.6", "/opt/venv/lib/python3.11/site-packages", "task")]
    assert m.node("task")["sbom"]["source"] == "computed" and m.node("task")["sbom"]["components"] == 3
    assert {f["outcome"] for f in m.node("business")["vulnerabilities"]["findings"]} == {"allowed"}
    # A second run finds them beside the digests (signed by a trusted key): nothing is read again.
    again = make(write_matrix, header, table, tmp_path, gate(exception((GLIBC, *JINJA2), IN_FORCE)), m.registry)
    opened.clear()
    assert again.publish(), again.display.said
    assert opened == [] and again.node("task")["sbom"]["source"] == "found"


def test_an_expired_exception_blocks_again_and_says_so(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    m = make(write_matrix, header, table, tmp_path, gate(exception((GLIBC, *JINJA2), "2026-01-31")))
    assert not m.publish() and m.public_tags() == {}
    found = m.node("business")["vulnerabilities"]["findings"]
    assert {f["outcome"] for f in found} == {"expired"} and all(f["expires"] == "2026-01-31" for f in found)
    assert "expired on 2026-01-31" in str(m.node("base")["error"])


def test_dry_run_lists_what_would_block_and_writes_nothing(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    m = make(write_matrix, header, table, tmp_path, gate())
    assert not m.publish(dry_run=True)
    assert "would be blocked by the vulnerability gate" in str(m.node("base")["error"])
    assert not [t for (_, t) in m.registry.tagged if t.endswith(".sbom")] and m.public_tags() == {}
    assert str(m.node("task")["sbom"]["where"]).startswith("would write")


def test_block_none_reports_and_publishes(write_matrix: MatrixWriter, header: str, table: CompatTable,
                                          tmp_path: Path) -> None:
    m = make(write_matrix, header, table, tmp_path, gate(block="none"))
    assert m.publish(), m.display.said
    assert {f["outcome"] for f in m.node("business")["vulnerabilities"]["findings"]} == {"below"}
    assert len(m.public_tags()) == 3 and len([t for (_, t) in m.registry.tagged if t.endswith(".sbom")]) == 3


def test_vulnerability_data_that_is_not_osv_stops_the_run_before_anything(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    bad = tmp_path / "feed.json"
    bad.write_text("not json", encoding="utf-8")
    m = make(write_matrix, header, table, tmp_path, f"vulnerabilities: {{data: [{bad}]}}\n")
    with pytest.raises(InputError, match="not JSON"):
        Publish(supply=SupplyChain()).start(m.run)


def signed(document: dict[str, Any], digest: str, signer: Signer) -> dict[str, Any]:
    return signer.sign(statement("127.0.0.1:5000/ml/pytorch", digest, PREDICATE_TYPE, document))


def test_an_sbom_counts_only_signed_by_a_trusted_key_about_its_digest() -> None:
    registry, verifier, stranger = FakeRegistry(), Signer.generate("the stager"), Signer.generate("a stranger")
    digest, _ = registry.image(REPO, "cache-a", "published")
    other, _ = registry.image(REPO, "cache-b", "another")
    store = RegistrySboms(registry, Trust((verifier.public,)), verifier)
    document = {"bomFormat": "CycloneDX", "specVersion": "1.7", "metadata": {"component": {"version": digest}},
                "components": [{"name": "jinja2", "version": "3.1.6", "purl": "pkg:pypi/jinja2@3.1.6"}]}
    tag = store.put(REPO, digest, document, node="e/task")
    assert tag == sbom_tag(digest) and store.lookup(REPO, digest).sbom is not None
    # Any DSSE implementation verifies it (securesystemslib here), as the in-toto Statement of a CycloneDX BOM.
    stored = attestation.read(registry, REPO, tag, ARTIFACT_TYPE)
    assert stored is not None and stored[0] == digest
    key = SSlibKey(verifier.public.fingerprint, "ed25519", "ed25519", {"public": verifier.public.raw})
    Envelope.from_dict(copy.deepcopy(stored[1])).verify([key], 1)  # (from_dict consumes its input)
    payload = json.loads(base64.b64decode(stored[1]["payload"]))
    assert payload["predicateType"] == "https://cyclonedx.org/bom" and payload["predicate"] == document

    def put(envelope: dict[str, Any], subject: str = digest) -> str | None:
        attestation.put(registry, REPO, tag, envelope, artifact_type=ARTIFACT_TYPE, subject=subject,
                        predicate_type=PREDICATE_TYPE, annotations={})
        found = store.lookup(REPO, digest)
        assert found.sbom is None
        return found.rejected

    tampered = copy.deepcopy(stored[1])
    changed = {**payload, "predicate": {**document, "components": []}}  # a component hidden after signing
    tampered["payload"] = base64.b64encode(json.dumps(changed).encode()).decode()
    assert "does not verify" in str(put(tampered))
    assert "untrusted key" in str(put(signed(document, digest, stranger)))
    assert "another image" in str(put(signed(document, other, verifier), other))  # another image's, copied here
    assert "describes" in str(put(signed({**document, "metadata": {"component": {"version": other}}}, digest,
                                         verifier)))


def test_promote_carries_a_trusted_sbom_into_the_target_repository() -> None:
    registry, stager = FakeRegistry(), Signer.generate("the stager")
    digest, _ = registry.image(REPO, "nightly-task", "published")
    trusted = Trust((stager.public,))
    document = {"metadata": {"component": {"version": digest}}, "components": []}
    RegistrySboms(registry, trusted, stager).put(REPO, digest, document, node="e/task")
    assert carry_sbom(registry, trusted, digest, REPO, "ml/stable")
    assert RegistrySboms(registry, trusted).lookup("ml/stable", digest).sbom is not None
    listed = referrers.listed(registry, "ml/stable", digest)  # and listed among the image's referrers there
    assert [m["digest"] for m in listed] == [registry.manifest_digest("ml/stable", sbom_tag(digest))]
    # one nobody here trusts stays behind
    other, _ = registry.image(REPO, "nightly-other", "other")
    stranger = Signer.generate("a stranger")
    attestation.put(registry, REPO, sbom_tag(other), signed({**document, "metadata": {"component": {
        "version": other}}}, other, stranger), artifact_type=ARTIFACT_TYPE, subject=other,
        predicate_type=PREDICATE_TYPE, annotations={})
    assert not carry_sbom(registry, trusted, other, REPO, "ml/stable")
    assert registry.manifest_digest("ml/stable", sbom_tag(other)) is None


def component(name: str, version: str, purl: str, **props: str) -> dict[str, Any]:
    return {"name": name, "version": version, "purl": purl,
            "properties": [{"name": f"imagebuilder:{k}", "value": v} for k, v in props.items()]}


def test_what_the_gate_looks_up_and_what_it_cannot_check() -> None:
    """Debs by source package in the image's Debian release; Python distributions from PyPI, but not one Debian
    installed (its deb is looked up: Debian backports fixes under the upstream version); an Ubuntu base's debs are
    named as not checked rather than matched against Debian's data."""
    document = {"components": [
        component("libssl3", "3.0.11-1~deb12u1", "pkg:deb/debian/libssl3@3.0.11-1~deb12u1?arch=amd64&distro=debian-12",
                  source="openssl 3.0.11-1~deb12u1", layer="base"),
        component("Jinja2", "3.1.4", "pkg:pypi/jinja2@3.1.4", path="/opt/venv/lib/python3.11/site-packages",
                  layer="task"),
        component("six", "1.16.0", "pkg:pypi/six@1.16.0", path="/usr/lib/python3/dist-packages", installer="debian"),
        component("libc6", "2.35-0ubuntu3", "pkg:deb/ubuntu/libc6@2.35-0ubuntu3?arch=amd64&distro=ubuntu-22.04")]}
    looked_up, unchecked = installed(document)
    assert [(i.query, i.package, i.layer) for i in looked_up] == [
        (osv.Query("Debian:12", "openssl", "3.0.11-1~deb12u1"), "libssl3", "base"),
        (osv.Query("PyPI", "Jinja2", "3.1.4"), "Jinja2", "task")]
    assert unchecked == ["1 deb packages of ubuntu-22.04 (no OSV data of that distribution is read)"]
    pypi_only = osv.Advisories.load(FEED / "PyPI")
    assert uncovered(looked_up, pypi_only) == ["1 Debian packages (the data has no Debian advisory)"]
    # An exception may name the binary package (what dpkg -l shows) or the source (what the advisory names).
    advisories = osv.Advisories.load(FEED)
    for named in ("libssl3", "openssl"):
        allow = Allowance("DSA-5532-1", "not reachable", datetime.date(2099, 1, 1), (named,))
        verdict = judge_(looked_up[:1], advisories, Policy(block="low", allow=(allow,)), datetime.date(2026, 11, 26))
        assert [f.outcome for f in verdict.findings] == ["allowed"], named


def test_a_blob_that_is_not_the_layer_its_config_names_makes_no_sbom(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    m = make(write_matrix, header, table, tmp_path, gate(block="none"))
    business = next(n for n in m.run.plan.nodes if n.layer.name == "business")
    diff_id = m.engine.images[str(m.run.ledger[business.id].image)]["layers"][-1]
    m.engine.layer_tars[diff_id] = layer_tar({"opt/venv/lib/python3.11/site-packages/x-1.dist-info/METADATA":
                                              b"Name: x\nVersion: 1\n\n"})  # pushed under the config's diff_id
    assert not m.publish()
    assert "its SBOM could not be made" in str(m.node("business")["error"]) and \
        "is not the layer its image's config names" in str(m.node("business")["error"])
    assert m.public_tags() == {}


def test_a_base_images_layers_are_said_to_be_the_base_images(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    """A component of the base image's own layers is attributed to it, not to the root node built on it (on a
    publish machine too, where no stage recorded the base: the engine has it, every run checks its bases)."""
    base = {"var/lib/dpkg/status": STATUS.replace("2.36-9+deb12u2", "2.36-9+deb12u3").encode(),
            "usr/lib/os-release": b'ID=debian\nVERSION_ID="12"\n'}
    m = make(write_matrix, header, table, tmp_path, gate(block="none"), base=base)
    assert m.publish(), m.display.said
    document = RegistrySboms(m.registry, m.run.keys.trust).lookup(REPO, m.node("task")["digest"]).sbom
    assert document is not None
    layers = {(c.name, c.version): c.layer for c in cyclonedx.components_of(document.document)}
    assert layers[("zlib1g", "1:1.2.13.dfsg-1")] == "base image debian:bookworm"  # (unchanged by the root's layer)
    assert layers[("libc6", "2.36-9+deb12u2")] == "base"  # the root node's own status file changed its version


def test_promote_keeps_back_a_digest_the_current_data_says_is_vulnerable() -> None:
    """Promotion moves public tags too: the digest's trusted SBOM is judged with today's data and the policy of
    its node, an exception lets it move, and one without an SBOM moves only where the policy does not require
    data."""
    registry, stager = FakeRegistry(), Signer.generate("the stager")
    trusted = Trust((stager.public,))
    digest, _ = registry.image(REPO, "nightly-task", "published")
    bare, _ = registry.image(REPO, "nightly-bare", "published before SBOMs")
    document = {"metadata": {"component": {"version": digest}}, "components": [
        component("Jinja2", "3.1.4", "pkg:pypi/jinja2@3.1.4", path="/opt/venv/lib/python3.11/site-packages",
                  layer="task")]}
    RegistrySboms(registry, trusted, stager).put(REPO, digest, document, node="e/task")
    advisories, today = osv.Advisories.load(FEED), datetime.date(2026, 11, 26)
    move = Move(f"127.0.0.1:5000/{REPO}:nightly-task", f"127.0.0.1:5000/{REPO}:stable-task", digest, None)
    why = vulnerable(registry, trusted, move, Policy(block="medium"), advisories, today)
    assert why is not None and "GHSA-cpwx-vrp4-4pq7" in why and "(and 2 more blocking findings)" in why
    allowed = tuple(Allowance(i, "templates are ours only", datetime.date(2027, 1, 31)) for i in JINJA2)
    assert vulnerable(registry, trusted, move, Policy(block="medium", allow=allowed), advisories, today) is None
    assert vulnerable(registry, trusted, move, Policy(block="critical"), advisories, today) is None
    old = Move(f"127.0.0.1:5000/{REPO}:nightly-bare", f"127.0.0.1:5000/{REPO}:stable-bare", bare, None)
    assert vulnerable(registry, trusted, old, Policy(block="medium"), advisories, today) is None
    fresh = datetime.date(2025, 11, 8)  # (within max_age of the feed's newest record, 2025-11-03)
    assert "no SBOM that counts" in str(vulnerable(registry, trusted, old, Policy(require_data=True), advisories,
                                                   fresh))
    # Data older than max_age days cannot judge under require_data (N17); without it, the gate still judges.
    aged = str(vulnerable(registry, trusted, move, Policy(block="critical", require_data=True), advisories, today))
    assert aged.startswith("it cannot be judged: the vulnerability data is 388 days old (as of 2025-11-03"), aged
    assert vulnerable(registry, trusted, move, Policy(block="critical", require_data=True, max_age=30), advisories,
                      fresh) is None


def test_an_exception_expires_within_a_year_or_the_horizon_the_matrix_sets(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    """N17: `expires: 9999-12-31` made an exception permanent; now at most 365 days from the day the matrix is read,
    and `exception_days` may lower that."""
    with pytest.raises(InputError, match=r"vulnerabilities.allow\[0\].expires: the exception for DSA-5514-1 expires "
                       r"9999-12-31, more than 365 days out \(vulnerabilities.exception_days\)"):
        make(write_matrix, header, table, tmp_path, gate(exception((GLIBC,), "9999-12-31")))
    with pytest.raises(InputError, match="more than 30 days out"):
        make(write_matrix, header, table, tmp_path, gate(exception((GLIBC,), IN_FORCE)) + "  exception_days: 30\n")
    with pytest.raises(InputError, match=r"exception_days 400 is outside \[1, 365\]"):
        make(write_matrix, header, table, tmp_path, gate() + "  exception_days: 400\n")
    m = make(write_matrix, header, table, tmp_path, gate(exception((GLIBC,), IN_FORCE)))
    assert m.run.plan.entries()[0].vulnerabilities.policy.exception_days == 365


def test_old_data_is_said_and_refused_under_require_data(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    """N17: the fixture feed's newest record is of 2025-11-03: past `max_age` (7 days by default), a run says so, and
    one that requires data refuses before anything; a `max_age` the data is within lets it judge."""
    m = make(write_matrix, header, table, tmp_path, gate(block="none"))
    Publish(supply=SupplyChain()).start(m.run)
    assert any("the vulnerability data is" in line and "days old (as of 2025-11-03" in line and "max_age is 7" in line
               for line in m.display.said), m.display.said
    required = make(write_matrix, header, table, tmp_path, gate(block="none") + "  require_data: true\n")
    with pytest.raises(InputError, match=r"days old \(as of 2025-11-03T22:54:41Z; vulnerabilities.max_age is 7\)"):
        Publish(supply=SupplyChain()).start(required.run)
    within = make(write_matrix, header, table, tmp_path, gate(block="none") + "  require_data: true\n")
    Publish(supply=SupplyChain(today=datetime.date(2025, 11, 8))).start(within.run)


def test_what_the_data_cannot_evaluate_is_listed_unchecked_never_none_known(
        write_matrix: MatrixWriter, header: str, table: CompatTable, tmp_path: Path) -> None:
    """N18: a jinja2 advisory whose range has a version that does not parse says nothing either way: the node lists
    it as not checked, and the run does not say "no known vulnerability"."""
    record = json.loads(next(FEED.rglob("GHSA-h75v-3vvj-5mfj.json")).read_text(encoding="utf-8"))
    record["affected"][0]["ranges"][0]["events"] = [{"introduced": "0"}, {"fixed": "not-a-version!"}]
    feed = tmp_path / "feed.json"
    feed.write_text(json.dumps(record), encoding="utf-8")
    m = make(write_matrix, header, table, tmp_path, f"vulnerabilities: {{data: [{feed}], max_age: 365}}\n")
    m.publish(supply=SupplyChain(today=datetime.date(2025, 1, 1)))
    unchecked = m.node("business")["vulnerabilities"]["unchecked"]
    assert "Jinja2 3.1.4: GHSA-h75v-3vvj-5mfj: fixed: 'not-a-version!' does not parse" in unchecked, unchecked
    assert not any("business" in line and "no known vulnerability" in line for line in m.display.said)


def test_promote_judges_a_digest_whose_node_the_matrix_does_not_know(
        write_matrix: MatrixWriter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """N11: a digest with no trusted pass record names no node; promote skipped the gate for it, so
    `--allow-untested` moved it although its trusted SBOM holds a blocking jinja2. Now every policy of the matrix
    judges it; and under require_data one with no SBOM that counts is refused."""
    from imagebuilder import cli
    from imagebuilder.errors import EngineUnavailable
    from imagebuilder.ports.registry import Registry

    registry, stager = FakeRegistry(), Signer.generate("the stager")
    digest, _ = registry.image(REPO, "nightly-task", "published")
    bare, _ = registry.image(REPO, "nightly-bare", "published before SBOMs")
    document = {"metadata": {"component": {"version": digest}}, "components": [
        component("Jinja2", "3.1.4", "pkg:pypi/jinja2@3.1.4", path="/opt/venv/lib/python3.11/site-packages",
                  layer="task")]}
    RegistrySboms(registry, Trust((stager.public,)), stager).put(REPO, digest, document, node="e/task")
    key = tmp_path / "stager.pub"
    key.write_bytes(stager.public.pem())
    promoter = tmp_path / "promoter.pem"  # (keys are named: a promote that writes `untested` records needs its key)
    promoter.write_bytes(Signer.generate("the promote job").private_pem())
    promoter.chmod(0o600)
    monkeypatch.setenv("IMAGEBUILDER_SIGNING_KEY", str(promoter))

    def engine(self: object) -> object:
        raise EngineUnavailable("no engine in this test")
    monkeypatch.setattr(cli.Context, "engine", engine)
    monkeypatch.setattr(Registry, "for_host", classmethod(lambda cls, *args, **kwargs: registry))

    def promote(tag: str, gate_text: str) -> int:
        matrix = write_matrix(textwrap.dedent(HEADER).lstrip() + "matrix: {torch: [2.8.0], accelerator: [cpu], "
                              "python: ['3.11']}\n" + gate_text)
        return cli.main(["--offline", "--cache-dir", str(tmp_path / "cache"), "--trust-key", str(key), "promote",
                         "--from", f"127.0.0.1:5000/{REPO}:{tag}", "--to", f"stable-{tag}", "--matrix", str(matrix),
                         "--allow-untested"])

    assert promote("nightly-task", gate() + "  max_age: 3650\n") == 1
    assert "vulnerability gate" in capsys.readouterr().out and registry.manifest_digest(REPO, "stable-nightly-task") \
        is None
    assert promote("nightly-bare", gate() + "  max_age: 3650\n  require_data: true\n") == 1
    assert "no SBOM that counts" in capsys.readouterr().out
    assert promote("nightly-bare", gate() + "  max_age: 3650\n") == 0  # (no SBOM, and the policy does not ask)
    assert registry.manifest_digest(REPO, "stable-nightly-bare") == bare
