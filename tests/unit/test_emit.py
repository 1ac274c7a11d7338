"""`plan --format graph|github-actions|buildkite|argo|k8s-jobs`: one graph, translated for each engine. Golden
files for a small plan; for a 600-node plan, every engine's documents are valid by the engine's own schema or
models (GitHub's and Buildkite's published JSON schemas, vendored by check-jsonschema; Argo's models from Hera;
the Kubernetes client's models) and within its limits."""

from __future__ import annotations

import functools
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from imagebuilder.cli import main
from imagebuilder.emit import argo, buildkite, formats, github, kubejobs, pods, roles
from imagebuilder.emit.graph import PUBLISH, STAGE, VERIFY, CiRunner, Graph
from imagebuilder.emit.settings import Settings
from imagebuilder.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
SMALL = "tests/unit/data/engines.yaml"
GOLDEN = ROOT / "tests" / "golden" / "engines"
DIGEST = "sha256:" + "ab" * 32
TOOL = f"ghcr.io/example/imagebuilder@{DIGEST}"


def vendored(name: str) -> Any:
    """A validator of a published schema as check-jsonschema vendors it (SchemaStore's github-workflows,
    Buildkite's own), checked once."""
    path = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / f"{name}.json"
    schema = json.loads(path.read_text(encoding="utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)


BASE_ID = "debian:bookworm=sha256:" + "ba" * 32  # the small plan's base image, as an engine would resolve it


def plan_text(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, matrix: str, fmt: str,
              *extra: str) -> str:
    monkeypatch.chdir(ROOT)
    code = main(["--offline", "--engine", "unix:///nonexistent.sock", "--base-image-id", BASE_ID, "plan", "--matrix",
                 matrix, "--format", fmt, *extra])
    out = capsys.readouterr().out
    assert code == 0
    return out


def the_graph(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, matrix: str) -> Graph:
    return Graph.of_json(json.loads(plan_text(capsys, monkeypatch, matrix, "graph")))


def test_the_graph_of_the_small_plan(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    graph = the_graph(capsys, monkeypatch, SMALL)
    kinds = [j.kind for j in graph.jobs]
    # os is one image for both entries: staged once; torch and task per entry, cuda for the CUDA entry
    assert kinds.count(STAGE) == 6 and kinds.count(VERIFY) == 2 and kinds[-1] == PUBLISH
    verify = {j.node: j for j in graph.jobs if j.kind == VERIFY}
    gpu = verify["2.7.1-cu126-py3.11-runtime/task"].runner
    assert (gpu.gpu, gpu.gpus, gpu.label) == ("NVIDIA-H100-80GB-HBM3", 2, "gpu-NVIDIA-H100-80GB-HBM3-x2")
    assert verify["2.7.1-cpu-py3.11-runtime/task"].runner.label == "cpu-large"  # CPU leaves verify on CPU
    seen: set[str] = set()
    for job in graph.jobs:  # dependency order; ids valid as Kubernetes names
        assert set(job.needs) <= seen and re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", job.id), job.id
        seen.add(job.id)


@pytest.mark.parametrize("fmt", ["graph", "github-actions", "buildkite", "argo"])
def test_golden(fmt: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                update_golden: bool) -> None:
    extra = ("--tool-image", TOOL) if fmt == "argo" else ()
    text = plan_text(capsys, monkeypatch, SMALL, fmt, *extra)
    golden = GOLDEN / f"{fmt}.{'json' if fmt == 'graph' else 'yaml'}"
    if update_golden:
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8"), f"{golden} differs: `make golden` rewrites it"


def test_golden_k8s_jobs(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                         update_golden: bool) -> None:
    graph = the_graph(capsys, monkeypatch, SMALL)
    leaves = {str(j.node): DIGEST for j in graph.jobs if j.kind == VERIFY}
    docs = formats.documents("k8s-jobs", graph, Settings(tool_image=TOOL, kueue_queue="gpu-team", digests=leaves,
                                                         base_ids=(BASE_ID,), bases=("debian:bookworm",)))
    text = formats.text("k8s-jobs", docs)
    golden = GOLDEN / "k8s-jobs.yaml"
    if update_golden:
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")
    gpu = next(d for _, d in docs if "cu126" in d["metadata"]["annotations"][kubejobs.NODE_ANNOTATION])
    pod = gpu["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert gpu["metadata"]["labels"][kubejobs.KUEUE_LABEL] == "gpu-team" and gpu["spec"]["suspend"] is True
    assert pod["containers"][0]["image"] == TOOL and DIGEST in pod["containers"][0]["args"]


def test_a_tool_image_by_tag_is_refused(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    code = main(["--offline", "--engine", "unix:///nonexistent.sock", "plan", "--matrix", SMALL, "--format", "argo",
                 "--tool-image", "ghcr.io/example/imagebuilder:latest"])
    assert code == 2 and "pinned by digest" in capsys.readouterr().err


def big_matrix(tmp_path: Path) -> Path:
    """600 nodes: 100 base images x {cpu, cu126} x (os, torch, task; cuda between os and torch for CUDA)... less
    the shared os: 100 x (3 + 4) = 700 nodes, 600 of them distinct images, 200 leaves."""
    bases = ", ".join(f"registry.example/os-{i}:1" for i in range(100))
    path = tmp_path / "big.yaml"
    path.write_text(textwrap.dedent(f"""
        version: 1
        base_image: debian:bookworm
        registry: registry.example/ml
        repository: pytorch
        torch_extras: []
        layers: [os, {{layer: cuda, when: {{accelerator: "cu*"}}}}, torch, task]
        runners: {{gpu: NVIDIA-H100-80GB-HBM3, gpus: 8}}
        matrix:
          torch: ["2.7.1"]
          accelerator: [cpu, cu126]
          python: ["3.11"]
          base_image: [{bases}]
        """), encoding="utf-8")
    return path


def planned_graph(path: Path, max_entries: int, *args: str) -> Graph:
    """`imagebuilder --offline --max-entries N plan --matrix PATH --format graph ARGS`, with no engine."""
    from click.testing import CliRunner

    from imagebuilder.cli import cli

    result = CliRunner().invoke(cli, ["--offline", "--engine", "unix:///nonexistent.sock", "--max-entries",
                                      str(max_entries), "plan", "--matrix", str(path), "--format", "graph", *args],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output[-2000:]
    return Graph.of_json(json.loads(result.stdout))


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    graph = planned_graph(big_matrix(tmp_path_factory.mktemp("big")), 1000)
    assert sum(j.kind == STAGE for j in graph.jobs) == 600 and sum(j.kind == VERIFY for j in graph.jobs) == 200
    return graph


def test_github_actions_of_600_nodes(big: Graph) -> None:
    schema = vendored("github-workflows")
    files = github.workflows(big, cpu=("ubuntu-24.04",), gpu=("self-hosted", "gpu"))
    shards = files[1:]
    assert len(shards) == 4  # 801 node jobs, 255 to a run (and its `next`)
    placed: dict[str, int] = {}
    for index, (name, doc) in enumerate(files):
        schema.validate(doc)
        assert len(yaml.safe_dump(doc).encode()) <= github.MAX_BYTES, name
        if index == 0:
            continue
        assert len(doc["jobs"]) <= github.MAX_JOBS, name
        for job_id, job in doc["jobs"].items():
            assert set(job.get("needs") or ()) <= set(doc["jobs"]), (name, job_id)  # needs stay in their run
            if job_id != "next":
                placed[job_id] = index
        assert ("next" in doc["jobs"]) == (index < len(shards))
    assert list(placed) == [j.id for j in big.jobs]  # every job once, in order
    for job in big.jobs:  # what a job needs ran in an earlier run, or in its own before it
        assert all(placed[n] <= placed[job.id] for n in job.needs)


def test_buildkite_of_600_nodes(big: Graph) -> None:
    schema = vendored("buildkite")
    parts = buildkite.uploads(big, ("--matrix", "big.yaml"))
    assert len(parts) == -(-len(big.jobs) // (buildkite.MAX_STEPS - 1)) >= 2  # (a step of each part uploads the next)
    keys: list[str] = []
    for part in parts:
        schema.validate(part)
        assert len(part["steps"]) <= buildkite.MAX_STEPS
        for step in part["steps"]:
            assert set(step.get("depends_on") or ()) <= set(keys), step["key"]
            keys.append(step["key"])
    assert parts[0]["steps"][-1]["command"].endswith("--part 2 | buildkite-agent pipeline upload")
    assert {s["agents"]["queue"] for p in parts for s in p["steps"]} == {"cpu", "gpu-NVIDIA-H100-80GB-HBM3-x8"}


@functools.cache
def argo_strict_schema() -> dict[str, Any]:
    """Argo's Workflow schema, strict: the JSON Schema of Hera's models of it (generated from Argo's own OpenAPI
    schema), with `additionalProperties: false` on every object that declares its properties, so a key Argo does
    not know (`dependancies`) is an error, not a field the controller drops."""
    from hera.workflows.models import Workflow

    def strict(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for value in node.values():
                strict(value)
        elif isinstance(node, list):
            for value in node:
                strict(value)

    schema = Workflow.model_json_schema(by_alias=True)
    strict(schema)
    return schema


def test_argo_documents_pass_argos_strict_schema_and_a_misspelt_key_does_not(big: Graph) -> None:
    """The golden Workflow and the 600-node one against Argo's strict schema; the same with one task's
    `dependencies` misspelt is refused (Argo's controller would drop the key and run the task at once)."""
    validator = jsonschema.Draft202012Validator(argo_strict_schema())
    golden = yaml.safe_load((ROOT / "tests" / "golden" / "engines" / "argo.yaml").read_text(encoding="utf-8"))
    for doc in (golden, argo.workflow(big, image=TOOL)):
        assert [e.message[:200] for e in validator.iter_errors(doc)] == []
    task = next(t for t in golden["spec"]["templates"][0]["dag"]["tasks"] if "dependencies" in t)
    task["dependancies"] = task.pop("dependencies")
    assert not validator.is_valid(golden)


def test_argo_of_600_nodes(big: Graph) -> None:
    from hera.workflows.models import Workflow

    doc = argo.workflow(big, image=TOOL)
    parsed = Workflow.model_validate(doc).model_dump(by_alias=True, exclude_none=True, mode="json")
    assert parsed == doc  # nothing Argo's models do not know (an unknown key would be dropped)
    assert len(json.dumps(doc).encode()) <= argo.MAX_BYTES
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    tasks = templates["plan"]["dag"]["tasks"]
    names = [t["name"] for t in tasks]
    assert len(names) == len(set(names)) == len(big.jobs)
    for task in tasks:
        assert set(task.get("dependencies") or ()) <= set(names) and task["template"] in templates
    gpu = templates[argo.template_name("verify", CiRunner("gpu", "NVIDIA-H100-80GB-HBM3", 8))]
    assert gpu["container"]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert gpu["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert templates["stage-cpu"]["outputs"]["parameters"][0]["name"] == "digest"


def test_kubernetes_jobs_of_600_nodes(big: Graph) -> None:
    from kubernetes.client import ApiClient

    client = ApiClient()
    leaves = {str(j.node): DIGEST for j in big.jobs if j.kind == VERIFY}
    docs = kubejobs.jobs(big, leaves, image=TOOL, queue="team")
    assert len(docs) == 200
    for doc in docs:
        model = client._ApiClient__deserialize(doc, "V1Job")  # type: ignore[attr-defined]
        assert client.sanitize_for_serialization(model) == doc  # every key is the model's
        prefix = doc["metadata"]["generateName"]  # (the API server adds five characters)
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]*-", prefix) and len(prefix) + 5 <= 63
        pod = doc["spec"]["template"]["spec"]
        node = big.job(next(j.id for j in big.jobs if j.node == doc["metadata"]["annotations"][kubejobs.NODE_ANNOTATION]
                            and j.kind == VERIFY))
        assert [c["image"] for c in pod["initContainers"]] == [TOOL, f"{node.repository}@{DIGEST}"]
        assert [c["image"] for c in pod["containers"]] == [TOOL]


def test_runner_keys_are_checked_and_default_from_the_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    from imagebuilder.declarations import schema
    from imagebuilder.input import matrix as matrix_mod
    from imagebuilder.input.compat import CompatTable

    text = (ROOT / SMALL).read_text(encoding="utf-8")
    path = tmp_path / "m.yaml"
    plain = text.replace("runners: {build: cpu-large}\n", "")
    path.write_text(plain[:plain.index("include:")], encoding="utf-8")
    (entry, _) = matrix_mod.load(path, CompatTable.load(None), env={}).entries
    assert (entry.runners.build, entry.runners.gpu_queue, entry.runners.gpu, str(entry.runners.gpus)) == tuple(
        schema.default(f"runners.{k}") for k in ("build", "gpu_queue", "gpu", "gpus"))
    for bad, key in (("runners: {gpus: 0}", "gpus"), ("runners: {gpu: 'H100 80GB'}", "gpu"),
                     ("runners: {queue: cpu}", "queue")):
        path.write_text(text.replace("runners: {build: cpu-large}", bad), encoding="utf-8")
        code = main(["--offline", "--engine", "unix:///nonexistent.sock", "plan", "--matrix", str(path), "--format",
                     "graph"])
        err = capsys.readouterr().err
        assert code == 2 and f"{key}" in err and "m.yaml" in err and "Traceback" not in err, err


def held_keys(pod: dict[str, Any]) -> list[str]:
    """The Secret keys a pod (or an Argo template) hands its containers, by `secretKeyRef` or as a volume, but the
    registry's optional credentials; none may reach a container of the leaf image (`suite`)."""
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [pod.get("container")])]
    refs = [e["valueFrom"]["secretKeyRef"] for c in containers for e in c.get("env") or []
            if "secretKeyRef" in (e.get("valueFrom") or {})]
    suite = [c for c in containers if c["name"] == "suite"]
    assert all(not c.get("env") and all(m["name"] in ("suite", "shm", "tmp") for m in c["volumeMounts"])
               for c in suite), suite
    assert not [v for v in pod.get("volumes") or [] if "secret" in v and v["secret"]["secretName"] == roles.SECRET]
    return [r["key"] for r in refs if r["name"] == roles.SECRET]


def test_each_job_holds_only_its_roles_key_and_names_the_public_halves_with_their_roles(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """N5-06/N5-08: stage jobs get the build key, GPU verify jobs the GPU runners' key, CPU verify and publish the
    hosted fleet's key (trusted `cpu,publish` only); secrets are passed by name, never `inherit`; every job and pod
    names the public halves with their roles. One definition (`emit/roles.py`) for every engine."""
    from imagebuilder.emit import roles
    from imagebuilder.evidence import signing

    assert {roles.SIGNING_ENV, roles.BUILD_ENV} == {signing.SIGNING_KEY_ENV, signing.BUILD_KEY_ENV}
    assert all(signing.roles_problem(k.roles.split(",")) is None for k in roles.KEYS)
    graph = the_graph(capsys, monkeypatch, SMALL)
    docs = dict(github.workflows(graph, cpu=("ubuntu-24.04",), gpu=("self-hosted", "gpu")))
    expected = {(STAGE, False): "IMAGEBUILDER_BUILD_KEY", (VERIFY, True): "IMAGEBUILDER_SIGNING_KEY",
                (VERIFY, False): "IMAGEBUILDER_HOSTED_KEY", (PUBLISH, False): "IMAGEBUILDER_HOSTED_KEY"}
    shard = docs[github.shard_name(0)]
    for job in graph.jobs:
        called = shard["jobs"][job.id]
        assert called["secrets"]["IMAGEBUILDER_KEY"] == \
            f"${{{{ secrets.{expected[(job.kind, job.runner.gpu is not None)]} }}}}", job.id
        assert called["with"]["key_env"] == (signing.BUILD_KEY_ENV if job.kind == STAGE else signing.SIGNING_KEY_ENV)
    assert "inherit" not in json.dumps(docs)
    node = docs[github.NODE_WORKFLOW]["jobs"]["node"]["steps"]
    trust = next(s for s in node if s.get("id") == "node")["env"]
    assert "'gpu=keys/signing.pub cpu,publish=keys/hosted.pub'" in trust["IMAGEBUILDER_TRUST_KEYS"]
    assert "'keys/build.pub'" in trust["IMAGEBUILDER_TRUST_BUILD_KEYS"]
    workflow = argo.workflow(graph, image="r/x@sha256:" + "a" * 64)
    for template in workflow["spec"]["templates"][1:]:
        env = {e["name"]: e.get("value") for e in template["container"]["env"]}
        kind = template["name"].split("-", 1)[0]
        want = "build.pem" if kind == STAGE else "gpu.pem" if "nvidia" in template["name"] else "hosted.pem"
        assert held_keys(template) == [want] and env["IMAGEBUILDER_TRUST_KEYS"] == (
            "gpu=/var/run/imagebuilder/trust/gpu.pub cpu,publish=/var/run/imagebuilder/trust/hosted.pub"), template
    for step in buildkite.uploads(graph, ())[0]["steps"]:
        job = graph.job(step["key"])
        assert step["secrets"] == {signing.BUILD_KEY_ENV if job.kind == STAGE else signing.SIGNING_KEY_ENV:
                                   expected[(job.kind, job.runner.gpu is not None)]}, step
    leaves = {str(j.node): "sha256:" + "b" * 64 for j in graph.jobs if j.kind == VERIFY}
    for one in kubejobs.jobs(graph, leaves, image="r/x@sha256:" + "a" * 64):
        pod = one["spec"]["template"]["spec"]
        assert held_keys(pod) == ["gpu.pem" if "nvidia" in str(pod["nodeSelector"]).lower() else "hosted.pem"]


def test_a_shard_of_a_moved_branch_runs_the_first_shards_commit(tmp_path: Path) -> None:
    """D-G3: the pin step of every node job, as the runner runs it: a dispatched shard whose branch moved since
    the first shard ran checks out the commit the first shard ran, fetching it into the shallow checkout
    `actions/checkout` makes (depth 1: the branch's tip only). Seen failing: without the step, HEAD is the tip."""
    import os
    import subprocess

    def git(where: Path, *args: str) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
        return subprocess.run(["git", *args], cwd=where, check=True, capture_output=True, text=True,
                              env=env).stdout.strip()

    origin, checkout = tmp_path / "origin", tmp_path / "checkout"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    (origin / "f").write_text("first\n")
    git(origin, "add", "-A")
    git(origin, "commit", "-qm", "first")
    first = git(origin, "rev-parse", "HEAD")
    (origin / "f").write_text("moved\n")
    git(origin, "commit", "-qam", "moved")
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{origin}", str(checkout))
    assert subprocess.run(["git", "cat-file", "-e", f"{first}^{{commit}}"], cwd=checkout).returncode != 0
    subprocess.run(["bash", "-e", "-c", github.PIN["run"]], cwd=checkout, env={**os.environ, "SHA": first},
                   check=True)
    assert git(checkout, "rev-parse", "HEAD") == first and (checkout / "f").read_text() == "first\n"


def test_an_entrys_publish_waits_for_its_own_verifies_and_the_whole_matrix_publishes_after_all(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """One failed leaf holds only its own entry: each entry's publish needs that entry's verifies only (and says
    them with --only); the whole matrix's publish needs every entry's publish and runs whatever they ended, on
    every engine (GitHub `!cancelled()`, Buildkite `allow_dependency_failure`, Argo `depends` on any end)."""
    graph = the_graph(capsys, monkeypatch, SMALL)
    verify = {j.node: j.id for j in graph.jobs if j.kind == VERIFY}
    per_entry = [j for j in graph.jobs if j.kind == PUBLISH and j.entry]
    assert sorted(j.entry for j in per_entry) == sorted({str(n).split("/")[0] for n in verify})
    for job in per_entry:
        mine = [jid for node, jid in verify.items() if str(node).startswith(f"{job.entry}/")]
        assert list(job.needs) == mine and not job.after_failures
        assert job.argv[job.argv.index("--only") + 1] == ",".join(n for n in verify if n.startswith(f"{job.entry}/"))
    whole = graph.jobs[-1]
    assert whole.id == PUBLISH and whole.after_failures and set(whole.needs) == {j.id for j in per_entry}
    order = [j.id for j in graph.jobs]
    assert all(order.index(n) < order.index(j.id) for j in per_entry for n in j.needs)
    shard = dict(github.workflows(graph, cpu=("ubuntu-24.04",), gpu=("self-hosted", "gpu")))["imagebuilder-1.yml"]
    assert shard["jobs"][PUBLISH]["if"] == "${{ !cancelled() }}"
    assert all("if" not in shard["jobs"][j.id] for j in per_entry)
    steps = {s["key"]: s for s in buildkite.uploads(graph, ())[0]["steps"]}
    assert steps[PUBLISH]["allow_dependency_failure"] is True
    assert not any(steps[j.id].get("allow_dependency_failure") for j in per_entry)
    tasks = {t["name"]: t for t in argo.workflow(graph, image=TOOL)["spec"]["templates"][0]["dag"]["tasks"]}
    assert "dependencies" not in tasks[PUBLISH]
    assert all(f"{j.id}.Failed" in tasks[PUBLISH]["depends"] for j in per_entry)
    assert [p["value"] for p in tasks[per_entry[0].id]["arguments"]["parameters"]] == [
        per_entry[0].argv[per_entry[0].argv.index("--only") + 1]]


def test_the_local_executor_holds_only_the_failed_leafs_entry(capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A verify that fails blocks its entry's publish only; the other entry's publish and the whole matrix's run
    (seen failing: with `after_failures` ignored, the whole matrix's publish is blocked)."""
    import sys

    from imagebuilder.emit import local

    graph = the_graph(capsys, monkeypatch, SMALL)
    failing = next(j for j in graph.jobs if j.kind == VERIFY)
    fake = tmp_path / "fake.py"  # a node command: writes the digest file a stage job names; fails the one verify
    fake.write_text("import pathlib, sys\na = [x for x in sys.argv[1:] if x != '--offline']\n"
                    "if '--digest-file' in a:\n    p = pathlib.Path(a[a.index('--digest-file') + 1])\n"
                    "    p.parent.mkdir(parents=True, exist_ok=True); p.write_text('sha256:' + '0' * 64)\n"
                    f"sys.exit(1 if {failing.node!r} in a and a[:2] == ['node', 'verify'] else 0)\n")
    monkeypatch.chdir(tmp_path)
    outcome = local.Executor(graph, [sys.executable, str(fake)], {}, lambda _: None, logs=tmp_path / "r").run()
    theirs = next(j for j in graph.jobs if j.kind == PUBLISH and j.entry and failing.id in j.needs)
    others = [j for j in graph.jobs if j.kind == PUBLISH and j.entry and j is not theirs]
    assert outcome[failing.id] == local.FAILED and outcome[theirs.id] == local.BLOCKED
    assert others and all(outcome[j.id] == local.DONE for j in others)
    assert outcome[PUBLISH] == local.DONE


def test_github_values_that_github_would_evaluate_are_refused(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """D-G4: `${{` in a command-line value (a runner label, the matrix path) is refused before anything is
    written (seen failing: it was written into `with:`, where GitHub evaluates it)."""
    import shutil

    monkeypatch.chdir(ROOT)
    odd = tmp_path / "m-${{ github.token }}.yaml"
    shutil.copy(ROOT / SMALL, odd)
    for matrix, extra in ((SMALL, ("--cpu-runner", "ubuntu-24.04,${{ secrets.REGISTRY_PASSWORD }}")),
                          (str(odd), ())):
        code = main(["--offline", "--engine", "unix:///nonexistent.sock", "plan", "--matrix", matrix, "--format",
                     "github-actions", *extra])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == "" and "GitHub evaluates" in captured.err, captured.err


def test_hosted_cpu_runners_get_no_queue_label(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """D-G5: a GitHub-hosted runner has its image's label only: the entry's CPU queue is added on self-hosted CPU
    runners only (the small matrix's CPU entry builds on `cpu-large`)."""
    graph = the_graph(capsys, monkeypatch, SMALL)
    stage = next(j for j in graph.jobs if j.kind == STAGE and j.runner.queue == "cpu-large")
    assert github.runs_on(stage, ("ubuntu-24.04",), ("gpu",)) == ["ubuntu-24.04"]
    assert github.runs_on(stage, ("Windows-Latest",), ("gpu",)) == ["Windows-Latest"]
    assert github.runs_on(stage, ("self-hosted", "linux"), ("gpu",)) == ["self-hosted", "linux", "cpu-large"]
    assert github.runs_on(stage, ("build-pool",), ("gpu",)) == ["build-pool", "cpu-large"]  # a custom label alone


def test_a_job_without_the_public_keys_stops_naming_them(tmp_path: Path) -> None:
    """D-G2: the node workflow's key check, as the runner runs it: the committed public halves, or the variables,
    or an error naming the missing files."""
    import os
    import subprocess

    step = next(s for s in github.node_workflow()["jobs"]["node"]["steps"]
                if s.get("name") == "the public keys the jobs trust")

    def run(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", step["run"]], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "TRUST": "", "TRUST_BUILD": "", **env})

    missing = run()
    assert missing.returncode == 1 and "keys/signing.pub keys/hosted.pub keys/build.pub" in missing.stdout
    assert run(TRUST="gpu=a.pub", TRUST_BUILD="b.pub").returncode == 0
    (tmp_path / "keys").mkdir()
    for name in ("signing", "hosted", "build"):
        (tmp_path / "keys" / f"{name}.pub").write_text("x")
    assert run().returncode == 0


def test_the_nightly_installs_imagebuilder_as_the_emitted_workflows_do() -> None:
    """One install step: the nightly's is the emitter's (no setup-python, the tool cache keyed by the tree)."""
    nightly = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text(encoding="utf-8"))
    for name, job in nightly["jobs"].items():
        runs = [s.get("run") for s in job["steps"]]
        assert github.INSTALL["run"] in runs, name
        assert not any("setup-python" in str(s.get("uses")) for s in job["steps"]), name


def test_a_strategy_matrix_past_its_limit_packs_entries_never_mixing_runners() -> None:
    """600 entries of two kinds in at most 256 jobs: each entry in exactly one job, a job of one kind only."""
    from imagebuilder.plan import waves

    # kinds of 600, 1 and 1 entries fit (each kind a job, the rest shared): seen refused before
    few = [{"id": f"x{i}", "only": f"x{i}/*", "gpu": False, "runs_on": [f"r{i}"], "wave": 0, "nodes": 1,
            "to_build": 1} for i in range(2)]
    many = [{"id": f"e{i}", "only": f"e{i}/*", "gpu": True, "runs_on": ["gpu"], "wave": 0, "nodes": 1, "to_build": 1}
            for i in range(600)]
    mixed = waves.pack(many + few, 256)
    assert len(mixed) <= 256 and sorted(e for j in mixed for e in j.get("entries", [j["id"]])) == sorted(
        e["id"] for e in many + few)
    include = [{"id": f"e{i}", "only": f"e{i}/*", "gpu": i % 3 == 0, "runs_on": ["gpu"] if i % 3 == 0 else ["cpu"],
                "wave": 0, "nodes": 2, "to_build": 1} for i in range(600)]
    jobs = waves.pack(include, 256)
    assert len(jobs) <= 256
    packed = [e for j in jobs for e in j.get("entries", [j["id"]])]
    assert sorted(packed) == sorted(e["id"] for e in include)
    by_id = {e["id"]: e for e in include}
    for job in jobs:
        assert {by_id[e]["gpu"] for e in job["entries"]} == {job["gpu"]}
        assert job["only"] == ",".join(f"{e}/*" for e in job["entries"])
    assert waves.pack(include[:10], 256) == include[:10]


def test_the_committed_reports_action_is_the_emitted_one() -> None:
    """The nightly uses the action the emitter writes (the one place the workflows name actions/*-artifact); the
    nightly names no marketplace action but checkout, which act copies offline."""
    path = ROOT / github.REPORTS_ACTION
    assert path.read_text(encoding="utf-8") == formats.text("github-actions", [(github.REPORTS_ACTION,
                                                                                 github.reports_action())])
    nightly = (ROOT / ".github" / "workflows" / "nightly.yml").read_text(encoding="utf-8")
    assert set(re.findall(r"uses: (\S+)", nightly)) == {"actions/checkout@v4", "./.github/actions/imagebuilder-reports"}


def test_a_later_shard_of_another_graph_refuses_to_run() -> None:
    """The graph check of every node job, as the runner runs it: a shard whose graph is not the one the first
    shard ran stops, naming both; the same graph, or the first shard (nothing expected), goes on."""
    import os
    import subprocess

    step = next(s for s in github.node_workflow()["jobs"]["node"]["steps"]
                if s.get("name") == "the graph the first shard started")

    def run(expect: str, graph: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", step["run"]], capture_output=True, text=True,
                              env={**os.environ, "EXPECT": expect, "GRAPH": graph})

    other = run("a" * 16, "b" * 16)
    assert other.returncode == 1 and f"this shard is of graph {'b' * 16}, the first shard ran graph {'a' * 16}" \
        in other.stdout
    assert run("a" * 16, "a" * 16).returncode == 0
    assert step["if"] == "inputs.expect_graph != ''"


def test_a_shard_hands_on_the_first_shards_graph_and_a_regenerated_one_dispatches_nothing(
        big: Graph) -> None:
    """The `next` job dispatches the graph the first shard ran (its own only on the first shard), and only when
    this shard is of that graph: a regenerated shard 2 cannot start a shard 3 that would pass its check. The
    fingerprint covers how the graph is cut and placed: another --max-jobs or other labels is another graph."""
    docs = dict(github.workflows(big, cpu=("ubuntu-24.04",), gpu=("self-hosted", "gpu")))
    mark = github.fingerprint(big, github.MAX_JOBS, ("ubuntu-24.04",), ("self-hosted", "gpu"))
    nxt = docs[github.shard_name(1)]["jobs"]["next"]
    assert nxt["env"]["GRAPH"] == f"${{{{ inputs.graph || '{mark}' }}}}"
    assert nxt["if"] == f"${{{{ !cancelled() && (inputs.graph == '' || inputs.graph == '{mark}') }}}}"
    assert github.fingerprint(big, 200, ("ubuntu-24.04",), ("self-hosted", "gpu")) != mark
    assert github.fingerprint(big, github.MAX_JOBS, ("ubuntu-22.04",), ("self-hosted", "gpu")) != mark


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """A pod's (or an Argo template's) containers, init containers first."""
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or [pod["container"]])]


def test_no_pod_mounts_the_host_and_a_verify_pod_runs_the_leaf_image_itself(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49: no hostPath, no Docker socket, no privilege in any Argo or Kubernetes document; a verify pod's
    suite container is the leaf image pinned by digest, requesting the runner's GPUs, and the judge (the tool
    image) requests the same and is told what the pod asked for; no container gets a service account token."""
    graph = the_graph(capsys, monkeypatch, SMALL)
    leaves = {str(j.node): DIGEST for j in graph.jobs if j.kind == VERIFY}
    workflow = argo.workflow(graph, image=TOOL)
    jobs = kubejobs.jobs(graph, leaves, image=TOOL)
    for text in (json.dumps(workflow), json.dumps(jobs)):
        assert "hostPath" not in text and "docker.sock" not in text and '"privileged"' not in text
    templates = {t["name"]: t for t in workflow["spec"]["templates"][1:]}
    pods_of = [*templates.values(), *(j["spec"]["template"]["spec"] for j in jobs)]
    for pod in pods_of:
        assert pod["automountServiceAccountToken"] is False
        for container in containers(pod):
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
            assert container["image"] == TOOL or container["name"] == "suite"
    for job in jobs:
        pod = job["spec"]["template"]["spec"]
        node = job["metadata"]["annotations"][kubejobs.NODE_ANNOTATION]
        runner = next(j.runner for j in graph.jobs if j.node == node and j.kind == VERIFY)
        prepare, suite, judge = containers(pod)
        assert suite["image"] == f"registry.example/ml/pytorch@{DIGEST}" and suite["command"] == list(pods.pod.COMMAND)
        want = {"nvidia.com/gpu": str(runner.gpus)} if runner.gpu else None
        for container in (suite, judge):
            assert (container.get("resources") or {}).get("limits") == want
        args = judge["args"]
        assert args[args.index("--requested-gpus") + 1] == str(runner.gpus if runner.gpu else 0)
        assert ("--requested-model" in args) == bool(runner.gpu) and args[-1] == node
        assert args[args.index("--digest") + 1] == DIGEST and prepare["args"][:2] == ["node", "prepare-suite"]
        assert pod["nodeSelector"] == ({"nvidia.com/gpu.product": runner.gpu} if runner.gpu
                                       else {"imagebuilder.dev/queue": runner.queue})
    verify = templates[argo.template_name("verify", CiRunner("gpu", "NVIDIA-H100-80GB-HBM3", 2))]
    assert verify["initContainers"][1]["image"] == "{{inputs.parameters.image}}"
    task = next(t for t in workflow["spec"]["templates"][0]["dag"]["tasks"] if t["template"] == verify["name"])
    params = {p["name"]: p["value"] for p in task["arguments"]["parameters"]}
    assert params["image"] == "registry.example/ml/pytorch@" + params["digest"]
    assert params["digest"].startswith("{{tasks.stage-") and params["digest"].endswith(".outputs.parameters.digest}}")
    for kind in ("stage", "publish"):
        pod = templates[f"{kind}-cpu-large"]
        env = {e["name"]: e.get("valueFrom") for e in pod["container"]["env"]}
        assert env["DOCKER_HOST"] == {"configMapKeyRef": {"name": pods.ENGINE_CONFIG, "key": "DOCKER_HOST",
                                                          "optional": False}}


def test_the_kubernetes_documents_pass_kubernetes_validate_strict(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The Jobs, and each Argo template's pod (as a Pod), by Kubernetes' own schemas (kubernetes-validate
    --strict, 1.30 and 1.37); a misspelt key in one of them fails it."""
    graph = the_graph(capsys, monkeypatch, SMALL)
    docs = kubejobs.jobs(graph, {str(j.node): DIGEST for j in graph.jobs if j.kind == VERIFY}, image=TOOL)
    for template in argo.workflow(graph, image=TOOL)["spec"]["templates"][1:]:
        spec = {k: v for k, v in template.items() if k not in ("name", "inputs", "outputs", "executor", "container")}
        spec["containers"] = [{**template["container"], "name": template["container"].get("name", "main")}]
        spec = json.loads(re.sub(r"\{\{[^}]*\}\}", "x", json.dumps(spec)))  # (Argo's placeholders)
        docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": template["name"]}, "spec": spec})
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    mutant = json.loads(json.dumps(docs[0]))
    mutant["spec"]["template"]["spec"]["initContainers"][1]["securityContex"] = {}
    bad.write_text(yaml.safe_dump(mutant), encoding="utf-8")
    tool = Path(sys.executable).parent / "kubernetes-validate"
    for version in ("1.30.0", "1.37.0"):
        ok = subprocess.run([str(tool), "--strict", "--quiet", "-k", version, str(good)], capture_output=True,
                            text=True)
        assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
        refused = subprocess.run([str(tool), "--strict", "--quiet", "-k", version, str(bad)], capture_output=True,
                                 text=True)
        assert refused.returncode != 0 and "securityContex" in refused.stdout + refused.stderr


def test_argo_names_follow_argos_validator_whatever_the_runner_label(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """D-A2: labels with `.` and `_` (a MIG profile, `cpu_large`) make names Argo's validator accepts
    (`workflow/validate/validate.go`: `[a-zA-Z0-9][-a-zA-Z0-9]*`, at most 128), kept apart from a label that
    differs only there; the old rule's name is one the validator refuses."""
    text = (ROOT / SMALL).read_text(encoding="utf-8").replace("runners: {build: cpu-large}",
                                                              "runners: {build: cpu_large}")
    text = text.replace("gpu: NVIDIA-H100-80GB-HBM3, gpus: 2", "gpu: NVIDIA-A100-SXM4-40GB-MIG-1g.5gb, gpus: 1")
    path = tmp_path / "mig.yaml"
    path.write_text(text, encoding="utf-8")
    code = main(["--offline", "--engine", "unix:///nonexistent.sock", "plan", "--matrix", str(path), "--format",
                 "graph"])
    graph = Graph.of_json(json.loads(capsys.readouterr().out))
    assert code == 0
    workflow = argo.workflow(graph, image=TOOL)
    names = [t["name"] for t in workflow["spec"]["templates"]] + \
        [t["name"] for t in workflow["spec"]["templates"][0]["dag"]["tasks"]]
    assert all(argo.NAME.fullmatch(n) and len(n) <= argo.MAX_NAME for n in names), names
    assert not argo.NAME.fullmatch("stage-cpu_large") and not argo.NAME.fullmatch("verify-gpu-x-mig-1g.5gb-x1")
    assert argo.template_name("stage", CiRunner("cpu_large")) != argo.template_name("stage", CiRunner("cpu-large"))
    # two labels that differ only in case are two runners (two node selectors), so two templates
    assert argo.template_name("stage", CiRunner("CPU-Large")) != argo.template_name("stage", CiRunner("cpu-large"))
    assert argo.template_name("stage", CiRunner("cpu-large")) == "stage-cpu-large"  # (a valid label is kept)
    long = CiRunner("q" * 63, "g" * 63, 8)  # (the grammar's longest queue and model: a name of 137 characters)
    assert len(argo.template_name("verify", long)) <= argo.MAX_NAME and argo.NAME.fullmatch(
        argo.template_name("verify", long))
    assert workflow["spec"]["templates"][0]["dag"]["failFast"] is False  # D-A1: one failed leaf stops nothing else


def test_an_argo_workflow_past_the_size_limit_is_refused_and_one_under_it_is_not(
        big: Graph, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """D-A4: the 600-node Workflow is under MAX_BYTES and emitted; the same graph with the limit just under its
    size is refused, naming the size, and `plan` exits 2 with nothing on stdout."""
    doc = argo.workflow(big, image=TOOL)
    size = len(json.dumps(doc, separators=(",", ":")).encode())
    assert size <= argo.MAX_BYTES
    monkeypatch.setattr(argo, "MAX_BYTES", size - 1)
    with pytest.raises(InputError, match=f"would be {size} bytes"):
        argo.workflow(big, image=TOOL)
    monkeypatch.setattr(argo, "MAX_BYTES", 1000)
    monkeypatch.chdir(ROOT)
    code = main(["--offline", "--engine", "unix:///nonexistent.sock", "--base-image-id", BASE_ID, "plan", "--matrix",
                 SMALL, "--format", "argo", "--tool-image", TOOL])
    captured = capsys.readouterr()
    assert code == 2 and "must stay under 1000" in captured.err and captured.out == ""


def test_the_graph_that_execute_runs_carries_the_plans_global_options(tmp_path: Path) -> None:
    """`--format graph` of a plan made with `--max-entries` other than the default (and `--offline`): every job's
    command, as the local executor runs it, is given the options first (without them, each `node stage` of a
    matrix past the default bound exits 2 on it)."""
    from imagebuilder.emit import local

    graph = planned_graph(big_matrix(tmp_path), 2000)
    assert graph.jobs and all(j.argv[:3] == ("--offline", "--max-entries", "2000") for j in graph.jobs)
    executor = local.Executor(graph, ("imagebuilder",), {}, lambda line: None, None, state=tmp_path / "state")
    first = executor.argv(graph.jobs[0])
    assert first is not None and first[:5] == ["imagebuilder", "--offline", "--max-entries", "2000", "node"]
    # `execute` given other global options than the plan's is refused (its jobs would silently run with the
    # plan's: a command line's option beats the environment's); given none, or the same, it runs
    assert graph.options() == ("--offline", "--max-entries", "2000")
    graph.check_options((), "g.json")
    graph.check_options(("--offline", "--max-entries", "2000"), "g.json")
    with pytest.raises(InputError, match=re.escape("g.json was planned with --offline --max-entries 2000, and this "
                                                   "command was given --offline --compat new.json")):
        graph.check_options(("--offline", "--compat", "new.json"), "g.json")
    (tmp_path / "g.json").write_text(json.dumps(graph.to_json()), encoding="utf-8")
    assert main(["--offline", "--max-entries", "1500", "execute", str(tmp_path / "g.json")]) == 2


def test_a_plan_past_etcds_limit_is_refused_and_its_parts_are_emitted(tmp_path: Path) -> None:
    """D-A4 on a real plan, no limit moved: 1,400 entries (700 base images x {cpu, cu126}) make a Workflow of
    ~2.9 MB, refused naming its size; the refusal's own recipe (`plan --only GLOB` per part) makes parts that are
    emitted, each under MAX_BYTES."""
    text = big_matrix(tmp_path).read_text(encoding="utf-8")
    bases = ", ".join(f"registry.example/os-{i}:1" for i in range(700))
    path = tmp_path / "huge.yaml"
    path.write_text(re.sub(r"base_image: \[.*\]", f"base_image: [{bases}]", text), encoding="utf-8")

    whole = planned_graph(path, 2000)
    assert sum(j.kind == VERIFY for j in whole.jobs) == 1400
    with pytest.raises(InputError, match=r"would be \d{7} bytes \(7001 tasks\)") as refused:
        argo.workflow(whole, image=TOOL)
    assert "--only" in (refused.value.hint or "")
    part = planned_graph(path, 2000, "--only", "*-os-1??-1/*")  # (a seventh of the bases)
    doc = argo.workflow(part, image=TOOL)
    assert sum(t["template"].startswith("verify") for t in doc["spec"]["templates"][0]["dag"]["tasks"]) == 200
    assert len(json.dumps(doc, separators=(",", ":")).encode()) <= argo.MAX_BYTES


def test_buildkite_parts_carry_the_global_options_and_a_later_part_is_the_same_graphs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """D-B1/D-B2/D-B3/D-B5: every command of every part (the next part's upload too) gets the global options the
    plan was made with; the upload fails when `plan` does (pipefail); no variable nothing reads; each step's reports
    are artifacts. Running the upload step's `plan` gives exactly the part the first run made."""
    path = big_matrix(tmp_path)
    monkeypatch.chdir(tmp_path)
    head = ["--offline", "--engine", "unix:///nonexistent.sock", "--max-entries", "2000"]
    assert main([*head, "plan", "--matrix", str(path), "--format", "buildkite"]) == 0
    parts = list(yaml.safe_load_all(capsys.readouterr().out))
    assert len(parts) > 1
    upload = parts[0]["steps"][-1]["command"]
    assert upload.startswith("set -o pipefail; imagebuilder --offline --max-entries 2000 plan --matrix")
    for step in [s for part in parts for s in part["steps"] if not s["key"].startswith("upload-part-")]:
        assert step["command"].startswith("imagebuilder --offline --max-entries 2000 "), step["command"]
        assert "IMAGEBUILDER_GPUS" not in step.get("env", {}) and step["artifact_paths"][0].startswith("reports/")
    bin_dir = tmp_path / "bin"  # the agent's PATH: imagebuilder, and a buildkite-agent that keeps what it is given
    bin_dir.mkdir()
    (bin_dir / "imagebuilder").write_text(f'#!/bin/sh\nexec {sys.executable} -m imagebuilder --engine '
                                          f'unix:///nonexistent.sock "$@"\n', encoding="utf-8")
    (bin_dir / "buildkite-agent").write_text(f'#!/bin/sh\ncat > {tmp_path}/uploaded\n', encoding="utf-8")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    ran = subprocess.run(["bash", "-e", "-c", upload], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert list(yaml.safe_load_all((tmp_path / "uploaded").read_text(encoding="utf-8"))) == [parts[1]]
    path.unlink()  # the next part's plan fails: so does the step, though the upload was fed an empty stream
    ran = subprocess.run(["bash", "-e", "-c", upload], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert ran.returncode == 2 and "big.yaml" in ran.stderr, ran.stderr[-2000:]
    ran = subprocess.run(["bash", "-e", "-c", upload.removeprefix("set -o pipefail; ")], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert ran.returncode == 0  # (what the step did before: the failure went unseen)


def test_two_executors_at_once_run_a_failing_job_once_and_a_later_run_tries_it_again(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """D-L1: two executors on one state folder, started together: the failing verify runs once (the one that
    waited takes the other's failure; seen failing: without a state folder it runs twice), and both report it
    failed; a job that succeeded runs in each (it says "nothing to do" in the second, and leaves its digest file
    there); an executor started afterwards runs the failed job again."""
    import threading

    from imagebuilder.emit import local

    graph = the_graph(capsys, monkeypatch, SMALL)
    failing = next(j for j in graph.jobs if j.kind == VERIFY)
    fake = tmp_path / "fake.py"  # as above, and each run of a job is counted in runs/
    fake.write_text("import pathlib, sys, time, uuid\na = [x for x in sys.argv[1:] if x != '--offline']\n"
                    "pathlib.Path('runs').mkdir(exist_ok=True)\n"
                    "name = '-'.join(a[:2]) + '-' + a[-1].replace('/', '_') + '-' + uuid.uuid4().hex\n"
                    "(pathlib.Path('runs') / name).write_text('')\n"
                    "if '--digest-file' in a:\n    p = pathlib.Path(a[a.index('--digest-file') + 1])\n"
                    "    p.parent.mkdir(parents=True, exist_ok=True); p.write_text('sha256:' + '0' * 64)\n"
                    "time.sleep(0.1)\n"
                    f"sys.exit(1 if {failing.node!r} in a and a[:2] == ['node', 'verify'] else 0)\n")
    monkeypatch.chdir(tmp_path)

    def together(state: Path | None) -> list[dict[str, str]]:
        executors = [local.Executor(graph, [sys.executable, str(fake)], {}, lambda _: None, logs=tmp_path / "r",
                                    state=state) for _ in range(2)]
        threads = [threading.Thread(target=e.run) for e in executors]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [e.outcome for e in executors]

    def runs(kind: str, node: str) -> int:
        return len(list((tmp_path / "runs").glob(f"node-{kind}-{node.replace('/', '_')}-*")))

    outcomes = together(tmp_path / "state")
    assert all(o[failing.id] == local.FAILED for o in outcomes)
    assert runs("verify", str(failing.node)) == 1
    assert all(runs("stage", str(j.node)) == 2 for j in graph.jobs if j.kind == STAGE)  # (each says "nothing")
    later = local.Executor(graph, [sys.executable, str(fake)], {}, lambda _: None, logs=tmp_path / "r",
                           state=tmp_path / "state").run()
    assert later[failing.id] == local.FAILED and runs("verify", str(failing.node)) == 2
    shutil.rmtree(tmp_path / "runs")
    together(None)
    assert runs("verify", str(failing.node)) == 2  # (no shared state: each executor runs it)


def test_one_table_of_engines_and_the_runner_defaults_are_the_schemas(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`plan --format` offers exactly the engines of `formats.ENGINES` (beside its own formats), each emits the
    small plan, and the default runner queue is the schema's `runners.build`."""
    from imagebuilder.cli.planning import plan
    from imagebuilder.declarations import schema
    from imagebuilder.emit.graph import CiRunner

    choices = next(p for p in plan.params if p.name == "fmt").type.choices  # type: ignore[attr-defined]
    assert set(formats.FORMATS) == set(formats.ENGINES) and set(formats.FORMATS) <= set(choices)
    graph = the_graph(capsys, monkeypatch, SMALL)
    settings = Settings(tool_image=TOOL, digests={str(j.node): DIGEST for j in graph.jobs if j.kind == VERIFY},
                        base_ids=(BASE_ID,), bases=("debian:bookworm",))
    assert all(formats.documents(fmt, graph, settings) for fmt in formats.FORMATS)
    assert CiRunner().queue == schema.default("runners.build") and CiRunner().label == schema.default("runners.build")


def test_github_commands_carry_the_global_options_of_the_plan(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every node job of the emitted workflows runs with the global options `plan` was given (one plan, one graph
    on every runner): `--offline --max-entries 2000` before the node command."""
    monkeypatch.chdir(ROOT)
    assert main(["--offline", "--engine", "unix:///nonexistent.sock", "--max-entries", "2000", "plan", "--matrix",
                 SMALL, "--format", "github-actions"]) == 0
    docs = [yaml.safe_load(part) for part in capsys.readouterr().out.split("---\n")]
    shard = next(d for d in docs if d and "jobs" in d and any("uses" in j for j in d["jobs"].values()))
    argvs = [json.loads(j["with"]["argv"]) for j in shard["jobs"].values() if "with" in j]
    assert argvs and all(a[:3] == ["--offline", "--max-entries", "2000"] for a in argvs), argvs


def test_kubernetes_formats_need_every_base_images_id_for_their_judges(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge has no engine: argo (and k8s-jobs) refuse to emit, naming the base image, when its ID is not known
    (no engine resolved it and no --base-image-id names it); with one named, the judges are given it. An engine's
    own machine never reads --base-image-id (its key would claim a base its build did not use)."""
    monkeypatch.chdir(ROOT)
    code = main(["--offline", "--engine", "unix:///nonexistent.sock", "plan", "--matrix", SMALL, "--format", "argo",
                 "--tool-image", TOOL])
    captured = capsys.readouterr()
    assert code == 2 and "'debian:bookworm' is not known" in captured.err and captured.out == ""
    doc = yaml.safe_load(plan_text(capsys, monkeypatch, SMALL, "argo", "--tool-image", TOOL))
    judge = next(t for t in doc["spec"]["templates"] if t["name"].startswith("verify-"))["container"]
    assert {"name": pods.BASE_IDS_ENV, "value": BASE_ID} in judge["env"]
    assert "--base-image-id" not in json.dumps(doc)  # (not a global option of the other commands)


def test_the_documented_kubernetes_wait_ends_when_a_job_fails_and_refuses_when_none_is_there(tmp_path: Path) -> None:
    """The commands of docs/guide/engines/kubernetes-jobs.md, run by bash with a stand-in kubectl (which answers
    the Jobs' conditions, one state per call) and imagebuilder: the wait ends once every Job is Complete or Failed,
    a failed Job included, and publish runs; with no Job of the set, or kubectl failing, it stops before publish."""
    text = (ROOT / "docs/guide/engines/kubernetes-jobs.md").read_text(encoding="utf-8")
    script = text.split("```bash\n", 1)[1].split("```", 1)[0].replace("sleep 30", "sleep 0")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "kubectl").write_text(
        "#!/bin/sh\ncase \"$*\" in *jsonpath*) n=$(cat calls 2>/dev/null || echo 0); echo $((n + 1)) > calls;\n"
        "  f=state-$n; [ -f $f ] || exit 1; cat $f;; esac\n", encoding="utf-8")
    (tmp_path / "bin" / "imagebuilder").write_text(
        "#!/bin/sh\ncase \"$*\" in *--format*) printf 'metadata:\\n  labels:\\n    imagebuilder.dev/plan: "
        "plan-0123\\n';; *) echo \"$*\" >> ran;; esac\n", encoding="utf-8")
    for tool in (tmp_path / "bin").iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}

    def run(*states: str) -> tuple[int, list[str]]:
        for old in [*tmp_path.glob("state-*"), tmp_path / "calls", tmp_path / "ran"]:
            old.unlink(missing_ok=True)
        for n, state in enumerate(states):
            (tmp_path / f"state-{n}").write_text(state, encoding="utf-8")
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=60)
        ran = (tmp_path / "ran").read_text().splitlines() if (tmp_path / "ran").exists() else []
        return done.returncode, [line.split()[0] for line in ran]

    code, ran = run("verify-a-1 \nverify-b-2 \n", "verify-a-1 Complete \nverify-b-2 \n",
                    "verify-a-1 SuccessCriteriaMet Complete \nverify-b-2 FailureTarget Failed \n")
    assert code == 0 and ran == ["stage", "publish"] and (tmp_path / "calls").read_text().strip() == "3"
    code, ran = run("")  # (no Job with the label: the set was not created, or the label is wrong)
    assert code != 0 and "publish" not in ran
    code, ran = run()  # (kubectl fails)
    assert code != 0 and "publish" not in ran
