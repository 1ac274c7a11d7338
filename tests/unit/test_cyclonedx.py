"""An image's CycloneDX SBOM (`supply.cyclonedx`), from the inventory of tests/unit/test_inventory.py's layers:
valid against the strict JSON schema, every package with its purl, licenses and layer, the image as its subject,
the same document for the same image but for the timestamp, and read back to the inventory it came from."""

from __future__ import annotations

import copy
import datetime
import json
import uuid
import warnings
from typing import Any

from imagebuilder.supply.cyclonedx import SPEC, Listed, components_of, document, validate
from imagebuilder.supply.inventory import DPKG_STATUS, Inventory
from tests.unit.test_inventory import BASE, CUDA_LAYER, D1, SYSTEM, TORCH, VENV, image_inventory

IMAGE = "127.0.0.1:5000/ml/pytorch:2.4.0-cu121"
DIGEST = "sha256:" + "a" * 64
CREATED = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.timezone.utc)


def sbom(inventory: Inventory | None = None, created: datetime.datetime = CREATED) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the library warns of an incomplete dependency graph, and such
        return document(inventory or image_inventory(), image=IMAGE, digest=DIGEST, tool_version="0.1.0",
                        created=created)


def props(component: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in component.get("properties", [])}


def test_the_document_validates() -> None:
    doc = sbom()
    assert validate(doc) is None
    assert validate(json.loads(json.dumps(doc))) is None
    assert doc["specVersion"] == f"{SPEC.to_version()}"
    assert doc["bomFormat"] == "CycloneDX"
    empty = sbom(Inventory.empty())
    assert validate(empty) is None and components_of(empty) == []


def test_the_image_is_the_subject() -> None:
    doc = sbom()
    meta = doc["metadata"]
    image = meta["component"]
    assert (image["type"], image["name"], image["version"]) == ("container", "127.0.0.1:5000/ml/pytorch", DIGEST)
    assert image["purl"].startswith("pkg:oci/pytorch@sha256")
    assert "repository_url=127.0.0.1:5000/ml/pytorch" in image["purl"] and "tag=2.4.0-cu121" in image["purl"]
    assert meta["tools"]["components"] == [{"type": "application", "name": "imagebuilder", "version": "0.1.0"}]
    assert datetime.datetime.fromisoformat(meta["timestamp"]) == CREATED
    refs = {c["bom-ref"] for c in doc["components"]}
    root = [d for d in doc["dependencies"] if d["ref"] == image["bom-ref"]]
    assert len(root) == 1 and set(root[0]["dependsOn"]) == refs
    assert {d["ref"] for d in doc["dependencies"]} == refs | {image["bom-ref"]}


def test_every_package_with_purl_licenses_and_layer() -> None:
    inventory = image_inventory()
    doc = sbom(inventory)
    by_ref = {c["bom-ref"]: c for c in doc["components"]}
    assert len(by_ref) == len(doc["components"]) == len(inventory.components) == 7
    for component in inventory.components:
        written = by_ref[component.bom_ref]
        assert (written["type"], written["name"], written["version"], written["purl"]) == (
            "library", component.name, component.version, component.purl)
        p = props(written)
        assert (p["imagebuilder:layer"], p["imagebuilder:layer_digest"], p["imagebuilder:path"]) == (
            component.layer, component.layer_digest, component.path)
    libc = by_ref["deb:libc6:amd64@2.36-9+deb12u4"]
    assert props(libc)["imagebuilder:source"] == "glibc 2.36-9+deb12u4"
    assert props(libc)["imagebuilder:arch"] == "amd64"
    assert props(libc)["imagebuilder:layer"] == BASE and props(libc)["imagebuilder:layer_digest"] == D1
    assert "licenses" not in libc
    assert libc["purl"] == "pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=amd64&distro=debian-12"
    six = by_ref[f"python:{SYSTEM}/six-1.16.0.egg-info"]
    assert six["licenses"] == [{"license": {"id": "MIT"}}] and six["purl"] == "pkg:pypi/six@1.16.0"
    chardet = by_ref[f"python:{SYSTEM}/chardet-5.1.0.egg-info"]
    assert chardet["licenses"] == [{"license": {"name": "GNU Library or Lesser General Public License (LGPL)"}}]
    nccl = by_ref["python:/opt/cuda-libs/nvidia_nccl_cu12-2.21.5.dist-info"]
    assert props(nccl)["imagebuilder:layer"] == TORCH and "imagebuilder:installer" not in props(nccl)
    tzdata = by_ref["deb:tzdata:all@2024b-0+deb12u1"]
    assert props(tzdata)["imagebuilder:layer"] == CUDA_LAYER
    assert props(tzdata)["imagebuilder:source"] == "tzdata 2024b-0+deb12u1"


def test_licenses_expressions_ids_and_names() -> None:
    from imagebuilder.supply.inventory import Component

    def written(*licenses: str) -> Any:
        python = Component("python", "x", "1", VENV, "torch", D1, f"{VENV}/x-1.dist-info/METADATA",
                           licenses=licenses, installer="pip")
        inventory = Inventory(python_entries=(python,))
        doc = sbom(inventory)
        assert validate(doc) is None
        assert props(doc["components"][0])["imagebuilder:installer"] == "pip"
        return doc["components"][0].get("licenses")

    assert written("MIT OR Apache-2.0") == [{"expression": "MIT OR Apache-2.0"}]
    assert written("Apache-2.0") == [{"license": {"id": "Apache-2.0"}}]
    assert written("NVIDIA Proprietary Software") == [{"license": {"name": "NVIDIA Proprietary Software"}}]
    # several: never an expression (CycloneDX allows one only alone)
    assert written("MIT", "BSD-3-Clause OR MIT", "Custom") == [
        {"license": {"id": "MIT"}}, {"license": {"name": "BSD-3-Clause OR MIT"}}, {"license": {"name": "Custom"}}]
    assert written() is None


def test_same_image_same_document_but_the_time_and_serial() -> None:
    one, two = sbom(), sbom(created=CREATED + datetime.timedelta(days=3))
    assert one["serialNumber"] != two["serialNumber"] and uuid.UUID(one["serialNumber"][len("urn:uuid:"):]).version == 4
    assert one["metadata"]["timestamp"] != two["metadata"]["timestamp"]
    for doc in (one, two):
        del doc["metadata"]["timestamp"], doc["serialNumber"]
    assert json.dumps(one) == json.dumps(two)


def test_a_broken_document_says_where() -> None:
    doc = sbom()
    broken = copy.deepcopy(doc)
    del broken["components"][0]["name"]
    message = validate(broken)
    assert message is not None and "'name' is a required property" in message and "components[0]" in message
    extra = copy.deepcopy(doc)
    extra["components"][1]["colour"] = "blue"  # strict: no unknown properties
    assert validate(extra) is not None
    assert validate({"bomFormat": "CycloneDX"}) is not None
    assert validate(doc) is None


def test_read_back() -> None:
    inventory = image_inventory()
    doc = json.loads(json.dumps(sbom(inventory)))
    listed = components_of(doc)
    assert listed == [(c.kind, c.name, c.version, c.path, c.layer) for c in inventory.components]
    assert listed[0] == Listed("deb", "curl", "7.88.1-10+deb12u5", DPKG_STATUS, CUDA_LAYER)
    assert {entry.kind for entry in listed} == {"deb", "python"}
    doc["components"].append({"type": "library", "name": "x", "purl": "pkg:npm/x@1"})  # not ours: left out
    doc["components"].append({"type": "library", "name": "y"})
    assert components_of(doc) == listed
