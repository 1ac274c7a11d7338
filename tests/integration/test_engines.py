"""The local executor runs the graph every engine gets (`plan --format graph`) on the real engine and registry:
end to end, again after a kill at a random job (what finished is not done again), and twice at once (one does
the work, the other finds it). What ran is counted from the executor's events, the engine's events (pushes,
smoke containers) and the registry (pass records). The plan is the session chain's (one CPU entry, base ->
business -> task) under a repository of this test's own: its images are on the engine already, so staging is
pushing key tags; each repository's leaf runs its suite once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from imagebuilder.ports.engine import DockerEngine

from .conftest import ROOT, SESSION, Chain, registry_tags, run_cli, wait_until


def matrix_for(chain: Chain, repository: str) -> Path:
    """The chain's matrix (its layers, so its keys) pushing to another repository."""
    path = chain.folder / f"{repository}.yaml"
    path.write_text(chain.matrix.read_text(encoding="utf-8").replace(f"repository: {chain.repository}",
                                                                    f"repository: {repository}"), encoding="utf-8")
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


def engine_events(engine: DockerEngine, since: float, repository: str) -> tuple[list[str], int]:
    """(the references pushed to the repository, the smoke containers this session started) since `since`."""
    found = engine.api.events(since=int(since), until=int(time.time()) + 1, decode=True)
    pushed, smoked = [], 0
    for event in found:
        attrs = (event.get("Actor") or {}).get("Attributes") or {}
        if event.get("Type") == "image" and event.get("Action") == "push" and f"/{repository}:" in attrs.get("name",
                                                                                                            ""):
            pushed.append(attrs["name"])
        key, _, value = SESSION.partition("=")
        if event.get("Type") == "container" and event.get("Action") == "start" and attrs.get(key) == value:
            smoked += 1
    return pushed, smoked


def pass_records(registry: str, repository: str) -> list[str]:
    return [t for t in registry_tags(registry, f"itest/{repository}", cache=True) if ".pass-" in t]


def test_the_executor_resumes_after_a_kill_and_two_at_once_do_the_work_once(
        engine: DockerEngine, registry: str, cpu_chain: Chain, tmp_path: Path) -> None:
    began = time.monotonic()
    cache = tmp_path / "cache"  # one machine: every run below shares its cache folder (keys, locks)

    # A kill at a random job, then a second run: what finished is not done again.
    repo = f"itest-exec-{uuid.uuid4().hex[:8]}"
    graph_file, graph = graph_of(matrix_for(cpu_chain, repo), tmp_path)
    jobs = [j["id"] for j in graph["jobs"]]
    assert [j["kind"] for j in graph["jobs"]] == ["stage", "stage", "stage", "verify", "publish"]
    seed = int(os.environ.get("IMAGEBUILDER_CHAOS_SEED", str(time.time_ns())))
    victim = random.Random(seed).choice(jobs[:-1])
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    t0 = time.time()
    proc = start(graph_file, cache, first, tmp_path / "run")
    wait_until(lambda: outcomes(first).get(victim) == "start" or proc.poll() is not None, f"{victim} to start", 600)
    time.sleep(random.Random(seed).uniform(0, 2))  # somewhere inside the job
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    engine.remove_containers(SESSION)  # what a dead machine leaves: its smoke container, if the suite was running
    t1 = time.time()
    killed = outcomes(first)
    finished = {j for j, e in killed.items() if e in ("done", "nothing-to-do")}
    proc = start(graph_file, cache, second, tmp_path / "run")
    out, _ = proc.communicate(timeout=1200)
    assert proc.returncode == 0, out[-3000:]
    again = outcomes(second)
    ran = {j for j, e in again.items() if e == "done"}
    assert set(again) == set(jobs) and set(again.values()) <= {"done", "nothing-to-do"}, (seed, again)
    assert not ran & finished, (seed, victim, killed, again)  # nothing finished ran again
    assert set(jobs) - finished - {victim} <= ran, (seed, victim, killed, again)  # everything unfinished ran
    pushed_first, smoke_first = engine_events(engine, t0, repo)
    pushed_second, smoke_second = engine_events(engine, t1, repo)
    pushed_first = [p for p in pushed_first if p not in pushed_second or pushed_first.count(p) > 1]
    everything = pushed_first + pushed_second
    assert len(everything) == len(set(everything)), (seed, everything)  # no reference pushed twice
    assert len(pass_records(registry, repo)) == 1, seed  # one suite run counted
    verify = jobs[3]
    assert smoke_second == (0 if verify in finished else 1), (seed, victim, smoke_first, smoke_second)
    public = registry_tags(registry, f"itest/{repo}")
    assert public, seed

    # Two executors at once on another repository: the same tags, the work done once.
    repo = f"itest-exec-{uuid.uuid4().hex[:8]}"
    graph_file, graph = graph_of(matrix_for(cpu_chain, repo), tmp_path / "two")
    t2 = time.time()
    procs = [start(graph_file, cache, tmp_path / f"two-{i}.jsonl", tmp_path / f"two-{i}") for i in (0, 1)]
    for proc in procs:
        out, _ = proc.communicate(timeout=1200)
        assert proc.returncode == 0, out[-3000:]
    ran_by = [{j for j, e in outcomes(tmp_path / f"two-{i}.jsonl").items() if e == "done"} for i in (0, 1)]
    assert not ran_by[0] & ran_by[1], ran_by  # no job's work done by both
    pushed, smoked = engine_events(engine, t2, repo)
    assert len(pushed) == len(set(pushed)) == 3, pushed  # each key tag pushed once
    assert smoked == 1 and len(pass_records(registry, repo)) == 1  # one suite run
    assert len(registry_tags(registry, f"itest/{repo}")) == len(public)  # the same tags as the first repository
    print(f"\nexecutor test: {time.monotonic() - began:.1f} s (chaos seed {seed}, killed at {victim})")
