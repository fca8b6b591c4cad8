"""Lanes and limits through the API, on Valkey and Redis: fair rotation, weights, priority
within a lane, fleet-wide concurrency derived from what is leased, sliding-window rates,
holds, pause per lane, and the lane bookkeeping after every transition (``check_lanes``)."""

from __future__ import annotations

from collections import Counter

import pytest
import redis

from emq import InvalidInput, JobSpec, Queue
from emq.model.events import parse_id

from ..support.helpers import expire_leases
from ..support.lanes_check import check_lanes

pytestmark = pytest.mark.servers("valkey", "redis")  # one queue's keys only: no cross-slot path


def lanes_of(jobs: list) -> list[str | None]:
    return [j.lane for j in jobs]


def test_lanes_take_turns_and_keep_priority_and_fifo_within_a_lane(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = [queue.enqueue("j", {"i": i}, lane="a") for i in range(4)]
    urgent = queue.enqueue("j", {"urgent": True}, lane="a", priority=-1)
    queue.enqueue_many([JobSpec("j", i, lane="b") for i in range(2)] + [("j", 9)])
    got = queue.claim(6)
    assert Counter(lanes_of(got)) == {"a": 3, "b": 2, None: 1}  # turns while each has work
    a_jobs = [j.id for j in got if j.lane == "a"]
    assert a_jobs == [urgent, ids[0], ids[1]]  # priority first, then FIFO
    assert [j.id for j in queue.claim(10) if j.lane == "a"] == ids[2:]
    check_lanes(client, qname)


def test_weights_give_a_proportional_share_while_both_lanes_have_work(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.set_limits(lane="heavy", weight=3)
    queue.enqueue_many([JobSpec("j", i, lane="heavy") for i in range(600)])
    queue.enqueue_many([JobSpec("j", i, lane="light") for i in range(600)])
    share: Counter[str | None] = Counter()
    while share["heavy"] < 590:  # both lanes still have work throughout
        for job in queue.claim(7):
            share[job.lane] += 1
            queue.complete(job.id, job.token)
    assert abs(share["heavy"] / share["light"] - 3) < 0.1
    check_lanes(client, qname)


@pytest.mark.slow  # seconds: 22,000 jobs
def test_a_big_lane_does_not_starve_fifty_small_ones(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.enqueue_many([JobSpec("j", i, lane="big") for i in range(20_000)])
    done_big = 0
    for job in queue.claim(500):  # the big lane ran alone for a while
        done_big += 1
        queue.complete(job.id, job.token)
    small = [JobSpec("j", i, lane=f"small-{n}") for n in range(50) for i in range(40)]
    queue.enqueue_many(small)
    before, left = done_big, len(small)
    while left:
        jobs = queue.claim(50)
        queue.complete_many([(j.id, j.token) for j in jobs])
        left -= sum(j.lane != "big" for j in jobs)
        done_big += sum(j.lane == "big" for j in jobs)
    # one turn per round of 51 lanes (about 40), and the last claim's batch (at most 50) is
    # filled from the big lane once the small ones run out
    assert done_big - before <= 40 + 2 + 50
    check_lanes(client, qname)


def test_lane_and_queue_concurrency_limits_count_what_is_leased(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.set_limits(concurrency=5)
    queue.set_limits(lane="x", concurrency=2)
    queue.enqueue_many([JobSpec("j", i, lane="x") for i in range(10)])
    queue.enqueue_many([JobSpec("j", i, lane="y") for i in range(10)])
    first = queue.claim(20)
    assert len(first) == 5 and Counter(lanes_of(first))["x"] == 2
    assert queue.claim(20) == [] and queue.claim(20).retry_in_ms == 0  # wait for a wake-up
    x = next(j for j in first if j.lane == "x")
    queue.complete(x.id, x.token)  # frees one queue slot and one slot of x
    assert lanes_of(queue.claim(20)) in (["x"], ["y"])
    check_lanes(client, qname)
    (lane_x,) = [lane for lane in queue.lanes() if lane.name == "x"]
    assert (lane_x.active, lane_x.concurrency) == (2, 2) or lane_x.active == 1


def test_the_sweep_frees_the_slots_of_a_dead_workers_jobs(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.set_limits(lane_concurrency=2)
    queue.enqueue_many([JobSpec("j", i, lane="x") for i in range(5)])
    held = queue.claim(5)
    assert len(held) == 2 and queue.claim(5) == []
    expire_leases(client, qname)  # the worker died: its leases lapse
    assert len(queue.sweep_stalled().recovered) == 2
    again = queue.claim(5)
    assert len(again) == 2  # the slots came back with the recovery
    for job in held:  # the dead worker's late acks change nothing
        with pytest.raises(Exception, match="lease"):
            queue.complete(job.id, job.token)
    check_lanes(client, qname)


def test_a_row_deleted_by_hand_can_not_leak_a_slot(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.set_limits(lane="x", concurrency=1)
    queue.enqueue_many([JobSpec("j", i, lane="x") for i in range(3)])
    (job,) = queue.claim(3)
    assert queue.claim(3) == []  # x is parked at its limit
    client.delete(queue.core.keys.job(job.id))  # the row vanishes with its lane
    expire_leases(client, qname)
    assert queue.sweep_stalled().missing == [job.id]
    assert len(queue.claim(3)) == 1  # the member without a lease was not counted
    check_lanes(client, qname)


def test_a_rate_allows_at_most_max_claims_in_any_window(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.set_limits(lane="api", rate=(3, 60_000))
    queue.enqueue_many([JobSpec("j", i, lane="api") for i in range(10)])
    queue.enqueue_many([JobSpec("j", i, lane="other") for i in range(10)])
    got = queue.claim(20)
    assert Counter(lanes_of(got)) == {"api": 3, "other": 10}  # a limited lane blocks no other
    limited = queue.claim(20)
    assert limited == [] and 0 < limited.retry_in_ms <= 60_001
    (api,) = [lane for lane in queue.lanes() if lane.name == "api"]
    assert api.next_at_ms is not None and api.pending == 7
    events = [e for e in queue.events() if e.event == "rate_limited"]
    assert [(e.fields["lane"], e.fields["by"]) for e in events] == [("api", "rate")]
    check_lanes(client, qname)


def test_a_queue_rate_counts_every_lane_and_tells_when_the_next_slot_is(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.set_limits(rate=(4, 60_000))
    queue.enqueue_many([JobSpec("j", i, lane=f"l{i % 3}") for i in range(9)])
    assert len(queue.claim(9)) == 4
    limited = queue.claim(9)
    assert limited == [] and 0 < limited.retry_in_ms <= 60_001
    assert queue.limits().limited_until_ms > 0
    queue.set_limits(rate=None)  # cleared: claims go on at once
    assert len(queue.claim(9)) == 5
    check_lanes(client, qname)


def test_a_hold_stops_claims_of_its_lane_and_spends_no_attempt(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.enqueue_many([JobSpec("j", i, lane="a") for i in range(3)] + [JobSpec("j", 0, lane="b")])
    jobs = queue.claim(2)
    a = next(j for j in jobs if j.lane == "a")
    assert queue.delay_many([(a.id, a.token, 0, 60_000, "a")]) == ["pending"]
    row = queue.job(a.id)
    assert row is not None and row.attempts == 0 and row.state == "pending"
    assert queue.claim(10) == []  # a is held; b has nothing left
    queue.enqueue("j", 1, lane="b")
    assert lanes_of(queue.claim(10)) == ["b"]
    held = [e for e in queue.events() if e.event == "rate_limited"]
    assert held and held[-1].fields["by"] == "handler" and held[-1].fields["lane"] == "a"
    until = int(held[-1].fields["until"])
    # the event's stream id and the script's TIME may read the clock a ms apart
    assert abs(until - parse_id(held[-1].id)[0] - 60_000) <= 1
    check_lanes(client, qname)


def test_a_whole_queue_hold_stops_every_lane(queue: Queue, client: redis.Redis, qname: str) -> None:
    queue.enqueue_many([JobSpec("j", i, lane=f"l{i}") for i in range(3)])
    (job,) = queue.claim(1)
    queue.delay_many([(job.id, job.token, 0, 60_000, "*")])
    limited = queue.claim(5)
    assert limited == [] and 0 < limited.retry_in_ms <= 60_001
    assert queue.limits().held_until_ms > 0
    check_lanes(client, qname)


def test_pause_and_resume_one_lane(queue: Queue, client: redis.Redis, qname: str) -> None:
    queue.enqueue_many([JobSpec("j", i, lane="a") for i in range(2)] + [("j", 0), ("j", 1)])
    assert queue.pause(lane="a") is True and queue.pause(lane="a") is False
    assert lanes_of(queue.claim(10)) == [None, None]
    assert [lane.paused for lane in queue.lanes() if lane.name == "a"] == [True]
    check_lanes(client, qname)
    assert queue.resume(lane="a") is True
    assert lanes_of(queue.claim(10)) == ["a", "a"]
    assert queue.pause(lane="default") and queue.enqueue("j", 2) and queue.claim(5) == []
    assert {e.event for e in queue.events()} >= {"lane_paused", "lane_resumed"}
    check_lanes(client, qname)


def test_every_transition_keeps_the_lane_bookkeeping_right(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.set_limits(lane_concurrency=3, lane_rate=(1000, 1000))
    specs = [JobSpec("j", i, lane=f"t{i % 4}", max_attempts=2) for i in range(40)]
    specs += [JobSpec("j", i, delay_ms=60_000, lane="t1") for i in range(3)] + [("j", "x")]
    ids = queue.enqueue_many(specs)
    check_lanes(client, qname)
    jobs = queue.claim(20)
    assert 0 < len(jobs) <= 15  # at most 3 of each of 5 lanes
    c, f, d, s, k = jobs[0], jobs[1], jobs[2], jobs[3], jobs[4]
    queue.complete(c.id, c.token)
    assert queue.fail(f.id, f.token, "boom", delay_ms=0) == "scheduled"
    assert queue.fail(d.id, d.token, "boom", retry=False) == "dead"
    assert queue.delay(k.id, k.token, 0) == "pending"
    check_lanes(client, qname)
    expire_leases(client, qname, s.id)
    assert queue.sweep_stalled(max_stalled=1).dead == [s.id]
    assert queue.redrive(d.id) and queue.redrive(s.id)
    check_lanes(client, qname)
    queue.promote_due()
    assert queue.remove(ids[-2]) == "schedule"
    some_pending = next(j for j in queue.jobs("pending", 0, 100) if j.lane)
    assert queue.remove(some_pending.id) == "pending"
    leased = queue.claim(5)
    if leased:
        assert queue.remove(leased[0].id) == "active"
    check_lanes(client, qname)
    assert queue.drain() > 0
    lanes = check_lanes(client, qname)
    assert not any(ids["pending"] for ids in lanes.values())
    for job in queue.jobs("active", 0, 100):
        queue.remove(job.id)
    for job in queue.jobs("dead", 0, 100) + queue.jobs("schedule", 0, 100):
        queue.remove(job.id)
    check_lanes(client, qname)  # an empty queue: no slot left taken
    assert all(lane.active == 0 for lane in queue.lanes())
    assert queue.obliterate() == 0
    assert not list(client.scan_iter(match=queue.core.keys.prefix + "lane*"))


def test_counts_and_jobs_see_every_lane(queue: Queue) -> None:
    queue.enqueue_many([JobSpec("j", i, lane=f"l{i % 3}", priority=-(i % 2)) for i in range(9)])
    queue.enqueue("j", "plain")
    assert queue.counts()["pending"] == 10
    pending = queue.jobs("pending", 0, 100)
    assert len(pending) == 10 and [j.priority for j in pending][:4] == [-1] * 4
    assert {j.lane for j in queue.jobs("pending", 0, 100, lane="l1")} == {"l1"}
    assert [lane.pending for lane in queue.lanes()] == [1, 3, 3, 3]


@pytest.mark.parametrize(
    "bad",
    [
        {"lane": "no spaces"},
        {"lane": "x" * 129},
        {"rate": (50,)},
        {"rate": (0, 1000)},
        {"rate": (5, 0)},
        {"concurrency": -1},
        {"weight": 2},  # weight needs lane=
        {"lane": "a", "weight": 0},
        {"lane": "a", "lane_concurrency": 2},
    ],
)
def test_bad_limits_are_refused_before_anything_is_written(
    queue: Queue, client: redis.Redis, bad: dict
) -> None:
    with pytest.raises(InvalidInput) as err:
        queue.set_limits(**bad)
    assert "Traceback" not in str(err.value)
    assert not list(client.scan_iter(match=queue.core.keys.prefix + "*"))


@pytest.mark.parametrize("lane", ["", "a b", "x" * 129, "a:b", 7])
def test_a_bad_lane_name_is_refused_before_anything_is_written(
    queue: Queue, client: redis.Redis, lane: object
) -> None:
    with pytest.raises(InvalidInput, match="lane"):
        queue.enqueue("j", 1, lane=lane)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="lane"):
        queue.pause(lane=lane)  # type: ignore[arg-type]
    assert not list(client.scan_iter(match=queue.core.keys.prefix + "*"))
