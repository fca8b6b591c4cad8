"""A flow's child removed by any path counts as ``removed`` for its parent (docs/flows.md,
"Cancel and remove"): remove, drain, obliterate and the dead-letter purge, in the child's own
step when the parent is in its queue, through the outbox when it is not; and a child whose
worker gives it back (delay) after a cancel was asked for counts as ``cancelled``. Every test
ends with the flow invariants on every queue it touches."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from emq import Flow, JobSpec, Queue
from emq.queue._sync import deadletters as dl

from ..support.flows_check import check_flows

pytestmark = pytest.mark.servers("valkey", "redis")


@pytest.fixture
def kids(url: str, qname: str) -> Iterator[Queue]:
    with Queue.from_url(url, qname + "-kids") as q:
        yield q


def check_all(client: redis.Redis, *queues: Queue) -> None:
    for q in queues:
        check_flows(client, q.name)


def statuses(q: Queue, parent: str) -> list[str]:
    return sorted(c.status for c in q.children(parent))


def test_drained_children_count_as_removed_for_their_parent(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    """A parent with a child still leased keeps waiting, its drained children counted; a
    parent whose children were all drained is ready, so the drain takes it too; a parent
    ready before the drain goes with its flow record."""
    held = queue.enqueue_flow(JobSpec("sum"), [JobSpec("part", i) for i in range(3)])
    gone = queue.enqueue_flow(JobSpec("sum"), [JobSpec("part", i) for i in range(2)])
    ready = queue.enqueue_flow(JobSpec("sum"), [JobSpec("part", "x")])
    leased = None
    for c in queue.claim(10, 60_000):
        if c.id == ready.children[0].id:
            queue.complete_with_result(c.id, c.token, 1, result_ttl_ms=0)
        elif c.id == held.children[0].id:
            leased = c
        else:  # back to the schedule: a drain takes scheduled jobs too
            queue.delay(c.id, c.token, 60_000)
    assert leased is not None and queue.job(ready.id).state == "pending"
    assert queue.drain(chunk=2) == 6  # 2 + 2 children, the ready parent, then gone's parent
    assert queue.job(ready.id) is None and queue.job(gone.id) is None
    assert not client.exists(queue.core.keys.flow(ready.id), queue.core.keys.flow(gone.id))
    assert statuses(queue, held.id) == ["", "removed", "removed"]
    assert queue.job(held.id).state == "waiting"
    check_flows(client, qname)
    queue.complete_with_result(leased.id, leased.token, 1, result_ttl_ms=0)
    assert queue.job(held.id).state == "pending"
    check_flows(client, qname)


@pytest.mark.parametrize("how", ["drain", "obliterate"])
def test_children_removed_in_another_queue_reach_their_parent(
    how: str, queue: Queue, kids: Queue, client: redis.Redis
) -> None:
    ids = queue.enqueue_flow(
        JobSpec("combine"),
        [JobSpec("part", i, queue=kids.name) for i in range(3)] + [JobSpec("local")],
    )
    ignored = queue.enqueue_flow(
        JobSpec("combine"), [JobSpec("part", queue=kids.name, on_failure="continue")]
    )
    if how == "drain":
        assert kids.drain(chunk=2) == 4
        assert kids.deliver_outbox().counted == 4
    else:
        assert kids.obliterate(chunk=2) == 4  # delivers the outbox before the queue goes
        assert not list(client.scan_iter(match=kids.core.keys.prefix + "*"))
    assert statuses(queue, ids.id) == ["", "removed", "removed", "removed"]
    assert queue.job(ids.id).state == "waiting"  # its local child is still to run
    assert statuses(queue, ignored.id) == ["removed"]
    assert queue.job(ignored.id).state == "pending"
    (local,) = [j for j in queue.claim(10, 60_000) if j.id == ids.children[3].id]
    queue.complete_with_result(local.id, local.token, 1, result_ttl_ms=0)
    assert queue.job(ids.id).state == "pending"
    check_all(client, queue, kids)


def test_obliterated_children_in_the_parents_queue_release_a_parent_elsewhere(
    queue: Queue, kids: Queue, client: redis.Redis
) -> None:
    """A sub-parent in the obliterated queue and its own children: the top parent, in
    another queue, hears of the sub-parent's removal once."""
    ids = queue.enqueue_flow(
        JobSpec("top"), [Flow(JobSpec("mid", queue=kids.name), [JobSpec("a"), JobSpec("b")])]
    )
    kids.obliterate(force=True, chunk=1)
    assert not list(client.scan_iter(match=kids.core.keys.prefix + "*"))
    assert statuses(queue, ids.id) == ["removed"]
    assert queue.job(ids.id).state == "pending"
    check_all(client, queue, kids)


def test_a_child_ending_after_its_parents_queue_was_obliterated_is_dropped(
    queue: Queue, kids: Queue, client: redis.Redis
) -> None:
    ids = queue.enqueue_flow(
        JobSpec("combine"), [JobSpec("part", i, queue=kids.name) for i in range(2)]
    )
    queue.obliterate()
    (c, d) = kids.claim(10, 60_000)
    kids.complete_with_result(c.id, c.token, 1, result_ttl_ms=0)
    kids.fail(d.id, d.token, "boom", retry=False)
    assert kids.deliver_outbox().counted == 0  # no parent: nothing counted, nothing created
    assert client.hlen(kids.core.keys.outbox) == 0
    assert not list(client.scan_iter(match=queue.core.keys.prefix + "*"))
    assert queue.job(ids.id) is None
    check_all(client, queue, kids)


@pytest.mark.parametrize("across", [False, True], ids=["one-queue", "two-queues"])
def test_a_purged_dead_child_counts_as_removed(
    across: bool, queue: Queue, kids: Queue, client: redis.Redis
) -> None:
    """A ``continue`` child's death leaves its parent waiting; purging it lets the parent
    run."""
    home = kids if across else queue
    ids = queue.enqueue_flow(
        JobSpec("combine"),
        [JobSpec("part", queue=home.name if across else None, on_failure="continue")],
    )
    (c,) = home.claim(1, 60_000)
    home.fail(c.id, c.token, "boom", retry=False)
    home.deliver_outbox()
    assert queue.job(ids.id).state == "waiting"
    assert dl.purge(home).moved == 1
    home.deliver_outbox()
    assert statuses(queue, ids.id) == ["removed"]
    assert queue.job(ids.id).state == "pending"
    check_all(client, queue, kids)


@pytest.mark.parametrize("via", ["delay", "fail"])
@pytest.mark.parametrize(
    ("policy", "parent_state"), [("fail_parent", "dead"), ("ignore", "pending")]
)
@pytest.mark.parametrize("across", [False, True], ids=["one-queue", "two-queues"])
def test_a_child_cancelled_while_it_ran_counts_as_cancelled(
    via: str,
    policy: str,
    parent_state: str,
    across: bool,
    queue: Queue,
    kids: Queue,
    client: redis.Redis,
) -> None:
    """A child whose cancel was asked for while it ran, then given back by its worker
    (``delay``: a retry later, a RateLimited, a shutdown's give-back) or failed with retries
    left (``fail``), ends cancelled, and its parent hears of it."""
    home = kids if across else queue
    ids = queue.enqueue_flow(
        JobSpec("combine"),
        [JobSpec("part", queue=home.name if across else None, on_failure=policy)],
    )
    (c,) = home.claim(1, 60_000)
    home.cancel(c.id, "stop")
    if via == "delay":
        assert home.delay(c.id, c.token, 5_000) == "cancelled"
    else:
        assert home.fail(c.id, c.token, "boom", delay_ms=5_000) == "cancelled"
    home.deliver_outbox()
    assert statuses(queue, ids.id) == ["cancelled"]
    assert queue.job(ids.id).state == parent_state
    check_all(client, queue, kids)
