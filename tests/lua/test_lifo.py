"""``enqueue(lifo=True)`` on real servers: a lifo job goes ahead of the jobs waiting at its
priority (the newest lifo first) and never past another priority; with lanes; and every
way back into pending gives it a fresh lifo place."""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner

from emq import JobSpec, Queue
from emq.cli.main import cli

from ..support.helpers import assert_consistent, expire_leases

pytestmark = pytest.mark.servers("valkey", "redis")  # one queue's keys only: no cross-slot path

P_MAX, P_MIN = 2**31 - 1, -(2**31)


def claim_names(queue: Queue, n: int = 100) -> list[str]:
    return [c.name for c in queue.claim(n)]


def test_claims_mix_lifo_and_fifo_jobs_by_priority_then_newest_lifo_first(
    queue: Queue, client: redis.Redis
) -> None:
    queue.enqueue("a0")
    queue.enqueue("b0-lifo", lifo=True)
    queue.enqueue("c1", priority=1)
    queue.enqueue("d0-lifo", lifo=True)
    queue.enqueue("e0")
    queue.enqueue("f1-lifo", priority=1, lifo=True)
    queue.enqueue("g-1", priority=-1)
    queue.enqueue_many(
        [JobSpec("h-1-lifo", priority=-1, lifo=True), ("i0", None), JobSpec("j0-lifo", lifo=True)]
    )
    assert claim_names(queue) == [
        "h-1-lifo", "g-1", "j0-lifo", "d0-lifo", "b0-lifo", "a0", "e0", "i0", "f1-lifo", "c1"
    ]  # fmt: skip
    assert_consistent(client, queue.name)


def test_a_batch_of_lifo_jobs_runs_newest_first(queue: Queue) -> None:
    queue.enqueue("first")
    queue.enqueue_many([JobSpec(f"n{i}", lifo=True) for i in range(50)])
    assert claim_names(queue) == [f"n{i}" for i in reversed(range(50))] + ["first"]


@pytest.mark.parametrize("priority", [P_MIN, -1024, 0, 1024, P_MAX - 1])
def test_a_lifo_score_stays_within_its_priority(
    queue: Queue, client: redis.Redis, priority: int
) -> None:
    """Below: the next priority's FIFO jobs always run first; exact ordering among lifo jobs
    holds for |priority| < 2^11 (beyond it their scores may tie: FIFO among them)."""
    queue.enqueue("lower", priority=priority - 1 if priority > P_MIN else priority)
    queue.enqueue("fifo", priority=priority)
    for i in range(3):
        queue.enqueue(f"lifo{i}", priority=priority, lifo=True)
    queue.enqueue("higher", priority=priority + 1)
    scores = dict(client.zrange(queue.core.keys.pending, 0, -1, withscores=True))
    rows = {queue.job(i).name: s for i, s in scores.items()}  # type: ignore[union-attr]
    for i in range(3):
        assert priority - 1 < rows[f"lifo{i}"] <= priority
    names = claim_names(queue)
    if priority > P_MIN:
        assert names[0] == "lower"
    assert names[-1] == "higher"
    if abs(priority) < 2**11:
        assert names[-5:-1] == ["lifo2", "lifo1", "lifo0", "fifo"]
    assert set(names[-5:-1]) == {"lifo0", "lifo1", "lifo2", "fifo"}


def test_lifo_in_a_lane(queue: Queue, client: redis.Redis) -> None:
    queue.enqueue_many([JobSpec(f"t{i}", lane="t") for i in range(3)])
    queue.enqueue("t-lifo", lane="t", lifo=True)
    queue.enqueue("d0")
    queue.enqueue("d-lifo", lifo=True)
    got = queue.claim(10)
    assert [c.name for c in got if c.lane == "t"] == ["t-lifo", "t0", "t1", "t2"]
    assert [c.name for c in got if c.lane is None] == ["d-lifo", "d0"]
    assert_consistent(client, queue.name)


def test_every_way_back_into_pending_gives_a_lifo_job_a_fresh_front_place(
    queue: Queue, client: redis.Redis
) -> None:
    """promote(id), a due promotion (claim, promote_due), a delay given back, the sweep,
    redrive, reschedule and set_priority all put a lifo job ahead of the FIFO jobs waiting at
    its priority (a fresh lifo number each time)."""
    job = queue.enqueue("L", lifo=True, delay_ms=60_000, max_attempts=50)
    assert queue.job(job).lifo  # type: ignore[union-attr]
    queue.enqueue_many([("f1", None), ("f2", None)])
    k = queue.core.keys

    def next_is_lifo() -> int:
        (c,) = queue.claim(1)
        assert c.id == job
        return c.token

    assert queue.promote(job)
    token = next_is_lifo()
    assert queue.delay(job, token, 0) == "pending"
    token = next_is_lifo()
    expire_leases(client, queue.name, job)
    assert queue.sweep_stalled(max_stalled=5).recovered == [job]
    token = next_is_lifo()
    assert queue.fail(job, token, "boom", retry=False) == "dead"
    assert queue.redrive(job)
    token = next_is_lifo()
    assert queue.fail(job, token, "retry", delay_ms=60_000) == "scheduled"
    client.zadd(k.schedule, {job: 1}, xx=True)  # due now: the claim promotes it
    token = next_is_lifo()
    assert queue.fail(job, token, "retry", delay_ms=60_000) == "scheduled"
    client.zadd(k.schedule, {job: 1}, xx=True)
    assert queue.promote_due() == [job]
    token = next_is_lifo()
    assert queue.fail(job, token, "retry", delay_ms=60_000) == "scheduled"
    assert queue.reschedule(job, 0) == "pending"
    token = next_is_lifo()
    assert queue.delay(job, token, 0) == "pending"
    assert queue.set_priority(job, 1) == "pending"
    assert claim_names(queue, 1) == ["f1"]  # priority 1 now: behind the FIFO jobs at 0
    assert queue.set_priority(job, 0) == "pending"
    assert claim_names(queue) == ["L", "f2"]
    assert_consistent(client, queue.name)


def test_cli_enqueue_lifo(url: str, queue: Queue) -> None:
    runner = CliRunner()
    fifo = runner.invoke(cli, ["enqueue", queue.name, "fifo", "--url", url])
    lifo = runner.invoke(cli, ["enqueue", queue.name, "lifo", "--lifo", "--url", url, "--json"])
    assert fifo.exit_code == 0 and lifo.exit_code == 0, (fifo.output, lifo.output)
    job_id = json.loads(lifo.output)["id"]
    assert queue.job(job_id).lifo  # type: ignore[union-attr]
    assert claim_names(queue) == ["lifo", "fifo"]


def test_lifo_must_be_a_bool(queue: Queue) -> None:
    from emq import InvalidOption

    with pytest.raises(InvalidOption, match="lifo must be True or False"):
        queue.enqueue("x", lifo=1)  # type: ignore[arg-type]
    assert queue.counts()["pending"] == 0
