"""Acknowledge and claim in one step (lua/complete_claim.lua, ``Queue.complete_and_claim``):
each part keeps its own script's safety belts, the claim sees the slots the completions
freed, the call's events are one entry, and a resend completes nothing twice and leases
nothing more."""

from __future__ import annotations

import time

import pytest
import redis

from emq import Queue
from emq.model.records import Answer

from ..support.helpers import assert_consistent

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def _held(queue: Queue, n: int, lease_ms: int = 30_000) -> list[tuple[str, int]]:
    return [(c.id, c.token) for c in queue.claim(n, lease_ms)]


def test_it_completes_the_held_jobs_and_leases_the_next_in_one_entry(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = [str(i) for i in queue.enqueue_many([("send", {"n": n}) for n in range(5)])]
    held = _held(queue, 2)
    entries = client.xlen(queue.core.keys.events)
    answers, claimed = queue.complete_and_claim(held, 2, worker="w-1")
    assert answers == [Answer.COMPLETED, Answer.COMPLETED]
    assert [c.id for c in claimed] == ids[2:4], "FIFO, after the completions"
    assert all(c.attempts == 1 for c in claimed)
    assert client.xlen(queue.core.keys.events) == entries + 1, "one entry for the call"
    told = [(e.event, e.job) for e in queue.events()][-4:]
    assert told == [("completed", ids[0]), ("completed", ids[1]),
                    ("claimed", ids[2]), ("claimed", ids[3])]  # fmt: skip
    assert queue.job(ids[2]).worker == "w-1"
    assert queue.counts()["completed"] == 2
    locs = assert_consistent(client, qname)
    assert locs["active"] == set(ids[2:4]) and locs["pending"] == {ids[4]}


def test_a_stale_token_is_refused_and_the_claim_still_runs(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    """A worker whose lease lapsed and was recovered and re-leased cannot complete the job:
    its part answers lost (complete.lua's belt), and its claim goes on."""
    first, second = (str(i) for i in queue.enqueue_many([("a", 1), ("b", 2)]))
    (stale,) = _held(queue, 1, lease_ms=1)
    time.sleep(0.01)  # the lease is expired on the server clock: swept, then leased again
    assert queue.sweep_stalled().recovered == [first]
    (fresh,) = _held(queue, 1)
    assert fresh[0] == first and fresh[1] > stale[1]
    answers, claimed = queue.complete_and_claim([stale], 1)
    assert answers == [Answer.LOST]
    assert [c.id for c in claimed] == [second]
    assert queue.complete_many([fresh]) == [Answer.COMPLETED], "the holder's ack still lands"
    assert "lease_lost" in [e.event for e in queue.events()]
    assert_consistent(client, qname)


def test_a_resent_call_completes_nothing_twice_and_leases_nothing_more(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = [str(i) for i in queue.enqueue_many([("send", n) for n in range(6)])]
    held = _held(queue, 2)
    first = queue.complete_and_claim(held, 2, request="call-1")
    again = queue.complete_and_claim(held, 2, request="call-1")  # its reply was lost
    assert first[0] == [Answer.COMPLETED] * 2 and again[0] == [Answer.GONE] * 2
    assert [(c.id, c.token) for c in again[1]] == [(c.id, c.token) for c in first[1]]
    assert queue.counts()["completed"] == 2
    locs = assert_consistent(client, qname)
    assert locs["active"] == set(ids[2:4]) and len(locs["pending"]) == 2


def test_the_claim_takes_the_slots_the_completions_freed(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    """Under a concurrency limit the claim part reads the limit after the completions: a
    worker at the limit completes its jobs and leases as many again, in one call."""
    queue.set_limits(concurrency=2)
    ids = [str(i) for i in queue.enqueue_many([("send", n) for n in range(4)])]
    held = _held(queue, 4)
    assert len(held) == 2 and not queue.claim(1), "at the limit"
    answers, claimed = queue.complete_and_claim(held, 4)
    assert answers == [Answer.COMPLETED] * 2
    assert [c.id for c in claimed] == ids[2:]
    assert_consistent(client, qname)


def test_on_a_paused_queue_the_completions_land_and_nothing_is_leased(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = [str(i) for i in queue.enqueue_many([("send", n) for n in range(3)])]
    held = _held(queue, 1)
    queue.pause()
    answers, claimed = queue.complete_and_claim(held, 2)
    assert answers == [Answer.COMPLETED] and list(claimed) == []
    assert [(e.event, e.job) for e in queue.events()][-1] == ("completed", ids[0])
    assert assert_consistent(client, qname)["pending"] == set(ids[1:])


def test_without_pairs_it_is_a_claim(queue: Queue) -> None:
    (only,) = (str(i) for i in queue.enqueue_many([("send", 1)]))
    answers, claimed = queue.complete_and_claim([], 3)
    assert answers == [] and [c.id for c in claimed] == [only]
