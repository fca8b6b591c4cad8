"""The stalled sweep: one recovery per expired lease however sweeps overlap (G2), counted in-script
(G3), dead-lettered at max_stalled, ghost rows never created (the sweep skips an id whose row is
gone)."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import redis

from emq import Queue

from ..support.helpers import assert_consistent, expire_leases, node_of, where

pytestmark = pytest.mark.servers("valkey", "redis")  # one queue's keys only: no cross-slot path

PROCS = 4


def _sweeper(url: str, name: str, barrier: mp.synchronize.Barrier, out: mp.Queue) -> None:
    q = Queue.from_url(url, name)
    q.client.ping()
    barrier.wait()
    recovered: list[str] = []
    dead: list[str] = []
    while True:  # bounded: each call removes what it returns; stops once a call finds nothing
        r = q.sweep_stalled(max_stalled=2, limit=50)
        recovered += r.recovered
        dead += r.dead
        if not r.recovered and not r.dead:
            break
    out.put((recovered, dead))
    q.close()


def _overlapping_sweeps(url: str, name: str) -> tuple[list[str], list[str]]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(PROCS)
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_sweeper, args=(url, name, barrier, out)) for _ in range(PROCS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return [i for r in results for i in r[0]], [i for r in results for i in r[1]]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_overlapping_sweeps_recover_each_lease_exactly_once(
    url: str, qname: str, client: redis.Redis
) -> None:
    q = Queue.from_url(url, qname)
    ids = q.enqueue_many([("work", {"n": i}) for i in range(1200)])
    assert len(q.claim(count=1000)) + len(q.claim(count=200)) == 1200
    expire_leases(client, qname)

    recovered, dead = _overlapping_sweeps(url, qname)
    assert dead == []
    assert sorted(recovered) == sorted(ids), "each job recovered exactly once over all sweeps"
    assert {q.job(i).stalled for i in ids} == {1}  # type: ignore[union-attr]
    assert {q.job(i).attempts for i in ids} == {1}  # type: ignore[union-attr]
    assert q.counts()["recovered"] == 1200
    assert_consistent(client, qname)

    for _ in range(2):
        q.claim(count=600)
    expire_leases(client, qname)
    recovered, dead = _overlapping_sweeps(url, qname)
    assert recovered == [] and sorted(dead) == sorted(ids)
    assert all(q.job(i).last_error == "stalled" for i in ids[:50])  # type: ignore[union-attr]
    assert q.counts()["dead"] == 1200
    assert_consistent(client, qname)
    q.close()


def test_sweep_ignores_unexpired_leases(queue: Queue, client: redis.Redis) -> None:
    a, b = queue.enqueue_many([("x", 1), ("x", 2)])
    queue.claim(count=2, lease_ms=60_000)
    expire_leases(client, queue.name, a)
    r = queue.sweep_stalled()
    assert r.recovered == [a] and r.dead == []
    assert where(client, queue.name, b) == ["active"]


def test_deadline_equal_to_now_is_expired(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.enqueue("x")
    queue.claim()
    sec, _ = client.time()
    client.zadd(queue.core.keys.active, {job_id: sec * 1000}, xx=True)  # <= now at any ms
    assert queue.sweep_stalled().recovered == [job_id]


def test_max_stalled_zero_never_dead_letters(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.enqueue("x")
    for n in range(1, 6):
        queue.claim()
        expire_leases(client, queue.name)
        assert queue.sweep_stalled(max_stalled=0).recovered == [job_id]
        assert queue.job(job_id).stalled == n  # type: ignore[union-attr]


def test_max_stalled_one_dead_letters_on_the_first_stall(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.enqueue("x", {"keep": "me"})
    queue.claim()
    expire_leases(client, queue.name)
    assert queue.sweep_stalled(max_stalled=1).dead == [job_id]
    job = queue.job(job_id)
    assert job is not None and job.state == "dead" and job.last_error == "stalled"
    assert job.payload == {"keep": "me"} and job.attempts == 1
    dead_event = client.xrevrange(queue.core.keys.events, count=1)[0][1]
    assert dead_event["event"] == "dead" and dead_event["payload"] == '{"keep":"me"}'


def test_sweep_skips_ids_whose_row_is_gone(queue: Queue, client: redis.Redis) -> None:
    job_id = queue.enqueue("x")
    queue.claim()
    client.delete(queue.core.keys.job(job_id))
    expire_leases(client, queue.name)
    r = queue.sweep_stalled()
    assert r.recovered == [] and r.dead == []
    assert not client.exists(queue.core.keys.job(job_id)), "no ghost row"
    assert where(client, queue.name, job_id) == []


@pytest.mark.slow
def test_sweep_all_drains_a_backlog_in_bounded_calls(queue: Queue, client: redis.Redis) -> None:
    for _ in range(5):
        queue.enqueue_many([("x", i) for i in range(1000)])
    for _ in range(5):
        queue.claim(count=1000)
    expire_leases(client, queue.name)
    node = node_of(client, queue.name)
    before = node.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    r = queue.sweep_all(limit=500)
    assert len(r.recovered) == 5000 and r.dead == []
    calls = node.info("commandstats")["cmdstat_evalsha"]["calls"] - before
    assert 11 <= calls <= 13  # ten full calls, one short one (plus the info reads' noise: none)


def test_recovered_job_keeps_its_priority_and_goes_first(queue: Queue, client: redis.Redis) -> None:
    old = queue.enqueue("x")
    queue.claim()
    newer = queue.enqueue_many([("x", i) for i in range(3)])
    expire_leases(client, queue.name)
    queue.sweep_stalled()
    assert [c.id for c in queue.claim(count=4)] == [old, *newer]
