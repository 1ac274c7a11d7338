"""The CLI as users meet it: exit codes, one clear message, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagebuilder", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200", **(env or {})}, timeout=120)


def test_plan_json_of_the_default_matrix() -> None:
    proc = run("plan", "--matrix", "matrix.yaml", "--json")
    assert proc.returncode == 0, proc.stderr
    nodes = json.loads(proc.stdout)
    by_id = {n["id"]: n for n in nodes}
    node = by_id["2.7.1-cu126-py3.11-runtime/business"]
    assert node["parent"] == "2.7.1-cu126-py3.11-runtime/torch"
    assert node["entry"]["cudnn"] == "9.5.1.17" and node["entry"]["nccl"] == "2.26.2"
    assert by_id["2.8.0-cu128-py3.11-runtime/cuda"]["entry"]["nccl"] == "2.27.3"
    # the tree: os -> cuda (CUDA entries) -> torch -> devel (devel entries) -> business -> task
    assert by_id["2.7.1-cu126-py3.11-runtime/torch"]["parent"] == "2.7.1-cu126-py3.11-runtime/cuda"
    assert by_id["2.8.0-cpu-py3.11-runtime/torch"]["parent"] == "2.8.0-cpu-py3.11-runtime/os"
    assert by_id["2.8.0-cpu-py3.11-devel/business"]["parent"] == "2.8.0-cpu-py3.11-devel/devel"
    # shared nodes: one OS for every entry, runtime's cuda and torch for devel; shared nodes are scoped
    assert by_id["2.8.0-cpu-py3.11-runtime/os"]["same_as"] == "2.11.0-cu130-py3.11-runtime/os"
    assert by_id["2.11.0-cu130-py3.11-devel/torch"]["same_as"] == "2.11.0-cu130-py3.11-runtime/torch"
    assert by_id["2.11.0-cu130-py3.11-devel/devel"]["same_as"] is None
    assert by_id["2.11.0-cu130-py3.11-runtime/cuda"]["scope"] == ["accelerator", "cuda", "cudnn", "nccl"]
    # a leaf states its scope too: what is below it (no flavor on the runtime chain, which devel builds on)
    assert by_id["2.11.0-cu130-py3.11-runtime/jupyter"]["scope"] == [
        "accelerator", "cuda", "cudnn", "nccl", "python", "torch", "torchaudio", "torchvision", "triton"]
    assert by_id["2.11.0-cu130-py3.11-devel/jupyter"]["scope"][:5] == ["accelerator", "cuda", "cudnn", "flavor", "nccl"]
    assert {n["entry"]["flavor"] for n in nodes} == {"runtime", "devel"}
    assert all(n["tags"][0].startswith("127.0.0.1:5000/ml/pytorch:") for n in nodes)
    # build order: every parent comes before its children
    seen: set[str] = set()
    for n in nodes:
        assert n["parent"] is None or n["parent"] in seen
        seen.add(n["id"])


@pytest.mark.parametrize(("body", "needle"), [
    ("matrix: {torch: [2.6.0], acclerator: [cpu]}\n", "unknown key 'acclerator'"),
    ("matrix: {torch: [2.8.0], accelerator: [cu124], python: ['3.11']}\n",
     "torch 2.8.0 publishes cpu, cu128; not cu124"),
    ("matrix: {torch: [2.9.0], accelerator: [cpu], python: ['3.9']}\n", "supports Python"),
    ("matrix: {torch: [2.6.0], accelerator: [cpu]\n", "YAML syntax error"),
])
def test_input_errors_exit_2_without_traceback(tmp_path: Path, body: str, needle: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("base_image: debian:bookworm\nregistry: r:5000\nrepository: p\nlayers: [base]\n" + body)
    for command in ("plan", "render", "build"):
        extra = ["--out", str(tmp_path / "out")] if command == "render" else []
        proc = run(command, "--matrix", str(path), *extra, env={"DOCKER_HOST": "unix:///nonexistent.sock"})
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout
        assert needle in proc.stderr
        assert str(path) in proc.stderr
        assert len(proc.stderr.strip().splitlines()) <= 3
    assert not (tmp_path / "out").exists()


def test_no_engine_is_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"  # a valid matrix that needs nothing on disk (no wheelhouse): the engine is missing
    path.write_text("base_image: debian:bookworm\nregistry: r:5000\nrepository: p\nlayers: [base]\n"
                    "torch_extras: []\nbuild: {pip_index_url: {cpu: 'https://pypi.org/simple'}}\n"
                    "matrix: {torch: [2.13.0], accelerator: [cpu], python: ['3.11']}\n")
    proc = run("--offline", "build", "--matrix", str(path), "--report", str(tmp_path / "r"),
               env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert proc.returncode == 2
    assert "cannot reach a Docker engine" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_render_writes_dockerfile_and_context(tmp_path: Path) -> None:
    proc = run("render", "--matrix", "matrix.yaml", "--out", str(tmp_path), "--only", "2.6.0-*/task")
    assert proc.returncode == 0, proc.stderr
    task = tmp_path / "2.6.0-cu124-py3.11-runtime" / "task"
    assert (task / "Dockerfile").read_text().startswith("FROM ")
    assert (task / "evaluate.py").is_file()
    assert (tmp_path / "2.6.0-cu124-py3.11-runtime" / "torch" / "_imagebuilder" / "constraints.txt").is_file()
    assert not (tmp_path / "2.6.0-cu124-py3.11-runtime" / "cuda" / "_imagebuilder" / "constraints.txt").exists()
    assert not (tmp_path / "2.8.0-cu128-py3.11-runtime").exists()


def test_only_that_selects_nothing_is_an_input_error() -> None:
    proc = run("plan", "--matrix", "matrix.yaml", "--only", "9.9.9-*")
    assert proc.returncode == 2
    assert "selects no node" in proc.stderr


def test_smoke_only_takes_known_kinds() -> None:
    proc = run("smoke", "some-image", "--only", "versions,fsdpp", env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert proc.returncode == 2
    assert "unknown kind 'fsdpp'" in proc.stderr and "did you mean 'fsdp'" in proc.stderr


def test_bad_expect_flag() -> None:
    proc = run("smoke", "some-image", "--expect", "torch")
    assert proc.returncode == 2
    assert "is not KEY=VALUE" in proc.stderr


def test_explain_lists_resolution_and_exclusions(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("base_image: debian:bookworm\nregistry: r:5000\nrepository: p\nlayers: [base]\n"
                    "matrix: {torch: [2.6.0, 2.7.1], accelerator: [cpu], python: ['3.11']}\n"
                    "exclude: [{torch: 2.6.0}]\n")
    proc = run("plan", "--matrix", str(path), "--explain")
    assert proc.returncode == 0, proc.stderr
    assert "torch=2.6.0, accelerator=cpu, python=3.11  <- exclude[0] torch=2.6.0" in proc.stdout
    assert "2.7.1-cpu-py3.11-runtime: torch 2.7.1 cpu from PyTorch's per-accelerator index" in proc.stdout


def test_the_packaged_table_pins_what_the_wheels_pin(tmp_path: Path) -> None:
    """Acceptance values, read from the packaged table through plan/render."""
    path = tmp_path / "m.yaml"
    path.write_text("base_image: debian:bookworm\nregistry: r:5000\nrepository: p\nlayers: [base]\n"
                    "matrix: {torch: [2.6.0], accelerator: [cu124], python: ['3.11']}\n"
                    "include:\n"
                    "  - {torch: 2.7.1, accelerator: cu126, python: '3.11'}\n"
                    "  - {torch: 2.8.0, accelerator: cu128, python: '3.11'}\n"
                    "  - {torch: 2.11.0, accelerator: cu130, python: '3.11'}\n")
    nodes = json.loads(run("plan", "--matrix", str(path), "--json").stdout)
    got = {n["entry"]["torch"]: (n["entry"]["cudnn"], n["entry"]["nccl"]) for n in nodes}
    assert got["2.6.0"] == ("9.1.0.70", "2.21.5")
    assert got["2.7.1"] == ("9.5.1.17", "2.26.2")
    assert got["2.8.0"] == ("9.10.2.21", "2.27.3")
    out = tmp_path / "out"
    assert run("render", "--matrix", str(path), "--out", str(out), "--only", "2.11.0-*").returncode == 0
    constraints = (out / "2.11.0-cu130-py3.11-runtime" / "base" / "_imagebuilder" / "constraints.txt").read_text()
    assert "nvidia-nccl-cu13==" in constraints and "nvidia-cudnn-cu13==" in constraints
    assert "-cu12" not in constraints


def test_expect_may_raise_a_floor_and_nothing_else(tmp_path: Path) -> None:
    from imagebuilder.errors import InputError
    from imagebuilder.evidence.spec import Specs
    from imagebuilder.input import matrix as matrix_mod
    from imagebuilder.input.compat import CompatTable
    from imagebuilder.plan import plan as plan_mod
    from imagebuilder.plan.render import Renderer

    path = tmp_path / "m.yaml"
    path.write_text("base_image: debian:bookworm\nregistry: r:5000\nrepository: p\nlayers: [base]\n"
                    "smoke: {throughput_floor: 0.5, cpu_gflops_floor: 20}\n"
                    "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n")
    plan = plan_mod.make(matrix_mod.load(path, CompatTable.load(None), env={}), Renderer())
    raised = Specs(plan, (("throughput_floor", "0.7"), ("cpu_gflops_floor", "20")))
    node = plan.nodes[-1]
    assert raised.told(node).expect["throughput_floor"] == 0.7  # the suite is told the raised floor
    assert raised.key(node) == Specs(plan).key(node)  # but a pass is of the matrix's spec: publish agrees
    for key, value in (("throughput_floor", "0.49"), ("cpu_gflops_floor", "5"), ("throughput_floor", "x"),
                       ("torch", "2.6.0"), ("nccl", "2.21.5"), ("cudnn_override", "true"), ("driver_floor", "1"),
                       ("cpu_gflops_floor", "nan"), ("throughput_floor", "inf")):
        with pytest.raises(InputError):  # a lower floor, or any expectation but a floor: input errors
            Specs(plan, ((key, value),))


def test_smoke_on_a_gpu_run_fails_on_a_skip_unless_allowed(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`imagebuilder smoke` is a gate too (e.g. after a bake build): an unknown GPU's throughput skip on a GPU
    run exits 1, like `build`; --allow-skip accepts it."""
    from imagebuilder import cli
    from imagebuilder.commands import smoke_image
    from imagebuilder.smoke.runner import GpuHost, SmokeReport

    from .fakes import DRIVER, H100, suite_report

    class Present:
        def image_id(self, ref: str) -> str:
            return "sha256:" + "a" * 64

        def inspect(self, ref: str) -> dict[str, object]:
            return {"Config": {"Labels": {"io.imagebuilder.version.torch": "2.11.0",
                                          "io.imagebuilder.version.accelerator": "cu130",
                                          "io.imagebuilder.version.cuda": "13.0"}}}

    def gpu_run(engine: object, image: str, expect: dict[str, Any], **kwargs: Any) -> SmokeReport:
        raw = suite_report(expect, kwargs["commands"], 1, **{"throughput.cuda:0": "skip:unknown GPU model 'Tesla T4'"})
        return SmokeReport(passed=True, duration=1.0, exit_code=0, gpu_verified=True, checks=tuple(raw["checks"]),
                           raw=raw, gpu_mode="devices")

    monkeypatch.setattr(cli.Context, "engine", lambda self: Present())
    monkeypatch.setattr(smoke_image, "run_smoke", gpu_run)
    monkeypatch.setattr(GpuHost, "probe", classmethod(lambda cls: GpuHost(("/dev/nvidia0",), (H100,), DRIVER)))
    assert cli.main(["smoke", "img"]) == 1
    assert "a skip is not a pass on a GPU run: throughput.cuda:0: unknown GPU model 'Tesla T4'" in \
        capsys.readouterr().err
    assert cli.main(["smoke", "img", "--allow-skip", "throughput"]) == 0


class LabelledImage:
    """An engine with one image, carrying the labels a build gives it (or none)."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels

    def image_id(self, ref: str) -> str:
        return "sha256:" + "b" * 64

    def inspect(self, ref: str) -> dict[str, object]:
        return {"Config": {"Labels": self.labels}}


BUILT_LABELS = {
    "io.imagebuilder.version.torch": "2.11.0", "io.imagebuilder.version.accelerator": "cu130",
    "io.imagebuilder.version.python": "3.11", "io.imagebuilder.version.flavor": "runtime",
    "io.imagebuilder.version.cuda": "13.0", "io.imagebuilder.version.nccl": "2.28.9",
    "io.imagebuilder.user": "1000:1000:/home/ml",
    "io.imagebuilder.checks": '[{"name": "layer.task.0", "run": "python /opt/task/evaluate.py --tiny"}]',
}


def smoke_with(monkeypatch: pytest.MonkeyPatch, labels: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    from imagebuilder import cli
    from imagebuilder.commands import smoke_image
    from imagebuilder.smoke.runner import SmokeReport

    from .fakes import suite_report

    seen: dict[str, Any] = {}

    def run_smoke(engine: object, image: str, expect: dict[str, Any], **kwargs: Any) -> SmokeReport:
        seen.update(expect=expect, **kwargs)
        raw = suite_report(expect, kwargs["commands"])  # an honest CPU run of the whole suite
        return SmokeReport(passed=True, duration=1.0, exit_code=0, checks=tuple(raw["checks"]), raw=raw)

    monkeypatch.setattr(cli.Context, "engine", lambda self: LabelledImage(labels))
    monkeypatch.setattr(smoke_image, "run_smoke", run_smoke)
    return cli.main(["smoke", "img", *args]), seen


def test_smoke_reads_what_to_check_from_the_images_own_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    code, seen = smoke_with(monkeypatch, BUILT_LABELS)
    assert code == 0
    expect = seen["expect"]
    assert (expect["torch"], expect["accelerator"], expect["cuda"], expect["nccl"]) == \
        ("2.11.0", "cu130", "13.0", "2.28.9")
    assert expect["cudnn"] is None and expect["torchvision"] is None  # no label: expected absent, still checked
    assert expect["user"] == {"uid": 1000, "gid": 1000, "home": "/home/ml"}
    assert expect["driver_floor"] and expect["throughput_floor"] == 0.6
    assert seen["commands"] == [{"name": "layer.task.0", "run": "python /opt/task/evaluate.py --tiny"}]
    code, seen = smoke_with(monkeypatch, BUILT_LABELS, "--expect", "torch=2.11.1", "--expect", "throughput_floor=0.7")
    assert code == 0 and seen["expect"]["torch"] == "2.11.1" and seen["expect"]["throughput_floor"] == "0.7"


def test_smoke_with_neither_labels_nor_expect_is_an_input_error(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, seen = smoke_with(monkeypatch, {"maintainer": "someone"})
    assert code == 2 and seen == {}
    assert "carries no imagebuilder labels (io.imagebuilder.version.*) and no --expect was given" in \
        capsys.readouterr().err
    code, seen = smoke_with(monkeypatch, {}, "--expect", "torch=2.6.0")
    assert code == 0 and seen["expect"] == {"torch": "2.6.0"}
    code, seen = smoke_with(monkeypatch, BUILT_LABELS, "--expect", "throughput_floor=0.1")
    assert code == 2 and seen == {}  # a floor is never lowered


def tiny_matrix(folder: Path, registry: str = "r:5000") -> Path:
    """A valid matrix of one CPU entry that needs nothing on disk and no package index (with --offline)."""
    path = folder / "m.yaml"
    path.write_text(f"base_image: debian:bookworm\nregistry: {registry}/ml\nrepository: p\nlayers: [base]\n"
                    "torch_extras: []\nbuild: {pip_index_url: {cpu: 'https://pypi.org/simple'}}\n"
                    "matrix: {torch: [2.13.0], accelerator: [cpu], python: ['3.11']}\n")
    return path


def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine must not be asked: the command stops before anything slow starts."""
    from imagebuilder import cli

    def engine(self: object) -> object:
        raise AssertionError("the engine was asked")
    monkeypatch.setattr(cli.Context, "engine", engine)


@pytest.mark.parametrize(("args", "option", "why"), [
    (["render", "--out", "{bad}"], "--out", "cannot be created: {file} is not a folder"),
    (["render", "--out", "{file}"], "--out", "exists and is not a folder"),
    (["export", "bake", "-o", "{bad}/docker-bake.json"], "--output", "cannot be created: {file} is not a folder"),
    (["export", "bake", "-o", "{tmp}"], "--output", "is a folder, not a file"),
    (["export", "bake", "--contexts", "{bad}"], "--contexts", "cannot be created: {file} is not a folder"),
    (["--cache-dir", "{bad}", "verify"], "--cache-dir", "cannot be created: {file} is not a folder"),
    (["build", "--report", "{bad}"], "--report", "cannot be created: {file} is not a folder"),
    (["stage", "--report", "{bad}"], "--report", "cannot be created: {file} is not a folder"),
    (["verify", "--report", "{bad}"], "--report", "cannot be created: {file} is not a folder"),
    (["publish", "--report", "{bad}"], "--report", "cannot be created: {file} is not a folder"),
    # /proc: os.access says yes to root there (CI runs as root); nothing can be made in it (audit f11)
    (["render", "--out", "/proc/x"], "--out", "cannot be created: /proc is not writable"),
    (["--cache-dir", "/proc/x", "publish"], "--cache-dir", "cannot be created: /proc is not writable"),
    (["export", "bake", "-o", "/proc/x/b.json"], "--output", "cannot be created: /proc is not writable"),
])
def test_an_unwritable_output_is_an_input_error_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str],
        option: str, why: str) -> None:
    from imagebuilder import cli

    no_engine(monkeypatch)
    file = tmp_path / "a-file"
    file.write_text("")
    names = {"bad": str(file / "x"), "file": str(file), "tmp": str(tmp_path)}
    argv = [arg.format(**names) for arg in args]
    command = 3 if argv[0] == "--cache-dir" else 2 if argv[0] == "export" else 1
    argv[command:command] = ["--matrix", str(tiny_matrix(tmp_path))]
    assert cli.main(["--offline", *argv]) == 2
    err = capsys.readouterr().err
    path = argv[argv.index(option if option in argv else "-o") + 1]
    assert err.strip() == f"error: {option} {path}: {why.format(**names)}"
    assert not (file / "x").exists() and not (Path.cwd() / "bake-contexts").exists()


def test_a_folder_that_is_not_writable_is_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """(As root every folder is writable: the test asks a folder that says it is not.)"""
    from imagebuilder import cli
    from imagebuilder.cli import options

    no_engine(monkeypatch)
    monkeypatch.setattr(options.os, "access", lambda path, mode: not mode & os.W_OK or Path(path) != tmp_path)
    assert cli.main(["--offline", "render", "--matrix", str(tiny_matrix(tmp_path)), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: --out {tmp_path}: is not writable"
    assert cli.main(["--offline", "render", "--matrix", str(tiny_matrix(tmp_path)), "--out",
                     str(tmp_path / "new")]) == 2
    assert capsys.readouterr().err.strip() == f"error: --out {tmp_path / 'new'}: cannot be created: {tmp_path} is " \
        "not writable"


@pytest.mark.parametrize(("template", "why"), [
    ("{", "is not a template: Single '{' encountered in format string"),
    ("stable-}", "is not a template: Single '}' encountered in format string"),
    ("{tag!z}", "is not a template: Unknown conversion specifier z"),
    ("stable-{tga}", "uses unknown field {tga}: did you mean 'tag'?"),
])
def test_promote_refuses_a_malformed_template_before_asking_the_registry(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], template: str, why: str) -> None:
    from imagebuilder import cli
    from imagebuilder.errors import EngineUnavailable
    from imagebuilder.ports.registry import Registry

    from .fakes import FakeRegistry

    registry, asked = FakeRegistry(), []
    registry.image("ml/p", "nightly-a", "a")

    def for_host(cls: object, host: str, insecure: tuple[str, ...] = ()) -> FakeRegistry:
        asked.append(host)
        return registry

    def engine(self: object) -> object:
        raise EngineUnavailable("no engine in this test")
    monkeypatch.setattr(cli.Context, "engine", engine)
    monkeypatch.setattr(Registry, "for_host", classmethod(for_host))
    assert cli.main(["promote", "--from", "r:5000/ml/p:nightly-*", "--to", template]) == 2
    assert capsys.readouterr().err.strip() == f"error: --to {template!r}: {why}"
    assert asked == []


def test_smoke_shm_size_is_a_size(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, seen = smoke_with(monkeypatch, BUILT_LABELS, "--shm-size", "bogus")
    assert code == 2 and seen == {}
    assert capsys.readouterr().err.strip() == "error: --shm-size 'bogus': not a size: a number of bytes, optionally " \
        "with a unit b, k, m or g, e.g. 2g"
    code, seen = smoke_with(monkeypatch, BUILT_LABELS, "--shm-size", "512m")
    assert code == 0 and seen["shm_size"] == "512m"


def test_plan_wave_is_not_negative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A wave past the plan's last one is an empty matrix, not an error: the nightly workflow asks for waves 1, 2
    and 3 to learn whether the plan has them."""
    from imagebuilder import cli
    from imagebuilder.errors import EngineUnavailable

    def engine(self: object) -> object:
        raise EngineUnavailable("no engine in this test")
    monkeypatch.setattr(cli.Context, "engine", engine)
    argv = ["--offline", "plan", "--matrix", str(tiny_matrix(tmp_path)), "--format", "github-matrix", "--wave"]
    assert cli.main([*argv, "-1"]) == 2
    assert capsys.readouterr().err.strip() == "error: --wave -1: a wave is 0 or more"
    assert cli.main([*argv, "3"]) == 0
    assert json.loads(capsys.readouterr().out) == {"include": []}


@pytest.mark.parametrize("command", ["verify", "publish"])
def test_a_registry_that_does_not_answer_is_an_outage_not_an_unstaged_plan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Exit 1 naming the registry's host, where nothing listens; a registry that answers without the key tag is
    still exit 2, not staged. Nothing is built, run or reported either way."""
    import socket

    from imagebuilder import cli
    from imagebuilder.ports.registry import Registries, Registry
    from imagebuilder.smoke.runner import GpuHost

    from .fakes import FakeEngine, FakeRegistry

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        host = f"127.0.0.1:{probe.getsockname()[1]}"
    engine = FakeEngine(FakeRegistry(host=host))
    engine.add({"config": {"Labels": {"os": "debian"}}}, "debian:bookworm")
    monkeypatch.setattr(cli.Context, "engine", lambda self: engine)
    monkeypatch.setattr(GpuHost, "probe", classmethod(lambda cls: GpuHost((), (), None)))
    argv = ["--offline", "--cache-dir", str(tmp_path / "cache"), command, "--matrix",
            str(tiny_matrix(tmp_path, host)), "--report", str(tmp_path / "report")]

    closed = Registries(lambda name: Registry(host=name, insecure=True, attempts=1))  # the real client, no retries
    monkeypatch.setattr(Registries, "of_engine", classmethod(lambda cls, *_, use=True, scope=(): closed))
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert f"error: registry {host} did not answer: whether 1 node(s) of the plan are staged is unknown" in err
    assert "not staged" not in err and "Traceback" not in err

    answers = Registries(lambda name: engine.registry)  # a registry that answers: it has no such key tag
    monkeypatch.setattr(Registries, "of_engine", classmethod(lambda cls, *_, use=True, scope=(): answers))
    assert cli.main(argv) == 2
    assert f"error: not staged: 1 node(s) of the plan have no key tag in the registry (first: {host}/ml/p:cache-" in \
        capsys.readouterr().err
    assert engine.builds == [] and engine.runs == [] and not (tmp_path / "report").exists()


def test_the_environments_registry_pair_is_for_the_matrix_registry_host(tmp_path: Path) -> None:
    """N5: a command that reads a matrix scopes IMAGEBUILDER_REGISTRY_USER/PASSWORD to the host of the file's own
    `registry:` (or --registry's), which its registry clients are made with; before any matrix, to none."""
    from rich.console import Console

    from imagebuilder import cli

    ctx = cli.Context(Console(), Console(), check_index=False)
    assert ctx.registry_hosts == ()
    cli.load_plan(ctx, tiny_matrix(tmp_path, "registry.corp.example:5443"))
    assert ctx.registry_hosts == ("registry.corp.example:5443",)
    cli.load_plan(ctx, tiny_matrix(tmp_path), registry="ghcr.io/org")
    assert ctx.registry_hosts == ("ghcr.io",)
