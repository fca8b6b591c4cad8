"""emq: AsyncQueue for producers; the emq Worker (or, before it landed, a minimal loop).

``BENCH_EMQ_MODE`` picks how jobs are processed:

- ``worker``: ``emq.worker.Worker`` with async no-op handlers, ``concurrency`` handlers at once;
- ``loop``: a minimal claim / run / complete_many loop on ``AsyncQueue`` (claim up to
  ``concurrency`` jobs in one script call, await each handler in turn, acknowledge the batch in
  one script call, park on the queue's wake list when empty). No heartbeat, timeout, retry or
  graceful stop: it shows what the core's scripts allow, as the row ``emq-loop``, next to the
  Worker's row ``emq``; the targets are judged on the Worker.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from probe import hit

from emq import AsyncQueue

NAME = "emq"
DISTS = ["emq", "redis", "hiredis"]
QUEUE = "bench"
CONCURRENCY = 50
APPEND = False
MODE = os.environ.get("BENCH_EMQ_MODE", "worker")
MODEL = (
    f"asyncio Worker, concurrency={CONCURRENCY}"
    if MODE == "worker"
    else f"bare AsyncQueue claim/complete_many loop, batch={CONCURRENCY} (reference only)"
)
BULK = "AsyncQueue.enqueue_many, all jobs in one call (1,000 per script call, 4 calls in flight)"


class Client:
    def __init__(self, url: str) -> None:
        self.url = url
        self.q: AsyncQueue | None = None

    async def setup(self) -> None:
        self.q = AsyncQueue.from_url(self.url, QUEUE)
        await self.q.new_ids(1)  # take the id node lease outside the timed part

    async def send(self, t: float) -> None:
        assert self.q is not None
        await self.q.enqueue("noop", t)

    async def send_many(self, n: int) -> None:
        assert self.q is not None
        await self.q.enqueue_many([("noop", 0.0)] * n)

    async def close(self) -> None:
        if self.q is not None:
            await self.q.close()


async def noop(payload: Any) -> None:
    hit(payload)


async def _loop(url: str, concurrency: int) -> None:
    q = AsyncQueue.from_url(url, QUEUE)
    wake = q.core.keys.wake
    while True:
        jobs = await q.claim(count=concurrency, lease_ms=30_000)
        if not jobs:
            await q.client.blpop([wake], timeout=1)
            continue
        for job in jobs:
            await noop(job.payload)
        await q.complete_many([(job.id, job.token) for job in jobs])


def work(url: str, concurrency: int) -> None:
    if MODE == "loop":
        asyncio.run(_loop(url, concurrency))
        return
    from emq.worker import Worker

    worker = Worker(QUEUE, {"noop": noop}, url=url, concurrency=concurrency)
    worker.run_sync()
