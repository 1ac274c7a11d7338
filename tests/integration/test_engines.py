"""The local executor runs the graph every engine gets (`plan --format graph`) on the real engine and registry:
end to end, again after a kill at a random job (what finished is not done again), and twice at once (one does
the work, the other finds it). What ran is counted from the executor's events, the engine's events (pushes,
smoke containers) and the registry (pass records). The plan is the session chain's (one CPU entry, base ->
business -> task) under a repository of this test's own: its images are on the engine already, so staging is
pushing key tags; each repository's leaf runs its suite once."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.registry import Registry

from .conftest import ROOT, SESSION, Chain, registry_tags, run_cli, wait_until


def matrix_for(chain: Chain, repository: str) -> Path:
    """The chain's matrix (its layers, so its keys) pushing to another repository; the suite's CPU floor at its
    least (a loaded CI machine is slow, and the floor is not what this test is about)."""
    path = chain.folder / f"{repository}.yaml"
    text = chain.matrix.read_text(encoding="utf-8").replace(f"repository: {chain.repository}",
                                                            f"repository: {repository}")
    path.write_text(text + "smoke: {cpu_gflops_floor: 10}\n", encoding="utf-8")
    return path


def graph_of(matrix: Path, folder: Path) -> tuple[Path, dict[str, Any]]:
    run = run_cli("plan", "--matrix", str(matrix), "--format", "graph")
    assert run.code == 0, run.text[-2000:]
    path = folder / "graph.json"
    path.write_text(run.out, encoding="utf-8")
    return path, dict(json.loads(run.out))


def start(graph: Path, cache: Path, events: Path, folder: Path) -> subprocess.Popen[str]:
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.Popen([sys.executable, "-m", "imagebuilder", "--cache-dir", str(cache), "execute", str(graph),
                             "--events", str(events)], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, env={**env, "PYTHONPATH": str(ROOT)})


def outcomes(events: Path) -> dict[str, str]:
    """job -> its last event (start: it never ended)."""
    out: dict[str, str] = {}
    for line in events.read_text(encoding="utf-8").splitlines() if events.exists() else []:
        event = json.loads(line)
        out[event["job"]] = event["event"]
    return out


class Events:
    """The engine's push and container-start events, read as they happen (the engine keeps only its last 256 for
    a later query, and other tests' runs fill them)."""

    def __init__(self, engine: DockerEngine) -> None:
        self.seen: list[dict[str, Any]] = []
        self.stream = engine.api.events(decode=True, filters={"type": ["image", "container"],
                                                              "event": ["push", "start"]})
        threading.Thread(target=self.read, daemon=True).start()

    def read(self) -> None:
        with contextlib.suppress(Exception):  # the stream ends when closed
            for event in self.stream:
                self.seen.append(event)

    def pushed(self, repository: str) -> list[str]:
        """The references pushed to the repository."""
        return [e["Actor"]["ID"] for e in self.seen if e.get("Type") == "image" and e.get("Action") == "push"
                and f"/{repository}:" in (e.get("Actor") or {}).get("ID", "")]

    def smoked(self, since: int = 0) -> int:
        """Containers this session started (smoke suites), from the `since`th event on."""
        key, _, value = SESSION.partition("=")
        return sum(e.get("Type") == "container" and ((e.get("Actor") or {}).get("Attributes") or {}).get(key) == value
                   for e in self.seen[since:])


def pass_records(registry: str, repository: str, digest: str) -> list[str]:
    """The pass records beside a digest."""
    head = digest.replace(":", "-") + ".pass-"
    return [t for t in registry_tags(registry, f"itest/{repository}", cache=True) if t.startswith(head)]


def test_the_executor_resumes_after_a_kill_with_two_at_once_and_does_each_job_once(
        engine: DockerEngine, registry: str, cpu_chain: Chain, tmp_path: Path) -> None:
    """A kill at a random job, then two executors at once on the same plan: the jobs that finished before the kill
    are done by neither, every other job by exactly one of them; each reference is pushed once over all three
    runs, and the suite ran once to the end (one pass record)."""
    began = time.monotonic()
    events = Events(engine)
    cache = tmp_path / "cache"  # one machine: every run shares its cache folder (its key, its build locks)
    repo = f"itest-exec-{uuid.uuid4().hex[:8]}"
    graph_file, graph = graph_of(matrix_for(cpu_chain, repo), tmp_path)
    jobs = [j["id"] for j in graph["jobs"]]
    assert [j["kind"] for j in graph["jobs"]] == ["stage", "stage", "stage", "verify", "publish"]
    seed = int(os.environ.get("IMAGEBUILDER_CHAOS_SEED", str(time.time_ns())))
    chance = random.Random(seed)
    victim = chance.choice(jobs)
    killed_events = tmp_path / "killed.jsonl"
    proc = start(graph_file, cache, killed_events, tmp_path / "killed")
    wait_until(lambda: outcomes(killed_events).get(victim) == "start" or proc.poll() is not None, f"{victim}", 900)
    time.sleep(chance.uniform(0, 3))  # somewhere inside the job (or just after it)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    engine.remove_containers(SESSION)  # what a dead machine leaves: its smoke container, if the suite was running
    killed = outcomes(killed_events)
    finished = {j for j, e in killed.items() if e in ("done", "nothing-to-do")}
    assert victim not in finished or killed[victim] != "start", killed
    smoked_before, mark = events.smoked(), len(events.seen)

    procs = [start(graph_file, cache, tmp_path / f"again-{i}.jsonl", tmp_path / f"again-{i}") for i in (0, 1)]
    for one in procs:
        out, _ = one.communicate(timeout=1800)
        assert one.returncode == 0, (seed, out[-3000:])
    ran_by = [{j for j, e in outcomes(tmp_path / f"again-{i}.jsonl").items() if e == "done"} for i in (0, 1)]
    said = f"seed {seed}, killed at {victim}: before {killed}, then {ran_by}"
    assert not ran_by[0] & ran_by[1], said  # no job done by both
    assert not (ran_by[0] | ran_by[1]) & finished, said  # nothing finished before the kill was done again
    assert set(jobs) - finished - {victim} <= ran_by[0] | ran_by[1], said  # everything unfinished was done
    smoked_after = events.smoked(mark)
    events.stream.close()
    pushed = events.pushed(repo)
    assert len(pushed) == len(set(pushed)) == 3, (said, pushed)  # each key tag pushed once, over all three runs
    assert smoked_after == (0 if jobs[3] in finished else 1), (said, smoked_before, smoked_after)  # one suite
    reg, name = Registry.for_host(registry), f"itest/{repo}"
    staged = {reg.manifest_digest(name, t) for t in registry_tags(registry, name, cache=True) if t.startswith("cache-")}
    argv = graph["jobs"][2]["argv"]  # the leaf's stage job: its digest, as the executor handed it to verify
    leaf = (tmp_path / "again-0" / argv[argv.index("--digest-file") + 1]).read_text(encoding="utf-8").strip()
    assert len(pass_records(registry, repo, leaf)) == 1, said  # the leaf's pass, beside its digest
    tags = registry_tags(registry, name)
    assert tags and {reg.manifest_digest(name, t) for t in tags} <= staged, said  # published: what was staged
    print(f"\nexecutor test: {time.monotonic() - began:.1f} s ({said})")
