"""Runs a graph of tasks on N worker threads, each task once all it depends on has finished.

A task returns whether it went well. Tasks decide for themselves what a failed dependency means
(a build whose parent failed marks itself blocked), so the runner only orders, parallelises and,
with `fail_fast`, stops starting new tasks after the first failure. A task may name an exclusive
resource: two tasks holding the same one never run at once (smoke suites share the GPUs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    id: str
    run: Callable[[], bool]
    deps: tuple[str, ...] = ()
    exclusive: str | None = None


@dataclass
class Outcome:
    finished: dict[str, bool]  # task id -> went well
    not_started: list[str]  # left out after a failure under fail_fast
    error: BaseException | None = None  # the first exception a task raised (a bug: re-raised by the caller)


def run(tasks: Sequence[Task], jobs: int = 1, fail_fast: bool = False,
        on_start: Callable[[Task], None] | None = None) -> Outcome:
    ids = {t.id for t in tasks}
    for t in tasks:
        missing = [d for d in t.deps if d not in ids]
        if missing:
            raise ValueError(f"task {t.id} depends on unknown {missing}")
    pending = list(tasks)
    finished: dict[str, bool] = {}
    running: set[str] = set()
    busy: set[str] = set()
    errors: list[BaseException] = []
    cond = threading.Condition()

    def work(task: Task) -> None:
        ok = False
        try:
            ok = bool(task.run())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which re-raises it
            errors.append(exc)
        finally:
            with cond:
                finished[task.id] = ok
                running.discard(task.id)
                if task.exclusive:
                    busy.discard(task.exclusive)
                cond.notify_all()

    with cond:
        while pending or running:
            stopping = fail_fast and (not all(finished.values()) or errors)
            if not stopping:
                for task in list(pending):
                    if len(running) >= max(1, jobs):
                        break
                    if all(d in finished for d in task.deps) and (task.exclusive is None or task.exclusive not in busy):
                        pending.remove(task)
                        running.add(task.id)
                        if task.exclusive:
                            busy.add(task.exclusive)
                        if on_start is not None:
                            on_start(task)
                        threading.Thread(target=work, args=(task,), name=f"task {task.id}", daemon=True).start()
            if stopping and not running:
                break
            if not running and pending:  # nothing runs and nothing can start: a dependency cycle
                raise ValueError(f"tasks cannot start: {[t.id for t in pending]}")
            cond.wait(timeout=1.0)
    return Outcome(finished, [t.id for t in pending], errors[0] if errors else None)
