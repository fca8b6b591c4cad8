"""Lanes and limits under real faults: the script cache flushed again and again, and an
out-of-memory episode in the middle of a run. Each ends with every job run exactly once, no
lane past its concurrency limit, and the lane bookkeeping right (every slot free)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
import redis

from emq import JobContext, JobSpec, Queue, ServerOutOfMemory, Worker, WorkerOptions
from emq.embedded.standalone import EmbeddedServer

from ..support.helpers import Flushing, until
from ..support.lanes_check import check_lanes

HANG = 120.0  # bounds a hang, never a speed


def lane_jobs(q: Queue, n: int, lanes: int) -> list[str]:
    specs = [JobSpec("j", {"i": i}, lane=f"t{i % lanes}") for i in range(n)]
    return [str(i) for i in q.enqueue_many(specs)]


class Tally:
    """Runs per job and the most handlers of one lane running at once (one worker process)."""

    def __init__(self) -> None:
        self.ran: Counter[str] = Counter()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()

    async def run(self, ctx: JobContext, pause: float) -> None:
        lane = ctx.lane or "default"
        self.ran[ctx.id] += 1
        self.now[lane] += 1
        self.most[lane] = max(self.most[lane], self.now[lane])
        try:
            await asyncio.sleep(pause)
        finally:
            self.now[lane] -= 1


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_lanes_and_limits_survive_script_flush_in_a_loop(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    q = Queue.from_url(own.url(), "lflush")
    q.set_limits(lane_concurrency=2, concurrency=6)
    q.set_limits(lane="t0", weight=3, concurrency=3)
    tally = Tally()
    with Flushing(own.url()) as flushes:
        ids = lane_jobs(q, 300, 6)
        w = Worker(q, options=WorkerOptions(concurrency=12, lease_ms=10_000, burst=True))

        @w.handler("j")
        async def j(payload: Any, ctx: JobContext) -> None:
            await tally.run(ctx, 0.001)

        await asyncio.wait_for(w.run(), HANG)
    assert flushes.count > 0
    assert tally.ran == {i: 1 for i in ids}
    assert tally.most["t0"] <= 3 and all(tally.most[f"t{n}"] <= 2 for n in range(1, 6))
    assert q.counts()["completed"] == 300
    check_lanes(admin, "lflush")
    assert q.limits().active == 0 and all(lane.active == 0 for lane in q.lanes())
    q.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_lanes_and_limits_ride_out_an_out_of_memory_episode(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    q = Queue.from_url(own.url(), "loom")
    q.set_limits(lane_concurrency=2)
    tally = Tally()
    started = asyncio.Event()
    w = Worker(q, options=WorkerOptions(concurrency=8, lease_ms=4_000, stalled_interval_ms=200))

    @w.handler("j")
    async def j(payload: Any, ctx: JobContext) -> None:
        started.set()
        await tally.run(ctx, 0.005)

    ids = lane_jobs(q, 200, 5)
    task = asyncio.create_task(w.run())
    await asyncio.wait_for(started.wait(), HANG)
    admin.config_set("maxmemory", 1)  # every write refused: claims, acks, heartbeats, limits
    try:
        with pytest.raises(ServerOutOfMemory):
            q.set_limits(lane="t1", concurrency=1)  # refused whole: nothing written
        with pytest.raises(ServerOutOfMemory):
            q.enqueue("j", {"i": -1}, lane="t9")
        await asyncio.sleep(1.0)  # the episode, shorter than a lease
    finally:
        admin.config_set("maxmemory", 0)
    assert "t1" not in admin.hgetall(q.core.keys.lanes("conf"))
    ids += lane_jobs(q, 50, 5)
    await until(lambda: q.counts()["completed"] == len(ids), HANG, "every job to complete")
    w.stop()
    await asyncio.wait_for(task, HANG)
    assert tally.ran == {i: 1 for i in ids}
    assert all(n <= 2 for n in tally.most.values()), tally.most
    assert w.stats.lease_lost == 0 and w.stats.outages >= 1
    check_lanes(admin, "loom")
    assert q.limits().active == 0 and all(lane.active == 0 for lane in q.lanes())
    q.close()
