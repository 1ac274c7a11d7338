"""The lock file on the real engine and registry (issue 48, base images): a base image re-tagged upstream to a new
digest is named by `outdated` with exactly the nodes it rebuilds; a build without `lock --update` keeps the locked
image (FROM its locked digest: nothing rebuilds); a locked image this engine cannot have stops the build with exit 2
before anything builds; after `lock --update` a build rebuilds those nodes and nothing else. Tiny layers, no smoke
suite, nothing pushed but the test's own base images: well under a minute."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from imagebuilder.ports.engine import DockerEngine

from .conftest import REGISTRY, ROOT, Chain, CliRun, dockerfile_context, itest_matrix, report

PYTHON_BASE = ("FROM debian:bookworm\nRUN apt-get update && apt-get install -y --no-install-recommends python3 "
               "&& rm -rf /var/lib/apt/lists/*\n")


def image(engine: DockerEngine, dockerfile: str, name: str) -> str:
    """Build a one-file context on the engine, tag it `name` and push it to the test registry: its image ID."""
    built = engine.build(dockerfile_context(dockerfile), network="host", sink=lambda line: None)
    engine.tag(built, name)
    engine.push(name)
    return built


def built(folder: Path) -> dict[str, str]:
    """node id -> its build status, from a run's report."""
    return {n["node"]: n["build"] for n in report(folder)["nodes"]}


def test_a_base_retagged_upstream_rebuilds_exactly_its_nodes_once_the_lock_takes_it(
        engine: DockerEngine, registry: str, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    names = f"{REGISTRY}/itest/lockbase-{uuid.uuid4().hex[:8]}"
    a, b = f"{names}:a", f"{names}:b"  # the test's own base images (debian:bookworm itself is never re-tagged)
    python = image(engine, PYTHON_BASE, f"{names}:python")  # (the engine's build cache after the first time)
    for name in (a, b):
        image(engine, f"FROM {python}\nLABEL io.imagebuilder.itest.base={name}\n", name)  # (new IDs every run)
    for layer in ("tiny", "top"):
        (tmp_path / "layers" / layer).mkdir(parents=True)
        (tmp_path / "layers" / layer / "Dockerfile.j2").write_text(f"FROM {{{{ parent_image }}}}\nRUN echo {layer} "
                                                                   f"> /{layer}\n")
    matrix = itest_matrix(tmp_path, repository, layers="[tiny, top]", body=f"""
        layers_path: [layers]
        matrix: {{torch: ["2.13.0"], accelerator: [cpu], python: ["3.11"], base_image: ['{a}', '{b}']}}
        """)
    lock_file = tmp_path / "matrix.lock.yaml"

    def build(folder: str) -> CliRun:
        return cli("build", "--matrix", str(matrix), "--report", str(tmp_path / folder), "--no-push", "--no-smoke")

    run = cli("lock", "--matrix", str(matrix))
    assert run.code == 0, run.text
    pinned = lock_file.read_text()
    assert pinned.count("source: registry") == 2 and f"{names}@sha256:" in pinned
    run = build("r1")
    assert run.code == 0, run.text[-3000:]
    first = built(tmp_path / "r1")
    assert set(first.values()) == {"built"} and len(first) == 4
    on_a = sorted(n for n in first if "lockbase" in n and n.split("/")[0].endswith("-a"))
    on_b = sorted(set(first) - set(on_a))
    assert len(on_a) == len(on_b) == 2

    # Upstream, `a` is re-tagged to another image: a new digest in the registry (and on this engine).
    moved = image(engine, f"FROM {a}\nLABEL io.imagebuilder.itest.moved={uuid.uuid4().hex}\n", a)
    run = cli("outdated", "--matrix", str(matrix), "--json")
    assert run.code == 0, run.text
    drift = {d["name"]: d for d in json.loads(run.out)["bases"]}
    assert (drift[a]["status"], sorted(drift[a]["rebuilds"]), drift[a]["new_id"]) == ("moved", on_a, moved)
    assert (drift[b]["status"], drift[b]["rebuilds"]) == ("current", [])
    text = cli("outdated", "--matrix", str(matrix))
    assert f"moved    {a}" in text.out and "rebuilds 2 node(s)" in text.out, text.text

    # The build does not take it: the lock is its input (FROM the locked digest), so nothing rebuilds.
    run = build("r2")
    assert run.code == 0, run.text[-3000:]
    assert set(built(tmp_path / "r2").values()) == {"cached"}
    assert re.search(rf"{re.escape(a)} names image {moved}.*keeps image", run.out.replace("\n", " ")), run.out[-3000:]

    # A lock that pins an image this engine does not have and the registry cannot give: refused, nothing built.
    refused = tmp_path / "refused"
    refused.mkdir()
    shutil.copytree(tmp_path / "layers", refused / "layers")
    shutil.copy(matrix, refused / "matrix.yaml")
    gone = f"sha256:{'0' * 64}"
    locked_b = re.search(rf"{re.escape(b)}:\n    id: (sha256:[0-9a-f]{{64}})\n    digest: (\S+)", pinned)
    assert locked_b is not None
    (refused / "matrix.lock.yaml").write_text(pinned.replace(locked_b.group(1), gone.replace("0", "1"))
                                              .replace(locked_b.group(2), f"{names}@{gone}"))
    run = cli("build", "--matrix", str(refused / "matrix.yaml"), "--report", str(refused / "r"), "--no-push",
              "--no-smoke")
    assert run.code == 2, run.text[-3000:]
    assert f"{refused / 'matrix.lock.yaml'}:" in run.err and "cannot be pulled by its locked digest" in run.err
    assert f"the lock pins image sha256:{'1' * 64}" in run.err and "Nothing was built" in run.err
    assert "Traceback" not in run.text and not (refused / "r").exists()

    # `lock --update a` takes it; the next build rebuilds exactly a's nodes.
    run = cli("lock", "--matrix", str(matrix), "--update", a)
    assert run.code == 0, run.text
    assert f"updated  {a}" in run.out and "rebuilds 2 node(s)" in run.out and f"kept     {b}" in run.out
    assert lock_file.read_text() != pinned
    run = build("r3")
    assert run.code == 0, run.text[-3000:]
    third = built(tmp_path / "r3")
    assert sorted(n for n, s in third.items() if s == "built") == on_a
    assert sorted(n for n, s in third.items() if s == "cached") == on_b
    roots = {n["node"]: n for n in report(tmp_path / "r3")["nodes"] if n["node"].endswith("/tiny")}
    assert {(n["base"] or {}).get("id") for k, n in roots.items() if k in on_a} == {moved}
    assert cli("outdated", "--matrix", str(matrix), "--exit-code-nothing-to-do").code == 3


def test_a_wheel_replaced_under_its_name_stops_the_build_naming_the_file_and_both_hashes(
        engine: DockerEngine, registry: str, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    """Issue 48: a wheelhouse the lock pins file by file. The same name with other bytes (the same size: the key
    used to be names and sizes) stops `build` with exit 2 before anything runs, naming the lock file and line, the
    file and both hashes; `lock --update FILE` takes it and the next build rebuilds the node that takes wheels."""
    import hashlib

    python = f"{REGISTRY}/itest/lockbase-{uuid.uuid4().hex[:8]}:python"
    image(engine, PYTHON_BASE, python)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    name = "imagebuilder_itest_tiny-1.0-py3-none-any.whl"
    (wheels / name).write_bytes(b"first bytes")
    (tmp_path / "layers" / "tiny").mkdir(parents=True)
    (tmp_path / "layers" / "tiny" / "Dockerfile.j2").write_text(  # (new keys every run, on any engine)
        f"FROM {{{{ parent_image }}}}\nRUN echo tiny {uuid.uuid4().hex} > /tiny\n")
    matrix = itest_matrix(tmp_path, repository, layers="[tiny]", body=f"""
        layers_path: [layers]
        build: {{wheelhouse: wheels}}
        matrix: {{torch: ["2.13.0"], accelerator: [cpu], python: ["3.11"], base_image: ['{python}']}}
        """)

    def build(folder: str) -> CliRun:
        return cli("build", "--matrix", str(matrix), "--report", str(tmp_path / folder), "--no-push", "--no-smoke")

    first, second = (f"sha256:{hashlib.sha256(b).hexdigest()}" for b in (b"first bytes", b"other bytes"))
    run = cli("lock", "--matrix", str(matrix))
    assert run.code == 0 and f"pinned   {name} (wheelhouse wheels): " in run.out, run.text
    lock_file = tmp_path / "matrix.lock.yaml"
    assert f"wheelhouses:\n  wheels:\n    {name}: {first}\n" in lock_file.read_text()
    assert build("r1").code == 0
    (wheels / name).write_bytes(b"other bytes")
    # The shipped drift watcher (.github/workflows/drift.yml), run by a real Actions runner (act) on a commit of a
    # repository that holds this matrix, its lock and the wheelhouse as it is now: it names the file that moved
    # and takes it, printing the lock's diff (the pull request it would open is GitHub's, not act's).
    said = drift_on_act(tmp_path, ["matrix.yaml", "matrix.lock.yaml", "layers", "wheels"])
    assert f"moved    {name} (wheelhouse wheels): locked {first[:19]}, now {second[:19]}" in said, said[-4000:]
    assert f"updated  {name} (wheelhouse wheels): " in said and "rebuilds 1 node(s)" in said, said[-4000:]
    assert f"+    {name}: {second}" in said and f"-    {name}: {first}" in said, said[-4000:]
    run = build("r2")
    line = lock_file.read_text().splitlines().index(f"    {name}: {first}") + 1
    assert run.code == 2, run.text[-3000:]
    assert run.err.startswith(f"error: {lock_file}:{line}:") or f"{lock_file}:{line}:" in run.err, run.err
    assert f"{name} is not the file the lock pins: expected {first}, found {second}" in run.err, run.err
    assert "Traceback" not in run.text and not (tmp_path / "r2").exists()
    run = cli("lock", "--matrix", str(matrix), "--update", name)
    assert run.code == 0 and f"updated  {name} (wheelhouse wheels): " in run.out and "rebuilds 1 node(s)" in run.out
    run = build("r3")
    assert run.code == 0, run.text[-3000:]
    assert built(tmp_path / "r3") == dict.fromkeys(built(tmp_path / "r1"), "built")  # (its key follows the pin)


def drift_on_act(folder: Path, files: list[str]) -> str:
    """`.github/workflows/drift.yml` run by act on a commit of the project with `files` of `folder` (the matrix,
    its lock and what they name): its log. This machine is the runner (`-self-hosted`); its engine and registry are
    the ones the matrix names."""
    from .test_pipelines import act_binary, git

    repo = folder / "drift-repo"
    for name in ("pyproject.toml", "README.md", "imagebuilder", "templates", "layers", ".github/workflows/drift.yml"):
        source, target = ROOT / name, repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target)
    for name in files:  # (the test's own layers over the project's)
        source, target = folder / name, repo / name
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target)
    (repo / ".gitignore").write_text("reports/\n", encoding="utf-8")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the project, a matrix, its lock and its wheelhouse")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("IMAGEBUILDER_")}, "NO_COLOR": "1",
           "COLUMNS": "200", "XDG_CACHE_HOME": str(folder / "act-xdg"),
           "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")}
    done = subprocess.run([act_binary(), "workflow_dispatch", "-W", ".github/workflows/drift.yml", "-P",
                           "ubuntu-24.04=-self-hosted", "--var", "IMAGEBUILDER_MATRIX=matrix.yaml"], cwd=repo,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=900)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-6000:]
    return said


def test_a_locked_install_builds_the_same_files_cold_and_refuses_an_index_file_replaced_under_its_name(
        engine: DockerEngine, cpu_chain: Chain, tmp_path: Path, repository: str,
        cli: Callable[..., CliRun]) -> None:
    """Issue 48, index wheels: a team layer's pip install (macros.j2's pip_install) on the session's CPU torch image,
    from an index served here over HTTP. `lock` pins its wheels by hash (uv, for real); a newer release on the index
    is named by `outdated` with exactly the node it rebuilds, and the build still installs the locked files; a cold
    rebuild (`--no-cache`: every step run again) installs the same files, so the two images' SBOM components (name,
    version and RECORD hash) are the same; a file the index then serves under the same name with other bytes stops
    the build, pip naming the file and both hashes."""
    from imagebuilder.supply.inventory import Inventory, read_folder

    from ..unit.test_installs import page, served, sha, wheel

    simple = tmp_path / "index" / "simple"
    pinned = {"alpha": wheel(simple / "alpha", "alpha", "1.0", requires=("beta>=2",)),
              "beta": wheel(simple / "beta", "beta", "2.0")}
    for project in pinned:
        page(simple / project)
    with served(tmp_path / "index") as url:
        index = f"{url}/simple"
        base = next(n for n in cpu_chain.report["nodes"] if n["node"].endswith("/base"))
        torch_image = f"itest-lockpip-{uuid.uuid4().hex[:8]}:torch"
        engine.tag(base["image"], torch_image)
        (tmp_path / "layers" / "team").mkdir(parents=True)
        (tmp_path / "layers" / "team" / "layer.yaml").write_text("description: a team's wheels\npip: [alpha==1.0]\n")
        (tmp_path / "layers" / "team" / "Dockerfile.j2").write_text(
            'FROM {{ parent_image }}\n{% import "macros.j2" as m %}\n{{ m.pip_install(build, layer.pip) }}\n')
        matrix = itest_matrix(tmp_path, repository, layers="[team]", base=torch_image, body=f"""
            layers_path: [layers]
            build: {{index_url: '{index}'}}
            matrix: {{torch: ["2.13.0"], accelerator: [cpu], python: ["3.11"]}}
            """)

        def build(folder: str, *extra: str) -> CliRun:
            return cli("build", "--matrix", str(matrix), "--report", str(tmp_path / folder), "--no-push",
                       "--no-smoke", *extra)

        def pythons(image: str) -> list[tuple[str, str, str | None]]:
            folders = engine.layer_folders(image)
            assert folders, image
            inventory = Inventory.empty()
            for i, folder in enumerate(folders):
                inventory = inventory.apply(read_folder(folder), str(i), str(i))
            return sorted((c.canonical_name, c.version, c.record) for c in inventory.pythons())

        run = cli("lock", "--matrix", str(matrix))
        assert run.code == 0 and "2 wheel(s): alpha==1.0, beta==2.0" in run.out, run.text[-3000:]
        locked = (tmp_path / "matrix.lock.yaml").read_text()
        assert f"sha256: {sha(pinned['alpha'])}" in locked and f"{index}/alpha/alpha-1.0-py3-none-any.whl" in locked
        wheel(simple / "beta", "beta", "2.1")  # upstream: a newer beta
        page(simple / "beta")
        run = build("r1")
        assert run.code == 0, run.text[-3000:]
        first = {n["node"]: n for n in report(tmp_path / "r1")["nodes"]}
        (node, built_), = first.items()
        said = json.loads(cli("outdated", "--matrix", str(matrix), "--json").out)["installs"]
        assert [(i["status"], [(c["name"], c["change"], (c["now"] or "")[:3]) for c in i["changes"]], i["rebuilds"])
                for i in said] == [("moved", [("beta", "newer", "2.1")], [node])], said
        cold = build("r2", "--no-cache")
        assert cold.code == 0, cold.text[-3000:]
        second = report(tmp_path / "r2")["nodes"][0]
        assert second["build"] == "built" and second["image"] != built_["image"]  # (every step ran again)
        mine = pythons(built_["image"])
        assert ("alpha", "1.0") in {p[:2] for p in mine} and ("beta", "2.0") in {p[:2] for p in mine}  # (not 2.1)
        assert all(record for name, _, record in mine if name in ("alpha", "beta"))
        assert pythons(second["image"]) == mine  # the same packages, each of the same files
        # The index now serves other bytes under alpha's name: pip refuses it, naming the file and both hashes.
        was = sha(pinned["alpha"])
        now = sha(wheel(simple / "alpha", "alpha", "1.0", requires=("beta>=2",), body="tampered"))
        page(simple / "alpha")
        refused = build("r3", "--no-cache")
        assert refused.code != 0 and "THESE PACKAGES DO NOT MATCH THE HASHES" in refused.text, refused.text[-3000:]
        assert "alpha" in refused.text and was in refused.text and now in refused.text, refused.text[-3000:]
