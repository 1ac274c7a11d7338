"""The task runner: dependency order, parallelism, exclusive resources, fail-fast."""

from __future__ import annotations

import threading
import time

import pytest

from imagebuilder.run import schedule


def recorder() -> tuple[list[str], threading.Lock]:
    return [], threading.Lock()


def task(name: str, log: list[str], *, deps: tuple[str, ...] = (), ok: bool = True, sleep: float = 0.0,
         exclusive: str | None = None) -> schedule.Task:
    def run() -> bool:
        log.append(f"start {name}")
        time.sleep(sleep)
        log.append(f"end {name}")
        return ok
    return schedule.Task(name, run, deps, exclusive)


def test_dependencies_run_first() -> None:
    log: list[str] = []
    out = schedule.run([task("c", log, deps=("b",)), task("b", log, deps=("a",)), task("a", log)], jobs=4)
    assert log == ["start a", "end a", "start b", "end b", "start c", "end c"]
    assert out.finished == {"a": True, "b": True, "c": True} and out.not_started == []


def test_independent_tasks_overlap_with_two_jobs() -> None:
    log: list[str] = []
    start = time.monotonic()
    schedule.run([task("x", log, sleep=0.3), task("y", log, sleep=0.3)], jobs=2)
    assert time.monotonic() - start < 0.55
    assert log[:2] == ["start x", "start y"] or log[:2] == ["start y", "start x"]


def test_one_job_runs_one_at_a_time() -> None:
    log: list[str] = []
    schedule.run([task("x", log, sleep=0.05), task("y", log, sleep=0.05)], jobs=1)
    assert log == ["start x", "end x", "start y", "end y"]


def test_exclusive_resource_is_never_shared() -> None:
    log: list[str] = []
    schedule.run([task("s1", log, sleep=0.1, exclusive="gpu"), task("s2", log, sleep=0.1, exclusive="gpu")], jobs=2)
    assert log == ["start s1", "end s1", "start s2", "end s2"]


def test_failure_keeps_going_by_default_and_dependents_still_run() -> None:
    log: list[str] = []
    out = schedule.run([task("bad", log, ok=False), task("child", log, deps=("bad",)), task("other", log)], jobs=1)
    assert out.finished == {"bad": False, "child": True, "other": True}  # the child decides what a failed parent means


def test_fail_fast_starts_nothing_after_a_failure() -> None:
    log: list[str] = []
    out = schedule.run([task("bad", log, ok=False), task("child", log, deps=("bad",)), task("other", log)],
                       jobs=1, fail_fast=True)
    assert out.finished == {"bad": False}
    assert out.not_started == ["child", "other"]


def test_a_task_exception_is_handed_back() -> None:
    def boom() -> bool:
        raise RuntimeError("bug")
    out = schedule.run([schedule.Task("t", boom)])
    assert isinstance(out.error, RuntimeError) and out.finished == {"t": False}


def test_unknown_dependency_and_cycle_are_errors() -> None:
    with pytest.raises(ValueError, match="unknown"):
        schedule.run([schedule.Task("a", lambda: True, ("nope",))])
    with pytest.raises(ValueError, match="cannot start"):
        schedule.run([schedule.Task("a", lambda: True, ("b",)), schedule.Task("b", lambda: True, ("a",))])
