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
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuilder.input.compat_refresh import (
    IndexUnreachable,
    diff_tables,
    driver_floor,
    fetch_table,
    index_kind,
    merge_tables,
    write_table,
)

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
            "extras": {},
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
            "extras": {},
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
    assert cu130["extras"] == {"cuda-toolkit": ["cublas", "cudart", "nvrtc"]}  # what the shared CUDA node installs


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


# --------------------------------------------------------------------------- a PyTorch-style index (local labels)

CU126_PINS = {
    "nvidia-cuda-runtime-cu12": "12.6.77",
    "nvidia-cudnn-cu12": "9.5.1.17",
    "nvidia-nccl-cu12": "2.26.2",
}


def _torch_metadata(version: str, pins: dict[str, str]) -> str:
    lines = [f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\nRequires-Python: >=3.9.0\n",
             "Requires-Dist: filelock\n", "Requires-Dist: sympy==1.13.1\n"]
    lines += [f"Requires-Dist: {name}=={pin}; platform_system == \"Linux\"\n" for name, pin in pins.items()]
    return "".join(lines) + "\n"


def _build_pytorch_index(root: Path) -> None:
    """Like download.pytorch.org/whl: wheels with local labels, companions pinning labelled torch."""
    files = root / "files"
    files.mkdir(parents=True)
    metadata = {  # wheel -> its .metadata file (None: the index serves none)
        "torch-2.5.1+cu124-cp311-cp311-manylinux_2_28_x86_64.whl": _torch_metadata(  # below min_torch
            "2.5.1+cu124", {"nvidia-cuda-runtime-cu12": "12.4.127"}
        ),
        "torch-2.6.0+cu126-cp311-cp311-manylinux_2_28_x86_64.whl": _torch_metadata("2.6.0+cu126", CU126_PINS),
        "torch-2.6.0+cu126-cp312-cp312-manylinux_2_28_x86_64.whl": None,  # tried first, no .metadata
        "torch-2.6.0+cpu-cp313-cp313-manylinux_2_28_x86_64.whl": None,  # not a readable wheel either
        "torch-2.6.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl": None,  # METADATA only inside the wheel
        "torch-2.6.0+cpu.cxx11.abi-cp311-cp311-manylinux_2_28_x86_64.whl": _torch_metadata("2.6.0+cpu.cxx11.abi", {}),
        # Labelled cu128, but pins CUDA 12.6: contradicts its label, so no variant.
        "torch-2.6.0+cu128-cp311-cp311-manylinux_2_28_x86_64.whl": _torch_metadata("2.6.0+cu128", CU126_PINS),
        "torch-2.6.0-cp311-cp311-manylinux_2_28_aarch64.whl": _torch_metadata("2.6.0", {}),  # not x86_64
        "torch-2.7.0+rocm6.3-cp312-cp312-manylinux_2_28_x86_64.whl": None,  # only a label with no variant
        # No CUDA pins under a cuNNN label: CUDA bundled in the wheel, its version from the label.
        "torch-2.8.0+cu118-cp312-cp312-manylinux_2_28_x86_64.whl": _torch_metadata("2.8.0+cu118", {}),
    }
    for name, text in metadata.items():
        (files / name).write_bytes(b"not a real wheel")
        if text is not None:
            (files / f"{name}.metadata").write_text(text, encoding="utf-8")
    _write_wheel(
        files / "torch-2.6.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.6.0+cpu.dist-info",
        _torch_metadata("2.6.0+cpu", {}),
    )
    companions = {
        "torchvision": {"0.21.0+cu126": "torch==2.6.0+cu126", "0.21.0+cpu": "torch==2.6.0+cpu",
                        "0.22.0+rocm6.3": "torch==2.7.0+rocm6.3"},
        "torchaudio": {"2.6.0+cu126": "torch==2.6.0+cu126"},
    }
    pages: dict[str, list[str]] = {
        "torch": [_anchor(n, ' data-requires-python="&gt;=3.9"' if "rocm" in n else "") for n in metadata]
    }
    for project, pins in companions.items():
        for version, req in pins.items():
            name = f"{project}-{version}-cp311-cp311-manylinux_2_28_x86_64.whl"
            (files / name).write_bytes(b"")
            meta = _vision_metadata(version, req).replace("torchvision", project)
            (files / f"{name}.metadata").write_text(meta, encoding="utf-8")
            pages.setdefault(project, []).append(_anchor(name))
    for project, anchors in pages.items():
        page = root / "simple" / project
        page.mkdir(parents=True)
        (page / "index.html").write_text(_page(project, anchors), encoding="utf-8")


@pytest.fixture
def pytorch_index_url(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "pytorch"
    _build_pytorch_index(root)
    yield from _serve(root, _QuietHandler)


def _pytorch_table(url: str) -> dict[str, object]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fetch_table(url, min_torch="2.6", timeout=10)


CU126_VARIANT: dict[str, object] = {
    "cuda": "12.6",
    "index": "pytorch",
    "cudnn": "9.5.1.17",
    "nccl": "2.26.2",
    "triton": None,
    "packages": CU126_PINS,
    "extras": {},
    "constraints": {},
    "verified": True,
}
CPU_VERIFIED: dict[str, object] = {
    "cuda": None,
    "index": "pytorch",
    "cudnn": None,
    "nccl": None,
    "triton": None,
    "packages": {},
    "extras": {},
    "constraints": {},
    "verified": True,
}


def test_fetch_table_from_pytorch_style_index(pytorch_index_url: str) -> None:
    with pytest.warns(UserWarning) as caught:
        table = fetch_table(pytorch_index_url, min_torch="2.6", timeout=10)

    messages = sorted(str(w.message) for w in caught)
    assert messages == [
        "torch 2.6.0+cu128: its METADATA pins cu126 (CUDA 12.6), not cu128; variant omitted",
        f"torch wheels on {pytorch_index_url} with local labels cpu.cxx11.abi, rocm6.3 give no variant",
    ]
    assert table["source"] == pytorch_index_url
    assert table["schema"] == 1
    assert table["releases"] == {
        "2.6.0": {
            "requires_python": ">=3.9.0",
            "python": ["3.11", "3.12", "3.13"],
            "glibc": "2.28",
            "torchvision": "0.21.0",
            "torchaudio": "2.6.0",
            "variants": {"cpu": CPU_VERIFIED, "cu126": CU126_VARIANT},  # no unverified placeholder
        },
        "2.7.0": {  # only a rocm wheel: listed, with no variant
            "requires_python": ">=3.9",
            "python": ["3.12"],
            "glibc": "2.28",
            "torchvision": "0.22.0",
            "torchaudio": None,
            "variants": {},
        },
        "2.8.0": {
            "requires_python": ">=3.9.0",
            "python": ["3.12"],
            "glibc": "2.28",
            "torchvision": None,
            "torchaudio": None,
            "variants": {"cu118": {**CPU_VERIFIED, "cuda": "11.8"}},
        },
    }


def test_index_kind() -> None:
    labelled = ["torch-2.6.0+cu126-cp311-cp311-manylinux_2_28_x86_64.whl", "torch-2.6.0.tar.gz"]
    plain = ["torch-2.6.0-cp311-cp311-manylinux_2_28_x86_64.whl", "torch-2.6.0.tar.gz", "not-a-wheel.whl"]
    assert index_kind("https://pypi.org/simple") == "pypi"
    assert index_kind("https://pypi.org/simple/", labelled) == "pypi"  # PyPI's URL decides, trailing slash or not
    assert index_kind("https://download.pytorch.org/whl/cu126", labelled) == "pytorch"
    assert index_kind("https://download.pytorch.org/whl/cu126", plain) == "pypi"
    assert index_kind("https://test.pypi.org/simple", labelled) == "pytorch"
    assert index_kind("http://127.0.0.1:8080/simple", plain) == "pypi"


def test_fetch_table_explicit_kind(index_url: str, pytorch_index_url: str) -> None:
    # Forced to "pypi", a PyTorch-style index's labelled wheels are all ignored.
    assert fetch_table(pytorch_index_url, min_torch="2.6", timeout=10, kind="pypi")["releases"] == {}
    # Forced to "pytorch", unlabelled wheels give no variant, and no placeholder is added.
    with pytest.warns(UserWarning, match=r"with local labels \(none\) give no variant"):
        table = fetch_table(index_url, min_torch="2.6", timeout=10, kind="pytorch")
    releases = table["releases"]
    assert isinstance(releases, dict)
    assert list(releases) == ["2.6.0", "2.11.0"]
    assert releases["2.6.0"]["variants"] == {}
    assert releases["2.6.0"]["python"] == ["3.11", "3.12"]
    assert releases["2.6.0"]["torchvision"] == "0.21.0"
    with pytest.raises(ValueError, match="unknown index kind 'conda'"):
        fetch_table(index_url, kind="conda")  # type: ignore[arg-type]


def test_merge_pypi_and_pytorch_tables(index_url: str, pytorch_index_url: str) -> None:
    pypi = fetch_table(index_url, min_torch="2.6", timeout=10)
    pytorch = _pytorch_table(pytorch_index_url)
    pypi_before, pytorch_before = copy.deepcopy(pypi), copy.deepcopy(pytorch)

    merged = merge_tables([pypi, pytorch])

    assert (pypi, pytorch) == (pypi_before, pytorch_before)  # inputs untouched
    assert merged["schema"] == 1
    assert merged["source"] == f"{index_url}, {pytorch_index_url}"
    assert merged["generated"] == pypi["generated"]
    assert merged["driver_floor"] == driver_floor()
    assert "conflicts" not in merged
    releases = merged["releases"]
    assert isinstance(releases, dict)
    assert list(releases) == ["2.6.0", "2.7.0", "2.8.0", "2.11.0"]
    pypi_rel, pytorch_rel = pypi["releases"], pytorch["releases"]
    assert isinstance(pypi_rel, dict) and isinstance(pytorch_rel, dict)
    assert releases["2.11.0"] == pypi_rel["2.11.0"]  # only on PyPI: unverified cpu placeholder kept
    assert releases["2.11.0"]["variants"]["cpu"]["verified"] is False
    assert releases["2.7.0"] == pytorch_rel["2.7.0"]

    r260 = releases["2.6.0"]
    assert list(r260["variants"]) == ["cpu", "cu124", "cu126"]
    assert r260["variants"]["cu124"] == pypi_rel["2.6.0"]["variants"]["cu124"]
    assert r260["variants"]["cu124"]["index"] == "pypi"
    assert r260["variants"]["cu126"] == CU126_VARIANT
    assert r260["variants"]["cpu"] == CPU_VERIFIED  # the verified one replaced PyPI's placeholder
    assert {k: v for k, v in r260.items() if k != "variants"} == {
        "requires_python": ">=3.9.0",
        "python": ["3.11", "3.12", "3.13"],  # union, in version order
        "glibc": "2.5",  # the lower floor (PyPI's manylinux1 wheel), not the string-wise lower "2.28"
        "torchvision": "0.21.0",
        "torchaudio": "2.6.0",  # PyPI's is null: the first non-null one
    }

    # PyTorch's table first: its verified cpu still beats PyPI's later placeholder.
    reverse = merge_tables([pytorch, pypi])
    assert reverse["source"] == f"{pytorch_index_url}, {index_url}"
    assert reverse["releases"]["2.6.0"]["variants"]["cpu"] == CPU_VERIFIED  # type: ignore[index]

    # A third index whose verified cu126 disagrees: the earlier table wins, the clash is recorded.
    mirror = "https://mirror.example/whl/cu126"
    other = copy.deepcopy(pytorch)
    other["source"] = mirror
    cu126 = other["releases"]["2.6.0"]["variants"]["cu126"]  # type: ignore[index]
    cu126["nccl"] = "2.27.3"
    cu126["packages"]["nvidia-nccl-cu12"] = "2.27.3"
    with_conflict = merge_tables([pypi, pytorch, other])
    assert with_conflict["releases"]["2.6.0"]["variants"]["cu126"] == CU126_VARIANT  # type: ignore[index]
    assert with_conflict["conflicts"] == [
        {"release": "2.6.0", "accelerator": "cu126", "kept": pytorch_index_url, "dropped": mirror,
         "fields": ["nccl", "packages"]},
    ]
    assert with_conflict["source"] == f"{index_url}, {pytorch_index_url}, {mirror}"


def test_merge_tables_rules() -> None:
    pypi = _table()
    pytorch = copy.deepcopy(pypi)
    pytorch["source"] = "https://download.pytorch.org/whl/cu124"
    pytorch["generated"] = "2025-03-01"
    pytorch["driver_floor"] = {}
    rel = pytorch["releases"]
    assert isinstance(rel, dict)
    rel["2.6.0"]["variants"]["cu124"]["index"] = "pytorch"  # the same build on another index: no conflict
    rel["2.5.1"]["variants"]["cu124"]["cudnn"] = "9.1.0.99"  # a verified disagreement
    rel["2.6.0"]["variants"]["cu118"] = {"cuda": "11.8", "verified": False}
    rel["2.6.0"]["python"] = ["3.13", "3.9"]
    rel["2.6.0"]["glibc"] = "2.17"
    rel["2.6.0"]["torchvision"] = "0.21.1"
    unverified = copy.deepcopy(pypi)
    unverified["source"] = "https://pypi.org/simple"  # a repeated source is listed once
    unverified_rel = unverified["releases"]
    assert isinstance(unverified_rel, dict)
    unverified_rel["2.6.0"]["variants"]["cu124"] = {"cuda": "12.4", "cudnn": "0", "verified": False}
    unverified_rel["2.6.0"]["variants"]["cu118"] = {"cuda": "11.8", "cudnn": "8", "verified": False}

    merged = merge_tables([pypi, pytorch, unverified])

    assert merged["source"] == "https://pypi.org/simple, https://download.pytorch.org/whl/cu124"
    assert (merged["generated"], merged["driver_floor"]) == ("2025-01-01", driver_floor())
    assert merged["conflicts"] == [
        {"release": "2.5.1", "accelerator": "cu124", "kept": "https://pypi.org/simple",
         "dropped": "https://download.pytorch.org/whl/cu124", "fields": ["cudnn"]},
    ]
    releases = merged["releases"]
    assert isinstance(releases, dict)
    original = pypi["releases"]
    assert isinstance(original, dict)
    assert releases["2.5.1"] == original["2.5.1"]
    r260 = releases["2.6.0"]
    assert r260["variants"] == {
        "cu118": {"cuda": "11.8", "verified": False},  # unverified: the first one stays
        "cu124": original["2.6.0"]["variants"]["cu124"],
    }
    assert (r260["python"], r260["glibc"], r260["torchvision"]) == (["3.9", "3.11", "3.12", "3.13"], "2.5", "0.21.0")

    # Conflicts already recorded in an input are carried over; no tables at all is an error.
    again = merge_tables([merged, pypi])
    assert again["conflicts"] == merged["conflicts"]
    assert "conflicts" not in merge_tables([pypi])
    with pytest.raises(ValueError, match="at least one table"):
        merge_tables([])

    # The merged table shares nothing with its inputs.
    r260["variants"]["cu124"]["packages"]["nvidia-nccl-cu12"] = "0"
    assert original["2.6.0"]["variants"]["cu124"]["packages"]["nvidia-nccl-cu12"] == "2.21.5"


def test_cli_refresh_merges_pypi_and_pytorch_indexes(index_url: str, pytorch_index_url: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from imagebuilder.cli import main

    out = tmp_path / "merged.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(["compat", "refresh", "--index", index_url, "--index", pytorch_index_url, "--out", str(out),
                     "--min-torch", "2.6"])
    assert code == 0, capsys.readouterr()
    variants = json.loads(out.read_text())["releases"]["2.6.0"]["variants"]
    assert variants["cu124"]["index"] == "pypi" and variants["cu126"]["index"] == "pytorch"
    assert variants["cpu"]["verified"] is True
    # Planning against the merged table now accepts torch 2.6.0 on cu126 (PyTorch's index), pinned.
    matrix = tmp_path / "m.yaml"
    matrix.write_text("base_image: debian:bookworm\nregistry: r:5000\nrepository: p\nlayers: [base]\n"
                      "matrix: {torch: [2.6.0], accelerator: [cu126], python: ['3.11']}\n")
    capsys.readouterr()
    assert main(["--compat", str(out), "plan", "--matrix", str(matrix), "--json"]) == 0
    (node,) = json.loads(capsys.readouterr().out)
    assert (node["entry"]["cudnn"], node["entry"]["nccl"]) == ("9.5.1.17", "2.26.2")
