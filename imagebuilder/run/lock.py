"""One build at a time per target repository on a machine: two `imagebuilder build` runs that publish to
the same repository serialize on a file lock (the second says who holds it and waits), so they never
interleave their pushes and tag moves; a lock file is never opened through a symbolic link. Runs on different
machines are kept apart by the registry itself: immutable tags are never overwritten and an entry is published
all or nothing."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TextIO

from ..errors import InputError


def _open(path: Path) -> TextIO:
    """The lock file, opened for reading and appending, never through a link: in a cache folder others can write
    to, a link planted under a lock's name would have this run truncate whatever it points at (`InputError`)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        why = "is a symbolic link" if path.is_symlink() else exc.strerror
        raise InputError(f"build lock {path}: {why}; a lock file is never opened through a link",
                         hint="remove it (and check who can write to the cache folder)") from None
    return os.fdopen(fd, "a+", encoding="utf-8")


@contextlib.contextmanager
def hold(folder: Path, names: Iterable[str], say: Callable[[str], None]) -> Iterator[None]:
    """Hold an exclusive lock for each name (taken in sorted order, so two runs cannot deadlock)."""
    folder.mkdir(parents=True, exist_ok=True)
    held: list[TextIO] = []
    try:
        for name in sorted(set(names)):
            path = folder / (hashlib.sha256(name.encode()).hexdigest()[:24] + ".lock")
            handle = _open(path)
            held.append(handle)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another imagebuilder run"
                say(f"waiting for lock on {name} held by {holder}")
                fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            handle.truncate()
            since = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            handle.write(f"PID {os.getpid()} on {socket.gethostname()} (since {since})\n")
            handle.flush()
        yield
    finally:
        for taken in reversed(held):
            with contextlib.suppress(OSError):
                fcntl.flock(taken, fcntl.LOCK_UN)
            taken.close()
