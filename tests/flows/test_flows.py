"""Flows on real servers, driven by hand: a parent waits in ``waiting`` and becomes pending
in the step that finishes its last child; each failure policy; cancel and remove; a tree;
bad input refused with nothing written. Every test ends with tests/support/flows_check.py."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from emq import (
    AsyncQueue,
    DuplicateConflict,
    Flow,
    FlowIds,
    InvalidInput,
    InvalidOption,
    JobSpec,
    Queue,
)
from emq.model.keys import QueueKeys

from ..support.flows_check import check_flows
from ..support.helpers import expire_leases
from ..support.lanes_check import check_lanes

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def take(q: Queue, n: int = 100) -> dict[str, Any]:
    """Claim everything claimable: id -> Claimed."""
    return {c.id: c for c in q.claim(n, 60_000)}


def finish(q: Queue, jobs: dict[str, Any], result: Any = None) -> None:
    for c in jobs.values():
        q.complete_with_result(c.id, c.token, result if result is not None else c.payload,
                               result_ttl_ms=0)  # fmt: skip


def test_a_parent_runs_after_its_last_child_and_reads_every_result(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = queue.enqueue_flow(JobSpec("sum"), [JobSpec("part", i) for i in range(5)])
    assert isinstance(ids, FlowIds) and len(ids.children) == 5
    assert all(not c.children for c in ids.children)
    counts = queue.counts()
    assert counts["waiting"] == 1 and counts["pending"] == 5
    assert [j.id for j in queue.jobs("waiting")] == [ids.id]
    check_flows(client, qname)
    parts = take(queue)
    assert set(parts) == {c.id for c in ids.children}  # the parent is never claimed early
    last = parts.pop(ids.children[4].id)
    finish(queue, parts)
    assert queue.job(ids.id).state == "waiting" and not queue.claim(10, 1000)
    check_flows(client, qname)
    finish(queue, {last.id: last})
    assert queue.job(ids.id).state == "pending"
    check_flows(client, qname)
    (parent,) = queue.claim(10, 60_000)
    assert parent.id == ids.id
    kids = queue.children(ids.id)
    assert [(k.id, k.status) for k in kids] == sorted((c.id, "completed") for c in ids.children)
    assert sorted(k.result for k in kids) == [0, 1, 2, 3, 4]
    queue.complete(parent.id, parent.token)
    assert queue.children(ids.id) == []  # the record goes with the parent
    assert not list(client.scan_iter(match=QueueKeys.of(qname).prefix + "flow:*"))
    check_flows(client, qname)


def test_a_dead_child_fails_its_parent_by_default(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = queue.enqueue_flow(JobSpec("sum"), [JobSpec("part", i) for i in range(3)])
    jobs = take(queue)
    bad = jobs.pop(ids.children[1].id)
    assert queue.fail(bad.id, bad.token, "boom", retry=False) == "dead"
    parent = queue.job(ids.id)
    assert parent.state == "dead" and bad.id in (parent.last_error or "")
    check_flows(client, qname)
    finish(queue, jobs)  # the others finish later: counted, the parent stays dead
    assert queue.job(ids.id).state == "dead"
    assert {k.status for k in queue.children(ids.id)} == {"completed", "dead"}
    check_flows(client, qname)


def test_an_ignored_dead_child_lets_its_parent_run(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    kids = [JobSpec("part", 0, on_failure="ignore"), JobSpec("part", 1)]
    ids = queue.enqueue_flow(JobSpec("sum"), kids)
    jobs = take(queue)
    bad = jobs.pop(ids.children[0].id)
    queue.fail(bad.id, bad.token, "boom", retry=False)
    assert queue.job(ids.id).state == "waiting"
    check_flows(client, qname)
    finish(queue, jobs)
    assert queue.job(ids.id).state == "pending"
    seen = {k.id: k.status for k in queue.children(ids.id)}
    assert seen == {ids.children[0].id: "dead", ids.children[1].id: "completed"}
    check_flows(client, qname)


def test_continue_waits_for_the_redrive_of_a_dead_child(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = queue.enqueue_flow(JobSpec("sum"), [JobSpec("part", 0, on_failure="continue")])
    (c,) = queue.claim(1, 60_000)
    queue.fail(c.id, c.token, "boom", retry=False)
    assert queue.job(ids.id).state == "waiting"
    assert queue.children(ids.id)[0].status == ""
    check_flows(client, qname)
    assert queue.redrive(c.id)
    (again,) = queue.claim(1, 60_000)
    assert again.id == c.id
    finish(queue, {again.id: again})
    assert queue.job(ids.id).state == "pending"
    check_flows(client, qname)


def test_a_child_dead_by_the_sweep_fails_its_parent(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = queue.enqueue_flow(JobSpec("sum"), [JobSpec("part", 0)])
    queue.claim(1, 60_000)
    expire_leases(client, qname)
    assert queue.sweep_stalled(max_stalled=1).dead == [ids.children[0].id]
    assert queue.job(ids.id).state == "dead"
    check_flows(client, qname)


def test_cancelling_a_waiting_parent_cancels_its_unfinished_children(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = queue.enqueue_flow(
        JobSpec("sum"),
        [JobSpec("part", 0), JobSpec("part", 1), Flow(JobSpec("mid"), [JobSpec("leaf")])],
    )
    done_id = ids.children[0].id
    held = {c.id: c for c in queue.claim(10, 60_000)}
    finish(queue, {done_id: held.pop(done_id)})
    assert queue.cancel(ids.id, "stop") == "cancelled"
    assert queue.job(ids.id).state == "dead"
    assert queue.job(ids.children[2].id).state == "dead"  # the waiting mid and its leaf
    leased = set(held)  # part 1 and leaf are leased: cancel requested, their worker fails them
    for c in held.values():
        assert queue.job(c.id).fields.get("cancel") == "stop"
        assert queue.fail(c.id, c.token, "stopping") == "cancelled"
    statuses = {k.id: k.status for k in queue.children(ids.id)}
    assert statuses[done_id] == "completed"
    assert leased and all(queue.job(i).state == "dead" for i in leased)
    assert not queue.claim(10, 1000)
    check_flows(client, qname)


def test_removing_a_child_counts_it_as_removed(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = queue.enqueue_flow(JobSpec("sum"), [JobSpec("part", 0), JobSpec("part", 1)])
    assert queue.remove(ids.children[0].id) == "pending"
    assert queue.job(ids.id).state == "waiting"
    check_flows(client, qname)
    finish(queue, take(queue))
    assert queue.job(ids.id).state == "pending"
    assert {k.status for k in queue.children(ids.id)} == {"removed", "completed"}
    check_flows(client, qname)


def test_removing_a_waiting_parent_cancels_its_children(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = queue.enqueue_flow(JobSpec("sum"), [JobSpec("part", 0), JobSpec("part", 1)])
    assert queue.remove(ids.id) == "waiting"
    assert queue.job(ids.id) is None
    assert all(queue.job(c.id).state == "dead" for c in ids.children)
    assert queue.counts()["waiting"] == 0 and not queue.claim(10, 1000)
    check_flows(client, qname)


def test_a_tree_runs_bottom_up(queue: Queue, client: redis.Redis, qname: str) -> None:
    ids = queue.enqueue_flow(
        JobSpec("root"), [Flow(JobSpec("mid"), [JobSpec("a"), JobSpec("b")]), JobSpec("c")]
    )
    mid = ids.children[0]
    assert queue.counts()["waiting"] == 2
    assert set(take(queue)) == {mid.children[0].id, mid.children[1].id, ids.children[1].id}
    check_flows(client, qname)
    # (the three are leased; complete them one by one)
    for job_id in (mid.children[0].id, mid.children[1].id):
        row = queue.job(job_id)
        queue.complete(job_id, row.token)
    assert queue.job(mid.id).state == "pending" and queue.job(ids.id).state == "waiting"
    check_flows(client, qname)
    (m,) = queue.claim(10, 60_000)
    queue.complete(m.id, m.token)
    assert queue.job(ids.id).state == "waiting"
    queue.complete(ids.children[1].id, queue.job(ids.children[1].id).token)
    assert queue.job(ids.id).state == "pending"
    check_flows(client, qname)


def test_a_dead_grandchild_fails_the_whole_line(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = queue.enqueue_flow(JobSpec("root"), [Flow(JobSpec("mid"), [JobSpec("a")])])
    (a,) = queue.claim(1, 60_000)
    queue.fail(a.id, a.token, "boom", retry=False)
    assert queue.job(ids.children[0].id).state == "dead"
    assert queue.job(ids.id).state == "dead"
    assert ids.children[0].id in (queue.job(ids.id).last_error or "")
    check_flows(client, qname)


@pytest.mark.parametrize(
    ("children", "match"),
    [
        ([], "non-empty list"),
        ([JobSpec("x", queue="no spaces allowed")], "queue name"),
        ([JobSpec("x", on_failure="explode")], "on_failure"),
        (["x"], "JobSpec or a Flow"),
        ([JobSpec("x", delay_ms=5)], "not supported in a flow"),
        ([JobSpec("x", id="JOB0000000SAME"), JobSpec("y", id="JOB0000000SAME")], "repeats"),
        ([JobSpec("bad name!")], "job name"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(
    queue: Queue, client: redis.Redis, qname: str, children: list[Any], match: str
) -> None:
    with pytest.raises(InvalidInput, match=match):
        queue.enqueue_flow(JobSpec("sum"), children)
    assert not list(client.scan_iter(match=QueueKeys.of(qname).prefix + "*"))


def test_an_id_that_exists_writes_nothing(queue: Queue, client: redis.Redis, qname: str) -> None:
    taken = queue.enqueue("x", None)
    with pytest.raises(DuplicateConflict):
        queue.enqueue_flow(JobSpec("sum"), [JobSpec("part"), JobSpec("part", id=str(taken))])
    assert queue.counts()["pending"] == 1 and queue.counts()["waiting"] == 0
    check_flows(client, qname)


def test_queue_and_on_failure_are_refused_outside_a_flow(queue: Queue) -> None:
    with pytest.raises(InvalidOption, match="enqueue_flow"):
        queue.enqueue_many([JobSpec("x", on_failure="ignore")])


async def test_the_async_twin_admits_and_reads_a_flow(
    aqueue: AsyncQueue, client: redis.Redis, qname: str
) -> None:
    ids = await aqueue.enqueue_flow(JobSpec("sum", lane="t"), [JobSpec("part", 1, lane="u")])
    assert (await aqueue.counts())["waiting"] == 1
    (c,) = await aqueue.claim(1, 60_000)
    await aqueue.complete_with_result(c.id, c.token, 7, result_ttl_ms=0)
    kids = await aqueue.children(ids.id)
    assert [(k.id, k.status, k.result) for k in kids] == [(c.id, "completed", 7)]
    (p,) = await aqueue.claim(1, 60_000)
    assert p.id == ids.id and p.lane == "t" and p.parent is None and c.parent == ids.id
    await aqueue.complete(p.id, p.token)
    await aqueue.close()
    check_flows(client, qname)
    check_lanes(client, qname)


def test_a_redriven_parent_waits_for_its_unfinished_children(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = queue.enqueue_flow(JobSpec("sum"), [JobSpec("a", max_attempts=1), JobSpec("b")])
    first, second = queue.claim(2, 60_000)
    dying, other = (first, second) if first.id == ids.children[0].id else (second, first)
    queue.fail(dying.id, dying.token, "boom", retry=False)
    assert queue.job(ids.id).state == "dead"  # fail_parent: the parent died at once
    assert queue.redrive(ids.id)
    assert queue.job(ids.id).state == "waiting"  # b is still leased: it must finish first
    assert queue.claim(5, 60_000) == []
    check_flows(client, qname)
    queue.complete(other.id, other.token)
    assert queue.job(ids.id).state == "pending"
    assert sorted(c.status for c in queue.children(ids.id)) == ["completed", "dead"]
    check_flows(client, qname)


@pytest.mark.slow  # seconds: a scale limit
def test_ten_thousand_children_are_one_step_and_one_more_is_refused(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    kids = [JobSpec("part", i) for i in range(10_000)]
    with pytest.raises(InvalidInput, match="at most 10,000 jobs"):
        queue.enqueue_flow(JobSpec("sum"), [*kids, JobSpec("one-more")])
    assert queue.counts()["pending"] == 0  # nothing was written
    ids = queue.enqueue_flow(JobSpec("sum"), kids)
    assert len(ids.children) == 10_000
    assert (queue.counts()["waiting"], queue.counts()["pending"]) == (1, 10_000)
    check_flows(client, qname)
