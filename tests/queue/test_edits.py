"""Edits of one waiting job (promote, reschedule, set_priority, update_payload), on real
servers: applied while pending (default lane and a named lane) or scheduled; refused on an
active, dead, kept completed or missing job with nothing written; bad input refused before
anything is sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from emq import (
    InvalidId,
    InvalidInput,
    InvalidOption,
    InvalidPayload,
    JobNotFound,
    NotWaiting,
    Queue,
    QueueOptions,
)
from emq.model.keys import QueueKeys

from ..support.helpers import assert_consistent, where
from ..support.lanes_check import check_lanes

pytestmark = pytest.mark.servers("valkey", "redis")  # one queue's keys only: no cross-slot path

MISSING = "JOB0000000000A"

Edit = Callable[[Queue, str], Any]
EDITS: dict[str, Edit] = {
    "promote": lambda q, i: q.promote(i),
    "reschedule": lambda q, i: q.reschedule(i, 5_000),
    "reschedule_now": lambda q, i: q.reschedule(i, 0),
    "set_priority": lambda q, i: q.set_priority(i, -7),
    "update_payload": lambda q, i: q.update_payload(i, {"new": True}),
}


def snapshot(client: redis.Redis, queue: str) -> dict[str, Any]:
    """Every key of the queue with its contents (the stream by length and last id)."""
    k = QueueKeys.of(queue)
    out: dict[str, Any] = {}
    for key in sorted(client.scan_iter(match=k.prefix + "*", count=1000)):
        kind = client.type(key)
        if kind == "hash":
            out[key] = client.hgetall(key)
        elif kind == "zset":
            out[key] = client.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            out[key] = sorted(client.smembers(key))
        elif kind == "list":
            out[key] = client.lrange(key, 0, -1)
        elif kind == "stream":
            out[key] = (client.xlen(key), client.xinfo_stream(key)["last-generated-id"])
        else:
            out[key] = client.get(key)
    return out


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def events_of(queue: Queue, job_id: str) -> list[str]:
    return [e.event for e in queue.events() if e.job == job_id]


# -- applied ----------------------------------------------------------------------------------


@pytest.mark.parametrize("lane", [None, "tenant-1"])
def test_a_promoted_scheduled_job_is_claimed_at_once(
    queue: Queue, client: redis.Redis, lane: str | None
) -> None:
    other = queue.enqueue("other", delay_ms=60_000, lane=lane)
    job = queue.enqueue("later", {"n": 1}, delay_ms=60_000, lane=lane)
    assert queue.claim(5) == []
    assert queue.promote(job) is True
    assert queue.job(job).state == "pending" and where(client, queue.name, job) == ["pending"]
    assert client.llen(queue.core.keys.wake) >= 1  # a parked worker is woken
    (got,) = queue.claim(5)
    assert (got.id, got.payload, got.lane) == (job, {"n": 1}, lane)
    assert where(client, queue.name, other) == ["schedule"]
    assert events_of(queue, job) == ["enqueued", "promoted", "claimed"]
    assert queue.promote(other) is True and queue.promote(other) is False  # pending already
    assert events_of(queue, other) == ["enqueued", "promoted"]
    assert_consistent(client, queue.name)


@pytest.mark.parametrize("lane", [None, "tenant-1"])
def test_reschedule_moves_a_waiting_job_in_time(
    queue: Queue, client: redis.Redis, lane: str | None
) -> None:
    a = queue.enqueue("a", lane=lane)
    b = queue.enqueue("b", lane=lane)
    before = server_ms(client)
    assert queue.reschedule(a, 30_000) == "scheduled"
    run_at = client.zscore(queue.core.keys.schedule, a)
    assert run_at is not None and before + 30_000 <= run_at <= server_ms(client) + 30_000
    assert queue.job(a).state == "scheduled"
    assert [c.id for c in queue.claim(5)] == [b]  # a waits
    assert queue.reschedule(a, 90_000) == "scheduled"  # a scheduled job gets the new time
    assert client.zscore(queue.core.keys.schedule, a) > run_at
    assert queue.reschedule(a, 0) == "pending"  # 0: pending now
    (got,) = queue.claim(5)
    assert (got.id, got.lane) == (a, lane)
    c = queue.enqueue("c", lane=lane)
    assert queue.reschedule(c, 0) == "pending"  # pending stays pending
    assert where(client, queue.name, c) == ["pending"]
    fields = [e.fields for e in queue.events() if e.job == a and e.event == "rescheduled"]
    assert fields == [
        {"delay_ms": "30000", "state": "scheduled"},
        {"delay_ms": "90000", "state": "scheduled"},
        {"delay_ms": "0", "state": "pending"},
    ]
    assert_consistent(client, queue.name)
    check_lanes(client, queue.name)


@pytest.mark.parametrize("lane", [None, "tenant-1"])
def test_set_priority_changes_the_claim_order(
    queue: Queue, client: redis.Redis, lane: str | None
) -> None:
    a, b, c = (queue.enqueue(n, lane=lane) for n in "abc")
    s = queue.enqueue("s", delay_ms=60_000, lane=lane)
    assert queue.set_priority(c, -1) == "pending"
    assert queue.set_priority(a, 2) == "pending"
    assert queue.set_priority(b, 0) == "pending"  # the same priority: b keeps its place
    assert queue.set_priority(s, -5) == "scheduled"
    assert queue.job(s).priority == -5 and where(client, queue.name, s) == ["schedule"]
    queue.promote(s)  # enters pending at its new priority
    assert [j.id for j in queue.claim(10)] == [s, c, b, a]
    assert [e.fields for e in queue.events() if e.event == "reprioritised" and e.job == c] == [
        {"priority": "-1"}
    ]
    assert_consistent(client, queue.name)


@pytest.mark.parametrize("lane", [None, "tenant-1"])
def test_update_payload_is_what_the_worker_receives(
    queue: Queue, client: redis.Redis, lane: str | None
) -> None:
    a = queue.enqueue("a", {"v": 1}, lane=lane)
    s = queue.enqueue("s", {"v": 1}, delay_ms=60_000, lane=lane)
    assert queue.update_payload(a, {"v": 2, "text": "é"}) == "pending"
    assert queue.update_payload(s, [1, 2, 3]) == "scheduled"
    (got,) = queue.claim(5)
    assert (got.id, got.payload) == (a, {"v": 2, "text": "é"})
    queue.promote(s)
    (got,) = queue.claim(5)
    assert (got.id, got.payload) == (s, [1, 2, 3])
    assert "payload_updated" in events_of(queue, a)
    assert_consistent(client, queue.name)
    check_lanes(client, queue.name)


# -- refused ----------------------------------------------------------------------------------


def _active(queue: Queue) -> str:
    queue.enqueue("x")
    return queue.claim(1)[0].id


def _dead(queue: Queue) -> str:
    job = queue.enqueue("x", max_attempts=1)
    (c,) = queue.claim(1)
    assert queue.fail(c.id, c.token, "boom") == "dead"
    return job


STATES: dict[str, Callable[[Queue], str]] = {"active": _active, "dead": _dead}


@pytest.mark.parametrize("edit", sorted(EDITS))
@pytest.mark.parametrize("state", sorted(STATES))
def test_an_edit_of_a_job_that_is_not_waiting_is_refused_and_writes_nothing(
    queue: Queue, client: redis.Redis, edit: str, state: str
) -> None:
    queue.enqueue("bystander", delay_ms=60_000)
    job = STATES[state](queue)
    before = snapshot(client, queue.name)
    with pytest.raises(NotWaiting, match=rf"{job} is {state}, not pending or scheduled"):
        EDITS[edit](queue, job)
    assert snapshot(client, queue.name) == before
    assert_consistent(client, queue.name)


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edit_of_a_kept_completed_job_is_refused(
    url: str, qname: str, client: redis.Redis, edit: str
) -> None:
    with Queue.from_url(url, qname, options=QueueOptions(keep_completed=(60_000, 10))) as q:
        job = q.enqueue("x")
        (c,) = q.claim(1)
        q.complete(c.id, c.token)
        assert q.job(job).state == "completed"
        before = snapshot(client, qname)
        with pytest.raises(NotWaiting, match="is completed"):
            EDITS[edit](q, job)
        assert snapshot(client, qname) == before


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edit_of_a_missing_job_is_refused(queue: Queue, client: redis.Redis, edit: str) -> None:
    queue.enqueue("bystander")
    before = snapshot(client, queue.name)
    with pytest.raises(JobNotFound, match=f"{MISSING} does not exist"):
        EDITS[edit](queue, MISSING)
    assert snapshot(client, queue.name) == before


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [
        (lambda q, i: q.promote("nope"), InvalidId, "nope"),
        (lambda q, i: q.reschedule("nope", 10), InvalidId, "nope"),
        (lambda q, i: q.reschedule(i, -1), InvalidOption, "delay_ms"),
        (lambda q, i: q.reschedule(i, 10 * 365 * 86_400_000 + 1), InvalidOption, "delay_ms"),
        (lambda q, i: q.reschedule(i, 1.5), InvalidOption, "delay_ms"),
        (lambda q, i: q.set_priority(i, 2**31), InvalidOption, "priority"),
        (lambda q, i: q.set_priority(i, "1"), InvalidOption, "priority"),
        (lambda q, i: q.set_priority(None, 1), InvalidId, "None"),
        (lambda q, i: q.update_payload(i, {1, 2}), InvalidPayload, "JSON"),
        (lambda q, i: q.update_payload(i, float("nan")), InvalidPayload, "JSON"),
        (lambda q, i: q.update_payload(i, "x" * 2_000_000), InvalidPayload, "over the limit"),
        (lambda q, i: q.update_payload("nope", 1), InvalidId, "nope"),
    ],
)
def test_bad_input_to_an_edit_is_refused_before_anything_is_sent(
    queue: Queue, client: redis.Redis, call: Edit, error: type[InvalidInput], says: str
) -> None:
    job = queue.enqueue("x", {"v": 1})
    before = snapshot(client, queue.name)
    with pytest.raises(error, match=says):
        call(queue, job)
    assert snapshot(client, queue.name) == before
