"""The walk of a layer's folder that the secret scan reads (ports.engine._folder_files): every regular file, as a
path in the image, in os.walk's order, its bytes on read; links and overlay whiteouts are not files; a file the
scan does not read is never opened."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.ports import engine as engine_module


def layer(root: Path) -> Path:
    (root / "usr/lib/python3/site-packages/pkg").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "empty").mkdir()
    (root / "etc/hosts").write_bytes(b"127.0.0.1 localhost\n")
    (root / "usr/lib/python3/site-packages/pkg/__init__.py").write_bytes(b"x = 1\n")
    (root / "usr/lib/python3/site-packages/pkg/data.bin").write_bytes(b"\0" * 70_000)
    (root / "top.txt").write_bytes(b"top")
    (root / "link").symlink_to("top.txt")
    os.mknod(root / "etc/whiteout", stat.S_IFCHR | 0o600, os.makedev(0, 0))  # what overlay2 writes for a delete
    return root


def walked(folder: Path) -> list[tuple[str, int, bytes]]:
    """What os.walk gives, the reference: regular files, each folder's files before its folders."""
    out = []
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                out.append(("/" + os.path.relpath(path, folder), os.lstat(path).st_size, Path(path).read_bytes()))
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of an overlay whiteout needs root")
def test_every_regular_file_in_os_walks_order_with_its_bytes(tmp_path: Path) -> None:
    folder = layer(tmp_path / "diff")
    got = [(path, size, stream.read()) for path, size, stream in engine_module._folder_files(str(folder))]
    assert got == walked(folder)
    assert {p for p, _, _ in got} == {"/etc/hosts", "/top.txt", "/usr/lib/python3/site-packages/pkg/__init__.py",
                                      "/usr/lib/python3/site-packages/pkg/data.bin"}


def test_a_file_that_is_not_read_is_not_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "diff"
    (folder / "a").mkdir(parents=True)
    for i in range(50):
        (folder / "a" / f"f{i}").write_bytes(b"data %d" % i)
    opened: list[str] = []

    def counting_open(path: str, mode: str) -> Any:
        opened.append(path)
        return io.FileIO(path, mode)

    monkeypatch.setattr(engine_module._FileOnRead, "opener", staticmethod(counting_open))
    read = {path: stream.read() for path, _, stream in engine_module._folder_files(str(folder)) if path.endswith("7")}
    assert read == {"/a/f7": b"data 7", "/a/f17": b"data 17", "/a/f27": b"data 27", "/a/f37": b"data 37",
                    "/a/f47": b"data 47"}
    assert sorted(opened) == sorted(str(folder / "a" / name) for name in ("f7", "f17", "f27", "f37", "f47"))


def test_a_file_gone_before_its_read_reads_as_empty(tmp_path: Path) -> None:
    folder = tmp_path / "diff"
    folder.mkdir()
    (folder / "gone").write_bytes(b"was here")
    for _path, _size, stream in engine_module._folder_files(str(folder)):
        (folder / "gone").unlink()
        assert stream.read() == b""
