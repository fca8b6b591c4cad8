"""saq: asyncio worker (``concurrency`` handlers at once); no bulk enqueue API (its own
``Queue.map`` enqueues with asyncio.gather, as the bulk figure does here)."""

from __future__ import annotations

import asyncio
from typing import Any

from probe import hit
from saq import Queue, Worker

NAME = "saq"
DISTS = ["saq", "redis", "hiredis"]
CONCURRENCY = 50
APPEND = False
MODEL = f"asyncio Worker, concurrency={CONCURRENCY}"
BULK = "none: asyncio.gather of enqueue, 1,000 at a time (as saq's Queue.map does)"
CHUNK = 1000


class Client:
    def __init__(self, url: str) -> None:
        self.queue = Queue.from_url(url)

    async def setup(self) -> None:
        await self.queue.connect()

    async def send(self, t: float) -> None:
        await self.queue.enqueue("noop", t=t)

    async def send_many(self, n: int) -> None:
        q = self.queue
        for start in range(0, n, CHUNK):
            await asyncio.gather(*(q.enqueue("noop", t=0.0) for _ in range(min(CHUNK, n - start))))

    async def close(self) -> None:
        await self.queue.disconnect()


async def noop(ctx: dict[str, Any], *, t: float) -> None:
    hit(t)


def work(url: str, concurrency: int) -> None:
    async def main() -> None:
        queue = Queue.from_url(url)
        worker = Worker(queue, functions=[noop], concurrency=concurrency)
        await worker.start()

    asyncio.run(main())
