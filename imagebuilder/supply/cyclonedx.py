"""The CycloneDX SBOM of one image, from its `Inventory`, through cyclonedx-python-lib: the image is the
document's subject (a container component named by its repository, versioned by its manifest digest) and depends
on every package it holds, each a library component with its purl, licenses and the layer that brought it.

The same image gives the same document but for its timestamp and serial number (CycloneDX: each BOM made has a
serial of its own): the components and dependencies are sorted. `components_of` reads a document back without the
library (the vulnerability gate, the tests), `validate` holds one against the JSON schema of `SPEC`."""

from __future__ import annotations

import datetime
import functools
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from cyclonedx.contrib.license.exceptions import InvalidSpdxLicenseException
from cyclonedx.contrib.license.factories import LicenseFactory
from cyclonedx.model import Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component as CdxComponent
from cyclonedx.model.component import ComponentType
from cyclonedx.model.license import License
from cyclonedx.output import make_outputter
from cyclonedx.schema import OutputFormat, SchemaVersion
from packageurl import PackageURL
from packaging.utils import canonicalize_name

from ..ports.reference import parse
from .inventory import DPKG_STATUS, Component, Inventory

SPEC = SchemaVersion.V1_7  # the newest the library writes that its strict JSON schema accepts
TOOL = "imagebuilder"
PROPERTY = "imagebuilder:"  # the prefix of this tool's component properties
LAYER, LAYER_DIGEST, PATH = f"{PROPERTY}layer", f"{PROPERTY}layer_digest", f"{PROPERTY}path"
INSTALLER, SOURCE, ARCH = f"{PROPERTY}installer", f"{PROPERTY}source", f"{PROPERTY}arch"
RECORD = f"{PROPERTY}record_sha256"  # a Python distribution's RECORD, hashed: the files it installed, each by sha256
_KINDS = {"deb": "deb", "pypi": "python"}  # purl type -> Component.kind


class Listed(NamedTuple):
    """One package of a document, as `components_of` reads it back."""

    kind: str  # deb | python
    name: str
    version: str
    path: str
    layer: str


def _licenses(values: tuple[str, ...]) -> list[License]:
    """One value: an SPDX expression if it parses as one (else an SPDX id or a name). Several: ids or names
    (CycloneDX allows an expression only alone)."""
    factory = LicenseFactory()
    if len(values) == 1:
        return [factory.make_from_string(values[0])]
    licenses: list[License] = []
    for value in values:
        try:
            licenses.append(factory.make_with_id(value))
        except InvalidSpdxLicenseException:
            licenses.append(factory.make_with_name(value))
    return licenses


def _properties(component: Component) -> list[Property]:
    pairs = [(LAYER, component.layer), (LAYER_DIGEST, component.layer_digest), (PATH, component.path),
             (INSTALLER, component.installer), (ARCH, component.arch), (RECORD, component.record)]
    if component.kind == "deb" and component.source:
        pairs.append((SOURCE, f"{component.source} {component.source_version or component.version}"))
    return [Property(name=name, value=value) for name, value in pairs if value]


def _component(component: Component) -> CdxComponent:
    return CdxComponent(type=ComponentType.LIBRARY, name=component.name, version=component.version,
                        purl=PackageURL.from_string(component.purl), bom_ref=component.bom_ref,
                        licenses=_licenses(component.licenses), properties=_properties(component))


def _image(image: str, digest: str) -> CdxComponent:
    ref = parse(image)
    qualifiers = {"repository_url": ref.name} | ({"tag": ref.tag} if ref.tag else {})
    purl = PackageURL(type="oci", name=ref.name.rsplit("/", 1)[-1].lower(), version=digest, qualifiers=qualifiers)
    return CdxComponent(type=ComponentType.CONTAINER, name=ref.name, version=digest, purl=purl,
                        bom_ref=purl.to_string())


def serial_number() -> uuid.UUID:
    """A new document's serial number (one per BOM made, as CycloneDX asks, even of the same image)."""
    return uuid.uuid4()


def document(inventory: Inventory, *, image: str, digest: str, tool_version: str,
             created: datetime.datetime | None = None) -> dict[str, Any]:
    """The SBOM of the image `image` (a reference; its tag or digest, if any, is not its name) whose manifest is
    `digest`, holding `inventory`, made at `created` (now when None), as a JSON document of SPEC."""
    bom = Bom(serial_number=serial_number())
    bom.metadata.timestamp = created or datetime.datetime.now(datetime.timezone.utc)
    root = _image(image, digest)
    bom.metadata.component = root
    bom.metadata.tools.components.add(CdxComponent(type=ComponentType.APPLICATION, name=TOOL, version=tool_version))
    components = [_component(c) for c in inventory.components]
    bom.components.update(components)
    bom.register_dependency(root, components)
    for component in components:
        bom.register_dependency(component)  # a leaf, said as such: the graph is complete
    doc: dict[str, Any] = json.loads(make_outputter(bom, OutputFormat.JSON, SPEC).output_as_string())
    return doc


def _sort_key(kind: str, path: str, name: str, version: str, ref: str) -> tuple[str, str, str, str, str]:
    """Inventory's order (Component.sort_key)."""
    return kind, path, str(canonicalize_name(name)) if kind == "python" else name, version, ref


def components_of(doc: Mapping[str, Any]) -> list[Listed]:
    """The deb and Python packages of a document (other components left out), in Inventory.components' order."""
    found: list[tuple[tuple[str, str, str, str, str], Listed]] = []
    components: Iterable[Any] = doc.get("components") or ()
    for component in components:
        try:
            kind = _KINDS.get(PackageURL.from_string(str(component.get("purl") or "")).type)
        except ValueError:
            continue
        if kind is None:
            continue
        props = {str(p.get("name")): str(p.get("value") or "") for p in component.get("properties") or ()}
        name, version = str(component.get("name") or ""), str(component.get("version") or "")
        path = props.get(PATH) or (DPKG_STATUS if kind == "deb" else "")
        key = _sort_key(kind, path, name, version, str(component.get("bom-ref") or ""))
        found.append((key, Listed(kind, name, version, path, props.get(LAYER, ""))))
    return [listed for _, listed in sorted(found)]


@functools.cache
def _validator() -> Any:
    from cyclonedx.validation.json import JsonStrictValidator  # (jsonschema takes a second to import: tests only)

    return JsonStrictValidator(SPEC)


def validate(doc: Mapping[str, Any]) -> str | None:
    """Where `doc` breaks SPEC's strict JSON schema and how (`$.components[0]: 'name' is a required property`),
    or None when it holds. Needs the library's json-validation extra (jsonschema)."""
    error = _validator().validate_str(json.dumps(doc))
    if error is None:
        return None
    message, where = getattr(error.data, "message", None), getattr(error.data, "json_path", None)
    return f"{where}: {message}" if message and where else str(error)
