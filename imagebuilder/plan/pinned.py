"""A plan under its lock, made in this one place (`load_plan`, and the tests that load a plan as it does): the
lock's installs rendered as their pinned wheels (`plan/installs.py`), then its bases (`bases.locked`: a matrix the
lock does not cover is refused), its wheelhouses (`wheels.locked`: each file the file it pins) and its installs
(`wheels.installs_locked`: each one the lock pins), all checked before anything runs."""

from __future__ import annotations

from ..input.lock import Lock
from ..input.matrix import Matrix
from . import bases, wheels
from . import plan as plan_mod
from .plan import Plan
from .render import Renderer


def make(matrix: Matrix, lock: Lock | None, renderer: Renderer | None = None, *, check: bool = True,
         only: str | None = None) -> Plan:
    """The whole plan of `matrix` pinned by `lock` (None: no lock file, the plan as it renders). `check=False`: a
    locked wheelhouse's pins taken as the lock gives them, its files unread (`outdated`, which compares them);
    `only`: a run of those nodes, whose wheelhouses alone are hashed (a file that moved under other entries stops
    nothing). The lock covers the whole matrix whatever `only` selects."""
    plan = plan_mod.make(matrix, renderer or Renderer({i.key: i for i in ((lock.installs or ()) if lock else ())}))
    if lock is None:
        return plan
    taken = {n.entry.build.wheelhouse for n in plan.only(only).nodes} if only else None
    plan = wheels.locked(bases.locked(plan, lock), lock, check=check, hashed=taken)
    return wheels.installs_locked(plan, lock)
