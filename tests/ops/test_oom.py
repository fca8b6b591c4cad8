"""A server at ``maxmemory`` (docs/guarantees.md, "At maxmemory"): a live worker's leases
outlast an out-of-memory episode of any length (``extend`` runs there and appends nothing),
and an operator frees memory with emq's own commands (remove, drain, the dead-letter purge,
obliterate), measured with the server's own figures before and after. Every script that could
grow memory stays refused whole, completions too, which the worker re-sends until memory is
back. Each test breaks a server of its own (``own``), puts its ``maxmemory`` back, and ends
with the invariant check."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from emq import (
    JobContext,
    JobSpec,
    Queue,
    QueueOptions,
    ServerOutOfMemory,
    Worker,
    WorkerOptions,
)
from emq.cli.main import cli
from emq.embedded.standalone import EmbeddedServer
from emq.lua.scripts import SCRIPTS
from emq.model.records import Answer
from emq.queue._sync import deadletters as dl

from ..support.flows_check import check_flows
from ..support.helpers import assert_consistent, make_dead, until

HANG = 90.0  # bounds a hang only; a busy machine may be many times slower than an idle one
LEASE_MS = 1_500


def server_ms(admin: redis.Redis) -> int:
    sec, usec = admin.time()
    return int(sec) * 1000 + int(usec) // 1000


def used_memory(admin: redis.Redis) -> int:
    return int(admin.info("memory")["used_memory"])


def sizes(admin: redis.Redis, q: Queue) -> dict[str, int]:
    """``MEMORY USAGE`` of every key of the queue, to the byte."""
    keys = admin.scan_iter(match=q.core.keys.prefix + "*", count=1000)
    return {k: int(admin.memory_usage(k, samples=0) or 0) for k in keys}


def aof_on(admin: redis.Redis) -> bool:
    info = admin.info("persistence")
    return int(info["aof_enabled"]) == 1 and int(info["aof_rewrite_in_progress"]) == 0


def loaded(admin: redis.Redis, *names: str) -> None:
    """Both shapes of each script in the server's cache, so a figure measured at maxmemory is
    the calls' own (a script's first call on a server loads it: a one-off of its text)."""
    for name in names:
        for shape in (SCRIPTS[name], SCRIPTS[name].at_maxmemory):
            assert shape is not None
            admin.script_load(shape.source)


class OutOfMemory:
    """``maxmemory`` below what the server uses (noeviction): every write that may grow
    memory is refused while the block runs; the setting is put back however it ends."""

    def __init__(self, admin: redis.Redis) -> None:
        self.admin = admin

    def __enter__(self) -> OutOfMemory:
        assert self.admin.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        self.admin.config_set("maxmemory", 1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.admin.config_set("maxmemory", 0)


@pytest.fixture
def oom(admin: redis.Redis) -> Iterator[OutOfMemory]:
    yield OutOfMemory(admin)
    admin.config_set("maxmemory", 0)  # a test that failed inside the block leaves no OOM


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_live_workers_leases_outlast_an_episode_of_several_leases(
    own: EmbeddedServer, admin: redis.Redis, oom: OutOfMemory
) -> None:
    """Before: every extend was refused with the rest, so the episode lapsed every 1.5 s
    lease (the first check below failed), the sweep recovered them once memory was back, and
    the long jobs ran twice. Now the heartbeat renews them throughout; the jobs end inside
    the episode, their completions are refused and re-sent, and each lands once memory is
    back."""
    q = Queue.from_url(own.url(), "oom-lease")
    ids = [str(i) for i in q.enqueue_many([("long", i) for i in range(8)])]
    runs: dict[str, int] = {}
    done = asyncio.Event()
    w = Worker(q, options=WorkerOptions(concurrency=8, lease_ms=LEASE_MS,
                                        stalled_interval_ms=100))  # fmt: skip

    @w.handler("long")
    async def long(payload: Any, ctx: JobContext) -> None:
        runs[ctx.id] = runs.get(ctx.id, 0) + 1
        await done.wait()

    task = asyncio.create_task(w.run())
    await until(lambda: len(runs) == 8, HANG, "the eight jobs to start")
    events = admin.xlen(q.core.keys.events)
    with oom:
        start = server_ms(admin)
        with pytest.raises(ServerOutOfMemory):
            q.sweep_stalled()  # the sweep is refused whole: it may grow memory
        await until(lambda: server_ms(admin) > start + 2 * LEASE_MS, HANG, "two leases")
        done.set()  # the jobs end: their completions are refused and re-sent
        await until(lambda: server_ms(admin) > start + 4 * LEASE_MS, HANG, "two more")
        deadlines = [s for _, s in admin.zrange(q.core.keys.active, 0, -1, withscores=True)]
        assert len(deadlines) == 8  # held: no completion landed
        assert min(deadlines) > start + LEASE_MS  # every lease renewed inside the episode
        assert admin.xlen(q.core.keys.events) == events  # renewed without appending
    swept = q.sweep_all()  # at once, before the worker's re-sent completions land
    assert (swept.recovered, swept.dead) == ([], [])
    await until(lambda: q.counts()["completed"] == 8, HANG, "every completion to land")
    w.stop()
    await asyncio.wait_for(task, HANG)
    assert runs == {i: 1 for i in ids}  # each job ran exactly once
    assert (w.stats.lease_lost, w.stats.recovered, w.stats.completed) == (0, 0, 8)
    c = q.counts()
    assert (c["pending"], c["active"], c["recovered"], c["dead"]) == (0, 0, 0, 0)
    assert_consistent(admin, "oom-lease")
    q.close()


def test_extend_at_maxmemory_renews_leases_and_adds_nothing(
    own: EmbeddedServer, admin: redis.Redis, oom: OutOfMemory
) -> None:
    """The heartbeat's call at maxmemory answers each lease as it would with memory free
    (renewed, cancelled, lost, gone), and no key of the queue grows by a byte: the lost lease
    appends no event there. Once memory is back the same call appends its lease_lost."""
    q = Queue.from_url(own.url(), "oom-extend")
    q.enqueue_many([("x", i) for i in range(4)])
    held, stale, done, asked = q.claim(4, lease_ms=60_000)
    q.complete(done.id, done.token)
    q.cancel(asked.id, "stop")  # leased: a cancel request, still renewed
    pairs = [(held.id, held.token), (stale.id, stale.token + 1), (done.id, done.token),
             (asked.id, asked.token)]  # fmt: skip
    loaded(admin, "extend")
    events, before = admin.xlen(q.core.keys.events), sizes(admin, q)
    old = float(admin.zscore(q.core.keys.active, held.id) or 0)
    with oom:
        with pytest.raises(ServerOutOfMemory):
            q.enqueue("x")  # the server is at maxmemory: a write that grows is refused
        got = q.extend_many(pairs, 120_000)
        after = sizes(admin, q)
    assert got[0] > old and got[1:] == [Answer.LOST, Answer.GONE, Answer.CANCELLED]
    assert float(admin.zscore(q.core.keys.active, asked.id) or 0) > old  # renewed too
    assert after == before  # no key added, none grown
    assert admin.xlen(q.core.keys.events) == events
    assert q.extend_many(pairs, 120_000)[1] == Answer.LOST
    last = admin.xrevrange(q.core.keys.events, count=1)[0][1]
    assert (last["event"], last["job"]) == ("lease_lost", stale.id)  # memory free: told
    assert_consistent(admin, "oom-extend")
    q.close()


def test_an_operator_frees_memory_at_maxmemory(
    own: EmbeddedServer, admin: redis.Redis, oom: OutOfMemory
) -> None:
    """Before: at maxmemory remove, drain, the purge and obliterate were refused whole like
    every write, so freeing memory took raising maxmemory or deleting keys by hand. Now each
    runs there and the server's used_memory goes down at every step, with no event appended;
    a cancel (it keeps the job, dead, with its reason: it grows) stays refused, whole."""
    q, other = Queue.from_url(own.url(), "oom-free"), Queue.from_url(own.url(), "oom-gone")
    body = "x" * 10_000  # each step frees far more than a connection's buffers move (~25 KB)
    dead = make_dead(q, [("send", {"b": body})] * 30, "boom")
    q.enqueue("send", {"b": body})
    (held,) = q.claim(1, lease_ms=600_000)
    big = str(q.enqueue("send", {"b": body * 50}))
    q.enqueue_many([("send", {"b": body, "i": i}) for i in range(99)])
    later = str(q.enqueue("send", {"b": body}, delay_ms=600_000))
    flow = q.enqueue_flow(JobSpec("sum"), [JobSpec("part", {"b": body}) for _ in range(5)])
    other.enqueue_many([("send", {"b": body})] * 50)
    other.claim(5, lease_ms=600_000)  # obliterate takes leased jobs too, with force
    loaded(admin, "remove", "drain", "obliterate")
    events, is_valkey = admin.xlen(q.core.keys.events), "valkey" in own.binary.name
    freed: dict[str, int] = {}
    with oom:
        used = used_memory(admin)

        def step(name: str) -> None:  # the server's own figure, after each command
            nonlocal used
            now = used_memory(admin)
            freed[name], used = used - now, now

        row = admin.hgetall(q.core.keys.job(later))
        with pytest.raises(ServerOutOfMemory, match="remove"):
            q.cancel(later)  # grows (a dead row with its reason): refused, nothing written
        assert admin.hgetall(q.core.keys.job(later)) == row
        assert q.remove(big) == "pending"
        step("remove")
        out = CliRunner().invoke(cli, ["drain", q.name, "--url", own.url()])
        assert out.exit_code == 0 and "drained 106 job(s)" in out.output, out.output
        step("emq drain")  # 99 waiting, the scheduled one, a flow's 5 children, then its parent
        if is_valkey:
            assert dl.purge(q).moved == len(dead)
            step("purge")
        else:  # Redis refuses any command queued in a MULTI at maxmemory: the purge's too
            with pytest.raises(ServerOutOfMemory):
                dl.purge(q)
        assert other.obliterate(force=True) == 50
        step("obliterate")
        assert admin.xlen(q.core.keys.events) == events  # not one event appended
    print(f"\nfreed at maxmemory ({own.binary.name}), bytes of used_memory: {freed}")
    assert all(n > 100_000 for n in freed.values()), freed  # measured: 0.17 to 1.1 MB a step
    left = list(admin.scan_iter(match=other.core.keys.prefix + "*"))
    assert all(admin.pttl(k) > 0 for k in left), left  # only claim replies, expiring (keyspace.md)
    assert q.job(flow.id) is None and q.counts()["pending"] == 0
    q.complete(held.id, held.token)  # memory back: the leased job goes on
    c = q.counts()
    assert (c["pending"], c["active"], c["schedule"]) == (0, 0, 0)
    assert c["dead"] == (0 if is_valkey else len(dead))
    check_flows(admin, "oom-free")
    assert_consistent(admin, "oom-gone")
    q.close()
    other.close()


@pytest.mark.servers("valkey")  # durability="aof" needs WAITAOF: Redis 7.0 has none
def test_a_durable_queue_frees_memory_at_maxmemory(
    own: EmbeddedServer, admin: redis.Redis, oom: OutOfMemory
) -> None:
    """A queue with durability="aof" waits for every removal: at maxmemory the wait's
    no-change write is refused too, so the removal is sent in its allow-oom shape and
    waited for with the script's own writes; it returns once they are fsynced."""
    admin.config_set("appendonly", "yes")
    admin.config_set("appendfsync", "always")
    deadline = time.monotonic() + HANG
    while not aof_on(admin):  # turning AOF on starts a rewrite; WAITAOF answers after it
        assert time.monotonic() < deadline, "the AOF was never turned on"
        time.sleep(0.01)
    options = QueueOptions(durability="aof")
    with Queue.from_url(own.url(), "oom-durable", options=options) as q:
        body = "x" * 10_000
        big = str(q.enqueue("send", {"b": body * 50}))
        rest = q.enqueue_many([("send", {"b": body, "i": i}) for i in range(20)])
        loaded(admin, "remove", "drain")
        with oom:
            used = used_memory(admin)
            with pytest.raises(ServerOutOfMemory):
                q.enqueue("send", {"b": body})  # grows: refused, nothing written
            assert q.remove(big) == "pending"  # waited for: WAITAOF after the script's writes
            assert q.drain() == len(rest)
            assert used - used_memory(admin) > 100_000
        assert q.counts()["pending"] == 0
        assert_consistent(admin, "oom-durable")
