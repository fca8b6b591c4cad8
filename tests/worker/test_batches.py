"""Batch handlers in-process, on real servers: filling and order, one claim per batch, results
per job, a raise retries each job once, a BatchResult settles jobs one by one, a cancel of one
job of a running batch, leases renewed for the whole batch, the server's limits counting each
job, a timeout, a stop giving back a filling batch, typed batch tasks (docs/batches.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from emq import (
    Backoff,
    BatchContext,
    BatchResult,
    InvalidOption,
    Queue,
    Tasks,
    Worker,
    WorkerFailed,
    WorkerOptions,
)
from emq.cli.main import cli
from emq.model.events import expand
from emq.observe import registry
from emq.worker.batches import BatchRuns

from ..support.helpers import assert_consistent, expire_leases, until

pytestmark = pytest.mark.servers("valkey", "redis")

NOW = Backoff(kind="fixed", base_ms=0, jitter=0.0)
HANG = 60.0  # bounds a hang, never a speed


def burst(queue: Queue, **options: Any) -> Worker:
    return Worker(queue, options=WorkerOptions(burst=True, backoff=NOW, **options))


@pytest.mark.servers("valkey", "redis", "cluster")
async def test_jobs_run_in_batches_in_claim_order_each_with_its_own_result(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.configure(result_ttl_ms=60_000)
    ids = [queue.enqueue("embed", {"i": i}) for i in range(23)]
    batches: list[list[int]] = []
    w = burst(queue, concurrency=1)

    @w.handler("embed", batch_size=10, batch_wait_ms=50)
    def embed(payloads: list[dict[str, int]]) -> list[int]:
        batches.append([p["i"] for p in payloads])
        return [p["i"] * 2 for p in payloads]

    await asyncio.wait_for(w.run(), HANG)
    assert [i for b in batches for i in b] == list(range(23))  # enqueue order, none twice
    assert max(len(b) for b in batches) == 10 and all(len(b) <= 10 for b in batches)
    assert w.stats.completed == 23
    assert [queue.result(j) for j in ids] == [2 * i for i in range(23)]
    assert queue.counts()["completed"] == 23
    assert_consistent(client, qname)


async def test_a_full_batch_is_claimed_in_one_script_call(
    queue: Queue, client: redis.Redis
) -> None:
    queue.enqueue_many([("embed", {"i": i}) for i in range(50)])
    sizes: list[int] = []
    w = burst(queue, concurrency=1)
    w.register("embed", lambda ps: sizes.append(len(ps)), batch_size=50)
    await asyncio.wait_for(w.run(), HANG)
    assert sizes == [50]
    # a script call appends one stream entry for all the jobs it moved: one entry holds
    # the 50 claims, so one call leased the whole batch
    claims = [
        sum(e.event == "claimed" for e in expand(entry_id, entry))
        for entry_id, entry in client.xrange(queue.core.keys.events)
    ]
    assert [n for n in claims if n] == [50]


async def test_a_raise_retries_every_job_of_the_batch_each_counting_one_attempt(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = [queue.enqueue("bulk", {"i": i}, max_attempts=3) for i in range(5)]
    calls: list[list[int]] = []
    w = burst(queue, concurrency=1)

    @w.handler("bulk", batch_size=5, batch_wait_ms=2_000)
    async def bulk(payloads: list[dict[str, int]], ctx: BatchContext) -> None:
        calls.append([j.attempts for j in ctx.jobs])
        if len(calls) == 1:
            raise ConnectionError("the bulk insert timed out")

    await asyncio.wait_for(w.run(), HANG)
    assert calls == [[1] * 5, [2] * 5]  # the retry runs as one batch again
    assert w.stats.retried == 5 and w.stats.completed == 5
    failures = [e for e in queue.events() if e.event == "retrying"]
    assert sorted(e.job for e in failures) == sorted(ids)
    assert_consistent(client, qname)


async def test_a_batch_result_retries_and_fails_single_jobs_and_completes_the_rest(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.configure(result_ttl_ms=60_000)
    ids = [queue.enqueue("mail", {"i": i}, max_attempts=2) for i in range(4)]
    seen: list[list[int]] = []
    w = burst(queue, concurrency=1)

    @w.handler("mail", batch_size=4, batch_wait_ms=2_000)
    def mail(payloads: list[dict[str, int]]) -> BatchResult:
        seen.append([p["i"] for p in payloads])
        if len(seen) > 1:
            return BatchResult(results=["again"] * len(payloads))
        return BatchResult(
            results=["a", "b", "c", "d"],
            retry={1: "the provider said: try later"},
            fail={2: ValueError("no such address")},
        )

    await asyncio.wait_for(w.run(), HANG)
    assert seen == [[0, 1, 2, 3], [1]]  # only the retried job ran again
    assert queue.result(ids[0]) == "a" and queue.result(ids[3]) == "d"
    assert queue.result(ids[1]) == "again"
    dead = queue.job(ids[2])
    assert dead.state == "dead" and "no such address" in (dead.last_error or "")
    assert dead.attempts == 1  # failed with no retry, attempts left unspent
    assert queue.counts()["completed"] == 3
    assert_consistent(client, qname)


async def test_a_batch_result_that_names_no_job_of_the_batch_fails_it_as_a_raise(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = [queue.enqueue("odd", {"i": i}, max_attempts=1) for i in range(2)]
    w = burst(queue, concurrency=1)
    w.register("odd", lambda ps: BatchResult(fail={7: "x"}), batch_size=2, batch_wait_ms=2_000)
    await asyncio.wait_for(w.run(), HANG)
    for job_id in ids:
        job = queue.job(job_id)
        assert job.state == "dead" and "indexes 0..1" in (job.last_error or "")
    assert_consistent(client, qname)


async def test_cancelling_one_job_of_a_running_batch_ends_it_alone(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = [queue.enqueue("slow", {"i": i}) for i in range(3)]
    started, release = asyncio.Event(), asyncio.Event()
    told: list[bool] = []
    w = Worker(queue, options=WorkerOptions(lease_ms=600, cancel_grace_ms=0, burst=True))

    @w.handler("slow", batch_size=3, batch_wait_ms=2_000)
    async def slow(payloads: list[Any], ctx: BatchContext) -> str:
        started.set()
        await release.wait()  # the cancelled job is abandoned meanwhile: the batch runs on
        told.extend(j.cancelled.is_set() for j in ctx.jobs)
        return "done"

    run = asyncio.create_task(w.run())
    await asyncio.wait_for(started.wait(), HANG)
    queue.cancel(ids[1], "not needed")
    await until(lambda: queue.job(ids[1]).state == "dead", HANG, "the cancel to land")
    release.set()
    await asyncio.wait_for(run, HANG)
    assert told == [False, True, False]
    assert queue.counts()["completed"] == 2 and w.stats.completed == 2
    assert queue.job(ids[1]).state == "dead"
    assert_consistent(client, qname)


async def test_a_job_of_a_running_batch_whose_lease_is_lost_is_dropped_alone(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    """Job 0's lease lapses mid-batch and the sweep recovers it: the worker's next heartbeat
    is refused for it alone, its result is never sent (G4), the rest of the batch completes,
    and job 0 runs again and completes once."""
    ids = [queue.enqueue("slow", {"i": i}) for i in range(3)]
    started, release = asyncio.Event(), asyncio.Event()
    runs: list[list[str]] = []
    w = burst(queue, lease_ms=600)

    @w.handler("slow", batch_size=3, batch_wait_ms=2_000)
    async def slow(payloads: list[Any], ctx: BatchContext) -> None:
        runs.append(ctx.ids)
        if len(runs) == 1:
            started.set()
            await release.wait()

    run = asyncio.create_task(w.run())
    await asyncio.wait_for(started.wait(), HANG)
    expire_leases(client, qname, ids[0])
    assert queue.sweep_stalled().recovered == [ids[0]]
    await until(lambda: w.stats.lease_lost == 1, HANG, "the heartbeat to be refused for job 0")
    release.set()
    await asyncio.wait_for(run, HANG)
    assert runs == [ids, [ids[0]]]  # job 0 ran again, alone; the others once
    assert queue.counts()["completed"] == 3 and w.stats.completed == 3
    assert [e.job for e in queue.events() if e.event == "stalled"] == [ids[0]]
    assert_consistent(client, qname)


async def test_leases_of_the_whole_batch_are_renewed_while_it_runs(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = [queue.enqueue("long", {"i": i}) for i in range(4)]
    w = burst(queue, lease_ms=300, stalled_interval_ms=50)
    active = queue.core.keys.active
    renewed: list[bool] = []

    def server_ms() -> int:
        sec, usec = client.time()
        return int(sec) * 1000 + int(usec) // 1000

    @w.handler("long", batch_size=4, batch_wait_ms=2_000)
    async def long(payloads: list[Any]) -> None:
        first = max(client.zscore(active, j) or 0 for j in ids)
        while server_ms() < first + 900:  # three leases' worth, on the server's clock
            await asyncio.sleep(0.05)
        now = server_ms()
        renewed.extend((client.zscore(active, j) or 0) > now for j in ids)

    await asyncio.wait_for(w.run(), HANG)
    assert renewed == [True] * 4  # every lease of the batch outlived the first deadline
    assert queue.counts()["completed"] == 4 and queue.counts()["recovered"] == 0
    assert_consistent(client, qname)


async def test_the_servers_concurrency_limit_counts_each_job_of_a_batch(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.set_limits(concurrency=3)
    queue.enqueue_many([("limited", {"i": i}) for i in range(9)])
    sizes: list[int] = []
    w = burst(queue, concurrency=4)
    w.register("limited", lambda ps: sizes.append(len(ps)), batch_size=9, batch_wait_ms=20)
    await asyncio.wait_for(w.run(), HANG)
    assert sum(sizes) == 9 and max(sizes) <= 3  # never more active than the limit
    assert_consistent(client, qname)


async def test_a_batch_past_its_timeout_fails_every_job_and_frees_its_slot(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = [queue.enqueue("stuck", {}, max_attempts=1) for _ in range(3)]
    w = burst(queue, timeout_ms=200)

    @w.handler("stuck", batch_size=3, batch_wait_ms=2_000)
    async def stuck(payloads: list[Any]) -> None:
        await asyncio.Event().wait()

    await asyncio.wait_for(w.run(), HANG)
    assert w.stats.timeouts == 3
    assert all(queue.job(j).state == "dead" for j in ids)
    assert_consistent(client, qname)


async def test_a_stop_gives_back_a_filling_batch_without_spending_attempts(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = [queue.enqueue("later", {}) for _ in range(2)]
    ran: list[int] = []
    w = Worker(queue, options=WorkerOptions(grace_ms=1_000))
    w.register("later", lambda ps: ran.append(len(ps)), batch_size=10, batch_wait_ms=600_000)
    run = asyncio.create_task(w.run())
    await until(lambda: w.stats.claimed == 2, HANG, "the jobs to be claimed")
    w.stop()
    await asyncio.wait_for(run, HANG)
    assert ran == [] and w.stats.given_back == 2
    for job_id in ids:
        job = queue.job(job_id)
        assert job.state == "pending" and job.attempts == 0
    assert_consistent(client, qname)


async def test_a_batch_handler_in_a_child_process_gets_the_list(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.configure(result_ttl_ms=60_000)
    ids = [queue.enqueue("square", {"n": n}) for n in range(6)]
    w = burst(queue, concurrency=1)
    w.register("square", _squares, batch_size=6, batch_wait_ms=2_000, isolation="process")
    await asyncio.wait_for(w.run(), HANG)
    assert [queue.result(j) for j in ids] == [n * n for n in range(6)]
    assert_consistent(client, qname)


def _squares(payloads: list[dict[str, int]]) -> list[int]:
    return [p["n"] ** 2 for p in payloads]


@dataclasses.dataclass
class Doc:
    id: int
    text: str


async def test_a_typed_batch_task_rebuilds_its_items_and_fails_a_bad_one_alone(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    queue.configure(result_ttl_ms=60_000)
    tasks = Tasks(qname)
    tasks.bind(queue)
    got: list[list[Doc]] = []

    @tasks.task(batch_size=5, batch_wait_ms=2_000)
    def index(docs: list[Doc]) -> list[int]:
        got.append(docs)
        return [len(d.text) for d in docs]

    good = [index.enqueue(Doc(i, "x" * i)) for i in range(1, 4)]
    bad = queue.enqueue("index", {"id": 9})  # no text: cannot be a Doc
    w = burst(queue, concurrency=1)
    w.include(tasks)
    await asyncio.wait_for(w.run(), HANG)
    assert got == [[Doc(1, "x"), Doc(2, "xx"), Doc(3, "xxx")]]
    assert [queue.result(j) for j in good] == [1, 2, 3]
    dead = queue.job(bad)
    assert dead.state == "dead" and "cannot read its item as Doc" in (dead.last_error or "")
    assert_consistent(client, qname)


async def test_the_workers_entry_names_its_batch_handlers_and_the_jobs_filling(
    queue: Queue, client: redis.Redis, url: str
) -> None:
    queue.enqueue_many([("fill", {}) for _ in range(3)])
    w = Worker(queue)
    w.register("fill", lambda ps: None, batch_size=10, batch_wait_ms=600_000)
    w.register("plain", lambda p: None)
    run = asyncio.create_task(w.run())
    try:
        entry = await until(
            lambda: [i for i in registry.list_workers(client) if i.filling == 3], HANG,
            "the entry to show the jobs filling a batch",
        )  # fmt: skip
        assert entry[0].batches == (("fill", 10, 600_000),) and entry[0].running == 0
        shown = CliRunner().invoke(cli, ["workers", "--url", url, "--json"]).output
        (mine,) = [w for w in json.loads(shown)["workers"] if w["id"] == entry[0].id]
        assert mine["batches"] == [["fill", 10, 600_000]] and mine["filling"] == 3
    finally:
        w.stop()
        await asyncio.wait_for(run, HANG)


async def test_a_bug_when_a_batch_wait_runs_out_stops_the_worker_loudly(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait's timer starts the batch outside any task: an error there must stop the run
    (WorkerFailed), never leave the jobs held and renewed forever behind a log line."""

    def broken(self: BatchRuns, jobs: list[Any], spec: Any) -> None:
        raise RuntimeError("a bug in starting a batch")

    monkeypatch.setattr(BatchRuns, "start", broken)
    queue.enqueue("late", {})
    w = burst(queue)
    w.register("late", lambda ps: None, batch_size=10, batch_wait_ms=50)
    with pytest.raises(WorkerFailed, match="a bug in starting a batch"):
        await asyncio.wait_for(w.run(), HANG)


def test_batch_options_are_checked_when_registered(queue: Queue) -> None:
    w = Worker(queue)
    for bad, why in (
        ({"batch_size": 0}, "batch_size must be within 1..1000"),
        ({"batch_size": 5, "batch_wait_ms": -1}, "batch_wait_ms must be"),
        ({"batch_wait_ms": 10}, "batch_wait_ms needs batch_size"),
    ):
        with pytest.raises(InvalidOption, match=why):
            w.register("x", lambda ps: None, **bad)
    tasks = Tasks(queue.name)
    with pytest.raises(InvalidOption, match="takes one list of items"):
        tasks.task("three", batch_size=3)(lambda a, b, c: None)
    with pytest.raises(InvalidOption, match="a batch task runs in the worker"):
        tasks.task(batch_size=3, isolation="process")


def test_a_sync_batch_handler_runs_in_one_thread_per_batch(queue: Queue) -> None:
    queue.enqueue_many([("t", {}) for _ in range(8)])
    threads: set[int] = set()
    w = burst(queue, concurrency=1)
    w.register("t", lambda ps: threads.add(threading.get_ident()), batch_size=8)
    asyncio.run(asyncio.wait_for(w.run(), HANG))
    assert len(threads) == 1 and w.stats.completed == 8
