"""The lock file beside the matrix (issue 48, base images), on the in-memory ports: what `lock` pins and keeps, the
keys it makes (a node's key follows the lock, not the tag), what `outdated` says and the exact nodes a move
rebuilds, what cannot be asked (unknown, never current), and each refusal seen refusing: a matrix the lock does not
cover, and a locked image a run cannot have (nothing is built)."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from imagebuilder.commands import lock as lock_cmd
from imagebuilder.errors import EngineError, InputError
from imagebuilder.evidence.signing import Keys
from imagebuilder.evidence.spec import Specs
from imagebuilder.input import lock as lock_mod
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.input.pkg_index import IndexUnreachable
from imagebuilder.ledger import BuildStatus, NodeRecord
from imagebuilder.plan import bases, pinned, wheels
from imagebuilder.plan import cache as cache_mod
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.plan import Plan
from imagebuilder.plan.render import Renderer
from imagebuilder.steps.run import RunOptions, execute
from imagebuilder.steps.stage import Stage

from ..conftest import MatrixWriter
from .fakes import FakeEngine, FakeRegistry, FakeResolver, registries

A = "127.0.0.1:5000/bases/a:1"  # a registry's image: locked by ID and manifest digest
B = "debian:bookworm"  # imported on the engine: locked by ID alone
MATRIX = f"""
version: 1
base_image: {B}
registry: 127.0.0.1:5000/ml
repository: pytorch
layers: [base, business, task]
matrix: {{torch: [2.6.0, 2.7.1], accelerator: [cpu], python: ['3.11'], base_image: ['{A}', '{B}']}}
"""


def world() -> FakeEngine:
    """An engine with B imported and A pulled from the registry (so it knows A's manifest digest)."""
    engine = FakeEngine(FakeRegistry())
    engine.add({"config": {"Labels": {"base": "b", "v": "1"}}}, B)
    engine.add({"config": {"Labels": {"base": "a", "v": "1"}}}, A)
    engine.push(A)
    return engine


def move(engine: FakeEngine, name: str, version: str, *, push: bool = True) -> str:
    """The name names a new image on `engine` (and, pushed, in the registry): its ID."""
    image = engine.add({"config": {"Labels": {"base": name, "v": version}}}, name)
    if push:
        engine.push(name)
    return image


def load(path: Path, table: CompatTable, *, locked: bool = True) -> Plan:
    """The plan as `load_plan` makes it: pinned by the lock beside the matrix (when `locked` and there is one), its
    installs rendered as the lock pins them."""
    return pinned.make(matrix_mod.load(path, table, env={}), lock_mod.read(lock_mod.beside(path)) if locked else None)


def lock(path: Path, table: CompatTable, engine: FakeEngine, update: tuple[str, ...] | None = None,
         offline: bool = False, resolver: FakeResolver | None = None) -> lock_cmd.Locking:
    return lock_cmd.lock(load(path, table, locked=False), path, engine, update=update, offline=offline,
                         resolver=resolver or FakeResolver())


def keys_of(plan: Plan) -> dict[str, str]:
    return {n.id: n.key for n in bases.keyed(plan).nodes}


def on(plan: Plan, name: str) -> list[str]:
    """Every node of the entries built on base `name`."""
    return [n.id for n in plan.nodes if n.entry.base_image == name]


@pytest.fixture
def matrix(write_matrix: MatrixWriter) -> Path:
    return write_matrix(MATRIX)


# -- the document ----------------------------------------------------------------------------------------------------

def test_the_lock_pins_each_base_by_id_and_registry_digest_sorted_and_stable(matrix: Path, table: CompatTable) -> None:
    engine = world()
    done = lock(matrix, table, engine)
    path = matrix.with_name("matrix.lock.yaml")
    assert done.changed and done.lock.file == path
    text = path.read_text()
    assert text.startswith("# imagebuilder lock file for matrix.yaml")
    read = lock_mod.read(path)
    assert read is not None
    assert [b.name for b in read.bases] == sorted([A, B])  # sorted by name, whatever order the matrix gives
    a, b = read.base(A), read.base(B)
    assert a is not None and b is not None
    assert a.id == engine.image_id(A)
    assert a.digest == f"127.0.0.1:5000/bases/a@{engine.registry.tagged[('bases/a', '1')]}"
    assert a.source == "registry"
    assert b.id == engine.image_id(B) and b.digest is None and b.source == "local"  # imported: its ID alone
    assert {e.id: e.base_image for e in read.entries} == {e.id: e.base_image for e in load(matrix, table).entries()}
    assert [line.split(":")[0] for line in text.splitlines() if not line.startswith(("#", " "))] == \
        ["version", "bases", "installs", "entries"]
    again = lock(matrix, table, engine)  # the same inputs write the same bytes (and say so)
    assert not again.changed and path.read_text() == text
    assert {c.line().split()[0] for c in again.changes} == {"kept"}


@pytest.mark.parametrize(("edit", "needle", "key"), [
    (lambda t: t.replace("version: 3", "version: 4"), "lock file version '4': this imagebuilder reads versions 1, 2, 3",
     "version"),
    (lambda t: t.replace("    source: local", "    source: local\n    sha: x"), "unknown key 'sha'",
     "bases.debian:bookworm.sha"),
    (lambda t: t.replace("id: sha256:", "id: sha512:", 1), "is not an image ID (sha256:<64 hex>)", ".id"),
    (lambda t: t.replace("source: local", "source: registry"), "source 'registry' does not agree with the digest",
     "bases.debian:bookworm.source"),
    (lambda t: t.replace(f"    base_image: {B}", "    base_image: c:1", 1), "builds on 'c:1', which `bases` does "
     "not pin", "base_image"),
])
def test_a_lock_file_it_does_not_understand_is_refused_naming_file_line_and_key(
        matrix: Path, table: CompatTable, edit: object, needle: str, key: str) -> None:
    lock(matrix, table, world())
    path = lock_mod.beside(matrix)
    path.write_text(edit(path.read_text()))  # type: ignore[operator]
    with pytest.raises(InputError) as caught:
        load(matrix, table)
    said = str(caught.value)
    assert needle in said and said.startswith(f"{path}:") and key in said, said
    assert caught.value.exit_code == 2


# -- lock and lock --update ------------------------------------------------------------------------------------------

def test_lock_keeps_what_it_pins_and_update_takes_what_the_name_names_now(matrix: Path, table: CompatTable) -> None:
    engine = world()
    first = lock(matrix, table, engine).lock
    other = FakeEngine(engine.registry)  # another machine pushes a new A: the registry's tag moved, not this engine's
    new_a = move(other, A, "2")
    kept = lock(matrix, table, engine)
    assert kept.lock == first and not kept.changed  # `lock` keeps what it pins
    with pytest.raises(InputError, match=r"lock --update debian:bokworm: the matrix names no base image") as caught:
        lock(matrix, table, engine, update=("debian:bokworm",))
    assert caught.value.hint == "did you mean 'debian:bookworm'?"
    plan = load(matrix, table)
    updated = lock(matrix, table, engine, update=(A,))  # pulled again by its name: the registry's new image
    change = next(c for c in updated.changes if c.name == A)
    assert change.now is not None and change.now.id == new_a and engine.pulled[-1] == A
    assert change.rebuilds == tuple(on(plan, A))
    assert change.line().startswith(f"updated  {A}: image ") and "rebuilds 6 node(s)" in change.line()
    assert updated.lock.base(B) == first.base(B)  # not named: kept


def test_update_that_cannot_ask_the_registry_writes_nothing_unless_offline(matrix: Path, table: CompatTable,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    engine = world()
    lock(matrix, table, engine)
    path = lock_mod.beside(matrix)
    before = path.read_text()
    move(engine, A, "2", push=False)  # this engine's A is another image (built here; no digest of A's repository)
    engine.repo_digests[str(engine.image_id(A))] = [f"127.0.0.1:5000/bases/a@sha256:{'0' * 64}"]

    def down(ref: str, *args: object, **kwargs: object) -> str:
        raise EngineError(f"pull {ref}: registry 127.0.0.1:5000 unreachable")
    monkeypatch.setattr(engine, "pull", down)
    with pytest.raises(InputError, match=r"its registry cannot be asked .*nothing was written") as caught:
        lock(matrix, table, engine, update=())
    assert caught.value.hint and "--offline" in caught.value.hint
    assert path.read_text() == before
    offline = lock(matrix, table, engine, update=(), offline=True)  # the engine's image, as it is
    assert offline.changed and offline.lock.base(A) is not None and offline.lock.base(A).id == engine.image_id(A)


# -- keys ------------------------------------------------------------------------------------------------------------

def test_a_key_follows_the_lock_not_the_tag(matrix: Path, table: CompatTable) -> None:
    engine = world()
    unlocked = bases.resolve(load(matrix, table), engine)  # no lock file yet: the engine's images
    assert unlocked.locked is None and {b.name for b in unlocked.bases} == {A, B}
    unpinned = keys_of(unlocked)
    lock(matrix, table, engine)
    # adopting the lock changes the keys of the nodes that pip-install (their installs take the lock's wheels alone,
    # `plan/installs.py`) and of those above them: here every chain's root installs torch
    before = keys_of(load(matrix, table))
    assert all(before[n.id] != unpinned[n.id] for n in unlocked.nodes)
    assert keys_of(bases.resolve(load(matrix, table, locked=False), engine)) == unpinned  # (no lock: as before)
    move(engine, B, "2", push=False)  # the tag moves upstream (here: on this engine); the lock does not
    assert keys_of(bases.resolve(load(matrix, table, locked=False), engine)) != unpinned  # without a lock: it would
    assert keys_of(load(matrix, table)) == before  # with the lock: no key changes
    lock(matrix, table, engine, update=(B,))  # the lock takes it: exactly B's nodes change
    after = keys_of(load(matrix, table))
    changed = [n for n in before if before[n] != after[n]]
    assert changed == on(load(matrix, table), B) and len(changed) == 6


# -- outdated --------------------------------------------------------------------------------------------------------

def test_outdated_names_a_move_and_exactly_the_nodes_it_rebuilds(matrix: Path, table: CompatTable) -> None:
    engine = world()
    lock(matrix, table, engine)
    plan = load(matrix, table)
    drift = {d.name: d for d in lock_cmd.outdated(plan, engine, registries(engine.registry))}
    assert {n: d.status for n, d in drift.items()} == {A: "current", B: "current"}
    assert drift[A].rebuilds == () and drift[A].nodes == tuple(on(plan, A))
    new_a = move(FakeEngine(engine.registry), A, "2")  # the registry's tag moves
    new_b = move(engine, B, "2", push=False)  # this engine's B is another image
    drift = {d.name: d for d in lock_cmd.outdated(plan, engine, registries(engine.registry))}
    assert {n: d.status for n, d in drift.items()} == {A: "moved", B: "moved"}
    assert drift[A].new_id == new_a and drift[B].new_id == new_b
    assert drift[A].registry is not None and drift[A].registry.startswith("127.0.0.1:5000/bases/a@sha256:")
    before = keys_of(plan)
    lock(matrix, table, engine, update=(A,))
    after = keys_of(load(matrix, table))
    assert drift[A].rebuilds == tuple(n for n in before if before[n] != after[n]) == tuple(on(plan, A))
    assert drift[B].rebuilds == tuple(on(plan, B))
    text = lock_cmd.lines(tuple(drift.values()), "matrix.lock.yaml")
    assert text[0] == "matrix.lock.yaml: 2 moved, 0 unknown, 0 current"
    assert text[2] == f"         rebuilds 6 node(s): {', '.join(on(plan, A))}"
    assert json.loads(json.dumps([d.to_json() for d in drift.values()]))[0]["rebuilds"] == on(plan, A)


def test_what_cannot_be_asked_is_unknown_never_current(matrix: Path, table: CompatTable) -> None:
    engine = world()
    lock(matrix, table, engine)
    plan = load(matrix, table)

    def statuses(engine_: FakeEngine | None, pool: object) -> dict[str, tuple[str, str]]:
        return {d.name: (d.status, d.why) for d in lock_cmd.outdated(plan, engine_, pool)}  # type: ignore[arg-type]

    offline = statuses(engine, None)  # --offline: no registry asked
    assert offline[A] == ("unknown", "--offline: its registry was not asked") and offline[B][0] == "current"
    assert statuses(None, registries(engine.registry)) == {  # no engine: the local image cannot be asked
        A: ("current", ""), B: ("unknown", "no engine answers: a local image is known to this engine alone")}

    class Down:
        def __call__(self, host: str) -> object:
            raise EngineError(f"registry {host} unreachable (connection refused)")

        def at(self, ref: str) -> object:
            return self(ref.split("/")[0])
    assert statuses(engine, Down())[A] == ("unknown", "its registry did not answer (registry 127.0.0.1:5000 "
                                                       "unreachable (connection refused))")
    engine.registry.tagged.pop(("bases/a", "1"))  # the tag is gone
    assert statuses(engine, registries(engine.registry))[A][0] == "unknown"
    engine.local_tags.pop(B)  # this engine has no B any more
    assert statuses(engine, registries(engine.registry))[B] == (
        "unknown", f"this engine has no image {B}: a local image is known to this engine alone")
    drift = lock_cmd.outdated(plan, engine, None)
    assert all(d.rebuilds == () and d.nodes for d in drift)  # said as what a move would rebuild, never as current
    assert lock_cmd.lines(drift, "f")[-1] == "         not known to be current; if it moved, 6 node(s) rebuild"


def test_outdated_without_a_lock_is_an_input_error(matrix: Path, table: CompatTable) -> None:
    with pytest.raises(InputError, match="there is no lock file beside the matrix"):
        lock_cmd.outdated(load(matrix, table), world(), None)


# -- the refusals ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("edit", "needle"), [
    (lambda t: t.replace(f"base_image: ['{A}', '{B}']", f"base_image: ['{A}', '{B}', 'c:1']"),
     "base image 'c:1' (entry 2.6.0-cpu-py3.11-runtime-c-1) is not pinned by the lock file"),
    (lambda t: t.replace("torch: [2.6.0, 2.7.1]", "torch: [2.6.0, 2.7.1, 2.9.0]"),
     "entry 2.9.0-cpu-py3.11-runtime-127.0.0.1-5000-bases-a-1 is not in the lock file"),
])
def test_a_matrix_the_lock_does_not_cover_is_refused(matrix: Path, table: CompatTable, edit: object,
                                                    needle: str) -> None:
    engine = world()
    engine.add({"config": {"Labels": {"base": "c"}}}, "c:1")
    lock(matrix, table, engine)
    load(matrix, table)  # covered: loads
    matrix.write_text(edit(matrix.read_text()))  # type: ignore[operator]
    with pytest.raises(InputError) as caught:
        load(matrix, table)
    assert needle in str(caught.value) and caught.value.exit_code == 2
    assert caught.value.hint == f"run `imagebuilder lock` to pin it, then review and commit {lock_mod.beside(matrix)}"
    assert str(caught.value).startswith(f"{matrix}:")  # the matrix's line of the entry
    lock(matrix, table, engine)
    load(matrix, table)  # once `lock` ran: covered again


def test_the_command_line_refuses_an_uncovered_matrix_with_exit_2(matrix: Path, table: CompatTable,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from imagebuilder import cli

    engine = world()
    monkeypatch.setattr(cli.Context, "engine", lambda self: engine)
    monkeypatch.setattr(cli.Context, "resolver", lambda self: FakeResolver())
    monkeypatch.setattr(cli.Context, "table", lambda self: table)
    assert cli.main(["--offline", "lock", "--matrix", str(matrix)]) == 0
    assert "wrote " + str(lock_mod.beside(matrix)) in capsys.readouterr().out
    assert cli.main(["--offline", "outdated", "--matrix", str(matrix), "--exit-code-nothing-to-do"]) == 0  # A unknown
    out = capsys.readouterr().out
    assert f"unknown  {A}" in out and "nothing to do" not in out
    assert cli.main(["--offline", "lock", "--matrix", str(matrix), B]) == 2
    assert "names are the base images and wheelhouse files to update; add --update" in capsys.readouterr().err
    matrix.write_text(matrix.read_text().replace("torch: [2.6.0, 2.7.1]", "torch: [2.6.0, 2.7.1, 2.9.0]"))
    for argv in (["outdated"], ["render", "--out", str(matrix.parent / "out")], ["plan"]):
        assert cli.main(["--offline", *argv, "--matrix", str(matrix)]) == 2, argv
        err = capsys.readouterr().err
        assert "is not in the lock file" in err and "run `imagebuilder lock`" in err and "Traceback" not in err
    assert not (matrix.parent / "out").exists()


def test_outdated_exits_3_only_when_every_base_is_known_current(matrix: Path, table: CompatTable,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from imagebuilder import cli

    engine = world()
    local = matrix.with_name("local.yaml")
    local.write_text(matrix.read_text().replace(f"base_image: ['{A}', '{B}']", ""))  # B alone: asked on the engine
    monkeypatch.setattr(cli.Context, "engine", lambda self: engine)
    monkeypatch.setattr(cli.Context, "resolver", lambda self: FakeResolver())
    monkeypatch.setattr(cli.Context, "table", lambda self: table)
    assert cli.main(["--offline", "lock", "--matrix", str(local)]) == 0
    # --offline asks no index: the installs the lock pins (from https indexes) are unknown, so never nothing to do
    assert cli.main(["--offline", "outdated", "--matrix", str(local), "--exit-code-nothing-to-do"]) == 0
    said_offline = capsys.readouterr().out
    assert "installs: 0 moved, 4 unknown, 0 current" in said_offline, said_offline
    assert "not asked (--offline)" in said_offline and "nothing to do" not in said_offline
    monkeypatch.setattr(cli.Context, "index_versions", lambda self, url, project: None)  # (the index answers)
    assert cli.main(["outdated", "--matrix", str(local), "--exit-code-nothing-to-do"]) == 3
    assert "nothing to do: every locked base image and install is current" in capsys.readouterr().out
    move(engine, B, "2", push=False)
    assert cli.main(["--offline", "outdated", "--matrix", str(local), "--json", "--exit-code-nothing-to-do"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["lock"] == str(local.with_name("local.lock.yaml"))
    plan = load(local, table)
    assert [(b["name"], b["status"], b["rebuilds"]) for b in said["bases"]] == [(B, "moved", on(plan, B))]
    assert {(r["project"], r["status"]) for r in said["releases"]} == {("torch", "unknown")}  # (--offline)


def run_stage(plan: Plan, engine: FakeEngine, folder: Path) -> dict[str, NodeRecord]:
    """Stage the decided plan on the fakes, as `build` does after `bases.resolve(pull=True)`."""
    decided = cache_mod.decide(bases.keyed(plan), cache_mod.Cache(engine, registries(engine.registry)))
    records = execute(engine, decided, registries(engine.registry), Specs(decided),
                      Keys.load(folder / "keys", {}), (Stage(),), Console(file=io.StringIO()),
                      RunOptions(report_dir=folder, cache_dir=folder / "cache", logs="none"))
    return {r.node: r for r in records}


def from_line(engine: FakeEngine, index: int) -> str:
    """The FROM of the `index`th build's Dockerfile."""
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(engine.builds[index][0])) as tar:
        member = tar.extractfile("Dockerfile")
        assert member is not None
        return next(line for line in member.read().decode().splitlines() if line.startswith("FROM "))


def test_a_run_builds_from_the_lock_when_the_tag_moved(matrix: Path, table: CompatTable, tmp_path: Path) -> None:
    engine = world()
    locked = lock(matrix, table, engine).lock
    a, b = locked.base(A), locked.base(B)
    assert a is not None and b is not None and a.digest is not None
    move(engine, A, "2")  # both names now name other images, here and (A) in the registry
    move(engine, B, "2", push=False)
    said: list[str] = []
    plan = bases.resolve(load(matrix, table), engine, pull=True, say=said.append)
    assert [x.reference for x in plan.bases] == [a.digest, b.id]  # FROM repo@digest (held under it), else the ID
    assert len(said) == 2 and "keeps image" in said[0] and "the build uses it" in said[0]
    records = run_stage(plan.only("2.6.0-*"), engine, tmp_path)
    assert {r.build for r in records.values()} == {BuildStatus.BUILT}
    roots = [n for n in plan.only("2.6.0-*").nodes if n.parent is None]
    assert [records[n.id].parent_image for n in roots] == [a.id, b.id]
    assert [(records[n.id].base or {}).get("id") for n in roots] == [a.id, b.id]
    froms = [from_line(engine, i) for i in range(len(engine.builds))]
    assert f"FROM {a.digest}" in froms and f"FROM {b.id}" in froms  # the roots: the locked images, not the tags
    engine.repo_digests.pop(a.id)  # the locked image is here by ID only (loaded, not pulled): FROM its ID
    assert bases.resolve(load(matrix, table), engine, pull=True).bases[0].reference == a.id


def test_a_locked_image_a_run_cannot_have_is_refused_before_anything_builds(matrix: Path, table: CompatTable) -> None:
    engine = world()
    locked = lock(matrix, table, engine).lock
    b, a = locked.base(B), locked.base(A)
    assert a is not None and b is not None and a.digest is not None
    engine.images.pop(b.id)  # the locked (local) image is gone; the name names another
    new_b = move(engine, B, "2", push=False)
    plan = load(matrix, table)
    with pytest.raises(InputError) as caught:
        bases.resolve(plan, engine, pull=True)
    said, path = str(caught.value), lock_mod.beside(matrix)
    line = lock_mod.read(path).line(f"bases.{B}")  # type: ignore[union-attr]
    assert line is not None and said.startswith(f"{path}:{line}: bases.{B}: base image '{B}': the lock pins image "
                           f"{b.id}, which is not on this engine and has no registry digest to pull it by; its image "
                           f"here is {new_b}. Nothing was built"), said
    assert caught.value.exit_code == 2 and caught.value.hint and f"lock --update {B}" in caught.value.hint
    assert engine.builds == []
    engine.images[b.id] = {"config": {"Labels": {"base": "b", "v": "1"}}}  # B back (by ID); A's manifest gone
    engine.images.pop(a.id)
    engine.registry.manifests.pop(a.digest.rpartition("@")[2])
    with pytest.raises(InputError, match=r"which is not on this engine and cannot be pulled by its locked digest"):
        bases.resolve(plan, engine, pull=True)
    assert engine.builds == []
    assert bases.resolve(plan, engine).bases == plan.bases  # a plan (no pull) keys from the lock alone


def test_a_locked_digest_that_is_another_image_is_refused(matrix: Path, table: CompatTable) -> None:
    engine = world()
    lock(matrix, table, engine)
    path = lock_mod.beside(matrix)
    other = move(engine, "127.0.0.1:5000/bases/a:other", "x")
    text = path.read_text()
    a = lock_mod.read(path)
    assert a is not None and a.base(A) is not None
    path.write_text(text.replace(str(a.base(A).id), other))  # type: ignore[union-attr]  # hand-edited: ID ≠ digest's
    with pytest.raises(InputError, match=r"but its locked digest .* is image sha256:"):
        bases.resolve(load(matrix, table), engine, pull=True)


def test_without_a_lock_file_nothing_is_pinned(write_matrix: MatrixWriter, table: CompatTable) -> None:
    path = write_matrix(textwrap.dedent(MATRIX))
    plan = load(path, table)
    assert plan.bases == () and plan.locked is None and not lock_mod.beside(path).exists()


def test_a_lock_file_it_cannot_read_is_written_anew_only_by_update_of_every_base(matrix: Path,
                                                                                table: CompatTable) -> None:
    engine = world()
    lock(matrix, table, engine)
    path = lock_mod.beside(matrix)
    good = path.read_text()
    path.write_text(good.replace("version: 3", "version: 4"))
    with pytest.raises(InputError, match="lock file version '4'") as caught:
        lock(matrix, table, engine)  # keeping what it pins needs the file read
    assert caught.value.hint is not None and "`imagebuilder lock --update` writes it anew" in caught.value.hint
    with pytest.raises(InputError, match="lock file version '4'"):
        lock(matrix, table, engine, update=(A,))
    assert lock(matrix, table, engine, update=()).changed and path.read_text() == good


# -- wheelhouses -----------------------------------------------------------------------------------------------------

TORCH = "torch-2.6.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
VISION = "torchvision-0.21.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


@pytest.fixture
def housed(write_matrix: MatrixWriter, tmp_path: Path) -> Path:
    """The matrix, its entries on B taking wheels from a wheelhouse beside it (two files), those on A from none."""
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / TORCH).write_bytes(b"torch wheel")
    (tmp_path / "wheels" / VISION).write_bytes(b"vision wheel")
    return write_matrix(MATRIX + f"include:\n  - {{base_image: '{B}', build: {{wheelhouse: wheels}}}}\n")


def sha(data: bytes) -> str:
    import hashlib

    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def test_the_lock_pins_each_wheelhouse_file_by_sha256_and_each_entry_names_its_wheelhouse(
        housed: Path, table: CompatTable) -> None:
    done = lock(housed, table, world())
    read = lock_mod.read(lock_mod.beside(housed))
    assert read is not None and [w.path for w in read.wheelhouses] == ["wheels"]  # (relative: beside the lock)
    assert read.wheelhouses[0].files == ((TORCH, sha(b"torch wheel")), (VISION, sha(b"vision wheel")))
    assert {e.id: e.wheelhouse for e in read.entries} == {
        e.id: ("wheels" if e.base_image == B else None) for e in load(housed, table, locked=False).entries()}
    assert sorted(c.line().split()[0] for c in done.changes if not isinstance(c, lock_cmd.InstallChange)) == \
        ["pinned"] * 4  # two bases, two files
    assert f"{TORCH}: sha256:" in lock_mod.beside(housed).read_text()
    plan = load(housed, table)
    assert [(w.folder, w.files) for w in plan.wheelhouses] == [(housed.parent / "wheels", read.wheelhouses[0].files)]


@pytest.mark.parametrize("change", ["replaced", "added", "removed"])
def test_a_wheelhouse_file_the_lock_does_not_pin_as_it_is_stops_everything_naming_file_and_hashes(
        housed: Path, table: CompatTable, change: str) -> None:
    lock(housed, table, world())
    path = lock_mod.beside(housed)
    folder = housed.parent / "wheels"
    if change == "replaced":  # another file under the same name (same size: the key used to be names and sizes)
        (folder / TORCH).write_bytes(b"torch WHEEL")
    elif change == "added":
        (folder / "evil-1.0-py3-none-any.whl").write_bytes(b"not locked")
    else:
        (folder / VISION).unlink()
    with pytest.raises(InputError) as caught:
        load(housed, table)
    said = str(caught.value)
    assert said.startswith(f"{path}:") and caught.value.exit_code == 2, said
    assert caught.value.hint is not None and "imagebuilder lock --update" in caught.value.hint
    if change == "replaced":
        line = path.read_text().splitlines().index(next(t for t in path.read_text().splitlines() if TORCH in t)) + 1
        assert said.startswith(f"{path}:{line}:"), said
        assert f"{TORCH} is not the file the lock pins: expected {sha(b'torch wheel')}, found {sha(b'torch WHEEL')}" \
            in said
    elif change == "added":
        assert f"evil-1.0-py3-none-any.whl ({sha(b'not locked')}) is not in the lock file" in said
    else:
        assert f"{VISION}, which the lock file pins ({sha(b'vision wheel')}), is gone" in said
    unlocked = load(housed, table, locked=False)  # (without the lock the same matrix loads: the lock is the gate)
    assert unlocked.wheelhouses == ()


def test_lock_keeps_a_pinned_file_until_update_names_it_and_exactly_the_wheelhouse_nodes_rebuild(
        housed: Path, table: CompatTable) -> None:
    engine = world()
    lock(housed, table, engine)
    before = keys_of(load(housed, table))
    folder = housed.parent / "wheels"
    (folder / TORCH).write_bytes(b"torch WHEEL")  # (the same size: the key follows the pin, not names and sizes)
    (folder / "new-1.0-py3-none-any.whl").write_bytes(b"new")
    (folder / ".DS_Store").write_bytes(b"hidden: never served, never pinned")
    again = lock(housed, table, engine)  # `lock` alone takes nothing of a pinned wheelhouse: new bytes, new files
    assert [c.line().split()[0] for c in again.changes if not isinstance(c, lock_cmd.InstallChange)] == \
        ["kept"] * 4 and not again.changed
    with pytest.raises(InputError, match="is not the file the lock pins"):
        load(housed, table)
    updated = lock(housed, table, engine, update=(TORCH,))
    with pytest.raises(InputError, match=r"new-1\.0-py3-none-any\.whl \(sha256:[0-9a-f]+\) is not in the lock file"):
        load(housed, table)  # (the new file: still not taken, --update named another)
    (folder / "new-1.0-py3-none-any.whl").unlink()
    change = next(c for c in updated.changes if isinstance(c, lock_cmd.WheelChange) and c.name == TORCH)
    takers = [n.id for n in load(housed, table).nodes if n.entry.build.wheelhouse == folder]
    assert change.was == sha(b"torch wheel") and change.now == sha(b"torch WHEEL")
    assert change.rebuilds == tuple(takers) and len(takers) == 6
    assert change.line().startswith(f"updated  {TORCH} (wheelhouse wheels): ") and "rebuilds 6 node(s)" in change.line()
    after = keys_of(load(housed, table))
    assert [n for n in before if before[n] != after[n]] == takers  # the wheelhouse's nodes, and nothing else
    with pytest.raises(InputError, match=r"names no base image, wheelhouse file or locked wheel 'torch\.whl'") \
            as caught:
        lock(housed, table, engine, update=("torch.whl",))
    assert caught.value.hint == "did you mean 'torch'?"  # (the locked wheel: its name is the nearest)


def test_a_locked_wheelhouse_serves_only_its_pinned_files_each_with_its_hash_for_pip(tmp_path: Path) -> None:
    import urllib.error
    import urllib.request

    from imagebuilder.run.loopback import serve_indexes

    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / TORCH).write_bytes(b"torch wheel")
    (folder / "extra.whl").write_bytes(b"not pinned")
    with serve_indexes({}, wheelhouses=[folder], pinned={folder: ((TORCH, sha(b"torch wheel")),)}) as served:
        url = served.wheelhouses[folder]
        build = urllib.request.build_opener(urllib.request.ProxyHandler({"http": served.build_args()["http_proxy"]}))
        page = build.open(url).read().decode()
        pin = sha(b"torch wheel").removeprefix("sha256:")
        assert f'href="{TORCH.replace("+", "%2B")}#sha256={pin}"' in page and "extra" not in page
        assert build.open(url + TORCH.replace("+", "%2B")).read() == b"torch wheel"
        with pytest.raises(urllib.error.HTTPError) as info:
            build.open(url + "extra.whl")
        assert info.value.code == 404


def tiny_wheel(path: Path, marker: str) -> bytes:
    """A minimal, valid pure-Python wheel `tiny 1.0` at `path` (its module says `marker`): its bytes."""
    import zipfile

    files = {"tiny/__init__.py": f"MARK = {marker!r}\n",
             "tiny-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n",
             "tiny-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                         "Tag: py3-none-any\n"}
    files["tiny-1.0.dist-info/RECORD"] = "".join(f"{name},,\n" for name in [*files, "tiny-1.0.dist-info/RECORD"])
    with zipfile.ZipFile(path, "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
    return path.read_bytes()


def test_pip_takes_a_locked_wheelhouse_file_only_with_the_bytes_its_lock_pinned(tmp_path: Path) -> None:
    """The build's last line of defence, with the real pip (a file replaced between `build`'s check of the lock and
    pip's download): the served link's `#sha256=` makes pip refuse bytes that are not the pinned ones."""
    import os
    import re
    import subprocess
    import sys

    from imagebuilder.run.loopback import serve_indexes

    folder = tmp_path / "wheels"
    folder.mkdir()
    name = "tiny-1.0-py3-none-any.whl"
    pinned = sha(tiny_wheel(folder / name, "locked"))

    def download(pin: str, out: Path) -> subprocess.CompletedProcess[str]:
        with serve_indexes({}, wheelhouses=[folder], pinned={folder: ((name, pin),)}) as served:
            env = {**os.environ, **served.build_args(), "no_proxy": "", "NO_PROXY": "", "PIP_CONFIG_FILE": os.devnull}
            return subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir",
                                   "--no-index", "--find-links", served.wheelhouses[folder], "-d", str(out),
                                   "tiny==1.0"], capture_output=True, text=True, env=env, timeout=120)

    ok = download(pinned, tmp_path / "first")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "first" / name).read_bytes() == (folder / name).read_bytes()
    tiny_wheel(folder / name, "replaced")  # the same name, other bytes; the run still serves the lock's pin
    refused = download(pinned, tmp_path / "second")
    assert refused.returncode != 0 and "DO NOT MATCH THE HASHES" in refused.stderr, refused.stderr
    assert f"Expected sha256 {pinned.removeprefix('sha256:')}" in refused.stderr
    assert re.search(rf"Got +{sha((folder / name).read_bytes()).removeprefix('sha256:')}", refused.stderr)


def test_outdated_names_each_moved_wheelhouse_file_and_the_nodes_it_rebuilds_where_build_refuses(
        housed: Path, table: CompatTable, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from imagebuilder import cli

    engine = world()
    engine.add({"config": {"Labels": {"base": "b", "v": "1"}}}, B)
    monkeypatch.setattr(cli.Context, "engine", lambda self: engine)
    monkeypatch.setattr(cli.Context, "resolver", lambda self: FakeResolver())
    monkeypatch.setattr(cli.Context, "table", lambda self: table)
    assert cli.main(["--offline", "lock", "--matrix", str(housed)]) == 0
    assert "2 wheelhouse file(s)" in capsys.readouterr().out
    folder = housed.parent / "wheels"
    (folder / TORCH).write_bytes(b"torch WHEEL")
    (folder / "new-1.0-py3-none-any.whl").write_bytes(b"new")
    assert cli.main(["--offline", "build", "--matrix", str(housed)]) == 2  # build refuses; outdated reports
    assert "is not the file the lock pins" in capsys.readouterr().err
    assert cli.main(["--offline", "outdated", "--matrix", str(housed), "--json"]) == 0
    files = {f["file"]: f for f in json.loads(capsys.readouterr().out)["wheelhouses"]}
    takers = [n.id for n in load(housed, table, locked=False).nodes if n.entry.build.wheelhouse == folder]
    assert {name: f["status"] for name, f in files.items()} == {TORCH: "moved", VISION: "current",
                                                                "new-1.0-py3-none-any.whl": "moved"}
    assert files[TORCH]["locked"] == sha(b"torch wheel") and files[TORCH]["now"] == sha(b"torch WHEEL")
    assert files[TORCH]["rebuilds"] == takers and files[VISION]["rebuilds"] == [] and len(takers) == 6
    assert files["new-1.0-py3-none-any.whl"]["locked"] is None
    assert cli.main(["--offline", "outdated", "--matrix", str(housed), "--exit-code-nothing-to-do"]) == 0
    out = capsys.readouterr().out
    assert "wheelhouse files: 2 moved, 1 current" in out and f"moved    {TORCH} (wheelhouse wheels): locked " in out
    assert "new (not in the lock)" in out and "rebuilds 6 node(s)" in out and "nothing to do" not in out


def test_a_moved_wheelhouse_file_stops_only_the_runs_whose_nodes_take_it(
        housed: Path, table: CompatTable, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`--only` narrows the files the lock hashes, never what it covers: a file moved under B's entries stops a run
    of B's nodes, not of A's; an entry the lock lacks stops every run."""
    from imagebuilder import cli

    engine = world()
    monkeypatch.setattr(cli.Context, "engine", lambda self: engine)
    monkeypatch.setattr(cli.Context, "resolver", lambda self: FakeResolver())
    monkeypatch.setattr(cli.Context, "table", lambda self: table)
    assert cli.main(["--offline", "lock", "--matrix", str(housed)]) == 0
    (housed.parent / "wheels" / TORCH).write_bytes(b"torch WHEEL")
    plan = load(housed, table, locked=False)
    a_leaf, b_leaf = (next(n.id for n in plan.nodes if n.leaf and n.entry.base_image == name) for name in (A, B))
    capsys.readouterr()
    assert cli.main(["--offline", "plan", "--matrix", str(housed), "--only", a_leaf]) == 0
    assert cli.main(["--offline", "plan", "--matrix", str(housed), "--only", b_leaf]) == 2
    assert "is not the file the lock pins" in capsys.readouterr().err
    assert cli.main(["--offline", "plan", "--matrix", str(housed)]) == 2  # the whole matrix takes it too
    capsys.readouterr()
    housed.write_text(housed.read_text() + "  - {torch: 2.6.0, accelerator: cpu, python: '3.11', "
                      "base_image: 'ghcr.io/new/base:1'}\n")  # an entry the lock lacks
    assert cli.main(["--offline", "plan", "--matrix", str(housed), "--only", a_leaf]) == 2  # coverage: whole matrix
    assert "is not pinned by the lock file" in capsys.readouterr().err


def test_plan_without_an_engine_keys_a_locked_matrix_from_the_lock(matrix: Path, table: CompatTable) -> None:
    from imagebuilder.commands import plan as plan_cmd

    engine = world()
    lock(matrix, table, engine)
    with_engine = keys_of(bases.resolve(load(matrix, table), engine))
    shown = plan_cmd.undecided(load(matrix, table))  # (what `plan` shows when no engine answers)
    assert {n.id: n.key for n in shown.nodes} == with_engine and all(with_engine.values())
    assert {n.decision.reason for n in shown.nodes} == {"no engine to ask what is cached"}
    bare = plan_cmd.undecided(load(matrix, table, locked=False))  # no lock: nothing to key from
    assert {n.key for n in bare.nodes} == {""} and {n.decision.reason for n in bare.nodes} == {
        "no engine to resolve the base image"}


def test_a_version_1_lock_still_reads_and_a_wheelhouse_it_does_not_pin_is_refused_but_not_watched(
        housed: Path, table: CompatTable) -> None:
    from imagebuilder.commands import plan as plan_cmd

    engine = world()
    lock(housed, table, engine)
    path = lock_mod.beside(housed)
    text = path.read_text()
    body = text[:text.index("wheelhouses:")] + text[text.index("entries:"):]
    path.write_text(body.replace("version: 2", "version: 1").replace("    wheelhouse: wheels\n", ""))
    read = lock_mod.read(path)
    assert read is not None and read.wheelhouses == () and {b.name for b in read.bases} == {A, B}
    with pytest.raises(InputError, match=r"takes wheels from the wheelhouse 'wheels'; the lock file .* pins no "
                                         r"wheelhouse for it") as caught:
        load(housed, table)
    assert caught.value.hint is not None and "imagebuilder lock" in caught.value.hint
    plan = plan_mod.make(matrix_mod.load(housed, table, env={}), Renderer())
    watched = wheels.locked(bases.locked(plan, read), read, check=False)  # (`outdated`: bases only, no refusal)
    assert watched.wheelhouses == () and lock_cmd.wheel_drift(watched) == ()
    assert plan_cmd.undecided(watched).nodes[0].key  # (and keyed from the lock's bases without an engine)


def test_a_wheelhouse_beside_the_matrix_folder_is_named_relative_to_the_lock(
        write_matrix: MatrixWriter, tmp_path: Path, table: CompatTable) -> None:
    (tmp_path / "shared" / "wheels").mkdir(parents=True)
    (tmp_path / "shared" / "wheels" / TORCH).write_bytes(b"torch wheel")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "layers").symlink_to(tmp_path / "shared")  # (a link is named as written, not resolved)
    matrix = write_matrix(MATRIX + "build: {wheelhouse: ../shared/wheels}\n", name="project/matrix.yaml")
    done = lock(matrix, table, world())
    assert [w.path for w in done.lock.wheelhouses] == ["../shared/wheels"]
    assert {e.wheelhouse for e in done.lock.entries} == {"../shared/wheels"}
    assert [w.name for w in load(matrix, table).wheelhouses] == ["../shared/wheels"]


def test_plan_without_an_engine_keys_a_locked_wheelhouse_as_a_run_does(housed: Path, table: CompatTable) -> None:
    from imagebuilder.commands import plan as plan_cmd

    engine = world()
    lock(housed, table, engine)
    locked = load(housed, table)
    run = keys_of(bases.resolve(locked, engine))  # (what a run keys: the lock's bases and pins)
    assert {n.id: n.key for n in plan_cmd.undecided(locked).nodes} == run
    unlocked = keys_of(bases.resolve(load(housed, table, locked=False), engine))
    # every node differs from its unlocked key: each chain's root pip-installs torch (the lock's wheels alone)
    assert [n for n in run if run[n] != unlocked[n]] == [n.id for n in locked.nodes]


# -- releases the matrix pins ----------------------------------------------------------------------------------------

def test_outdated_names_a_later_patch_release_of_torch_with_the_nodes_taking_it_rebuilds(
        matrix: Path, table: CompatTable, write_matrix: MatrixWriter) -> None:
    """torch 2.6.0 with 2.6.1 served is `newer` (the pre-release and the next minor are not patches of it; a local
    label is one release), with exactly the nodes of its entries, on both bases; 2.7.1 with nothing later is
    `current`; --offline (no versions asked) and an index that does not answer are `unknown`, never current.
    NCCL and cuDNN, as torch pins them for a CUDA entry, are asked of the same index: a later NCCL patch rebuilds
    the CUDA entry's nodes from its CUDA libraries up, and not the CPU entry's."""
    plan = load(matrix, table, locked=False)
    served = {"torch": ["2.5.1", "2.6.0", "2.6.1+cpu", "2.6.1", "2.6.2rc1", "2.7.0", "2.7.1", "2.8.0"]}
    asked: list[tuple[str, str]] = []

    def versions(index: str, project: str) -> list[str] | None:
        asked.append((index, project))
        return served.get(project)

    found = {r.pinned: r for r in lock_cmd.releases(plan, versions)}
    assert set(found) == {"2.6.0", "2.7.1"} and {p for _, p in asked} == {"torch"}
    old = {n.id for n in plan.nodes if n.entry.torch == "2.6.0"}
    assert len(old) == 6  # (base, business, task) x two base images
    assert (found["2.6.0"].status, found["2.6.0"].newer, set(found["2.6.0"].nodes)) == ("newer", ("2.6.1",), old)
    assert (found["2.7.1"].status, found["2.7.1"].newer) == ("current", ())
    assert all(r.status == "unknown" and "--offline" in r.why for r in lock_cmd.releases(plan, None))

    def silent(index: str, project: str) -> list[str] | None:  # (as `pkg_index.project_versions` fails)
        raise IndexUnreachable(f"cannot fetch {index}/{project}/: gaierror")

    said = {(r.status, r.why[:24]) for r in lock_cmd.releases(plan, silent)}
    assert said == {("unknown", "its index did not answer")}
    text = "\n".join(lock_cmd.release_lines(lock_cmd.releases(plan, versions)))
    assert "newer    torch 2.6.0 -> 2.6.1" in text and "rebuilds 6 node(s)" in text and "1 newer, 0 unknown" in text

    cuda = write_matrix(MATRIX.replace("accelerator: [cpu]", "accelerator: [cpu, cu126]")
                        .replace("layers: [base, business, task]",
                                 'layers: [os, {layer: cuda, when: {accelerator: "cu*"}}, torch, task]')
                        .replace("torch: [2.6.0, 2.7.1]", "torch: [2.7.1]").replace(f", base_image: ['{A}', '{B}']",
                                                                                       ""), name="cuda.yaml")
    plan = load(cuda, table, locked=False)
    served["nvidia-nccl-cu12"] = ["2.26.2", "2.26.5", "2.27.3"]
    found = {r.project: r for r in lock_cmd.releases(plan, versions)}
    assert (found["nvidia-nccl-cu12"].status, found["nvidia-nccl-cu12"].newer) == ("newer", ("2.26.5",))
    entry = "2.7.1-cu126-py3.11-runtime"
    assert set(found["nvidia-nccl-cu12"].nodes) == {f"{entry}/cuda", f"{entry}/torch", f"{entry}/task"}
    assert set(found["torch"].nodes) >= {f"{entry}/torch", f"{entry}/task"}  # (the OS and CUDA nodes read no torch)
    assert not {n for n in found["torch"].nodes if n.endswith(("/os", "/cuda"))}
