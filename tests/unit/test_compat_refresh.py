"""compat_refresh against a tiny local index served over HTTP (no internet)."""

from __future__ import annotations

import copy
import datetime
import functools
import http.server
import json
import re
import socket
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuilder.compat_refresh import IndexUnreachable, diff_tables, driver_floor, fetch_table, write_table

LINUX = '; platform_system == "Linux" and platform_machine == "x86_64"'

# torch 2.6.0: old-style "(==x)" pins, .metadata served only for the cp311 wheel.
TORCH_260_METADATA = f"""\
Metadata-Version: 2.1
Name: torch
Version: 2.6.0
Requires-Python: >=3.9.0
Requires-Dist: filelock
Requires-Dist: nvidia-cuda-runtime-cu12 (==12.4.127) {LINUX}
Requires-Dist: nvidia-cudnn-cu12 (==9.1.0.70) {LINUX}
Requires-Dist: nvidia-nccl-cu12 (==2.21.5) {LINUX}
Requires-Dist: nvidia-cublas-cu12 (==12.4.5.8) {LINUX}
Requires-Dist: nvidia-windows-only-cu12 (==1.0) ; platform_system == "Windows"
Requires-Dist: triton (==3.2.0) {LINUX}
Requires-Dist: sympy (==1.13.1) ; python_version >= "3.9"
Provides-Extra: optree
Requires-Dist: optree (>=0.13.0) ; extra == 'optree'
Requires-Dist: nvidia-extra-only-cu12 (==2.0) ; extra == 'optree'

"""

# torch 2.11.0: cuda-toolkit extras + -cu13 names; no .metadata file, only inside the wheel.
TORCH_2110_METADATA = """\
Metadata-Version: 2.4
Name: torch
Version: 2.11.0
Requires-Python: >=3.10
Requires-Dist: filelock
Requires-Dist: cuda-toolkit[cublas,cudart,nvrtc]==13.0.2; platform_system == "Linux"
Requires-Dist: cuda-bindings<14,>=13.0.3; platform_system == "Linux"
Requires-Dist: nvidia-cudnn-cu13==9.19.0.56; platform_system == "Linux"
Requires-Dist: nvidia-nccl-cu13==2.28.9; platform_system == "Linux"
Requires-Dist: triton==3.6.0; platform_system == "Linux"

"""


def _vision_metadata(version: str, torch_req: str) -> str:
    return (
        f"Metadata-Version: 2.1\nName: torchvision\nVersion: {version}\n"
        f"Requires-Dist: numpy\nRequires-Dist: {torch_req}\n"
    )


def _write_wheel(path: Path, dist_info: str, metadata: str) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\n")
        zf.writestr(f"{dist_info}/METADATA", metadata)
        zf.writestr("torch/__init__.py", "")


def _page(project: str, anchors: list[str]) -> str:
    body = "\n".join(anchors)
    return f"<!DOCTYPE html><html><body><h1>Links for {project}</h1>\n{body}\n</body></html>\n"


def _anchor(filename: str, extra: str = "") -> str:
    return f'<a href="../../files/{filename}#sha256=00"{extra}>{filename}</a><br/>'


def _build_index(root: Path) -> None:
    files = root / "files"
    files.mkdir(parents=True)
    torch_wheels = [
        "torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl",  # below min_torch
        "torch-2.6.0-cp311-cp311-manylinux_2_28_x86_64.whl",  # the only one with .metadata
        "torch-2.6.0-cp312-cp312-manylinux1_x86_64.whl",  # lowest glibc floor
        "torch-2.6.0-cp313-cp313t-manylinux_2_28_x86_64.whl",  # free-threaded: not a "python"
        "torch-2.6.0-cp314-cp314-manylinux_2_28_aarch64.whl",  # not x86_64
        "torch-2.6.0-cp314-cp314-win_amd64.whl",  # not Linux
        "torch-2.6.0.tar.gz",  # sdist
        "torch-2.7.0rc1-cp312-cp312-manylinux_2_28_x86_64.whl",  # pre-release
        "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl",  # METADATA only inside the wheel
    ]
    for name in torch_wheels:
        (files / name).write_bytes(b"not a real wheel")
    (files / "torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl.metadata").write_text(
        TORCH_260_METADATA.replace("2.6.0", "2.5.1"), encoding="utf-8"
    )
    (files / "torch-2.6.0-cp311-cp311-manylinux_2_28_x86_64.whl.metadata").write_text(
        TORCH_260_METADATA, encoding="utf-8"
    )
    _write_wheel(
        files / "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl", "torch-2.11.0.dist-info", TORCH_2110_METADATA
    )
    yanked = "torch-2.6.1-cp312-cp312-manylinux1_x86_64.whl"
    (files / yanked).write_bytes(b"")
    (files / f"{yanked}.metadata").write_text(TORCH_260_METADATA.replace("2.6.0", "2.6.1"), encoding="utf-8")

    vision = {
        "0.21.0": "torch (==2.6.0)",
        "0.26.0": "torch==2.11.0",
        "0.27.0": "torch>=2.11.0",  # not an exact pin: must not claim 2.11.0
        "0.20.5": "torch==2.6.0",  # also pins 2.6.0, but the newest pinning release wins
        "0.20.1": "torch (==2.5.1)",
    }
    vision_anchors = []
    for version, req in vision.items():
        name = f"torchvision-{version}-cp312-cp312-manylinux_2_28_x86_64.whl"
        (files / name).write_bytes(b"")
        (files / f"{name}.metadata").write_text(_vision_metadata(version, req), encoding="utf-8")
        vision_anchors.append(_anchor(name))

    for project, anchors in {
        "torch": [_anchor(n) for n in torch_wheels] + [_anchor(yanked, ' data-yanked=""')],
        "torchvision": vision_anchors,
    }.items():
        page = root / "simple" / project
        page.mkdir(parents=True)
        (page / "index.html").write_text(_page(project, anchors), encoding="utf-8")
    # no simple/torchaudio/: the index does not carry it


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


class _JsonHandler(_QuietHandler):
    """Serves simple/<project>/index.json as PEP 691 JSON when the client asks for it."""

    def do_GET(self) -> None:
        wanted = "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
        page = Path(self.directory) / self.path.lstrip("/") / "index.json"
        if wanted and self.path.startswith("/simple/") and page.is_file():
            body = page.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


def _html_to_json(root: Path) -> None:
    """Write a PEP 691 twin of each PEP 503 page (same files, same yanks)."""
    for page in (root / "simple").glob("*/index.html"):
        rows = [
            {"filename": href.split("/")[-1].split("#")[0], "url": href, "hashes": {}, "yanked": "data-yanked" in rest}
            for href, rest in re.findall(r'<a href="([^"]+)"([^>]*)>', page.read_text(encoding="utf-8"))
        ]
        doc = {"meta": {"api-version": "1.1"}, "name": page.parent.name, "files": rows}
        (page.parent / "index.json").write_text(json.dumps(doc), encoding="utf-8")


def _serve(root: Path, handler: type[http.server.SimpleHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(params=["html", "json"])
def index_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    _build_index(tmp_path)
    if request.param == "json":
        _html_to_json(tmp_path)
        yield from _serve(tmp_path, _JsonHandler)
    else:
        yield from _serve(tmp_path, _QuietHandler)


def test_fetch_table_from_local_index(index_url: str) -> None:
    table = fetch_table(index_url, min_torch="2.6", timeout=10)

    assert table["schema"] == 1
    assert table["source"] == index_url
    assert table["generated"] == datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    assert table["driver_floor"] == driver_floor()
    releases = table["releases"]
    assert isinstance(releases, dict)
    assert list(releases) == ["2.6.0", "2.11.0"]  # 2.5.1 < min, 2.6.1 yanked, 2.7.0rc1 pre-release

    r260 = releases["2.6.0"]
    assert r260["requires_python"] == ">=3.9.0"
    assert r260["python"] == ["3.11", "3.12"]
    assert r260["glibc"] == "2.5"
    assert r260["torchvision"] == "0.21.0"
    assert r260["torchaudio"] is None
    assert r260["variants"] == {
        "cu124": {
            "cuda": "12.4",
            "index": "pypi",
            "cudnn": "9.1.0.70",
            "nccl": "2.21.5",
            "triton": "3.2.0",
            "packages": {
                "nvidia-cublas-cu12": "12.4.5.8",
                "nvidia-cuda-runtime-cu12": "12.4.127",
                "nvidia-cudnn-cu12": "9.1.0.70",
                "nvidia-nccl-cu12": "2.21.5",
                "triton": "3.2.0",
            },
            "constraints": {},
            "verified": True,
        },
        "cpu": {
            "cuda": None,
            "index": "pytorch",
            "cudnn": None,
            "nccl": None,
            "triton": None,
            "packages": {},
            "constraints": {},
            "verified": False,
        },
    }

    r2110 = releases["2.11.0"]
    assert r2110["requires_python"] == ">=3.10"
    assert r2110["python"] == ["3.12"]
    assert r2110["glibc"] == "2.28"
    assert r2110["torchvision"] == "0.26.0"
    assert sorted(r2110["variants"]) == ["cpu", "cu130"]
    cu130 = r2110["variants"]["cu130"]
    assert (cu130["cuda"], cu130["cudnn"], cu130["nccl"], cu130["triton"]) == ("13.0", "9.19.0.56", "2.28.9", "3.6.0")
    assert cu130["packages"] == {
        "cuda-toolkit": "13.0.2",
        "nvidia-cudnn-cu13": "9.19.0.56",
        "nvidia-nccl-cu13": "2.28.9",
        "triton": "3.6.0",
    }
    assert cu130["constraints"] == {"cuda-bindings": "<14,>=13.0.3"}


def test_write_table_format(tmp_path: Path) -> None:
    out = tmp_path / "data" / "compat.json"
    write_table({"b": 1, "a": {"y": 2, "x": [1]}}, out)
    assert out.read_text(encoding="utf-8") == '{\n "a": {\n  "x": [\n   1\n  ],\n  "y": 2\n },\n "b": 1\n}\n'


def _table() -> dict[str, object]:
    variant = {
        "cuda": "12.4",
        "index": "pypi",
        "cudnn": "9.1.0.70",
        "nccl": "2.21.5",
        "triton": "3.2.0",
        "packages": {"nvidia-cudnn-cu12": "9.1.0.70", "nvidia-nccl-cu12": "2.21.5"},
        "constraints": {},
        "verified": True,
    }
    release = {
        "requires_python": ">=3.9.0",
        "python": ["3.11", "3.12"],
        "glibc": "2.5",
        "torchvision": "0.21.0",
        "torchaudio": "2.6.0",
        "variants": {"cu124": variant},
    }
    return {
        "schema": 1,
        "generated": "2025-01-01",
        "source": "https://pypi.org/simple",
        "driver_floor": driver_floor(),
        "releases": {"2.5.1": copy.deepcopy(release), "2.6.0": release},
    }


def test_diff_tables_reports_changes() -> None:
    old = _table()
    new = copy.deepcopy(old)
    new["generated"] = "2025-02-01"  # not a change worth reporting
    releases = new["releases"]
    assert isinstance(releases, dict)
    r260 = releases["2.6.0"]
    r260["variants"]["cu124"]["packages"]["nvidia-cudnn-cu12"] = "9.1.0.99"
    r260["variants"]["cu124"]["cudnn"] = "9.1.0.99"
    r260["variants"]["cu124"]["packages"]["nvidia-cusparselt-cu12"] = "0.6.2"
    r260["torchvision"] = "0.21.1"
    del releases["2.5.1"]
    releases["2.7.0"] = copy.deepcopy(r260)

    assert diff_tables(old, new) == [
        "removed release 2.5.1",
        "2.6.0: torchvision 0.21.0 -> 0.21.1",
        "2.6.0 cu124: cudnn 9.1.0.70 -> 9.1.0.99",
        "2.6.0 cu124: pin nvidia-cudnn-cu12 9.1.0.70 -> 9.1.0.99",
        "2.6.0 cu124: pin nvidia-cusparselt-cu12 added (0.6.2)",
        "added release 2.7.0 (variants: cu124)",
    ]
    assert diff_tables(old, copy.deepcopy(old)) == []


def test_unreachable_index_raises() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/simple"
    with pytest.raises(IndexUnreachable, match=rf"127\.0\.0\.1:{port}/simple/torch/"):
        fetch_table(url, timeout=2)


def test_missing_project_raises(tmp_path: Path) -> None:
    (tmp_path / "simple").mkdir()
    for url in _serve(tmp_path, _QuietHandler):
        with pytest.raises(IndexUnreachable, match="not found on the index"):
            fetch_table(url, timeout=5)


# --------------------------------------------------------------------------- the CLI over a local index


def test_cli_refresh_writes_the_table_and_prints_changes(index_url: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from imagebuilder.cli import main

    out = tmp_path / "table.json"
    assert main(["compat", "refresh", "--index", index_url, "--out", str(out), "--min-torch", "2.6"]) == 0
    printed = capsys.readouterr().out
    assert "2.6.0" in printed and f"wrote {out}" in printed
    table = json.loads(out.read_text())
    assert table["releases"]["2.6.0"]["variants"]["cu124"]["nccl"] == "2.21.5"
    # A second refresh from the same index changes nothing.
    assert main(["compat", "refresh", "--index", index_url, "--out", str(out), "--min-torch", "2.6"]) == 0
    assert "no changes" in capsys.readouterr().out
    # The refreshed table is what `compat show` and planning read.
    assert main(["--compat", str(out), "compat", "show", "--torch", "2.6.0", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown[0]["variants"]["cu124"]["cudnn"] == "9.1.0.70"


def test_cli_refresh_from_an_unreachable_index_leaves_the_table(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from imagebuilder.cli import main

    out = tmp_path / "table.json"
    out.write_text('{"old": true}\n')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once we leave: nothing listens there
    assert main(["compat", "refresh", "--index", f"http://127.0.0.1:{port}/simple", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "unchanged" in err and "Traceback" not in err
    assert out.read_text() == '{"old": true}\n'
