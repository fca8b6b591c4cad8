"""A bounded random walk over a layout-3 queue: packed jobs and rows mixed, every transition
that meets a waiting job, G1 checked after each step and the claim order checked against a
model of the waiting jobs (priority, then id: mint order), so the packed structures and the
`pending` set never disagree about who is next (docs/keyspace.md, Packed waiting jobs)."""

from __future__ import annotations

import random

import pytest
import redis

from emq import Answer, Queue

from ..support.helpers import assert_consistent, expire_leases

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

STEPS = 250


@pytest.mark.parametrize("seed", [1, 2])
def test_a_random_walk_keeps_one_place_and_the_claim_order(
    queue: Queue, client: redis.Redis, seed: int
) -> None:
    rnd = random.Random(seed)
    waiting: dict[str, int] = {}  # id -> priority, what the model says waits
    leased: dict[str, int] = {}  # id -> token
    ended: set[str] = set()
    for _ in range(STEPS):
        move = rnd.choice(["enqueue", "enqueue", "claim", "complete", "delay", "edit", "end",
                           "sweep"])  # fmt: skip
        if move == "enqueue":
            n = rnd.randint(1, 4)
            priority = rnd.choice([0, 0, 0, 2, -1])
            ids = (
                queue.enqueue_many([("w", {"n": i}) for i in range(n)])
                if priority == 0
                else [queue.enqueue("w", {"p": priority}, priority=priority) for _ in range(n)]
            )
            waiting.update((str(i), priority) for i in ids)
        elif move == "claim":
            count = rnd.randint(1, 5)
            got = queue.claim(count, lease_ms=60_000)
            expected = sorted(waiting, key=lambda i: (waiting[i], i))[:count]
            assert [j.id for j in got] == expected, "claim order: priority, then id"
            for job in got:
                assert job.id not in leased and job.id not in ended
                leased[job.id] = job.token
                del waiting[job.id]
        elif move == "complete" and leased:
            job_id = rnd.choice(sorted(leased))
            assert queue.complete_many([(job_id, leased.pop(job_id))]) == [Answer.COMPLETED]
            ended.add(job_id)
        elif move == "delay" and leased:  # back to its priority's place
            job_id = rnd.choice(sorted(leased))
            queue.delay(job_id, leased.pop(job_id))
            waiting[job_id] = queue.job(job_id).priority  # type: ignore[union-attr]
        elif move == "edit" and waiting:
            job_id = rnd.choice(sorted(waiting))
            edit = rnd.choice(["payload", "priority", "cancel", "remove"])
            if edit == "payload":
                queue.update_payload(job_id, {"edited": True})
            elif edit == "priority":
                waiting[job_id] = rnd.choice([0, 1, -2])
                queue.set_priority(job_id, waiting[job_id])
            else:
                queue.cancel(job_id) if edit == "cancel" else queue.remove(job_id)
                del waiting[job_id]
                ended.add(job_id)
        elif move == "end" and leased:  # a stale completion after a recovery is refused
            job_id = rnd.choice(sorted(leased))
            expire_leases(client, queue.name, job_id)
            assert job_id in queue.sweep_stalled(max_stalled=0).recovered
            assert queue.complete_many([(job_id, leased.pop(job_id))]) == [Answer.LOST]
            waiting[job_id] = queue.job(job_id).priority  # type: ignore[union-attr]
        elif move == "sweep":
            assert queue.sweep_stalled().recovered == [], "no lease lapsed on its own"
        locs = assert_consistent(client, queue.name)
        assert locs["pending"] == set(waiting) and locs["active"] == set(leased)
        assert queue.counts()["pending"] == len(waiting)
    while got := queue.claim(50, lease_ms=60_000):  # bounded: every waiting job, once each
        expected = sorted(waiting, key=lambda i: (waiting[i], i))[: len(got)]
        assert [j.id for j in got] == expected
        for job in got:
            del waiting[job.id]
    assert not waiting
    assert_consistent(client, queue.name)
