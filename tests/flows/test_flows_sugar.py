"""``emq.chain`` and ``emq.group`` (docs/flows.md): trees built on ``enqueue_flow``, run by
a real worker serving two queues, so a link in another queue goes through the outbox and
the worker's maintenance beat delivers it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from emq import Flow, InvalidInput, JobContext, JobSpec, Queue, Worker, WorkerOptions, chain, group

from ..support.flows_check import check_flows
from ..support.helpers import until
from ..worker.test_worker_procs import HANG

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def test_chain_and_group_build_the_trees_they_name() -> None:
    a, b, c = JobSpec("a"), JobSpec("b"), JobSpec("c")
    assert chain(a, b, c) == Flow(c, [Flow(b, [a])])
    assert group([a, b], then=c) == Flow(c, [a, b])
    assert chain(group([a, b], then=c), JobSpec("d")) == Flow(JobSpec("d"), [Flow(c, [a, b])])
    with pytest.raises(InvalidInput, match="at least two"):
        chain(a)
    with pytest.raises(InvalidInput, match="first job"):
        chain(a, Flow(b, [c]))
    with pytest.raises(InvalidInput, match="then="):
        group([a], then="c")  # type: ignore[arg-type]


async def run_until_gone(worker: Worker, queue: Queue, job_id: str) -> None:
    """Run ``worker`` until ``job_id`` (the tree's root) completed, then stop it."""
    task = asyncio.create_task(worker.run(handle_signals=False))
    try:
        await until(lambda: queue.job(job_id) is None or task.done(), HANG, "the root done")
    finally:
        worker.stop()
        await asyncio.wait_for(task, HANG)


async def test_a_chain_across_two_queues_runs_in_order_and_passes_results_on(
    url: str, queue: Queue, client: redis.Redis, qname: str
) -> None:
    other = qname + "-b"
    ran: list[str] = []

    def step(payload: Any, ctx: JobContext) -> int:
        before = ctx.children()
        got = before[0].result if before else 0
        ran.append(f"{payload}:{got}")
        return int(got) + int(payload)

    ids = queue.enqueue_flow(
        chain(JobSpec("step", 1), JobSpec("step", 10, queue=other), JobSpec("step", 100))
    )
    w = Worker([qname, other], url=url, options=WorkerOptions(concurrency=4))
    w.register("step", step)
    await run_until_gone(w, queue, ids.id)
    assert ran == ["1:0", "10:1", "100:11"]
    check_flows(client, qname)
    check_flows(client, other)
    assert client.hlen(f"emq:{{{other}}}:outbox") == 0


async def test_a_group_runs_its_callback_once_with_every_result(
    url: str, queue: Queue, client: redis.Redis, qname: str
) -> None:
    other = qname + "-b"
    calls: list[list[Any]] = []

    def part(payload: int) -> int:
        return payload * payload

    def total(payload: Any, ctx: JobContext) -> int:
        results = sorted(c.result for c in ctx.children())
        calls.append(results)
        return sum(results)

    parts = [JobSpec("part", i, queue=other if i % 2 else None) for i in range(10)]
    ids = queue.enqueue_flow(group(parts, then=JobSpec("total")))
    w = Worker([qname, other], url=url, options=WorkerOptions(concurrency=4))
    w.register("part", part)
    w.register("total", total)
    await run_until_gone(w, queue, ids.id)
    assert calls == [sorted(i * i for i in range(10))]
    check_flows(client, qname)
    check_flows(client, other)
