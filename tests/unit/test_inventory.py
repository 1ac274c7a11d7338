"""What an image holds, read from its layer tars (`supply.inventory`): dpkg's installed packages and every Python
distribution (dist-info, egg-info directory or file, in a venv, the system's dist-packages or a `--target` prefix),
the layer that brought each as layers stack (a package unchanged keeps its first layer; whiteouts and opaque
directories delete what is below), purls and licenses, and the JSON the caller caches."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.supply.inventory import (
    DPKG_STATUS,
    Component,
    Deb,
    Inventory,
    LayerFacts,
    OsRelease,
    read_folder,
    read_layer,
)


@dataclass(frozen=True)
class Link:
    """A hard link to an earlier member."""

    target: str


@dataclass(frozen=True)
class Symlink:
    target: str


Content = bytes | str | Link | Symlink | None  # None: a directory


def layer_tar(entries: Iterable[tuple[str, Content]]) -> bytes:
    """An uncompressed layer tar of `(name, content)` members, in this order (names as written: `./x` or `x`)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in entries:
            info = tarfile.TarInfo(name)
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(content, Link):
                info.type, info.linkname = tarfile.LNKTYPE, content.target
                tar.addfile(info)
            elif isinstance(content, Symlink):
                info.type, info.linkname = tarfile.SYMTYPE, content.target
                tar.addfile(info)
            else:
                data = content.encode() if isinstance(content, str) else content
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def read(entries: Iterable[tuple[str, Content]]) -> LayerFacts:
    return read_layer(io.BytesIO(layer_tar(entries)))


def metadata(name: str, version: str, *headers: str, body: str = "") -> str:
    text = "".join(f"{h}\n" for h in ("Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *headers))
    return text + (f"\n{body}" if body else "")


def paragraph(package: str, version: str, status: str = "install ok installed", arch: str = "amd64",
              source: str | None = None) -> str:
    lines = [f"Package: {package}", f"Status: {status}", "Priority: optional", f"Architecture: {arch}"]
    lines += [f"Source: {source}"] if source else []
    lines += [f"Version: {version}", "Description: a package", " with a long description", " .", " in paragraphs"]
    return "\n".join(lines) + "\n"


def status(*paragraphs: str) -> str:
    return "\n".join(paragraphs)


VENV = "/opt/venv/lib/python3.11/site-packages"
SYSTEM = "/usr/lib/python3/dist-packages"
CUDA = "/opt/cuda-libs"
BASE, CUDA_LAYER, TORCH = "base image debian:bookworm", "cuda", "torch"
D1, D2, D3 = "sha256:" + "1" * 64, "sha256:" + "2" * 64, "sha256:" + "3" * 64
LIBC = paragraph("libc6", "2.36-9+deb12u4", source="glibc (2.36-9+deb12u4)")
GPL_TEXT = "GNU GENERAL PUBLIC LICENSE\n        Version 2, June 1991\n        \n        Copyright (C) 1989"

BASE_LAYER: list[tuple[str, Content]] = [
    ("./", None),
    ("./etc/", None),
    ("./etc/os-release", Symlink("../usr/lib/os-release")),
    ("./usr/lib/os-release", 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'),
    ("./var/lib/dpkg/status", status(LIBC, paragraph("tzdata", "2024a-0+deb12u1", arch="all"),
                                     paragraph("zlib1g", "1:1.2.13.dfsg-1", source="zlib"),
                                     paragraph("old-tool", "1.0-1", status="deinstall ok config-files"))),
    ("./var/lib/dpkg/status-old", status(LIBC)),
    (f".{VENV}/foo-1.0.dist-info/", None),
    (f".{VENV}/foo-1.0.dist-info/INSTALLER", "uv\n"),
    (f".{VENV}/foo-1.0.dist-info/METADATA",
     metadata("Foo", "1.0", "License-Expression: MIT OR Apache-2.0", "License: ignored",
              body="Name: not-a-header\nVersion: 6.6.6\n")),
    (f".{VENV}/foo-1.0.dist-info/RECORD", "foo/__init__.py,,\n"),
    (f".{VENV}/typing_extensions-4.9.0.dist-info/METADATA",
     metadata("typing_extensions", "4.9.0", "Classifier: Programming Language :: Python :: 3",
              "Classifier: License :: OSI Approved", "Classifier: License :: OSI Approved :: Python Software "
              "Foundation License")),
    (f".{SYSTEM}/six-1.16.0.egg-info/PKG-INFO", metadata("six", "1.16.0", "License: MIT")),
    (f".{SYSTEM}/six-1.16.0.egg-info/top_level.txt", "six\n"),
    (f".{SYSTEM}/chardet-5.1.0.egg-info",
     metadata("chardet", "5.1.0", f"License: {GPL_TEXT}", "Classifier: License :: OSI Approved :: GNU Library or "
              "Lesser General Public License (LGPL)")),
]
CUDA_STATUS = status(LIBC, paragraph("tzdata", "2024b-0+deb12u1", arch="all"), paragraph("curl", "7.88.1-10+deb12u5"))
SECOND_LAYER: list[tuple[str, Content]] = [  # no "./"
    ("var/lib/dpkg/status", CUDA_STATUS),
    (f"{CUDA[1:]}/nvidia_cudnn_cu12-9.1.0.70.dist-info/INSTALLER", "pip"),
    (f"{CUDA[1:]}/nvidia_cudnn_cu12-9.1.0.70.dist-info/METADATA",
     metadata("nvidia-cudnn-cu12", "9.1.0.70", "License: NVIDIA Proprietary Software")),
    (f"{VENV[1:]}/.wh.foo-1.0.dist-info", b""),
]
THIRD_LAYER: list[tuple[str, Content]] = [
    (f"{CUDA[1:]}/.wh..wh..opq", b""),
    (f"{CUDA[1:]}/nvidia_nccl_cu12-2.21.5.dist-info/METADATA", metadata("nvidia-nccl-cu12", "2.21.5")),
    (f"{VENV[1:]}/typing_extensions-4.9.0.dist-info/METADATA", metadata("typing_extensions", "4.9.0")),
]


def layers() -> list[tuple[LayerFacts, str, str]]:
    return [(read(BASE_LAYER), BASE, D1), (read(SECOND_LAYER), CUDA_LAYER, D2), (read(THIRD_LAYER), TORCH, D3)]


def stack(facts: Iterable[tuple[LayerFacts, str, str]]) -> Inventory:
    inventory = Inventory.empty()
    for f, label, digest in facts:
        inventory = inventory.apply(f, label, digest)
    return inventory


def image_inventory() -> Inventory:
    """The three layers above, stacked: what tests/unit/test_cyclonedx.py documents."""
    return stack(layers())


def by_name(components: Iterable[Component]) -> dict[str, Component]:
    return {c.name: c for c in components}


class Unseekable(io.RawIOBase):
    """A body that reads forward only, like an HTTP response."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def seek(self, offset: int, whence: int = 0) -> int:
        raise io.UnsupportedOperation("seek")

    def tell(self) -> int:
        raise io.UnsupportedOperation("tell")

    def readinto(self, buffer: Any) -> int:
        chunk = self._data.read(min(len(buffer), 1000))  # short reads too
        buffer[:len(chunk)] = chunk
        return len(chunk)


def test_layer_facts_of_the_base_layer() -> None:
    facts = read(BASE_LAYER)
    assert facts.dpkg == (Deb("libc6", "2.36-9+deb12u4", "amd64", "glibc", "2.36-9+deb12u4"),
                          Deb("tzdata", "2024a-0+deb12u1", "all", "tzdata", "2024a-0+deb12u1"),
                          Deb("zlib1g", "1:1.2.13.dfsg-1", "amd64", "zlib", "1:1.2.13.dfsg-1"))
    assert facts.os_release == (OsRelease("/usr/lib/os-release", "debian", "12"),)  # /etc's is a symlink
    assert [d.metadata for d in facts.dists] == [
        f"{VENV}/foo-1.0.dist-info/METADATA", f"{VENV}/typing_extensions-4.9.0.dist-info/METADATA",
        f"{SYSTEM}/chardet-5.1.0.egg-info", f"{SYSTEM}/six-1.16.0.egg-info/PKG-INFO"]
    assert facts.whiteouts == () and facts.opaques == ()
    foo = facts.dists[0]
    assert (foo.name, foo.version, foo.installer, foo.site) == ("Foo", "1.0", "uv", VENV)  # not the body's Name


def test_the_base_image() -> None:
    inventory = stack(layers()[:1])
    assert inventory.distro == "debian-12"
    debs = by_name(inventory.debs())
    assert sorted(debs) == ["libc6", "tzdata", "zlib1g"]  # old-tool: config files only
    libc = debs["libc6"]
    assert (libc.source, libc.source_version, libc.arch, libc.layer, libc.layer_digest, libc.path) == (
        "glibc", "2.36-9+deb12u4", "amd64", BASE, D1, DPKG_STATUS)
    assert libc.purl == "pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=amd64&distro=debian-12"
    assert libc.bom_ref == "deb:libc6:amd64@2.36-9+deb12u4"
    assert debs["tzdata"].purl == "pkg:deb/debian/tzdata@2024a-0%2Bdeb12u1?arch=all&distro=debian-12"
    assert (debs["zlib1g"].source, debs["zlib1g"].source_version) == ("zlib", "1:1.2.13.dfsg-1")
    assert debs["zlib1g"].purl == "pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=amd64&distro=debian-12"

    pythons = by_name(inventory.pythons())
    assert sorted(pythons) == ["Foo", "chardet", "six", "typing_extensions"]
    foo = pythons["Foo"]
    assert (foo.path, foo.version, foo.licenses, foo.installer, foo.layer) == (
        VENV, "1.0", ("MIT OR Apache-2.0",), "uv", BASE)
    assert foo.purl == "pkg:pypi/foo@1.0"
    assert foo.bom_ref == f"python:{VENV}/foo-1.0.dist-info"
    assert pythons["typing_extensions"].purl == "pkg:pypi/typing-extensions@4.9.0"
    assert pythons["typing_extensions"].licenses == ("Python Software Foundation License",)
    assert (pythons["six"].path, pythons["six"].licenses, pythons["six"].installer) == (SYSTEM, ("MIT",), None)
    chardet = pythons["chardet"]  # an egg-info file whose License is the whole text: the classifier speaks
    assert (chardet.path, chardet.licenses) == (SYSTEM, ("GNU Library or Lesser General Public License (LGPL)",))
    assert chardet.bom_ref == f"python:{SYSTEM}/chardet-5.1.0.egg-info"
    assert inventory.python_paths() == (VENV, SYSTEM)


def test_layers_stack_and_keep_who_brought_what() -> None:
    base = stack(layers()[:1])
    second = base.apply(read(SECOND_LAYER), CUDA_LAYER, D2)
    debs = by_name(second.debs())
    assert sorted(debs) == ["curl", "libc6", "tzdata"]  # zlib1g removed
    assert (debs["libc6"].layer, debs["libc6"].layer_digest) == (BASE, D1)  # unchanged: still the base's
    assert (debs["tzdata"].version, debs["tzdata"].layer, debs["tzdata"].layer_digest) == (
        "2024b-0+deb12u1", CUDA_LAYER, D2)  # upgraded
    assert (debs["curl"].layer, debs["curl"].source) == (CUDA_LAYER, "curl")
    pythons = by_name(second.pythons())
    assert "Foo" not in pythons  # whited out
    cudnn = pythons["nvidia-cudnn-cu12"]
    assert (cudnn.path, cudnn.layer, cudnn.installer, cudnn.licenses) == (
        CUDA, CUDA_LAYER, "pip", ("NVIDIA Proprietary Software",))
    assert second.python_paths() == (CUDA, VENV, SYSTEM)
    assert by_name(base.pythons())["Foo"].layer == BASE  # apply is pure

    third = second.apply(read(THIRD_LAYER), TORCH, D3)
    pythons = by_name(third.pythons())
    assert "nvidia-cudnn-cu12" not in pythons  # the opaque directory hides the layer below
    assert (pythons["nvidia-nccl-cu12"].path, pythons["nvidia-nccl-cu12"].layer) == (CUDA, TORCH)  # its own stays
    assert pythons["typing_extensions"].layer == TORCH  # rewritten: the newest layer that wrote it
    assert pythons["six"].layer == BASE
    assert by_name(third.debs())["curl"].layer == CUDA_LAYER  # no status file in this layer: no change
    assert third == image_inventory()


def test_components_are_sorted() -> None:
    components = image_inventory().components
    assert [(c.kind, c.path, c.name) for c in components] == [
        ("deb", DPKG_STATUS, "curl"), ("deb", DPKG_STATUS, "libc6"), ("deb", DPKG_STATUS, "tzdata"),
        ("python", CUDA, "nvidia-nccl-cu12"),
        ("python", VENV, "typing_extensions"),
        ("python", SYSTEM, "chardet"), ("python", SYSTEM, "six"),
    ]
    assert list(components) == sorted(components, key=Component.sort_key)
    assert all(c.distro == "debian-12" for c in components if c.kind == "deb")


def test_whiteouts_of_the_database_and_of_whole_trees() -> None:
    base = stack(layers()[:1])
    gone = base.apply(read([("var/lib/dpkg/.wh.status", b"")]), "x", D2)
    assert gone.debs() == () and len(gone.pythons()) == 4
    assert base.apply(read([("var/lib/dpkg/.wh..wh..opq", b"")]), "x", D2).debs() == ()
    assert base.apply(read([("var/.wh.lib", b"")]), "x", D2).debs() == ()
    venv = base.apply(read([("opt/.wh.venv", b"")]), "x", D2)
    assert sorted(c.name for c in venv.pythons()) == ["chardet", "six"]
    meta = base.apply(read([(f"{SYSTEM[1:]}/six-1.16.0.egg-info/.wh.PKG-INFO", b"")]), "x", D2)
    assert "six" not in by_name(meta.pythons())
    assert base.apply(read([("usr/lib/.wh.os-release", b"")]), "x", D2).distro is None
    # a layer that makes dpkg's folder opaque and writes a status file: that file counts (an unchanged package
    # is still the layer's that brought it)
    fresh = base.apply(read([("var/lib/dpkg/.wh..wh..opq", b""), ("var/lib/dpkg/status", status(LIBC))]), "y", D2)
    assert [(c.name, c.layer) for c in fresh.debs()] == [("libc6", "base image debian:bookworm")]


def test_ubuntu_and_etc_os_release_first() -> None:
    facts = read([("usr/lib/os-release", "ID=debian\nVERSION_ID=12\n"),
                  ("etc/os-release", "# comment\nID='ubuntu'\nVERSION_ID=\"22.04\"\n"),
                  ("var/lib/dpkg/status", status(paragraph("bash", "5.1-6ubuntu1")))])
    inventory = Inventory.empty().apply(facts, "base", D1)
    assert inventory.distro == "ubuntu-22.04"
    assert inventory.debs()[0].purl == "pkg:deb/ubuntu/bash@5.1-6ubuntu1?arch=amd64&distro=ubuntu-22.04"
    bare = Inventory.empty().apply(read([("var/lib/dpkg/status", status(paragraph("bash", "5.2")))]), "b", D1)
    assert bare.distro is None and bare.debs()[0].purl == "pkg:deb/debian/bash@5.2?arch=amd64"


def test_hard_links() -> None:
    meta = metadata("x", "1.0", "License: BSD")
    facts = read([
        ("opt/a/x-1.0.dist-info/METADATA", meta),
        ("opt/a/x-1.0.dist-info/INSTALLER", "uv"),
        ("opt/b/x-1.0.dist-info/INSTALLER", Link("opt/a/x-1.0.dist-info/INSTALLER")),
        ("opt/b/x-1.0.dist-info/METADATA", Link("./opt/a/x-1.0.dist-info/METADATA")),
        ("opt/c/y-2.0.dist-info/METADATA", Link("opt/elsewhere/unknown")),  # not kept: ignored
        ("var/lib/dpkg/status-old", status(LIBC)),
        ("var/lib/dpkg/status", Link("var/lib/dpkg/status-old")),
    ])
    assert [(d.metadata, d.name, d.installer, d.licenses) for d in facts.dists] == [
        ("/opt/a/x-1.0.dist-info/METADATA", "x", "uv", ("BSD",)),
        ("/opt/b/x-1.0.dist-info/METADATA", "x", "uv", ("BSD",))]
    assert facts.dpkg is not None and [d.name for d in facts.dpkg] == ["libc6"]
    unresolved = read([("var/lib/dpkg/status", Link("tmp/whatever"))])
    assert unresolved.dpkg is None


def test_metadata_headers_only_and_fallbacks() -> None:
    huge = metadata("big", "3.0", "License: Apache-2.0", body="x" * (9 << 20))  # 9 MiB of description
    facts = read([
        ("site/big-3.0.dist-info/METADATA", huge),
        ("site/nameless_pkg-0.5.dist-info/METADATA", "Metadata-Version: 2.1\nSummary: no name\n"),
        ("site/develop.egg-info/PKG-INFO", "Metadata-Version: 1.0\nName: develop\n"),  # no version: left out
        ("site/big-3.0.dist-info/RECORD", "big/__init__.py,,\n"),
        ("site/unknown.dist-info/METADATA", "Metadata-Version: 2.1\n"),  # no name, no version
        ("site/other.txt", "METADATA"),
    ])
    assert [(d.name, d.version, d.licenses) for d in facts.dists] == [
        ("big", "3.0", ("Apache-2.0",)), ("nameless_pkg", "0.5", ())]


def test_a_stream_that_cannot_seek() -> None:
    data = layer_tar(BASE_LAYER)
    with pytest.raises(io.UnsupportedOperation):
        Unseekable(data).seek(0)
    assert read_layer(io.BufferedReader(Unseekable(data))) == read(BASE_LAYER)
    assert read_layer(Unseekable(data)) == read(BASE_LAYER)  # type: ignore[arg-type]


def test_json_round_trips() -> None:
    for facts, _, _ in layers():
        text = json.dumps(facts.to_json())
        assert LayerFacts.from_json(json.loads(text)) == facts
    empty = LayerFacts()
    assert LayerFacts.from_json(empty.to_json()) == empty and empty.dpkg is None
    assert LayerFacts.from_json(LayerFacts(dpkg=()).to_json()).dpkg == ()
    inventory = image_inventory()
    again = Inventory.from_json(json.loads(json.dumps(inventory.to_json())))
    assert again == inventory and again.components == inventory.components
    # a parent's stored inventory, a child built on it
    child = again.apply(read([("opt/venv/lib/python3.11/site-packages/z-1.dist-info/METADATA", metadata("z", "1"))]),
                        "task", D3)
    assert by_name(child.pythons())["z"].layer == "task" and by_name(child.debs())["libc6"].layer == BASE
    bads: list[Any] = [{}, {"format": 99}, {"format": 1, "debs": 3}, [], None]
    for bad in bads:
        with pytest.raises(ValueError):
            Inventory.from_json(bad)
        with pytest.raises(ValueError):
            LayerFacts.from_json(bad)


def test_not_a_tar() -> None:
    with pytest.raises(tarfile.TarError):
        read_layer(io.BytesIO(b"not a tar at all" * 100))


def as_folder(entries: Iterable[tuple[str, Content]], root: Path) -> Path:
    """The same layer as overlay2 keeps it in the engine's storage: a whiteout is a character device 0/0, an
    opaque folder has the attribute trusted.overlay.opaque=y (root makes both, as dockerd does)."""
    for name, content in entries:
        path = root / name.lstrip("./").lstrip("/") if name not in ("./", "/") else root
        base = path.name
        if base == ".wh..wh..opq":
            path.parent.mkdir(parents=True, exist_ok=True)
            os.setxattr(path.parent, "trusted.overlay.opaque", b"y")
        elif base.startswith(".wh."):
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mknod(path.parent / base[4:], 0o600 | stat.S_IFCHR, 0)
        elif content is None:
            path.mkdir(parents=True, exist_ok=True)
        elif isinstance(content, Symlink):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(content.target)
        elif isinstance(content, Link):
            os.link(root / content.target.lstrip("./").lstrip("/"), path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def test_a_layer_folder_of_the_engines_storage_reads_as_its_tar(tmp_path: Path) -> None:
    """`read_folder` (overlay2's diff folder, no decompression) and `read_layer` (the blob) agree, whiteouts and
    opaque folders included (the integration test compares the two on a real engine's layer with a whiteout)."""
    for i, entries in enumerate((BASE_LAYER, SECOND_LAYER, THIRD_LAYER)):
        assert read_folder(str(as_folder(entries, tmp_path / str(i)))) == read(entries), i


def test_each_python_distribution_carries_the_hash_of_its_record_into_the_sbom(tmp_path: Path) -> None:
    """Issue 48: two images installed from the same locked files list the same packages and hashes. The hash of a
    distribution is its RECORD's (every file it installed, each by sha256, as the installer wrote it), read from the
    layer as the tar and as the engine's folder alike, kept through JSON, and written as a component property."""
    import hashlib

    from imagebuilder.supply import cyclonedx

    record = "x/__init__.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\nx-1.0.dist-info/RECORD,,\n"
    site = "opt/venv/lib/python3.11/site-packages"
    entries: list[tuple[str, Content]] = [
        (f"{site}/x-1.0.dist-info/METADATA", metadata("x", "1.0")), (f"{site}/x-1.0.dist-info/RECORD", record),
        (f"{site}/y-2.0.dist-info/METADATA", metadata("y", "2.0")),  # (no RECORD: none said)
        ("opt/b/x-1.0.dist-info/METADATA", Link(f"{site}/x-1.0.dist-info/METADATA")),
        ("opt/b/x-1.0.dist-info/RECORD", Link(f"{site}/x-1.0.dist-info/RECORD"))]
    facts = read(entries)
    want = hashlib.sha256(record.encode()).hexdigest()
    assert [(d.name, d.record) for d in facts.dists] == [("x", want), ("x", want), ("y", None)]
    assert read_folder(str(as_folder(entries[:3], tmp_path / "f"))) == read(entries[:3])
    assert LayerFacts.from_json(json.loads(json.dumps(facts.to_json()))) == facts
    image = Inventory.empty().apply(facts, "team", D3)
    assert Inventory.from_json(json.loads(json.dumps(image.to_json()))) == image
    doc = cyclonedx.document(image, image="127.0.0.1:5000/ml/x:1", digest="sha256:" + "a" * 64, tool_version="t")
    assert cyclonedx.validate(doc) is None
    said = {(c["name"], p["value"]) for c in doc["components"] for p in c.get("properties") or ()
            if p["name"] == cyclonedx.RECORD}
    assert said == {("x", want)}
    other = read([(f"{site}/x-1.0.dist-info/METADATA", metadata("x", "1.0")),
                  (f"{site}/x-1.0.dist-info/RECORD", record.replace("47DEQ", "AAAAQ"))])
    assert other.dists[0].record != want  # (one installed file of other bytes: another hash)
