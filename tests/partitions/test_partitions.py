"""Partitioned queues (docs/partitions.md): ``QueueOptions(partitions=N)`` splits a queue into
N queues, each its own hash slot. Routing keeps dedup keys and ids exact, a worker of the
queue's name serves every partition, reads by id find the job, the count is stored on the
server and a different one is refused before anything is written.

Every read here goes through the Queue and Worker APIs, one partition at a time, so the tests
hold on a cluster too (no multi-key command spans two partitions)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner
from redis.crc import key_slot

from emq import (
    AsyncPartitionedQueue,
    AsyncQueue,
    Cancel,
    InvalidInput,
    InvalidName,
    InvalidOption,
    JobContext,
    JobNotFound,
    JobSpec,
    PartitionedQueue,
    Queue,
    QueueOptions,
    Worker,
    WorkerOptions,
)
from emq.calls.partitions import FIELD, EnqueuePlan, partition_name, partition_of, split_name
from emq.cli.main import cli
from emq.model.config import MAX_PARTITIONS
from emq.model.keys import QueueKeys
from emq.queue._sync.partition_count import expand_queues

from ..support.helpers import until

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

THREE = QueueOptions(partitions=3)
HANG = 60.0  # bounds a hang, never a speed


@pytest.fixture
def pq(url: str, qname: str) -> Iterator[PartitionedQueue]:
    q = PartitionedQueue.from_url(url, qname, options=THREE)
    yield q
    q.close()


def stored(client: redis.Redis, name: str) -> str | None:
    return client.hget(QueueKeys.of(name).meta, FIELD)  # type: ignore[return-value]


def no_keys(client: redis.Redis, name: str) -> bool:
    """No key of queue ``name`` that a write would make exists (one key per command)."""
    k = QueueKeys.of(name)
    return not any(client.exists(key) for key in (k.meta, k.pending, k.events, k.metrics))


# -- names, routing, the plan (no server) ------------------------------------------------


def test_names_and_routing_are_pure() -> None:
    assert partition_name("hot", 2) == "hot..2"
    assert split_name("hot..2") == ("hot", 2)
    assert split_name("a...0") == ("a.", 0)
    assert split_name("hot..02") is None and split_name("hot..64") is None
    assert split_name("hot") is None
    assert partition_of("JOB0000000000A", 3) == partition_of("JOB0000000000A", 3)
    assert {partition_of(f"k{i}", 3) for i in range(50)} == {0, 1, 2}


def test_plan_keeps_each_partitions_share_in_batch_order() -> None:
    keys = [f"k{i}" if i % 2 else None for i in range(200)]
    plan = EnqueuePlan([(k, None) for k in keys], 3)
    counter = iter(range(10**6))
    while wanted := plan.wanted():
        plan.feed([f"JOB{next(counter):011d}" for _ in range(wanted)])
    shares = plan.by_partition()
    assert sum(len(s) for s in shares.values()) == 200
    for p, share in shares.items():
        ids = [plan.ids[i] or "" for i in share]
        assert share == sorted(share) and ids == sorted(ids)  # batch order is mint order
        assert all(partition_of(i, 3) == p for i in ids)  # every id routes to its partition
        for i in share:
            if (key := keys[i]) is not None:
                assert partition_of(key, 3) == p
    plain = EnqueuePlan([(None, None)] * 5, 3)  # no keys: every minted id used, in order
    assert plain.wanted() == 5
    plain.feed([f"JOB{i:011d}" for i in range(5)])
    assert plain.wanted() == 0 and plain.ids == [f"JOB{i:011d}" for i in range(5)]


def test_keys_of_partitions_hash_to_different_slots() -> None:
    for base in ("hot", "orders", "emails.eu"):
        slots = []
        for p in range(3):
            k = QueueKeys.of(partition_name(base, p))
            one = {key_slot(x.encode()) for x in (k.pending, k.active, k.meta, k.job("JOBx"))}
            assert len(one) == 1  # a partition is one slot: its scripts stay one-slot
            slots.append(one.pop())
        assert len(set(slots)) == 3, (base, slots)


# -- bad input: refused before any key is written --------------------------------------


@pytest.mark.parametrize("bad", [0, -1, MAX_PARTITIONS + 1, True, "3", 2.0])
def test_bad_partition_counts_are_refused(bad: object) -> None:
    with pytest.raises(InvalidOption, match="partitions"):
        QueueOptions(partitions=bad)  # type: ignore[arg-type]


def test_a_plain_queue_refuses_partitions_and_names_the_class_to_use(
    url: str, qname: str, client: redis.Redis
) -> None:
    with pytest.raises(InvalidOption, match=r"emq\.PartitionedQueue\.from_url\(url, "):
        Queue.from_url(url, qname, options=THREE)
    with pytest.raises(InvalidOption, match=r"emq\.AsyncPartitionedQueue\.from_url"):
        AsyncQueue.from_url(url, qname, options=THREE)
    assert no_keys(client, qname)


def test_bad_input_is_refused_before_any_key_is_written(
    pq: PartitionedQueue, url: str, qname: str, client: redis.Redis
) -> None:
    with pytest.raises(InvalidName, match="too long for 3 partitions"):
        PartitionedQueue.from_url(url, "x" * 127, options=THREE)
    with pytest.raises(InvalidOption, match="key chooses the partition"):
        pq.enqueue("t", 1, id="JOB00000000001", key="k")
    with pytest.raises(InvalidInput):  # a bad job anywhere in a batch: nothing sent
        pq.enqueue_many([("t", 1), ("t", 2), JobSpec("", 3)])
    with pytest.raises(InvalidInput, match="appears twice"):
        pq.enqueue_many(
            [JobSpec("t", 1, id="JOB00000000001"), JobSpec("t", 2, id="JOB00000000001")]
        )
    assert stored(client, qname) is None  # not even the partition count
    assert all(no_keys(client, partition_name(qname, p)) for p in range(3))


# -- the stored count ----------------------------------------------------------------------


def test_the_count_is_stored_and_another_one_refused(
    pq: PartitionedQueue, url: str, qname: str, client: redis.Redis
) -> None:
    pq.enqueue("t", 1)
    assert stored(client, qname) == "3"
    four = PartitionedQueue.from_url(url, qname, options=QueueOptions(partitions=4))
    with four, pytest.raises(InvalidOption, match="stored on the server with 3 partitions"):
        four.enqueue("t", 2)
    assert stored(client, qname) == "3"
    assert no_keys(client, partition_name(qname, 3))
    with PartitionedQueue.from_url(url, qname) as reader:  # no count given: the stored one
        assert len(reader.partitions()) == 3
        assert reader.counts()["pending"] == 1
    w = Worker(qname, {"t": lambda p: None}, url=url, queue_options=QueueOptions(partitions=2))
    with pytest.raises(InvalidOption, match="stored on the server with 3 partitions"):
        w.run_sync(handle_signals=False)


def test_a_queue_nobody_partitioned_is_not_read_as_one(
    url: str, qname: str, client: redis.Redis
) -> None:
    reader = PartitionedQueue.from_url(url, qname)
    with reader, pytest.raises(InvalidOption, match="not partitioned"):
        reader.counts()
    assert no_keys(client, qname)


def test_jobs_in_the_plain_queue_of_the_name_are_served_and_counted(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    before = queue.enqueue("t", "plain, before the split")
    pq = PartitionedQueue.from_url(url, qname, options=THREE)
    ids = pq.enqueue_many([("t", i) for i in range(3)])
    after = queue.enqueue("t", "plain, after")  # a plain producer, emq enqueue, a flow child
    assert stored(client, qname) == "3"
    assert pq.counts()["pending"] == 5
    found = pq.job(after)
    assert found is not None and found.payload == "plain, after"
    plain = {partition_name(qname, p): QueueOptions() for p in range(3)}
    assert expand_queues(client, {qname: QueueOptions()}) == {**plain, qname: QueueOptions()}
    seen: list[str] = []
    w = Worker(qname, {"t": lambda p, ctx: seen.append(ctx.id)}, url=url,
               options=WorkerOptions(burst=True))  # fmt: skip
    w.run_sync(handle_signals=False)
    assert sorted(seen) == sorted([before, after, *ids])
    assert pq.counts()["completed"] == 5
    # the plain queue is served by a run that starts while it holds live jobs, and only then
    assert expand_queues(client, {qname: QueueOptions()}) == plain
    pq.close()


# -- spreading -----------------------------------------------------------------------------


def test_one_dedup_key_is_one_job_queue_wide(pq: PartitionedQueue) -> None:
    first = pq.enqueue("t", 1, key="order-7")
    again = pq.enqueue("t", 2, key="order-7")
    assert again == first and first.created and not again.created
    batch = pq.enqueue_many([JobSpec("t", i, key=f"k{i % 30}") for i in range(90)])
    assert len(set(batch)) == 30
    assert sum(1 for i in batch if i.created) == 30
    assert pq.counts()["pending"] == 31
    for i in range(30):
        home = pq.partition_of_key(f"k{i}")
        assert home.job(batch[i]) is not None  # the key's partition holds it
        assert pq.partition_of(batch[i]) is home  # and its id routes there


def test_jobs_spread_by_id_and_an_explicit_id_stays_unique(pq: PartitionedQueue) -> None:
    ids = pq.enqueue_many([("t", i) for i in range(300)])
    assert len(set(ids)) == 300
    each = pq.partition_counts()
    assert all(c["pending"] > 0 for c in each)  # 3 * (2/3)**300: never empty
    assert sum(c["pending"] for c in each) == 300
    for job_id in ids[:20]:
        assert pq.partition_of(job_id).job(job_id) is not None
    (mine,) = pq.new_ids(1)
    a = pq.enqueue("t", "x", id=mine)
    b = pq.enqueue("t", "x", id=mine)
    assert a == b == mine and a.created and not b.created
    assert pq.counts()["pending"] == 301


def test_counts_are_the_partitions_summed(pq: PartitionedQueue) -> None:
    pq.enqueue_many([("t", i) for i in range(60)])
    pq.enqueue("t", "later", delay_ms=60_000)
    total, each = pq.counts(), pq.partition_counts()
    for field in ("pending", "schedule", "active", "dead"):
        assert total[field] == sum(c[field] for c in each)
    assert total["pending"] == 60 and total["schedule"] == 1
    listed = pq.jobs("pending", 0, 1000)
    assert len(listed) == 60 and [j.id for j in listed] == sorted(j.id for j in listed)


# -- reads and changes by id -------------------------------------------------------------


def test_get_cancel_remove_redrive_by_id(pq: PartitionedQueue) -> None:
    a, b, c = pq.enqueue_many([("t", 1), ("t", 2), ("t", 3)])
    job = pq.job(a)
    assert job is not None and job.payload == 1
    assert pq.cancel(a, "no") == Cancel.CANCELLED
    dead = pq.job(a)
    assert dead is not None and dead.state == "dead" and dead.cancelled == "no"
    assert pq.redrive(a) and pq.job(a).state == "pending"  # type: ignore[union-attr]
    assert pq.remove(b) == "pending" and pq.job(b) is None
    assert pq.set_priority(c, 5) == "pending"
    (ghost,) = pq.new_ids(1)
    assert pq.job(ghost) is None and not pq.redrive(ghost)
    with pytest.raises(JobNotFound):
        pq.cancel(ghost)
    with pytest.raises(JobNotFound):
        pq.remove(ghost)


def test_a_job_outside_its_routed_partition_is_found(pq: PartitionedQueue) -> None:
    parts = pq.partitions()
    ids = parts[0].new_ids(30)
    job_id = next(i for i in ids if partition_of(i, 3) != 2)  # routed elsewhere
    parts[2].enqueue("t", "here", id=job_id)  # as a flow's child or a repeat tick lands
    found = pq.job(job_id)
    assert found is not None and found.payload == "here"
    assert pq.cancel(job_id) == Cancel.CANCELLED
    assert parts[2].job(job_id).state == "dead"  # type: ignore[union-attr]


def test_limits_are_refused_unless_asked_per_partition(pq: PartitionedQueue) -> None:
    with pytest.raises(InvalidOption, match="per_partition=True"):
        pq.set_limits(concurrency=10)
    pq.set_limits(concurrency=4, per_partition=True)
    assert all(q.limits().concurrency == 4 for q in pq.partitions())


# -- workers ---------------------------------------------------------------------------------


def test_a_worker_of_the_name_drains_every_partition_once(
    pq: PartitionedQueue, url: str, qname: str
) -> None:
    ids = pq.enqueue_many([("t", i) for i in range(90)])
    ids += pq.enqueue_many([JobSpec("t", i, key=f"key-{i}") for i in range(30)])
    seen: list[str] = []
    lock = threading.Lock()

    def handle(payload: int, ctx: JobContext) -> None:
        with lock:
            seen.append(ctx.id)

    w = Worker(qname, {"t": handle}, url=url, options=WorkerOptions(concurrency=4, burst=True))
    w.run_sync(handle_signals=False)  # no flag: the worker reads the count from the server
    assert sorted(seen) == sorted(ids)  # every job, each exactly once
    counts = pq.counts()
    assert counts["pending"] == counts["active"] == counts["schedule"] == 0
    assert counts["completed"] == 120


def test_a_worker_with_every_partition_full_claims_from_each(
    pq: PartitionedQueue, url: str, qname: str
) -> None:
    parts = pq.partitions()
    for q in parts:
        q.enqueue_many([("t", i) for i in range(20)])
    served: list[str] = []
    w = Worker(qname, url=url, options=WorkerOptions(concurrency=1))

    @w.handler("t")
    def handle(payload: int, ctx: JobContext) -> None:
        served.append(ctx.queue)
        if len(served) == 9:
            w.stop()

    w.run_sync(handle_signals=False)
    # a claim takes at most concurrency + claim-ahead (3) jobs from one partition and the
    # next claim starts at the next partition: 9 jobs come from at least 3 claims
    assert set(served[:9]) == {q.name for q in parts}
    counts = pq.counts()
    assert counts["completed"] == len(served) and counts["pending"] == 60 - len(served)


async def test_a_worker_parked_between_jobs_serves_each_partition(url: str, qname: str) -> None:
    """Between jobs the worker parks on every partition's wake list; on a cluster the lists
    lie in several slots, waited on by one BLPOP each (one BLPOP over them is refused). The
    poll is 1 s: redis-py may swallow the cancel of a BLPOP, which then ends at its timeout."""
    apq = AsyncPartitionedQueue.from_url(url, qname, options=THREE)
    parts = await apq.partitions()
    seen: list[int] = []
    w = Worker(qname, {"t": seen.append}, url=url, options=WorkerOptions(poll_ms=1_000))
    task = asyncio.create_task(w.run())
    try:
        for p, q in enumerate(parts * 2):
            await q.enqueue("t", p)
            await until(lambda n=p + 1: len(seen) == n, HANG, f"job {p} to run")
    finally:
        w.stop()
        await asyncio.wait_for(task, HANG)
        await apq.close()
    assert seen == list(range(6)) and w.stats.outages == 0


# -- asyncio twin, CLI --------------------------------------------------------------------------


async def test_the_asyncio_twin(url: str, qname: str) -> None:
    async with AsyncPartitionedQueue.from_url(url, qname, options=THREE) as apq:
        ids = await apq.enqueue_many([("t", i) for i in range(30)])
        dup = await apq.enqueue("t", 0, key="k")
        assert not (await apq.enqueue("t", 1, key="k")).created
        assert (await apq.counts())["pending"] == 31
        job = await apq.job(ids[7])
        assert job is not None and job.payload == 7
        assert await apq.cancel(dup) == Cancel.CANCELLED


def test_the_cli_routes_a_partitioned_queues_jobs_by_id_and_key(
    pq: PartitionedQueue, url: str, qname: str
) -> None:
    """`emq enqueue`, `job`, `cancel`, `jobs` and `dead` on a partitioned queue's name reach
    the partitions (a job enqueued into the plain queue would wait for a worker restart)."""
    pq.enqueue("warm", 0)  # the count is on the server from here on

    def run(*args: str) -> object:
        out = CliRunner().invoke(cli, [*args, "--url", url, "--json"])
        assert out.exit_code == 0, out.output
        return json.loads(out.output)

    made = [run("enqueue", qname, "t", str(i), "--key", f"k{i}") for i in range(6)]
    again = run("enqueue", qname, "t", "0", "--key", "k0")
    assert again == {"id": made[0]["id"], "created": False}  # type: ignore[index]
    assert pq.counts()["pending"] == 7
    with Queue.from_url(url, qname + "-unused") as other:
        plain = Queue(other.client, qname)  # the plain queue of the name: nothing there
        assert plain.counts()["pending"] == 0
    job = run("job", qname, made[3]["id"])  # type: ignore[index]
    assert job["payload"] == 3  # type: ignore[index]
    assert run("cancel", qname, made[3]["id"])["answer"] == "cancelled"  # type: ignore[index]
    assert [j["id"] for j in run("jobs", qname, "dead")["jobs"]] == [made[3]["id"]]  # type: ignore[index]
    assert run("dead", qname, "purge", made[3]["id"]) == {"purge": 1}  # type: ignore[index]
    assert pq.job(made[3]["id"]) is None  # type: ignore[index]


def test_emq_stats_shows_one_row_and_its_partitions(
    pq: PartitionedQueue, url: str, qname: str
) -> None:
    pq.enqueue_many([("t", i) for i in range(12)])
    run = CliRunner().invoke(cli, ["stats", "--url", url, "--json"])
    assert run.exit_code == 0, run.output
    rows = json.loads(run.output)
    assert rows[qname]["pending"] == 12 and rows[qname]["partitions"] == 3
    assert not any(name.startswith(qname + "..") for name in rows)
    run = CliRunner().invoke(cli, ["stats", qname, "--partitions", "--url", url, "--json"])
    assert run.exit_code == 0, run.output
    rows = json.loads(run.output)
    parts = Counter({n: r["pending"] for n, r in rows.items() if n != qname})
    assert sorted(parts) == [partition_name(qname, p) for p in range(3)]
    assert sum(parts.values()) == rows[qname]["pending"] == 12
    assert all(rows[n]["slot"] == key_slot(QueueKeys.of(n).meta.encode()) for n in parts)
    run = CliRunner().invoke(cli, ["stats", qname, "--url", url])
    assert run.exit_code == 0 and qname in run.output
