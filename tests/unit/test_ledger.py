"""The run ledger: frozen records replaced whole under one lock, so updates from the scheduler's worker threads
are never lost or seen half-done; the first reason a node failed is the one kept."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from imagebuilder.ledger import BuildStatus, Ledger, NodeRecord, PublishStatus


def ledger() -> Ledger:
    return Ledger({n: NodeRecord(n, "e", n.split("/")[1], n.endswith("task")) for n in ("e/base", "e/task")})


def test_updates_from_many_threads_are_all_kept() -> None:
    book = ledger()
    start = threading.Barrier(8)

    def work(worker: int) -> None:
        start.wait()
        for i in range(200):
            book.alias("e/task", f"w{worker}-{i}", moved=i % 2 == 0)
            book.timed("e/base", f"w{worker}-{i}", float(i))

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    task = book["e/task"]
    assert len(task.aliases) + len(task.aliases_held) == 8 * 200 and len(task.aliases) == 8 * 100
    assert len(book["e/base"].durations) == 8 * 200


def test_records_are_frozen_and_fields_are_checked() -> None:
    book = ledger()
    before = book["e/base"]
    book.update("e/base", build=BuildStatus.BUILT, image="sha256:" + "1" * 64)
    assert before.build is None and book["e/base"].build == BuildStatus.BUILT  # a snapshot never changes
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.build = BuildStatus.FAILED  # type: ignore[misc]
    with pytest.raises(TypeError):
        book.update("e/base", imagee="typo")


def test_the_first_reason_is_kept_and_secrets_are_masked() -> None:
    book = ledger()
    book.fail("e/task", "parent e/base did not build", build=BuildStatus.BLOCKED)
    book.fail("e/task", "the run was interrupted", publish=PublishStatus.HELD)
    assert book["e/task"].error == "parent e/base did not build" and book["e/task"].publish == PublishStatus.HELD
    book.update("e/base", error="token s3cr3t-value leaked", smoke_report={"checks": [{"log": ["s3cr3t-value"]}]})
    book.masked(lambda text: text.replace("s3cr3t-value", "***"))
    assert book["e/base"].error == "token *** leaked" and book["e/base"].smoke_report == {"checks": [{"log": ["***"]}]}
    assert not book["e/task"].ok and book["e/task"].outcome() == "blocked"
