"""Flows across queues (docs/flows.md, Across queues): admission in one step per queue, a
child's end recorded in its own slot (the outbox) and delivered to its parent's slot by a
second, idempotent step. Every test ends with the flow invariants on both queues."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner

from emq import (
    AsyncQueue,
    DuplicateConflict,
    Flow,
    JobContext,
    JobSpec,
    Queue,
    Worker,
    WorkerOptions,
)
from emq.calls.flows import deliver_call, plan
from emq.cli.main import cli
from emq.embedded.standalone import EmbeddedServer
from emq.model.keys import QueueKeys

from ..support.flows_check import check_flows
from ..support.helpers import until
from ..worker.test_worker_procs import HANG

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


@pytest.fixture
def kids(url: str, qname: str) -> Iterator[Queue]:
    with Queue.from_url(url, qname + "-kids") as q:
        yield q


def run_one(q: Queue, result: object = None) -> str:
    """Claim one job of ``q`` and complete it with ``result``; returns its id."""
    (job,) = q.claim(1)
    q.complete_with_result(job.id, job.token, result, result_ttl_ms=0)
    return job.id


def check_both(client: redis.Redis, *queues: Queue) -> None:
    for q in queues:
        check_flows(client, q.name)


def test_a_child_in_another_queue_reaches_its_parent_once(
    queue: Queue, kids: Queue, client: redis.Redis, url: str
) -> None:
    ids = queue.enqueue_flow(
        JobSpec("combine"),
        [JobSpec("part", i, queue=kids.name) for i in range(3)] + [JobSpec("local")],
    )
    assert [c.queue for c in ids.children] == [kids.name] * 3 + [queue.name]
    remote = [c.id for c in ids.children[:3]]
    assert client.hget(kids.core.keys.job(remote[0]), "parent") == f"{ids.id}@{queue.name}"
    assert (queue.counts()["waiting"], queue.counts()["pending"]) == (1, 1)
    assert kids.counts()["pending"] == 3
    done = {run_one(kids, {"n": i}) for i in range(3)}
    assert done == set(remote)
    # the children's step is done; their parent has not heard yet: the outbox holds it
    assert client.hlen(kids.core.keys.outbox) == 3 and kids.counts()["outbox"] == 3
    shown = CliRunner().invoke(cli, ["stats", kids.name, "--url", url]).output
    assert "outbox: 3 flow messages" in shown
    shown = CliRunner().invoke(cli, ["stats", queue.name, "--url", url]).output
    assert "waiting" in shown and "outbox" not in shown
    assert queue.job(ids.id).state == "waiting"
    check_both(client, queue, kids)
    # a beat that delivered and died before deleting: the next beat's delivery counts nothing
    entries = client.hgetall(kids.core.keys.outbox)
    todo = plan(entries)
    call = deliver_call(kids.core, queue.name, todo.done[queue.name])
    assert kids._run(call) == 3
    check_both(client, queue, kids)
    replay = kids.deliver_outbox()
    assert (replay.entries, replay.counted) == (3, 0)
    assert client.hlen(kids.core.keys.outbox) == 0
    assert kids._run(call) == 0  # and replayed once more, still nothing
    assert queue.job(ids.id).state == "waiting"  # the local child is still unfinished
    run_one(queue)  # the local child
    (parent,) = queue.claim(1)
    assert parent.id == ids.id
    children = {c.id: c for c in queue.children(ids.id)}
    assert {children[i].queue for i in remote} == {kids.name}
    assert sorted(children[i].result["n"] for i in remote) == [0, 1, 2]
    queue.complete(parent.id, parent.token)
    check_both(client, queue, kids)


def test_a_beat_killed_before_delivery_delays_the_parent_and_loses_nothing(
    queue: Queue, kids: Queue, client: redis.Redis
) -> None:
    ids = queue.enqueue_flow(JobSpec("combine"), [JobSpec("part", queue=kids.name)])
    run_one(kids, 7)
    # no delivery yet (the beat died before it): the parent waits, the end is kept
    assert queue.job(ids.id).state == "waiting"
    check_both(client, queue, kids)
    assert kids.deliver_outbox().counted == 1
    assert queue.job(ids.id).state == "pending"
    assert [c.result for c in queue.children(ids.id)] == [7]
    check_both(client, queue, kids)


@pytest.mark.parametrize(
    ("policy", "parent_after"), [("fail_parent", "dead"), ("ignore", "pending")]
)
def test_a_dead_child_in_another_queue_follows_its_policy(
    queue: Queue, kids: Queue, client: redis.Redis, policy: str, parent_after: str
) -> None:
    ids = queue.enqueue_flow(
        JobSpec("combine"), [JobSpec("part", queue=kids.name, on_failure=policy, max_attempts=1)]
    )
    (job,) = kids.claim(1)
    kids.fail(job.id, job.token, "boom", retry=False)
    kids.deliver_outbox()
    parent = queue.job(ids.id)
    assert parent.state == parent_after
    if policy == "fail_parent":
        assert parent.last_error == f"child {job.id}@{kids.name} dead"
    assert [c.status for c in queue.children(ids.id)] == ["dead"]
    check_both(client, queue, kids)


def test_continue_waits_for_the_redrive_of_a_child_in_another_queue(
    queue: Queue, kids: Queue, client: redis.Redis
) -> None:
    ids = queue.enqueue_flow(
        JobSpec("combine"), [JobSpec("part", queue=kids.name, on_failure="continue")]
    )
    (job,) = kids.claim(1)
    kids.fail(job.id, job.token, "boom", retry=False)
    assert kids.deliver_outbox().entries == 0  # a continue child's death tells no one
    assert queue.job(ids.id).state == "waiting"
    check_both(client, queue, kids)
    assert kids.redrive(job.id)
    run_one(kids, "second time")
    kids.deliver_outbox()
    assert queue.job(ids.id).state == "pending"
    assert [c.result for c in queue.children(ids.id)] == ["second time"]
    check_both(client, queue, kids)


def test_cancel_of_a_waiting_parent_reaches_its_children_in_another_queue(
    queue: Queue, kids: Queue, client: redis.Redis
) -> None:
    ids = queue.enqueue_flow(
        JobSpec("combine"), [JobSpec("part", i, queue=kids.name) for i in range(3)]
    )
    (leased,) = kids.claim(1)
    queue.cancel(ids.id, "not needed")
    assert client.hlen(queue.core.keys.outbox) == 3
    assert queue.deliver_outbox().cancels == 3
    for child in ids.children:
        job = kids.job(child.id)
        if child.id == leased.id:
            assert job.state == "active"  # its worker is told on its next heartbeat
        else:
            assert (job.state, job.cancelled) == ("dead", "not needed")
    kids.deliver_outbox()  # the cancelled children's ends reach the dead parent: no change
    assert queue.job(ids.id).state == "dead"
    check_both(client, queue, kids)


def test_removing_a_child_in_another_queue_counts_it_for_its_parent(
    queue: Queue, kids: Queue, client: redis.Redis
) -> None:
    ids = queue.enqueue_flow(
        JobSpec("combine"), [JobSpec("part", i, queue=kids.name) for i in range(2)]
    )
    kids.remove(ids.children[0].id)
    run_one(kids, 1)
    assert kids.deliver_outbox().counted == 2
    assert queue.job(ids.id).state == "pending"
    assert sorted(c.status for c in queue.children(ids.id)) == ["completed", "removed"]
    check_both(client, queue, kids)


def test_a_tree_that_comes_back_to_its_first_queue(
    queue: Queue, kids: Queue, client: redis.Redis
) -> None:
    ids = queue.enqueue_flow(
        JobSpec("root"),
        [Flow(JobSpec("middle", queue=kids.name), [JobSpec("leaf", queue=queue.name)])],
    )
    (middle,) = ids.children
    (leaf,) = middle.children
    assert (middle.queue, leaf.queue) == (kids.name, queue.name)
    assert client.hget(queue.core.keys.job(leaf.id), "parent") == f"{middle.id}@{kids.name}"
    assert run_one(queue, "leaf") == leaf.id
    assert queue.deliver_outbox().counted == 1  # the leaf's end, from the root's queue
    assert kids.job(middle.id).state == "pending"
    assert run_one(kids, "middle") == middle.id
    kids.deliver_outbox()
    assert queue.job(ids.id).state == "pending"
    check_both(client, queue, kids)


def test_a_resent_flow_admits_nothing_twice(queue: Queue, kids: Queue, client: redis.Redis) -> None:
    ids = queue.enqueue_flow(
        JobSpec("combine"), [JobSpec("part", i, queue=kids.name) for i in range(3)]
    )
    specs = [JobSpec("part", i, queue=kids.name, id=c.id) for i, c in enumerate(ids.children)]
    again = queue.enqueue_flow(JobSpec("combine", id=ids.id), specs)
    assert again == ids
    assert (queue.counts()["waiting"], kids.counts()["pending"]) == (1, 3)
    before = {k: client.hgetall(k) for k in (queue.core.keys.job(ids.id),)}
    with pytest.raises(DuplicateConflict):  # an id of this flow under another parent
        queue.enqueue_flow(
            JobSpec("other"), [JobSpec("part", id=ids.children[0].id, queue=kids.name)]
        )
    assert {k: client.hgetall(k) for k in before} == before
    # the refused flow's first step (its parent) was taken back: nothing of it is left
    assert queue.counts()["waiting"] == 1 and queue.counts()["dead"] == 0
    check_both(client, queue, kids)


async def test_the_async_twin_admits_and_delivers_across_queues(
    aqueue: AsyncQueue, url: str, qname: str, client: redis.Redis
) -> None:
    async with AsyncQueue.from_url(url, qname + "-kids") as akids:
        ids = await aqueue.enqueue_flow(
            Flow(JobSpec("combine"), [JobSpec("part", 1, queue=akids.name)])
        )
        (job,) = await akids.claim(1)
        await akids.complete_with_result(job.id, job.token, 5, result_ttl_ms=0)
        assert (await akids.deliver_outbox()).counted == 1
        assert (await aqueue.job(ids.id)).state == "pending"
        assert [(c.id, c.queue, c.result) for c in await aqueue.children(ids.id)] == [
            (job.id, akids.name, 5)
        ]
    await aqueue.close()
    check_flows(client, aqueue.name)
    check_flows(client, QueueKeys.of(qname + "-kids").queue)


@pytest.mark.slow  # seconds: a fault episode
async def test_an_out_of_memory_episode_delays_delivery_and_loses_nothing(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    """The children's ends wait in the outbox while the server refuses every write; the
    worker's beat logs the episode, keeps beating, and delivers once memory is back: the
    parent runs once with every result."""
    parents, kids = Queue.from_url(own.url(), "oomp"), Queue.from_url(own.url(), "oomk")
    ids = parents.enqueue_flow(
        JobSpec("combine"), [JobSpec("part", i, queue=kids.name) for i in range(50)]
    )
    for i in range(50):
        run_one(kids, i)
    seen: list[list[object]] = []

    def combine(payload: object, ctx: JobContext) -> None:
        seen.append(sorted(c.result for c in ctx.children()))  # type: ignore[type-var]

    w = Worker([parents, kids], options=WorkerOptions(stalled_interval_ms=200))
    w.register("combine", combine)
    admin.config_set("maxmemory", 1)  # every script refused, the delivery's too
    task = asyncio.create_task(w.run(handle_signals=False))
    try:
        await asyncio.sleep(1.5)  # the episode: several beats try and are refused
        assert admin.hlen(kids.core.keys.outbox) == 50  # refused, kept
        assert parents.job(ids.id).state == "waiting"
        admin.config_set("maxmemory", 0)
        await until(lambda: parents.job(ids.id) is None, HANG, "the parent to complete")
    finally:
        admin.config_set("maxmemory", 0)
        w.stop()
        await asyncio.wait_for(task, HANG)
    assert seen == [list(range(50))]
    assert w.stats.outages >= 1  # the episode was logged, and the worker rode it out
    assert admin.hlen(kids.core.keys.outbox) == 0
    check_both(admin, parents, kids)
    parents.close()
    kids.close()


def test_unreadable_outbox_entries_are_dropped_and_never_stop_a_delivery(
    queue: Queue, kids: Queue, client: redis.Redis
) -> None:
    ids = queue.enqueue_flow(JobSpec("combine"), [JobSpec("part", queue=kids.name)])
    run_one(kids, 1)
    box = kids.core.keys.outbox
    client.hset(box, mapping={
        "done:JOB0000000000A": "not json",
        "done:JOB0000000000B": '{"q": "bad name!", "p": "JOB0000000000B"}',
        "cancel:JOB0000000000C@x": '{"q": "x", "j": "not-an-id", "r": ""}',
        "done:JOB0000000000D": '{"q": "x", "p": "JOB0000000000D", "c": "c", "s": "odd", '
        '"f": "", "r": ""}',
        "what:JOB0000000000E": '{"q": "x"}',
        "cancel:ok@x": '{"q": "x", "j": "JOB0000000000F", "r": "' + "r" * 2000 + '"}',
    })  # fmt: skip
    delivered = kids.deliver_outbox()
    assert delivered.counted == 1 and len(delivered.broken) == 6, delivered
    assert client.hlen(box) == 0
    assert queue.job(ids.id).state == "pending"
    check_both(client, queue, kids)
