"""Bad input is refused with a specific error before any key is written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from emq import (
    InvalidId,
    InvalidInput,
    InvalidName,
    InvalidOption,
    InvalidPayload,
    InvalidUrl,
    JobSpec,
    Queue,
    QueueOptions,
)

GOOD_ID = "JOB0000000000A"


def _deep(depth: int) -> Any:
    payload: Any = 1
    for _ in range(depth):
        payload = [payload]
    return payload


def _keys_of(client: redis.Redis, name: str) -> list[str]:
    return list(client.scan_iter(match=f"emq:{{{name}}}:*", count=1000))


@pytest.mark.parametrize("name", ["a{b", "a}b", "with space", "x" * 129, "", "tab\there", "ünï"])
def test_bad_queue_names(url: str, name: str) -> None:
    with pytest.raises(InvalidName, match="queue name"):
        Queue.from_url(url, name)


CASES: list[tuple[str, type[InvalidInput], Callable[[Queue], Any]]] = [
    ("malformed id on complete", InvalidId, lambda q: q.complete("JOB123", 1)),
    ("malformed id on extend", InvalidId, lambda q: q.extend("nope", 1)),
    ("malformed id on remove", InvalidId, lambda q: q.remove("JOB0000000000A!")),
    ("malformed id on job()", InvalidId, lambda q: q.job("../etc")),
    ("malformed id on enqueue", InvalidId, lambda q: q.enqueue("x", id="JOB_bad_bad_bad")),
    ("non-JSON payload", InvalidPayload, lambda q: q.enqueue("x", object())),
    ("bytes payload", InvalidPayload, lambda q: q.enqueue("x", b"raw")),
    ("lone surrogate in payload", InvalidPayload, lambda q: q.enqueue("x", {"t": "\ud800"})),
    ("payload over the limit", InvalidPayload, lambda q: q.enqueue("x", "y" * (512 * 1024))),
    ("bad job name", InvalidName, lambda q: q.enqueue("no spaces please")),
    ("zero lease", InvalidOption, lambda q: q.claim(1, lease_ms=0)),
    ("negative lease", InvalidOption, lambda q: q.claim(1, lease_ms=-1)),
    ("negative extend lease", InvalidOption, lambda q: q.extend(GOOD_ID, 1, lease_ms=-5)),
    ("huge claim", InvalidOption, lambda q: q.claim(5000)),
    ("unknown location", InvalidOption, lambda q: q.jobs("finished")),
    ("negative delay", InvalidOption, lambda q: q.enqueue("x", delay_ms=-1)),
    ("float priority", InvalidOption, lambda q: q.enqueue("x", priority=1.5)),
    ("zero token", InvalidOption, lambda q: q.complete(GOOD_ID, 0)),
    ("bad tuple in batch", InvalidOption, lambda q: q.enqueue_many([("x",)])),  # type: ignore[list-item]
    ("bad job in batch", InvalidName, lambda q: q.enqueue_many([("ok", 1), ("b a d", 2)])),
    ("negative sweep limit", InvalidOption, lambda q: q.sweep_stalled(limit=0)),
    ("negative max_stalled", InvalidOption, lambda q: q.sweep_stalled(max_stalled=-1)),
    ("empty dedup key", InvalidOption, lambda q: q.enqueue("x", key="")),
    ("max_attempts zero", InvalidOption, lambda q: q.enqueue_many([JobSpec("x", max_attempts=0)])),
    ("keys lost in JSON", InvalidPayload, lambda q: q.enqueue("x", {1: "a", "1": "b"})),
    ("100,000-deep payload", InvalidPayload, lambda q: q.enqueue("x", _deep(100_000))),
    ("lone surrogate dedup key", InvalidOption, lambda q: q.enqueue("x", key="\ud800")),
    ("lone surrogate claim request", InvalidOption, lambda q: q.claim(1, request="\udfff")),
    (
        "one id, two payloads in a batch",
        InvalidId,
        lambda q: q.enqueue_many([JobSpec("x", 1, id=GOOD_ID), JobSpec("x", 2, id=GOOD_ID)]),
    ),
]


@pytest.mark.parametrize("label,error,call", CASES, ids=[c[0] for c in CASES])
def test_bad_input_writes_nothing(
    queue: Queue,
    client: redis.Redis,
    label: str,
    error: type[Exception],
    call: Callable[[Queue], Any],
) -> None:
    with pytest.raises(error) as info:
        call(queue)
    assert str(info.value), "the message says what to fix"
    assert isinstance(info.value, ValueError)
    assert _keys_of(client, queue.name) == []


def test_payload_limit_is_configurable(url: str, qname: str, client: redis.Redis) -> None:
    q = Queue.from_url(url, qname, options=QueueOptions(max_payload_bytes=1024 * 1024))
    q.enqueue("x", "y" * (600 * 1024))
    with pytest.raises(InvalidPayload, match="1048576"):
        q.enqueue("x", "y" * (1100 * 1024))
    assert q.counts()["pending"] == 1


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379", "redis://:99999", "nonsense", ""])
def test_bad_urls(url: str) -> None:
    with pytest.raises(InvalidUrl):
        Queue.from_url(url, "q")


def test_client_without_decoding_is_refused(url: str) -> None:
    with pytest.raises(InvalidOption, match="decode_responses"):
        Queue(redis.Redis.from_url(url), "q")
