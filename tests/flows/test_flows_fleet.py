"""A flow under a real fleet: a parent with 1,000 children processed by three worker
processes killed at random (SIGKILL). The parent runs exactly once, after its last child
completed, and reads all 1,000 results (the queue keeps no results: the children's are kept
for their parent only). Waits poll the server with a deadline that only bounds a hang."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from emq import JobContext, JobSpec, Queue, Worker, WorkerOptions

from ..support.flows_check import check_flows
from ..support.flows_handlers import parent_key
from ..worker.test_worker_procs import CLI, HANG, TESTS

# --max-stalled 0: a child leased by two killed workers in turn is recovered, never
# dead-lettered (which, by the default fail_parent, would fail the parent: not this test's point)
FLEET = ["--concurrency", "20", "--lease-ms", "1000", "--stalled-interval-ms", "250",
         "--max-stalled", "0"]  # fmt: skip


def spawn(url: str, queues: list[str], tmp: Path, n: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, EMQ_URL=url)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent), env.get("PYTHONPATH", "")])
    names = [arg for q in queues for arg in ("-q", q)]
    with (tmp / f"w-{n}.log").open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", CLI, "worker", "tests.support.flows_handlers:handlers", *names,
             *FLEET],
            env=env, stdout=out, stderr=out, cwd=tmp,
        )  # fmt: skip


@pytest.mark.slow  # real processes, SIGKILLed
@pytest.mark.parametrize("across", [False, True], ids=["one-queue", "two-queues"])
def test_a_thousand_children_under_random_sigkills_run_their_parent_once(
    url: str, queue: Queue, client: redis.Redis, qname: str, tmp_path: Path, across: bool
) -> None:
    """With ``across``, the children are in a second queue: a kill can land between a
    child's completion and its delivery to the parent (the outbox), and the parent still
    runs once with every result."""
    rng = random.Random(13)
    kids = qname + "-kids" if across else None
    queues = [qname, kids] if kids else [qname]
    ids = queue.enqueue_flow(
        JobSpec("combine"), [JobSpec("part", i, queue=kids) for i in range(1_000)]
    )
    started = 0
    live = [spawn(url, queues, tmp_path, started + i) for i in range(3)]
    started = 3
    kills, deadline = 0, time.monotonic() + 5 * HANG
    try:
        while not client.llen(parent_key(qname)):
            assert time.monotonic() < deadline, queue.counts()
            done = (
                Queue(queue.client, kids).counts()["completed"]
                if kids
                else queue.counts()["completed"]
            )
            if kills < 4 and done > 150 * (kills + 1):
                victim = live.pop(rng.randrange(len(live)))
                victim.kill()
                victim.wait(HANG)
                kills += 1
                live.append(spawn(url, queues, tmp_path, started))
                started += 1
            time.sleep(0.02)
        wait_until = time.monotonic() + HANG
        while queue.job(ids.id) is not None:  # the parent's own completion lands
            assert time.monotonic() < wait_until
            time.sleep(0.02)
    finally:
        for proc in live:
            proc.kill()
            proc.wait(HANG)
    runs = [json.loads(r) for r in client.lrange(parent_key(qname), 0, -1)]
    assert len(runs) == 1, runs  # exactly once
    assert runs[0]["completed"] == 1_000 and runs[0]["no_result"] == 0
    assert runs[0]["total"] == sum(2 * i for i in range(1_000))
    assert kills >= 2
    for name in queues:
        c = Queue(queue.client, name).counts()
        assert (c["pending"], c["active"], c["waiting"], c["dead"]) == (0, 0, 0, 0), c
        check_flows(client, name)
    if kids:
        assert Queue(queue.client, kids).counts()["completed"] == 1_000
        assert queue.counts()["completed"] == 1
        assert client.hlen(f"emq:{{{kids}}}:outbox") == 0
    else:
        assert queue.counts()["completed"] == 1_001


async def test_a_sync_parent_reads_its_children_through_an_in_process_worker(
    queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = queue.enqueue_flow(JobSpec("combine_sync"), [JobSpec("part", i) for i in range(20)])
    seen: list[list[tuple[str, object]]] = []

    def part(payload: int) -> int:
        return payload + 100

    def combine_sync(payload: object, ctx: JobContext) -> None:
        seen.append([(k.status, k.result) for k in ctx.children()])

    for _ in range(5):  # a burst worker stops when nothing is claimable: the parent may
        if queue.job(ids.id) is None:  # become pending just after; run another
            break
        w = Worker(queue, options=WorkerOptions(concurrency=8, burst=True))
        w.register("part", part)
        w.register("combine_sync", combine_sync)
        await asyncio.wait_for(w.run(), HANG)
    assert len(seen) == 1
    assert sorted(int(str(r)) for _, r in seen[0]) == [i + 100 for i in range(20)]
    assert {st for st, _ in seen[0]} == {"completed"}
    assert queue.job(ids.id) is None
    check_flows(client, qname)
