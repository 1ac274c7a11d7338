"""The build pipeline on the real engine and registry: build, smoke, tag, push, pull back."""

from __future__ import annotations

import json
import shlex
import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.evidence import passes, provenance
from imagebuilder.evidence.ecosystem import raw_sbom_tag
from imagebuilder.evidence.referrers import index_tag
from imagebuilder.evidence.sboms import sbom_tag
from imagebuilder.evidence.sigstore import att_tag
from imagebuilder.ports.engine import DockerEngine

from ..report_page import ReportPage
from .conftest import (
    REGISTRY,
    SESSION,
    Chain,
    CliRun,
    Processes,
    cpu_matrix,
    dockerfile_context,
    registry_tags,
    report,
    running_containers,
    salted_layers,
)

ROOT = Path(__file__).resolve().parents[2]


def test_cpu_chain_is_built_smoked_pushed_and_pulled_back_by_digest(
        engine: DockerEngine, registry: str, cpu_chain: Chain) -> None:
    run, repository = cpu_chain.run, cpu_chain.repository
    assert cpu_chain.planned == dict.fromkeys(("base", "business", "task"), "build")  # a first build
    # Live log lines are prefixed by node id; the summary is printed at the end.
    assert "2.13.0-cpu-py3.11-runtime/base │" in run.out
    assert "imagebuilder summary" in run.out and "3/3 nodes ok" in run.out

    nodes = {n["node"]: n for n in cpu_chain.report["nodes"]}
    assert [n["status"] for n in nodes.values()] == ["pushed"] * 3
    # The Markdown summary and the JUnit file are written next to report.json.
    summary = (cpu_chain.folder / "report" / "summary.md").read_text()
    assert "**3/3 nodes ok** · 3 built · 0 cached" in summary
    assert "| `2.13.0-cpu-py3.11-runtime` | 🔨 ✅ pushed ([log](logs/" in summary
    junit = (cpu_chain.folder / "report" / "junit.xml").read_text()
    assert '<testsuite name="2.13.0-cpu-py3.11-runtime/task"' in junit and 'name="fsdp.compiled_step_cpu"' in junit
    assert 'failures="0"' in junit
    assert nodes["2.13.0-cpu-py3.11-runtime/task"]["smoke"] == "passed"
    checks = {c["name"]: c for c in nodes["2.13.0-cpu-py3.11-runtime/task"]["smoke_report"]["checks"]}
    assert checks["versions.torch"]["value"] == "2.13.0"
    assert checks["versions.python"]["value"] == "3.11"
    for name in ("distributed.all_reduce", "distributed.all_gather", "distributed.reduce_scatter",
                 "fsdp.compiled_step_cpu", "throughput.cpu", "health.shm", "versions.library_path"):
        assert checks[name]["status"] == "pass", checks[name]
    assert checks["distributed.gloo_init"]["value"]["world_size"] == 2
    assert checks["layer.task.0"]["status"] == "pass"  # the task layer's own check ran in the leaf
    assert checks["layer.business.0"]["status"] == "pass"  # ...and so did its parent's, inherited
    # Each node: an immutable tag carrying its key, and the floating alias {entry}-{layer}.
    assert registry_tags(registry, f"itest/{repository}") == sorted(
        [f"2.13.0-cpu-py3.11-runtime-{layer}" for layer in ("base", "business", "task")]
        + [f"2.13.0-cpu-py3.11-runtime-{n['layer']}-{n['key'][:12]}" for n in nodes.values()])
    assert nodes["2.13.0-cpu-py3.11-runtime/task"]["aliases"] == [
        f"{registry}/itest/{repository}:2.13.0-cpu-py3.11-runtime-task"]
    # One key tag per node, and one pass record and one SBOM beside each node's digest (test_publishing reads
    # them).
    every = registry_tags(registry, f"itest/{repository}", cache=True)
    records = [t for t in every if passes.is_record_tag(t)]
    assert sorted(records) == sorted(t for n in nodes.values() for t in passes.tags_for(n["digest"], every))
    assert len(records) == 3
    assert sorted(every) == sorted([*registry_tags(registry, f"itest/{repository}"), *records,
                                    *(t for n in nodes.values() for t in (  # the signed SBOM, the raw one, cosign's
                                        sbom_tag(n["digest"]), raw_sbom_tag(n["digest"]),  # `.att` and the
                                        att_tag(n["digest"]), index_tag(n["digest"]),  # fallback referrers index
                                        provenance.tag(n["digest"]))),  # and the build record of the key tag
                                    *(f"cache-{n['key'][:12]}" for n in nodes.values())])

    # Each layer builds FROM its parent's image ID, and carries OCI and version labels.
    base, business, task = (nodes[f"2.13.0-cpu-py3.11-runtime/{x}"] for x in ("base", "business", "task"))
    labels = engine.inspect(task["image"])["Config"]["Labels"]
    assert labels["org.opencontainers.image.base.digest"] == business["image"]
    # content only, a leaf's too: the layer and its scope, never the entry (another entry may share the image)
    assert labels["io.imagebuilder.layer"] == "task" and "io.imagebuilder.node" not in labels
    assert labels["io.imagebuilder.scope"] == "accelerator,cuda,cudnn,flavor,nccl,python,torch,torchaudio," \
        "torchvision,triton"
    assert labels["io.imagebuilder.version.flavor"] == "runtime"
    assert labels["io.imagebuilder.version.torch"] == "2.13.0"
    assert labels["io.imagebuilder.version.accelerator"] == "cpu"
    assert engine.inspect(business["image"])["Config"]["Labels"]["org.opencontainers.image.base.digest"] \
        == base["image"]

    # The versions manifest: what pip and dpkg installed, at the path the label names.
    path = labels["io.imagebuilder.versions"]
    manifest = json.loads(engine.run(task["image"], ["cat", path], timeout=60).logs)
    assert manifest["torch"] == "2.13.0+cpu" and manifest["cuda"] is None and manifest["python"].startswith("3.11.")
    assert "numpy" in manifest["pip"] and "python3" in manifest["dpkg"]

    # Pull back by digest: the registry's manifest yields the very image that was built.
    ref = task["tags"][0]
    digest = task["digest"]
    assert engine.registry_digest(ref) == digest
    for tag in task["tags"]:
        engine.untag(tag)
    by_digest = f"{ref.rsplit(':', 1)[0]}@{digest}"
    engine.remove_image(by_digest)
    assert engine.pull(by_digest) == task["image"]

    # No wheel, pip cache or apt lists left in any layer (but the wheels Debian's python3-venv package installs
    # from, which the os layer keeps so that every layer above can make a venv).
    result = engine.run(task["image"], ["sh", "-c",
                        "find / -xdev \\( -name '*.whl' -o -path /root/.cache/pip -o -path '/var/lib/apt/lists/*_*' "
                        "\\) -not -path '/usr/share/python-wheels/*' -print 2>/dev/null; echo END"], timeout=120)
    assert result.logs.strip() == "END", result.logs


def test_layer_outside_the_repo_via_layers_path(
        engine: DockerEngine, registry: str, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    team = tmp_path / "team-repo" / "layers"
    shutil.copytree(ROOT / "examples" / "team-layers" / "trainer", team / "trainer")
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, trainer]",
                        extra="layers_path: [team-repo/layers]\n")
    # The whole suite is the chain's to run (~1 min of CPU here): this test is about where the layer comes from, so
    # its image is pushed untested and then its layer's own check runs in it, read from the image's labels.
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "report"), "--no-smoke",
              "--allow-untested")
    assert run.code == 0, run.text[-3000:]
    nodes = {n["node"]: n for n in report(tmp_path / "report")["nodes"]}
    trainer = nodes["2.13.0-cpu-py3.11-runtime/trainer"]
    assert trainer["status"] == "pushed"
    assert "2.13.0-cpu-py3.11-runtime-trainer" in registry_tags(registry, f"itest/{repository}")
    smoked = cli("smoke", str(trainer["image"]), "--only", "layers")
    assert smoked.code == 0, smoked.text[-3000:]
    checks = {c["name"]: c["status"] for c in json.loads(smoked.out)["checks"]}
    assert checks == {"layer.trainer.0": "pass"}, checks


def test_failing_smoke_check_pushes_nothing_for_that_entry(
        engine: DockerEngine, registry: str, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    # (with torch.compile switched off in the suite's container, so the suite fails in seconds, not after a ~50 s
    # compiled FSDP step: what fails here is the flow's subject, not how; the floor still fails on its own)
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base]",
                        extra="smoke: {env: {TORCHDYNAMO_DISABLE: '1'}}\n")
    # --expect may raise a floor, and nothing else: a version is an input error before anything runs
    swapped = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "swapped"), "--expect", "torch=0.0.0")
    assert swapped.code == 2 and "--expect torch=0.0.0: only floors may be given" in swapped.err, swapped.text
    assert not (tmp_path / "swapped").exists()
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "report"), "--expect",
              "cpu_gflops_floor=1000000")
    assert run.code == 1, run.text[-3000:]
    assert "throughput.cpu" in report(tmp_path / "report")["nodes"][0]["error"]
    (node,) = report(tmp_path / "report")["nodes"]
    assert "throughput.cpu" in {c["name"] for c in node["smoke_report"]["checks"] if c["status"] == "fail"}
    assert (node["build"] in ("built", "cached"), node["smoke"], node["publish"]) == (True, "failed", "held")
    assert node["tags"] == []
    assert registry_tags(registry, f"itest/{repository}") == []
    # Not even a local tag was applied.
    assert engine.image_id(f"{registry}/itest/{repository}:2.13.0-cpu-py3.11-runtime-base") is None


def test_smoke_command_reports_json(engine: DockerEngine, cpu_chain: Chain, cli: Callable[..., CliRun]) -> None:
    node = {"image": cpu_chain.image(engine, "base")}
    # (the whole suite passed in this image when the chain was built; here the command: its labels and --expect,
    # the host's verdict, the JSON it prints)
    ok = cli("smoke", node["image"], "--expect", "torch=2.13.0", "--expect", "accelerator=cpu",
             "--expect", "cuda=none", "--only", "versions,health")
    assert ok.code == 0, ok.text
    assert '"passed": true' in ok.out and json.loads(ok.out)["expect"]["torch"] == "2.13.0"
    bad = cli("smoke", node["image"], "--expect", "python=3.12", "--only", "versions")  # a diagnostic run
    assert bad.code == 1
    assert "versions.python: got '3.11', expected '3.12'" in bad.text
    report_json = json.loads(bad.out)
    assert report_json["only"] == ["versions"] and {c["name"].split(".")[0] for c in report_json["checks"]} == {
        "versions"}
    assert engine.managed_containers(SESSION) == []  # every smoke container was removed


def test_a_suite_run_again_on_the_same_image_loads_what_it_compiled(engine: DockerEngine, cpu_chain: Chain,
                                                                    cli: Callable[..., CliRun]) -> None:
    """The chain's leaf ran its whole suite when the chain was verified, its FSDP step compiled by Inductor. Its
    FSDP check run again loads the graphs from that image's compile cache (a volume named by its ID) and still
    passes its compile check; an image built on it (another ID) gets a volume of its own, which goes once that image
    is gone."""
    from imagebuilder.smoke.runner import COMPILE_VOLUME

    task = cpu_chain.image(engine, "task")
    volume = COMPILE_VOLUME + str(engine.image_id(task)).removeprefix("sha256:")

    def fsdp() -> dict[str, Any]:
        run = cli("smoke", task, "--only", "fsdp")
        assert run.code == 0, run.text[-3000:]
        graphs = {c["name"]: c for c in json.loads(run.out)["checks"]}["fsdp.compiled_graphs_cpu"]
        assert graphs["status"] == "pass", graphs
        return dict(graphs["value"])

    got = fsdp()
    if got["inductor_cache_hits"] == 0:  # (the volume went with the image, if a test removed it: warm it once)
        got = fsdp()
    assert got["inductor_cache_hits"] == got["inductor_graphs"] >= 1, got
    assert volume in {v["Name"] for v in engine.api.volumes()["Volumes"]}

    on_top = engine.build(dockerfile_context(f"FROM {task}\nLABEL io.imagebuilder.itest=compile-cache\n"),
                          network="none", sink=lambda line: None)
    other = COMPILE_VOLUME + on_top.removeprefix("sha256:")
    assert cli("smoke", on_top, "--only", "health").code == 0
    assert other in {v["Name"] for v in engine.api.volumes()["Volumes"]}
    engine.remove_image(on_top)
    assert cli("smoke", task, "--only", "health").code == 0  # any run prunes the caches of images gone
    names = {v["Name"] for v in engine.api.volumes()["Volumes"]}
    assert other not in names and volume in names


def test_build_error_fails_that_node_with_its_log(
        engine: DockerEngine, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    broken = tmp_path / "layers" / "broken"
    broken.mkdir(parents=True)
    (broken / "Dockerfile.j2").write_text(textwrap.dedent("""
        FROM {{ parent_image }}
        RUN echo "about to fail" && exit 3
        """).lstrip())
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[broken, base]", extra="layers_path: [layers]\n")
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-push")
    assert run.code == 1
    nodes = {n["node"]: n for n in report(tmp_path / "r")["nodes"]}
    broken_node = nodes["2.13.0-cpu-py3.11-runtime/broken"]
    assert broken_node["status"] == "failed"
    assert "returned a non-zero code: 3" in broken_node["error"]
    assert nodes["2.13.0-cpu-py3.11-runtime/base"]["status"] == "blocked"
    assert "about to fail" in Path(broken_node["log"]).read_text()
    assert "about to fail" in run.out  # the failing node's log tail is shown in the summary
    assert "2.13.0-cpu-py3.11-runtime/broken │" in run.out  # live log lines are prefixed by node id


def test_a_failing_entry_does_not_stop_an_independent_one(
        engine: DockerEngine, registry: str, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun], chromium: Any) -> None:
    # Two entries that differ only by base image name (the same image under a second name, so the
    # engine's cache is shared): the second one's first layer fails to build.
    twin = f"itest/{repository}-debian:bookworm"
    engine.tag(engine.image_id(base_image) or base_image, twin)
    broken = tmp_path / "layers" / "broken"
    broken.mkdir(parents=True)
    (broken / "Dockerfile.j2").write_text("FROM {{ parent_image }}\nRUN echo 'step fails' && false\n")
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base]", extra=textwrap.dedent(f"""
        layers_path: [layers]
        aliases: ["{{entry}}-{{layer}}", "shared-{{layer}}"]
        include:
          - {{base_image: "{twin}", layers: [broken, base]}}
        """))
    matrix.write_text(matrix.read_text().replace(
        "matrix:\n", f"matrix:\n  base_image: [debian:bookworm, \"{twin}\"]\n", 1))
    try:
        # (untested: what is tested here is that one entry's failure leaves the other alone, not the suite)
        run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--jobs", "2", "--no-smoke",
                  "--allow-untested")
    finally:
        engine.untag(twin)
    assert run.code == 1
    nodes = {n["node"]: n for n in report(tmp_path / "r")["nodes"]}
    ok = nodes["2.13.0-cpu-py3.11-runtime-debian-bookworm/base"]
    assert ok["status"] == "pushed", ok
    failed = [n for k, n in nodes.items() if "itest" in k]
    assert [n["status"] for n in failed] == ["failed", "blocked"]
    assert "step fails" in run.out
    # The passing entry's tag and own alias; `shared-base` also covers the failed entry, so it did not move.
    assert registry_tags(registry, f"itest/{repository}") == [
        "2.13.0-cpu-py3.11-runtime-debian-bookworm-base", f"2.13.0-cpu-py3.11-runtime-debian-bookworm-base-"
        f"{ok['key'][:12]}"]
    assert ok["aliases_held"] == [f"{REGISTRY}/itest/{repository}:shared-base"]
    assert "alias 127.0.0.1:5000/itest/" in run.out and "shared-base not moved" in run.out
    # The run's report.html, in a browser: every node, the failed one's log tail and the command that builds it
    # again, and nothing fetched.
    page = ReportPage(chromium, tmp_path / "r" / "report.html")
    try:
        text = page.text()
        assert all(node in text for node in nodes)
        bad = next(k for k, n in nodes.items() if n["status"] == "failed")
        card = page.open_from_grid(bad)
        assert "step fails" in card.locator("pre.log.tail").inner_text()
        assert card.locator(".repro pre").inner_text() == shlex.join(
            ["imagebuilder", "build", "--matrix", str(matrix), "--only", bad, "--no-push"])
        assert page.foreign_requests() == []
    finally:
        page.close()


def hang_layer(tmp_path: Path) -> None:
    """A layer whose smoke suite hangs as it starts (a sitecustomize that sleeps when Python runs the suite; any
    other Python, such as the build's own steps, runs as usual)."""
    hang = tmp_path / "layers" / "hang"
    hang.mkdir(parents=True)
    (hang / "sitecustomize.py").write_text("import sys, time\n\nif any(a.endswith('/suite.py') for a in sys.argv):\n"
                                           "    time.sleep(900)\n")
    (hang / "Dockerfile.j2").write_text("FROM {{ parent_image }}\nCOPY sitecustomize.py /opt/hang/sitecustomize.py\n"
                                        "ENV PYTHONPATH=/opt/hang\n")


def test_a_hanging_smoke_is_killed_and_counts_as_a_failure(
        engine: DockerEngine, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    hang_layer(tmp_path)
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, hang]",
                        extra="layers_path: [layers]\nsmoke: {timeout: 8}\n")
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-push")
    assert run.code == 1, run.text[-2000:]
    node = next(n for n in report(tmp_path / "r")["nodes"] if n["layer"] == "hang")
    assert node["smoke"] == "failed"
    assert "timed out after 8 s; the container was killed" in node["error"]
    assert node["durations"]["smoke"] < 80
    assert engine.managed_containers(SESSION) == []  # killed and removed


@pytest.mark.interrupt
@pytest.mark.parametrize("parent", ["sigint-default", "sigint-ignored"])
def test_ctrl_c_during_smoke_removes_the_container(
        engine: DockerEngine, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun], processes: Processes, parent: str) -> None:
    """`sigint-ignored`: started as CI starts a background job, with SIGINT ignored by its parent. The image is
    the stock base layer (cached after its first build in any test; no session chain, so that
    benchmarks/interrupts.py can repeat this test cheaply)."""
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base]")
    assert cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-push", "--no-smoke").code == 0
    (node,) = report(tmp_path / "r")["nodes"]
    proc = processes.start("smoke", node["image"], ignore_sigint=parent == "sigint-ignored")
    err = processes.interrupt(proc, lambda: running_containers(engine), "the smoke container to run", wait=120,
                              stop_within=60)
    assert "interrupted" in err
    assert engine.managed_containers(SESSION) == []


def test_an_unreachable_registry_is_retried_then_fails_cleanly(
        engine: DockerEngine, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        cli: Callable[..., CliRun]) -> None:
    # A base layer of this test's own (salted: a key no image has yet), so the cache lookup has to ask the
    # registry; the engine's build cache still serves its steps.
    salted_layers(tmp_path / "layers", ["base"], f"itest {repository}")
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base]", extra="layers_path: [layers]\n")
    run = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "r"), "--no-smoke",
              "--registry", "127.0.0.1:5999/itest")  # nothing listens there
    assert run.code == 1
    assert "cache lookup failed: registry 127.0.0.1:5999 unreachable" in run.err  # one warning
    assert run.text.count("retrying HEAD 127.0.0.1:5999/v2/itest/") == 2  # 3 attempts, backoff in between
    # A build that pushes stops there, before anything builds: its push could not succeed.
    assert f"publishing needs push to 127.0.0.1:5999/itest/{repository}: registry 127.0.0.1:5999 unreachable " \
           "(connection refused); nothing was built or pushed" in run.err, run.text[-3000:]
    assert "▶ build" not in run.out and not (tmp_path / "r" / "report.json").exists()
    assert "Traceback" not in run.text
    # Without a push (--no-push) the registry is not needed: the build goes on, only the lookup said so.
    local = cli("build", "--matrix", str(matrix), "--report", str(tmp_path / "local"), "--no-smoke", "--no-push",
                "--registry", "127.0.0.1:5999/itest")
    assert local.code == 0 and "cache lookup failed" in local.err, local.text[-3000:]
    (node,) = report(tmp_path / "local")["nodes"]
    assert node["build"] in ("built", "cached") and node["digest"] is None


@pytest.mark.interrupt
@pytest.mark.parametrize("parent", ["sigint-default", "sigint-ignored"])
def test_ctrl_c_during_a_parallel_build_removes_its_containers(
        engine: DockerEngine, wheelhouse: Path, base_image: str, repository: str, tmp_path: Path,
        processes: Processes, parent: str) -> None:
    hang_layer(tmp_path)
    matrix = cpu_matrix(tmp_path, repository, wheelhouse, layers="[base, hang]", extra="layers_path: [layers]\n")
    proc = processes.start("build", "--matrix", str(matrix), "--jobs", "2", "--no-push", "--report",
                           str(tmp_path / "r"), env={"IMAGEBUILDER_CACHE_DIR": str(tmp_path / "cache")},
                           ignore_sigint=parent == "sigint-ignored")
    processes.interrupt(proc, lambda: running_containers(engine), "the smoke container to run", wait=600,
                        stop_within=60)
    assert engine.managed_containers(SESSION) == []
    data = report(tmp_path / "r")
    assert data["interrupted"] is True
    hang = next(n for n in data["nodes"] if n["layer"] == "hang")
    assert hang["publish"] == "held" and hang["tags"] == []  # nothing of the entry was tagged
