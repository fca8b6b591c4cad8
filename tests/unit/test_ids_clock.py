"""Ids follow the server's clock, not the producer's (docs/keyspace.md, Job ids): a producer whose
wall clock is an hour ahead, an hour behind or before 2024 cannot reorder a queue."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from emq import Queue
from emq.calls.jobs import node_lease
from emq.model.ids import EPOCH_MS, Minter, minted_at_ms

HOUR_S = 3600.0
BEFORE_2024_S = 1_500_000_000.0  # 2017-07-14: a machine whose clock was never set


@contextmanager
def wall_clock(skew_s: float | None = None, at_s: float | None = None) -> Iterator[None]:
    """Skew this process's wall clock (``time.time`` and ``time.time_ns``) by ``skew_s``, or
    pin it at ``at_s`` (plus the time elapsed since). The monotonic clock is left alone: no
    real machine's monotonic clock knows the date."""
    real, real_ns = time.time, time.time_ns
    start = real()
    if at_s is not None:
        skew_s = at_s - start
    assert skew_s is not None
    shift = skew_s

    def fake() -> float:
        return real() + shift

    def fake_ns() -> int:
        return real_ns() + int(shift * 1e9)

    time.time, time.time_ns = fake, fake_ns  # type: ignore[assignment]
    try:
        yield
    finally:
        time.time, time.time_ns = real, real_ns  # type: ignore[assignment]


def test_minter_mints_from_the_server_clock_reading() -> None:
    m = Minter()
    server_ms = EPOCH_MS + 86_400_000  # the server says 2024-01-02
    read_at = time.monotonic()
    m.leased(5, read_at, server_ms, read_at)
    first = m.mint()
    assert server_ms <= minted_at_ms(first) < server_ms + 60_000
    with wall_clock(skew_s=-20 * 365 * 86_400):  # the local wall clock is irrelevant
        assert server_ms <= minted_at_ms(m.mint()) < server_ms + 60_000


def test_ids_never_go_backwards_when_a_new_reading_moves_the_clock_back() -> None:
    m = Minter()
    now = time.monotonic()
    m.leased(5, now, EPOCH_MS + 10 * 86_400_000, now)
    before = m.mint_many(100)
    m.leased(5, now, EPOCH_MS + 86_400_000, now)  # the server's clock stepped back 9 days
    after = m.mint_many(100)
    assert before + after == sorted(before + after)
    assert len(set(before + after)) == 200


def test_node_lease_returns_the_server_clock(client: redis.Redis) -> None:
    from emq.lua import scripts

    # other tests' producers hold random node numbers on this server: take one that is free
    for node in range(1023, 0, -1):
        call = node_lease(node, "clock-test-owner", 1000)
        held, server_ms = call.decode(scripts.run(client, call.script, call.keys, call.args))
        if held:
            break
    seconds, micros = client.time()
    assert held is True
    assert abs(server_ms - (seconds * 1000 + micros // 1000)) < 60_000
    other = node_lease(node, "someone-else", 1000)
    held, again = other.decode(scripts.run(client, other.script, other.keys, other.args))
    assert held is False and again >= server_ms, "the clock is read when refused too"


SKEWS = {
    "ahead-1h": {"skew_s": HOUR_S},
    "behind-1h": {"skew_s": -HOUR_S},
    "before-2024": {"at_s": BEFORE_2024_S},
    "on-time": {"skew_s": 0.0},
}


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_producers_with_wrong_clocks_pop_in_enqueue_order(
    url: str, qname: str, client: redis.Redis
) -> None:
    """Four producers, each on its own connection pool (its own minter and node lease), each
    living in its own (faked) wall-clock time, take turns enqueueing. The jobs must pop in the
    order they were enqueued: ids interleave by the server's clock."""
    producers = {label: Queue.from_url(url, qname) for label in SKEWS}
    enqueued: list[str] = []
    try:
        for round_ in range(5):
            for label, skew in SKEWS.items():
                with wall_clock(**skew):
                    job_id = producers[label].enqueue("job", {"from": label, "round": round_})
                enqueued.append(job_id)
                # ids of one millisecond order by node number, and each producer's reading
                # of the server clock is off by up to half its lease round trip: turns
                # 50 ms apart keep the test about order, not about those milliseconds
                time.sleep(0.05)
        popped = [job.id for job in producers["on-time"].claim(len(enqueued), 60_000)]
        assert popped == enqueued
        seconds, micros = client.time()
        server_now = seconds * 1000 + micros // 1000
        for job_id in enqueued:
            assert abs(minted_at_ms(job_id) - server_now) < 60_000, "minted on server time"
    finally:
        for q in producers.values():
            q.close()


def test_a_slow_first_round_trip_does_not_push_a_producer_ahead(
    url: str, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer whose first call is slow (connecting, checking the server, a busy machine)
    must not mint ids that sort after those of a producer that enqueues after it: the clock
    offset comes from the quickest of a few TIME readings, not from that first call."""
    from emq.calls.call import Call

    original = Queue._run

    def slow_lease(self: Queue, call: Call[Any]) -> Any:
        if call.script == "node_lease":
            time.sleep(0.6)  # the round trip is slow before the server reads its clock
        return original(self, call)

    slow = Queue.from_url(url, qname)
    with monkeypatch.context() as m:
        m.setattr(Queue, "_run", slow_lease)
        first = slow.enqueue("x", 1)
    with Queue.from_url(url, qname) as later:
        second = later.enqueue("x", 2)
    assert first < second, "the earlier enqueue must pop first"
    assert [j.payload for j in slow.claim(count=2)] == [1, 2]
    slow.close()
