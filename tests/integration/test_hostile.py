"""Hostile values and credentials on the real engine (issue 15): every value of tests/hostile/values.yaml
that is accepted is built at once into one probe layer, and nothing it holds runs; an index that needs
credentials is reached through imagebuilder's loopback proxy, and no trace of the password is in the image;
a secret a layer writes into a file is found by the layer scan."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import urllib.parse
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from imagebuilder.ports.engine import DockerEngine

from ..auth_index import auth_index, basic
from .conftest import ROOT, Chain, CliRun, cpu_matrix, report

INERT = [c for c in yaml.safe_load((ROOT / "tests" / "hostile" / "values.yaml").read_text()) if c["expect"] == "inert"]


def chain_base(cpu_chain: Chain, engine: DockerEngine) -> Path:
    """The session chain's layer folders (its base image is on the engine: the probe builds on it)."""
    cpu_chain.image(engine, "base")
    return cpu_chain.folder / "layers"


@pytest.fixture(autouse=True)
def _leave_the_chain_childless(engine: DockerEngine, tmp_path: Path) -> Iterator[None]:
    """These tests build on the session chain's base image; what they built is removed afterwards, so the chain
    has no children when later tests remove its images (an image with children cannot be removed)."""
    yield
    for folder in tmp_path.glob("*"):
        if (folder / "report.json").is_file():
            for node in report(folder)["nodes"]:
                if node["image"] and node["layer"] != "base":
                    engine.remove_image(node["image"])


def run_in(engine: DockerEngine, image: str, script: str) -> str:
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", image, "sh", "-c", script],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_every_accepted_hostile_value_is_inert_in_a_real_build(
        engine: DockerEngine, registry: str, wheelhouse: Path, cpu_chain: Chain, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    probe = tmp_path / "layers" / "probe"
    shutil.copytree(ROOT / "tests" / "hostile" / "probe", probe)
    meta = yaml.safe_load((probe / "layer.yaml").read_text())
    values = {c["key"]: c["value"] for c in INERT}
    meta["description"] = values["layer.description"]
    meta["pip"] = [values["layer.pip.0"]]
    (probe / "layer.yaml").write_text(yaml.safe_dump(meta))
    index_url = values["build.index_url"]
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, probe]",
                        extra=f"layers_path: [{chain_base(cpu_chain, engine)}, layers]\n")
    text = matrix.read_text().replace("build:\n", f"build:\n  index_url: '{index_url}'\n", 1)
    matrix.write_text(text)
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-push", "--no-smoke")
    assert run.code == 0, run.text[-3000:]
    node = {n["layer"]: n for n in report(tmp_path / "r")["nodes"]}["probe"]
    assert node["build"] == "built"
    image = node["image"]
    # Nothing ran: no marker of any of the values' commands, anywhere in the image.
    assert run_in(engine, image, "ls -d /tmp/pwned* /pwned* 2>/dev/null || true").strip() == ""
    # Each value was written back exactly as it was given: quoted, not interpreted.
    assert run_in(engine, image, "cat /opt/probe/description") == values["layer.description"] + "\n"
    assert run_in(engine, image, "cat /opt/probe/pip") == values["layer.pip.0"] + "\n"
    assert run_in(engine, image, "cat /opt/probe/index_url") == index_url + "\n"
    config = engine.inspect(image)["Config"]
    assert f"PROBE_DESCRIPTION={values['layer.description']}" in config["Env"]
    assert config["Labels"]["io.imagebuilder.probe"] == values["layer.description"]
    # The pins still hold: the requirement with a marker was installed under the image's constraints.
    frozen = run_in(engine, image, "pip freeze --all; echo ---; cat /opt/imagebuilder/constraints.txt")
    installed, constraints = frozen.split("---\n")
    assert "torch==2.13.0" in installed and "torch==2.13.0" in constraints
    filelock = next(line for line in installed.splitlines() if line.lower().startswith("filelock=="))
    assert filelock in constraints


# -- an index that needs credentials ------------------------------------------------------------------

def wheel(name: str, version: str) -> tuple[str, bytes]:
    """A minimal pure-Python wheel (one module) built here, so the test's index serves something real."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}.py": b"VALUE = 42\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: itest\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()}"
                     f",{len(data)}\n" for path, data in files.items()) + f"{dist}/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, data in [*files.items(), (f"{dist}/RECORD", record.encode())]:
            zf.writestr(path, data)
    return f"{name}-{version}-py3-none-any.whl", buf.getvalue()


@contextlib.contextmanager
def basic_auth_index(user: str, password: str, project: str, version: str) -> Iterator[tuple[str, list[str]]]:
    """A PEP 503 index on loopback that answers only with the right credentials: (its URL, the Authorization
    headers it was sent)."""
    filename, data = wheel(project, version)

    def respond(path: str, port: int) -> tuple[int, dict[str, str], bytes]:
        if path.rstrip("/") == f"/simple/{project}":  # an absolute link back to the index itself
            link = f"http://127.0.0.1:{port}/files/{filename}#sha256={hashlib.sha256(data).hexdigest()}"
            return 200, {"Content-Type": "text/html"}, f'<a href="{link}">{filename}</a>'.encode()
        if path == f"/files/{filename}":
            return 200, {"Content-Type": "application/octet-stream"}, data
        return 404, {}, b""

    with auth_index(basic(user, password), respond) as served:
        yield served


def every_layer(image: str) -> Iterator[tuple[str, bytes]]:
    """Every file of every layer of an image (docker save), with its bytes."""
    saved = subprocess.run(["docker", "save", image], capture_output=True, check=True, timeout=600).stdout
    with tarfile.open(fileobj=io.BytesIO(saved)) as outer:
        for member in outer.getmembers():
            if member.isfile():
                blob = outer.extractfile(member)
                assert blob is not None
                data = blob.read()
                yield member.name, data
                if member.name.endswith("layer.tar"):
                    with tarfile.open(fileobj=io.BytesIO(data)) as inner:
                        for item in inner.getmembers():
                            stream = inner.extractfile(item) if item.isfile() else None
                            if stream is not None:
                                yield f"{member.name}:{item.name}", stream.read()


def test_an_index_that_needs_credentials_leaves_no_trace_of_them(
        engine: DockerEngine, registry: str, wheelhouse: Path, cpu_chain: Chain, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    user, password = "itest", "pw-" + os.urandom(12).hex()
    layers = tmp_path / "layers"
    (layers / "private").mkdir(parents=True)
    # After pip (through the proxy, with the run's token in its environment), a process that does not use the
    # proxy settings asks the index's proxy straight: it is refused, as anything on the machine but this run's
    # builds would be.
    (layers / "private" / "Dockerfile.j2").write_text(
        'FROM {{ parent_image }}\n{% import "macros.j2" as m %}\n{{ m.pip_install(build, layer.pip) }}\n'
        'RUN python3 -c "import http.client as h, os, urllib.parse as p; '
        "u = p.urlsplit(os.environ['IMAGEBUILDER_INDEX_URL']); c = h.HTTPConnection(u.netloc, timeout=30); "
        "c.request('GET', u.path + '/ibprivate/'); s = c.getresponse().status; "
        "print('without the run token:', s); assert s == 407, s\"\n")
    (layers / "private" / "layer.yaml").write_text("pip: [ibprivate==1.0]\n")
    with basic_auth_index(user, password, "ibprivate", "1.0") as (url, seen):
        matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, private]",
                            extra=f"layers_path: [{chain_base(cpu_chain, engine)}, layers]\n")
        matrix.write_text(matrix.read_text().replace("build:\n", f"build:\n  index_url: {url}\n", 1))
        args = ("build", "--matrix", str(matrix), "--no-push", "--no-smoke")
        # Without credentials the index refuses pip: the test's index really needs them.
        denied = cli(*args, "--report", str(tmp_path / "denied"))
        assert denied.code == 1 and seen and not any(seen), denied.text[-2000:]
        seen.clear()
        run = cli(*args, "--report", str(tmp_path / "r"),
                  env={"IMAGEBUILDER_INDEX_USER": user, "IMAGEBUILDER_INDEX_PASSWORD": password,
                       "IMAGEBUILDER_INDEX_HOSTS": urllib.parse.urlsplit(url).netloc})
        assert run.code == 0, run.text[-3000:]
        assert seen and all(seen), seen  # pip came through the proxy, which added the credentials
        assert "without the run token: 407" in run.text, run.text[-3000:]
    node = {n["layer"]: n for n in report(tmp_path / "r")["nodes"]}["private"]
    image = node["image"]
    assert "$IMAGEBUILDER_INDEX_USER/$IMAGEBUILDER_INDEX_PASSWORD" in run.text and password not in run.text
    assert run_in(engine, image, "python -c 'import ibprivate; print(ibprivate.VALUE)'") == "42\n"
    traces = (password, base64.b64encode(f"{user}:{password}".encode()).decode())
    history = subprocess.run(["docker", "history", "--no-trunc", image], capture_output=True, text=True).stdout
    inspect = subprocess.run(["docker", "inspect", image], capture_output=True, text=True).stdout
    assert "ibprivate" in history or "pip install" in history  # the step is there ...
    assert "_proxy=" not in history.lower() and "@127.0.0.1" not in history  # ... and not the run's proxy token
    for trace in traces:  # ... with no trace of the credentials: history, inspect, every layer's files
        assert trace not in history and trace not in inspect
    leaks = [name for name, data in every_layer(image) if any(trace.encode() in data for trace in traces)]
    assert leaks == [], leaks  # (the image saved and read once for both)
    assert node["secret_scan"] and "files" in node["secret_scan"]
    saved_report = json.dumps(report(tmp_path / "r"))
    assert password not in saved_report


def test_a_secret_in_a_layers_files_fails_the_node(
        engine: DockerEngine, registry: str, wheelhouse: Path, cpu_chain: Chain, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    secret = "hf_" + "q" * 36
    folder = tmp_path / "layers" / "leaky"
    folder.mkdir(parents=True)
    (folder / "Dockerfile.j2").write_text("FROM {{ parent_image }}\nCOPY team.env /opt/team/.env\n"
                                          "COPY notes.txt /opt/team/notes.txt\n")
    (folder / "team.env").write_text(f"HF_TOKEN={secret}\n")
    (folder / "notes.txt").write_text("deploy with ghp_" + "A1b2" * 9 + "\n")  # a token nobody told us of
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, leaky]",
                        extra=f"layers_path: [{chain_base(cpu_chain, engine)}, {tmp_path / 'layers'}]\n")
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-push", "--no-smoke",
              env={"HF_TOKEN": secret})
    assert run.code == 1, run.text[-3000:]
    node = {n["layer"]: n for n in report(tmp_path / "r")["nodes"]}["leaky"]
    assert node["build"] == "failed" and node["image"] is None
    error = node["error"]
    assert "$HF_TOKEN appears in the file /opt/team/.env" in error
    assert "the file /opt/team/notes.txt holds a GitHub token" in error
    assert secret not in run.text and "A1b2A1b2" not in error
    assert engine.images_with_label(f"io.imagebuilder.key={node['key']}") == []  # removed: no run reuses it
