"""Retries of registry requests and engine pushes: transient failures (connections refused or reset, timeouts,
5xx, 429) are retried with backoff and said; anything else fails at once with what the other side said."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from imagebuilder.errors import EngineError
from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.registry import Registry


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoff waits, recorded instead of slept."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


@dataclass
class Replies:
    """A requests session that answers from a script: a status code, or an exception to raise."""

    script: list[int | Exception]
    asked: list[str] = field(default_factory=list)

    def mount(self, prefix: str, adapter: Any) -> None:
        pass

    def request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        self.asked.append(f"{method} {url}")
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        resp = requests.Response()
        resp.status_code = step
        resp.headers["Docker-Content-Digest"] = "sha256:" + "a" * 64
        resp.reason = "Service Unavailable" if step == 503 else "OK"
        return resp


def registry(*script: int | Exception) -> tuple[Registry, Replies, list[str]]:
    said: list[str] = []
    session = Replies(list(script))
    client = Registry("reg.example:5000", insecure=True, attempts=3, on_retry=said.append,
                      _session=session)  # type: ignore[arg-type]
    return client, session, said


def test_a_transient_registry_failure_is_retried_with_backoff_and_said(waits: list[float]) -> None:
    client, session, said = registry(requests.exceptions.ConnectionError("refused"), 503, 200)
    assert client.manifest_digest("ml/pytorch", "cache-0123") == "sha256:" + "a" * 64
    assert len(session.asked) == 3 and len(waits) == 2 and waits[1] > waits[0] > 0
    assert said == [f"retrying HEAD reg.example:5000/v2/ml/pytorch/manifests/cache-0123 (attempt {n} of 3) after: {e}"
                    for n, e in ((2, "ConnectionError"), (3, "_Status"))]


def test_a_registry_that_keeps_failing_is_one_error_naming_it(waits: list[float]) -> None:
    client, session, said = registry(*[requests.exceptions.ConnectionError("Connection refused")] * 3)
    with pytest.raises(EngineError, match=r"^registry reg.example:5000 unreachable \(connection refused\)$"):
        client.manifest_digest("ml/pytorch", "x")
    assert len(session.asked) == 3 and len(said) == 2
    client, session, _ = registry(503, 503, 503)
    with pytest.raises(EngineError, match="HTTP 503: Service Unavailable"):
        client.manifest_digest("ml/pytorch", "x")


def test_an_answer_that_is_not_transient_is_not_retried(waits: list[float]) -> None:
    client, session, said = registry(404)
    assert client.manifest_digest("ml/pytorch", "x") is None
    assert len(session.asked) == 1 and said == [] and waits == []


@dataclass
class PushApi:
    """docker-py's push stream, scripted: each attempt yields the records of one list."""

    attempts: list[list[dict[str, Any]]]
    pushed: int = 0

    def push(self, repo: str, tag: str | None = None, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.pushed += 1
        return iter(self.attempts.pop(0))


DONE = [{"status": "Pushed"}, {"aux": {"Tag": "t", "Digest": "sha256:" + "b" * 64, "Size": 1}}]


def test_a_push_cut_by_the_network_is_retried_and_said(waits: list[float]) -> None:
    api = PushApi([[{"error": "read tcp: connection reset by peer"}], [{"error": "502 Bad Gateway"}], DONE])
    said: list[str] = []
    engine = DockerEngine(api)
    assert engine.push("reg.example:5000/ml/pytorch:t", said.append) == "sha256:" + "b" * 64
    assert api.pushed == 3 and len(waits) == 2
    assert [line.split(" after: ")[0] for line in said] == [
        "retrying push reg.example:5000/ml/pytorch:t (attempt 2 of 4)",
        "retrying push reg.example:5000/ml/pytorch:t (attempt 3 of 4)"]


def test_a_refused_push_is_not_retried(waits: list[float]) -> None:
    api = PushApi([[{"errorDetail": {"message": "denied: requested access to the resource is denied"}}], DONE])
    with pytest.raises(EngineError, match=re.escape("push reg.example:5000/ml/pytorch:t: denied: requested access")):
        DockerEngine(api).push("reg.example:5000/ml/pytorch:t")
    assert api.pushed == 1 and waits == []


def test_build_output_reaches_the_log_as_whole_lines() -> None:
    from imagebuilder.ports.engine import _drain

    chunks = ["Step 6/10 : RUN x\n", "without the run token:", " 407\n", "a\nb", "c\r\n", "get 10%\rget 100%\n",
              "bar 1%\rbar 2%\r", "bar 3%", "\n", "tail"]
    lines: list[str] = []
    _drain(iter({"stream": c} for c in chunks), lines.append, "build")
    assert lines == ["Step 6/10 : RUN x", "without the run token: 407", "a", "bc", "get 100%", "bar 3%", "tail"]
