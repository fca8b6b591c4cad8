"""bullmq (the Python port): asyncio Worker with ``concurrency``; bulk through
``Queue.addBulk``."""

from __future__ import annotations

import asyncio
from typing import Any

from bullmq import Queue, Worker
from probe import hit

NAME = "bullmq"
DISTS = ["bullmq", "redis", "hiredis"]
CONCURRENCY = 50
APPEND = False
MODEL = f"asyncio Worker, concurrency={CONCURRENCY} (completed jobs kept, its default)"
BULK = "Queue.addBulk, 1,000 at a time"
CHUNK = 1000


class Client:
    def __init__(self, url: str) -> None:
        self.url = url
        self.queue: Queue | None = None

    async def setup(self) -> None:
        self.queue = Queue("bench", {"connection": self.url})

    async def send(self, t: float) -> None:
        assert self.queue is not None
        await self.queue.add("noop", {"t": t})

    async def send_many(self, n: int) -> None:
        assert self.queue is not None
        for start in range(0, n, CHUNK):
            jobs: list[dict[str, Any]] = [
                {"name": "noop", "data": {"t": 0.0}} for _ in range(min(CHUNK, n - start))
            ]
            await self.queue.addBulk(jobs)

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.close()


async def process(job: Any, token: str) -> None:
    hit(job.data["t"])


def work(url: str, concurrency: int) -> None:
    async def main() -> None:
        worker = Worker("bench", process, {"connection": url, "concurrency": concurrency})
        try:
            await asyncio.Event().wait()
        finally:
            await worker.close()

    asyncio.run(main())
