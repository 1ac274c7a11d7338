"""Issue 48, the wheels an index serves: each pip install a node's template makes is pinned by the lock
(`installs.<key>`: each wheel it adds by name, version, file, source and sha256), and under the lock it installs
those files alone (`--no-deps --require-hashes -r`). On the in-memory ports: what `lock` resolves for a chain (a
node's install adds only what the chain below it lacks), what it keeps and what `--update` resolves again (with the
installs above it), the rendered text and context, and the refusal of an install the lock does not pin. For real: uv
resolving from a wheelhouse and a file:// index, offline (the wheels' hashes are the files'), and pip refusing a file
replaced on the index under its name, naming both hashes."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.commands import lock as lock_cmd
from imagebuilder.errors import InputError
from imagebuilder.input import lock as lock_mod
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.plan import bases, pinned
from imagebuilder.plan.installs import PLATFORM, raw_installs
from imagebuilder.plan.plan import Plan
from imagebuilder.ports.resolver import Ask, Resolved, ResolveFailed, UvResolver, wheels_of

from ..conftest import MatrixWriter
from .fakes import FakeEngine, FakeRegistry, FakeResolver

MATRIX = """
version: 1
base_image: debian:bookworm
registry: 127.0.0.1:5000/ml
repository: pytorch
layers: [base, business, task]
matrix: {torch: [2.6.0, 2.7.1], accelerator: [cpu], python: ['3.11']}
"""
NEEDS = {"torch": ("filelock", "sympy"), "sympy": ("mpmath",), "transformers": ("filelock", "tokenizers"),
         "datasets": ("filelock", "pyarrow")}


def engine() -> FakeEngine:
    fake = FakeEngine(FakeRegistry())
    fake.add({"config": {"Labels": {"base": "b"}}}, "debian:bookworm")
    return fake


def load(path: Path, table: CompatTable, *, locked: bool = True) -> Plan:
    """As `load_plan` makes it: the lock's installs rendered as pinned, and checked."""
    return pinned.make(matrix_mod.load(path, table, env={}), lock_mod.read(lock_mod.beside(path)) if locked else None)


def lock(path: Path, table: CompatTable, resolver: FakeResolver, update: tuple[str, ...] | None = None
         ) -> lock_cmd.Locking:
    return lock_cmd.lock(load(path, table, locked=False), path, engine(), update=update, offline=False,
                         resolver=resolver)


@pytest.fixture
def matrix(write_matrix: MatrixWriter) -> Path:
    return write_matrix(MATRIX)


@pytest.fixture
def table() -> CompatTable:
    return CompatTable.load()


def test_each_install_adds_only_what_its_chain_lacks_and_is_pinned_by_name_version_file_source_and_hash(
        matrix: Path, table: CompatTable) -> None:
    resolver = FakeResolver(needs=NEEDS)
    done = lock(matrix, table, resolver)
    read = lock_mod.read(lock_mod.beside(matrix))
    assert read is not None and read.installs is not None
    plan = load(matrix, table)
    base = plan.node("2.7.1-cpu-py3.11-runtime/base").rendered.installs
    business = plan.node("2.7.1-cpu-py3.11-runtime/business").rendered.installs
    assert len(base) == 1 and len(business) == 1 and business[0].after == base[0].key
    torch = read.install(base[0].key)
    above = read.install(business[0].key)
    assert torch is not None and above is not None
    assert [w.name for w in torch.wheels] == ["filelock", "mpmath", "sympy", "torch", "torchaudio", "torchvision"]
    assert {w.name: w.version for w in torch.wheels}["torch"] == "2.7.1"
    # the business layer's install adds what torch's did not: filelock is below it already
    assert [w.name for w in above.wheels] == ["accelerate", "datasets", "pyarrow", "safetensors", "tokenizers",
                                              "transformers"]
    wheel = above.wheels[0]
    assert (wheel.file, wheel.source, wheel.sha256) == ("accelerate-1.15.0-py3-none-any.whl",
                                                        "https://pypi.org/simple/accelerate-1.15.0.whl",
                                                        hashlib.sha256(b"accelerate-1.15.0").hexdigest())
    # what business was resolved against: the entry's pins and every wheel its chain installed
    asked = [a for a in resolver.asked if "transformers==5.23.0" in a.requirements]
    assert [{"torch==2.6.0", "torch==2.7.1"} & set(a.constraints) for a in asked] == [{"torch==2.6.0"},
                                                                                       {"torch==2.7.1"}]
    assert all("mpmath==1.0" in a.constraints and (a.python, a.platform) == ("3.11", PLATFORM) for a in asked)
    assert len(read.installs) == 4 and sum(isinstance(c, lock_cmd.InstallChange) for c in done.changes) == 4
    text = lock_mod.beside(matrix).read_text()
    assert f"installs:\n  {sorted(i.key for i in read.installs)[0]}:\n    kind: venv\n" in text
    again = lock(matrix, table, FakeResolver(needs=NEEDS, salt="other bytes now"))  # what it pins is kept
    assert not again.changed and {c.line().split()[0] for c in again.changes
                                  if isinstance(c, lock_cmd.InstallChange)} == {"kept"}


def test_under_the_lock_an_install_takes_its_wheels_alone_each_checked_by_its_hash(
        matrix: Path, table: CompatTable) -> None:
    unlocked = load(matrix, table, locked=False).node("2.7.1-cpu-py3.11-runtime/business").rendered
    assert "--require-hashes" not in unlocked.dockerfile and "transformers==5.23.0" in unlocked.dockerfile
    lock(matrix, table, FakeResolver(needs=NEEDS))
    node = load(matrix, table).node("2.7.1-cpu-py3.11-runtime/business")
    text = node.rendered.dockerfile
    assert "COPY _imagebuilder/wheels-1.txt /tmp/imagebuilder-wheels.txt\n" in text
    assert '--no-deps --require-hashes -r /tmp/imagebuilder-wheels.txt' in text
    assert "transformers==5.23.0" not in text  # (the file names it, with its hash)
    assert " && pip check " in text and "pip freeze --all" in text  # the environment still checked and recorded
    files = dict(node.rendered.files)
    sha = hashlib.sha256(b"transformers-5.23.0").hexdigest()
    assert f"transformers==5.23.0 --hash=sha256:{sha}\n" in files["_imagebuilder/wheels-1.txt"].decode()
    base = load(matrix, table).node("2.7.1-cpu-py3.11-runtime/base").rendered
    assert "--require-hashes -r /tmp/imagebuilder-wheels.txt" in base.dockerfile
    assert "torch==2.7.1 --hash=sha256:" in dict(base.files)["_imagebuilder/wheels-1.txt"].decode()


def test_an_install_the_lock_does_not_pin_is_refused_before_anything_runs(
        write_matrix: MatrixWriter, matrix: Path, table: CompatTable) -> None:
    lock(matrix, table, FakeResolver(needs=NEEDS))
    load(matrix, table)  # (pinned: it loads)
    layers = matrix.parent / "layers"
    (layers / "business").mkdir(parents=True)
    (layers / "business" / "layer.yaml").write_text("description: a team's libraries\npip: [transformers==5.24.0]\n")
    (layers / "business" / "Dockerfile.j2").write_text(
        'FROM {{ parent_image }}\n{% import "macros.j2" as m %}\n{{ m.pip_install(build, layer.pip) }}\n')
    matrix.write_text(matrix.read_text() + "layers_path: [layers]\n")  # (a layer's requirement moved)
    with pytest.raises(InputError) as caught:
        load(matrix, table)
    said = str(caught.value)
    assert "business: pip install transformers==5.24.0 from https://pypi.org/simple" in said
    assert f"is not pinned by the lock file {lock_mod.beside(matrix)}" in said
    assert caught.value.hint is not None and "run `imagebuilder lock`" in caught.value.hint
    done = lock(matrix, table, FakeResolver(needs=NEEDS))  # `lock` pins it; the torch installs are kept
    lines = [c.line() for c in done.changes if isinstance(c, lock_cmd.InstallChange)]
    assert sum(line.startswith("pinned   ") for line in lines) == 2  # (one per torch: its chain differs)
    assert sum(line.startswith("dropped  ") for line in lines) == 2
    assert sum(line.startswith("kept") for line in lines) == 2
    load(matrix, table)


RAW = '''FROM {{ parent_image }}
# pip install in a comment installs nothing
RUN echo "pip install, said" && pip freeze && pip check
RUN pip install --no-deps --require-hashes -r /opt/team/hashed.txt
RUN apt-get update \\
 && pip install requests
RUN ["python3", "-m", "pip", "install", "numpy"]
RUN bash -c 'cd /tmp && PIP_NO_CACHE_DIR=1 /opt/venv/bin/pip3.11 install --user foo'
RUN <<END
set -e
uv pip install bar
END
RUN if true; then micromamba install -y qux; fi; easy_install old
RUN --mount=type=cache,target=/root/.cache/pip pip install -r requirements.txt
RUN <<END
#!/bin/bash
# the team's wheels
pip install heredoc-after-comments
END
RUN V=${X#v} && curl -fsS http://x/#frag && echo $((1<<2)) && bash -lc 'pip install nested'
RUN pip download --dest /tmp/w wheels-only && pip install --no-deps --require-hashes -r /tmp/hashed.txt
'''


def test_every_spelling_of_an_install_outside_the_macros_is_found_and_hashed_ones_are_not() -> None:
    found = [(r.line, r.command) for r in raw_installs(RAW)]
    assert found == [(5, "pip install requests"), (7, "python3 -m pip install numpy"),
                     (8, "/opt/venv/bin/pip3.11 install --user foo"), (9, "uv pip install bar"),
                     (13, "micromamba install -y qux"), (13, "easy_install old"),
                     (14, "pip install -r requirements.txt"), (15, "pip install heredoc-after-comments"),
                     (20, "pip install nested")]


def test_a_team_layers_own_pip_install_is_refused_under_the_lock_naming_its_template_line_and_command(
        matrix: Path, table: CompatTable) -> None:
    """Issue 48: what a layer installs by its own `RUN pip install` the lock cannot pin (it is not recorded), so under
    a lock of version 3 it stops the plan, naming the template, its line and the command; one that checks hashes
    itself is taken, and without a lock (or with one of version 1 or 2) the template builds as it always did."""
    lock(matrix, table, FakeResolver(needs=NEEDS))
    layers = matrix.parent / "layers"
    (layers / "business").mkdir(parents=True)
    (layers / "business" / "layer.yaml").write_text("description: a team's libraries\n")
    template = layers / "business" / "Dockerfile.j2"
    template.write_text("FROM {{ parent_image }}\nRUN pip install --no-deps --require-hashes -r /opt/h.txt\n")
    matrix.write_text(matrix.read_text() + "layers_path: [layers]\n")
    load(matrix, table)  # (hashed by its own file: taken)
    template.write_text("FROM {{ parent_image }}\nRUN apt-get update \\\n && pip install 'requests>=2'\n")
    with pytest.raises(InputError) as caught:
        load(matrix, table)
    said = str(caught.value)
    assert said.startswith(f"{template}:2: node ") and "its layer 'business' runs `pip install requests>=2`" in said
    assert f"an install the lock file {lock_mod.beside(matrix)} cannot pin" in said, said
    assert caught.value.hint is not None and "m.pip_install(build, layer.pip)" in caught.value.hint
    assert load(matrix, table, locked=False)  # (no lock: as it always built)


def test_update_of_a_wheel_resolves_its_installs_again_and_the_installs_above_them(
        matrix: Path, table: CompatTable) -> None:
    lock(matrix, table, FakeResolver(needs=NEEDS))
    before = {n.id: n.key for n in bases.keyed(bases.resolve(load(matrix, table), engine())).nodes}
    newer = FakeResolver(needs=NEEDS, versions={"mpmath": "1.4"})
    done = lock(matrix, table, newer, update=("mpmath",))  # (only the torch installs lock it)
    lines = [c.line() for c in done.changes if isinstance(c, lock_cmd.InstallChange)]
    updated = [line for line in lines if line.startswith("updated  ")]
    assert len(updated) == 2 and all("mpmath==1.4" in line for line in updated), lines
    assert all("rebuilds 3 node(s)" in line for line in updated)  # base, business, task of its torch
    # business was resolved again after them (what it adds follows what is below it), to the same wheels
    assert sum("transformers==5.23.0" in a.requirements for a in newer.asked) == 2
    after = {n.id: n.key for n in bases.keyed(bases.resolve(load(matrix, table), engine())).nodes}
    assert [n for n in before if before[n] != after[n]] == list(before)  # every node is above a torch install


def test_outdated_resolves_each_locked_install_again_naming_what_moved_and_the_nodes_it_rebuilds(
        matrix: Path, table: CompatTable) -> None:
    """Issue 48's drift watcher for index wheels: each install judged against the chain the lock pins below it; a newer
    dependency and a file replaced under its version are `moved` with the nodes taking them rebuilds and the command
    that takes them; an index that does not answer, or --offline, is `unknown`, never current."""
    lock(matrix, table, FakeResolver(needs=NEEDS))
    plan, pinned_ = load(matrix, table), lock_mod.read(lock_mod.beside(matrix))

    def drift(resolver: FakeResolver | None, offline: bool = False) -> dict[str, lock_cmd.InstallDrift]:
        return {f"{d.nodes[0]}: {d.said.split(' from ')[0]}": d
                for d in lock_cmd.install_drift(plan, pinned_, resolver, offline=offline)}

    same = drift(FakeResolver(needs=NEEDS))
    assert len(same) == 4 and {d.status for d in same.values()} == {"current"}
    torch26 = "2.6.0-cpu-py3.11-runtime/base: pip install torch==2.6.0, torchvision==0.21.0, torchaudio==2.6.0"
    newer = drift(FakeResolver(needs=NEEDS, versions={"mpmath": "1.4"}))
    assert sorted(k for k, d in newer.items() if d.status == "moved") == sorted(
        k for k in newer if ": pip install torch" in k)  # (only the torch installs pull mpmath)
    moved = newer[torch26]
    assert [(c["name"], c["change"], (c["now"] or "")[:3]) for c in moved.changes()] == [("mpmath", "newer", "1.4")]
    assert moved.rebuilds == tuple(n.id for n in plan.nodes if n.entry.torch == "2.6.0")  # base, business, task
    text = "\n".join(lock_cmd.install_lines(tuple(newer.values())))
    assert "installs: 2 moved, 0 unknown, 2 current" in text and "newer    mpmath: locked 1.0 sha256:" in text
    assert "rebuilds 3 node(s)" in text and "take it: imagebuilder lock --update mpmath" in text, text
    replaced = drift(FakeResolver(needs=NEEDS, salt="re-uploaded"))[torch26]  # the same versions, other bytes
    assert {c["change"] for c in replaced.changes()} == {"replaced"} and replaced.status == "moved"
    assert {d.status for d in drift(None, offline=True).values()} == {"unknown"}
    assert all(d.why == "not asked (--offline)" and not d.changes() for d in drift(None, offline=True).values())

    class Silent(FakeResolver):
        def resolve(self, ask: Ask) -> tuple[Resolved, ...]:
            raise ResolveFailed("error sending request for url (https://pypi.org/simple/)")

    silent = drift(Silent())
    assert {d.status for d in silent.values()} == {"unknown"} and "no answer" in silent[torch26].why
    found = lock_cmd.Outdated("matrix.lock.yaml", (), (), (), tuple(silent.values()))
    assert not found.current and found.to_json()["installs"][0]["status"] == "unknown"
    # `lock --update mpmath` takes it; then every install is current again
    lock(matrix, table, FakeResolver(needs=NEEDS, versions={"mpmath": "1.4"}), update=("mpmath",))
    plan, pinned_ = load(matrix, table), lock_mod.read(lock_mod.beside(matrix))
    assert {d.status for d in drift(FakeResolver(needs=NEEDS, versions={"mpmath": "1.4"})).values()} == {"current"}


def test_uv_resolves_for_the_images_python_from_a_wheelhouse_and_a_file_index_offline(tmp_path: Path) -> None:
    house, index = tmp_path / "wheels", tmp_path / "simple"
    alpha = wheel(house, "alpha", "1.0", requires=("beta>=2",))
    beta = wheel(house, "beta", "2.0")
    gamma = wheel(index / "gamma", "gamma", "3.0")
    page(index / "gamma")
    found = UvResolver().resolve(Ask(("alpha==1.0", "gamma==3.0"), index.as_uri(), "3.11", PLATFORM,
                                     find_links=house, offline=True))
    assert [(r.name, r.version, r.file, r.sha256) for r in found] == [
        ("alpha", "1.0", alpha.name, sha(alpha)), ("beta", "2.0", beta.name, sha(beta)),
        ("gamma", "3.0", gamma.name, sha(gamma))]
    assert found[0].url == alpha.as_uri() and found[2].url == gamma.as_uri()
    with pytest.raises(ResolveFailed, match="beta"):  # a constraint no file meets: uv's own words
        UvResolver().resolve(Ask(("alpha==1.0",), index.as_uri(), "3.11", PLATFORM, constraints=("beta==3.0",),
                                 find_links=house, offline=True))


def test_of_several_compatible_wheels_the_one_pip_would_install_is_locked_and_none_is_refused() -> None:
    """uv lists every wheel compatible with the platform (seen: a py3-none-any wheel beside manylinux2014 and
    manylinux_2_28 builds); the lock takes the one pip installs there, by its tag priority."""
    def w(file: str, digit: str) -> dict[str, object]:
        return {"url": f"https://x/simple/a/{file}", "hashes": {"sha256": digit * 64}}

    listed = [w("a-1.0-py3-none-any.whl", "0"), w("a-1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                                                   "1"), w("a-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", "2")]
    for order in (listed, listed[::-1]):
        (got,) = wheels_of({"packages": [{"name": "a", "version": "1.0", "wheels": order}]}, "3.11",
                           "x86_64-manylinux_2_28")
        assert (got.file, got.sha256) == ("a-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", "2" * 64)
    (older,) = wheels_of({"packages": [{"name": "a", "version": "1.0", "wheels": listed}]}, "3.11",
                         "x86_64-manylinux_2_17")  # (an older glibc: the 2_28 build is not for it)
    assert older.sha256 == "1" * 64
    with pytest.raises(ResolveFailed, match=r"a 1\.0: no wheel of the resolution is for Python 3\.11"):
        wheels_of({"packages": [{"name": "a", "version": "1.0", "wheels": [w("a-1.0-cp312-cp312-win_amd64.whl",
                                                                              "3")]}]})
    with pytest.raises(ResolveFailed, match=r"b 2\.0: the resolution gives no wheel"):
        wheels_of({"packages": [{"name": "b", "version": "2.0", "sdist": {"url": "https://x/b-2.0.tar.gz"}}]})


def test_uv_asks_an_http_index_anew_each_time_never_answering_from_its_cache(tmp_path: Path) -> None:
    """`outdated` and `lock --update` must see what the index serves now: a release added since the last answer is
    found (uv's cache would call the old one current: seen, `outdated` said current for a newer beta)."""
    simple = tmp_path / "simple"
    wheel(simple / "beta", "beta", "2.0")
    page(simple / "beta")
    with served(tmp_path) as url:
        ask = Ask(("beta>=2",), f"{url}/simple", "3.11", PLATFORM)
        assert [r.version for r in UvResolver().resolve(ask)] == ["2.0"]
        wheel(simple / "beta", "beta", "2.1")
        page(simple / "beta")
        assert [r.version for r in UvResolver().resolve(ask)] == ["2.1"]


def test_pip_refuses_a_file_the_index_replaced_under_its_name_naming_both_hashes(tmp_path: Path) -> None:
    """The locked install's own options (`macros.j2`'s `locked_opts`), run by the real pip against a file:// index."""
    index = tmp_path / "simple"
    gamma = wheel(index / "gamma", "gamma", "3.0")
    (index / "gamma" / "index.html").write_text(f'<a href="{gamma.name}">{gamma.name}</a>\n')
    good = sha(gamma)
    (tmp_path / "wheels.txt").write_text(f"gamma==3.0 --hash=sha256:{good}\n")

    def install() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--index-url",
                               index.as_uri(), "--no-deps", "--require-hashes", "-r", str(tmp_path / "wheels.txt"),
                               "--target", str(tmp_path / "t"), "--disable-pip-version-check"],
                              capture_output=True, text=True, check=False)

    assert install().returncode == 0
    wheel(index / "gamma", "gamma", "3.0", body="tampered")  # the same name, other bytes
    refused = install()
    assert refused.returncode != 0 and "THESE PACKAGES DO NOT MATCH THE HASHES" in refused.stderr
    assert good in refused.stderr and sha(gamma) in refused.stderr and good != sha(gamma)


def page(project: Path) -> None:
    """PEP 503's page of a project's folder of an index: each wheel in it, with its sha256 (written again after a
    file changes)."""
    (project / "index.html").write_text("".join(f'<a href="{f.name}#sha256={sha(f)}">{f.name}</a>\n'
                                                for f in sorted(project.glob("*.whl"))))


@contextlib.contextmanager
def served(root: Path) -> Iterator[str]:
    """`root` served over HTTP on loopback, as an index is (its URL), until the block ends."""
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wheel(folder: Path, name: str, version: str, *, requires: tuple[str, ...] = (), body: str = "") -> Path:
    """A tiny pure-Python wheel (`name-version-py3-none-any.whl`) that pip and uv read as any other."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    files = {f"{name}/__init__.py": f"# {body}\n", f"{info}/METADATA": meta,
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{p},,\n" for p in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for p, text in {**files, f"{info}/RECORD": record}.items():
            zf.writestr(zipfile.ZipInfo(p, (2020, 1, 1, 0, 0, 0)), text)
    return path
