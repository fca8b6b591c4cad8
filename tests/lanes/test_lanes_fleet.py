"""Lanes and limits under a real fleet: worker processes (with random SIGKILLs) never run more
of a lane or of the queue at once than its concurrency limit, a rate holds in every window of
server time, a handler's RateLimited holds its lane and spends no attempt, and one worker
serves fifty small lanes before a big one. Every wait polls the server with a deadline that
only bounds a hang; nothing asserts a speed."""

from __future__ import annotations

import asyncio
import bisect
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from emq import JobContext, JobSpec, Queue, RateLimited, Worker, WorkerOptions
from emq.model.events import parse_id

from ..support.lanes_check import check_lanes
from ..support.worker_handlers import open_gate, runs_key
from ..worker.test_worker_procs import HANG, Procs, runs, wait_for


@pytest.fixture
def fleet(url: str, qname: str, tmp_path: Path) -> Iterator[Procs]:
    p = Procs(url, qname, tmp_path)
    yield p
    p.close()


FLEET = ["--concurrency", "20", "--lease-ms", "1000", "--stalled-interval-ms", "250"]


def most_at_once(log: list[str], lane_of: dict[str, str]) -> tuple[int, dict[str, int]]:
    """The most runs open at once, over the queue and per lane, from the runs list (its order
    is the server's order of the handlers' records; ``kill:<pid>`` ends that process's runs)."""
    running: dict[str, tuple[str, str]] = {}  # job -> (pid, lane)
    top, per_lane = 0, Counter[str]()
    for entry in log:
        what, *rest = entry.split(":")
        if what == "kill":
            running = {j: v for j, v in running.items() if v[0] != rest[0]}
            continue
        job, pid = rest
        if what == "start":
            running[job] = (pid, lane_of[job])
        else:
            running.pop(job, None)
        top = max(top, len(running))
        for lane, n in Counter(v[1] for v in running.values()).items():
            per_lane[lane] = max(per_lane[lane], n)
    return top, dict(per_lane)


def fill(queue: Queue, handler: str = "work") -> dict[str, str]:
    specs = [JobSpec(handler, {"ms": 30}, lane="x") for _ in range(40)]
    specs += [JobSpec(handler, {"ms": 30}, lane=f"y{i % 3}") for i in range(60)]
    ids = queue.enqueue_many(specs)
    return {job_id: spec.lane or "default" for job_id, spec in zip(ids, specs, strict=True)}


@pytest.mark.slow
def test_three_workers_never_run_past_the_lane_or_queue_limit(
    fleet: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.set_limits(concurrency=5)
    queue.set_limits(lane="x", concurrency=2)
    lane_of = fill(queue, "gated")  # each handler waits for the test to open the gate
    for _ in range(3):
        fleet.spawn(*FLEET, "--burst")
    wait_for(lambda: len(runs(client, qname)) >= 5, HANG, "five handlers started")
    lanes = {lane.name: lane.active for lane in queue.lanes()}
    assert queue.limits().active == 5 and lanes["x"] == 2  # the limits are reached
    open_gate(client, qname, 100)
    wait_for(lambda: queue.counts()["completed"] == 100, 3 * HANG, "every job done")
    top, per_lane = most_at_once(runs(client, qname), lane_of)
    assert top <= 5 and per_lane["x"] <= 2, (top, per_lane)
    check_lanes(client, qname)
    assert queue.limits().active == 0 and all(lane.active == 0 for lane in queue.lanes())


# A lease long enough that a live worker starved by a busy machine keeps it: only the kills
# make leases lapse here. The bound on a hang is the loop's own deadline (3 * HANG), which
# reports the counts, so pytest's timeout sits above it.
KILLED_FLEET = ["--concurrency", "20", "--lease-ms", "3000", "--stalled-interval-ms", "250"]


@pytest.mark.slow
@pytest.mark.timeout(4 * HANG)
def test_random_sigkills_break_no_limit_and_leak_no_slot(
    fleet: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    rng = random.Random(11)
    queue.set_limits(concurrency=5)
    queue.set_limits(lane="x", concurrency=2)
    lane_of = fill(queue)
    live = [fleet.spawn(*KILLED_FLEET) for _ in range(3)]
    kills, deadline = 0, time.monotonic() + 3 * HANG
    while queue.counts()["completed"] < 100:
        assert time.monotonic() < deadline, queue.counts()
        if kills < 4 and len(client.lrange(runs_key(qname), 0, -1)) > 20 * (kills + 1):
            victim = live.pop(rng.randrange(len(live)))
            victim.kill()
            victim.wait(HANG)  # dead before its runs are closed in the log
            client.rpush(runs_key(qname), f"kill:{victim.pid}")
            kills += 1
            live.append(fleet.spawn(*KILLED_FLEET))
        time.sleep(0.02)
    top, per_lane = most_at_once(runs(client, qname), lane_of)
    assert top <= 5 and per_lane["x"] <= 2, (top, per_lane)
    assert kills >= 2
    c = queue.counts()
    assert (c["completed"], c["pending"], c["active"], c["dead"]) == (100, 0, 0, 0)
    check_lanes(client, qname)  # every slot free again: nothing parked at a limit
    assert queue.limits().active == 0 and all(lane.active == 0 for lane in queue.lanes())


def windows_hold(times: list[int], most: int, per_ms: int) -> bool:
    """No ``per_ms`` window holds more than ``most`` of ``times`` (ms, sorted)."""
    return all(bisect.bisect_left(times, t + per_ms) - i <= most for i, t in enumerate(times))


@pytest.mark.slow
def test_a_rate_holds_in_every_window_of_server_time_across_three_workers(
    fleet: Procs, queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.set_limits(rate=(50, 1000))
    queue.enqueue_many([("fast", {"ms": 1}) for _ in range(500)])
    workers = [fleet.spawn("--concurrency", "20", "--burst", name="r") for _ in range(3)]
    for w in workers:
        assert w.wait(3 * HANG) == 0
    claims = sorted(parse_id(e.id)[0] for e in queue.events() if e.event == "claimed")
    assert len(claims) == 500 and queue.counts()["completed"] == 500
    assert windows_hold(claims, 50, 1000)
    assert claims[-1] - claims[0] >= 9 * 1000  # 500 claims need ten windows at least
    calls = sum(fleet.events(w, "stopped")[0]["claim_calls"] for w in workers)
    assert calls <= 6 * 500 / 20, calls  # limited workers wait for the slot, they do not poll
    print(f"\nrate run: {(claims[-1] - claims[0]) / 1000:.1f} s of server time, {calls} claims")
    check_lanes(client, qname)


@pytest.mark.slow  # seconds: waits out a 2 s rate hold
async def test_rate_limited_holds_its_lane_spends_no_attempt_and_spares_other_lanes(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    api = set(queue.enqueue_many([JobSpec("call", i, lane="api") for i in range(3)]))
    queue.enqueue_many([JobSpec("call", i, lane="other") for i in range(20)])
    told = asyncio.Event()
    w = Worker(queue, options=WorkerOptions(concurrency=4, burst=True))

    @w.handler()
    async def call(payload: int, ctx: JobContext) -> None:
        if ctx.lane == "api" and not told.is_set():
            told.set()
            raise RateLimited(2000)
        await asyncio.sleep(0.001)

    await asyncio.wait_for(w.run(), HANG)
    assert w.stats.rate_limited == 1 and queue.counts()["completed"] == 23
    events = list(queue.events())
    (held,) = [e for e in events if e.event == "rate_limited"]
    assert (held.fields["lane"], held.fields["by"]) == ("api", "handler")
    until = int(held.fields["until"])
    after = [e for e in events if e.event == "claimed" and parse_id(e.id) > parse_id(held.id)]
    assert all(parse_id(e.id)[0] >= until for e in after if e.job in api)  # the lane waited
    assert any(parse_id(e.id)[0] < until for e in after if e.job not in api)  # others did not
    (given_back,) = [e.job for e in events if e.event == "delayed"]
    again = [e for e in after if e.job == given_back]
    assert [e.fields["attempts"] for e in again] == ["1"]  # the attempt was not spent
    check_lanes(client, qname)


@pytest.mark.slow  # seconds: a worker runs thousands of jobs
async def test_one_worker_serves_fifty_small_lanes_before_a_big_one_gets_far(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.enqueue_many([JobSpec("t", "big", lane="big") for _ in range(20_000)])
    queue.enqueue_many(
        [JobSpec("t", f"s{n}", lane=f"small-{n}") for n in range(50) for _ in range(40)]
    )
    order: list[str] = []
    w = Worker(queue, options=WorkerOptions(concurrency=50))

    @w.handler()
    async def t(payload: str) -> None:
        order.append(payload)
        if sum(1 for p in order if p != "big") == 2000:
            w.stop()

    await asyncio.wait_for(w.run(), HANG)
    last_small = max(i for i, p in enumerate(order) if p != "big")
    big_before = sum(1 for p in order[:last_small] if p == "big")
    assert big_before < 300, big_before  # about one turn per round of 51 lanes
    check_lanes(client, qname)


async def test_a_sync_handler_can_hold_the_whole_queue_or_another_lane(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.enqueue_many([JobSpec("call", "queue", lane="a"), JobSpec("call", "lane-b", lane="c")])
    b_ids = set(queue.enqueue_many([JobSpec("call", i, lane="b") for i in range(3)]))
    told: set[str] = set()
    w = Worker(queue, options=WorkerOptions(concurrency=1, burst=True))

    @w.handler()
    def call(payload: object, ctx: JobContext) -> None:  # a sync handler, in a thread
        if payload in ("queue", "lane-b") and payload not in told:
            told.add(str(payload))
            if payload == "queue":
                raise RateLimited(300, whole_queue=True)
            raise RateLimited(300, lane="b")

    await asyncio.wait_for(w.run(), HANG)
    assert w.stats.rate_limited == 2 and queue.counts()["completed"] == 5
    events = list(queue.events())
    held = {e.fields["lane"]: e for e in events if e.event == "rate_limited"}
    assert set(held) == {"*", "b"} and {e.fields["by"] for e in held.values()} == {"handler"}
    for lane, hold in held.items():
        until = int(hold.fields["until"])
        after = [e for e in events if e.event == "claimed" and parse_id(e.id) > parse_id(hold.id)]
        bound = after if lane == "*" else [e for e in after if e.job in b_ids]
        assert all(parse_id(e.id)[0] >= until for e in bound), lane
        assert bound or lane == "b"  # the job given back is claimed again after the hold
    delayed = [e for e in events if e.event == "delayed"]
    assert len(delayed) == 2 and {e.fields["attempts"] for e in delayed} == {"0"}
    check_lanes(client, qname)
