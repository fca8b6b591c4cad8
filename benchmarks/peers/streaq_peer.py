"""streaq: asyncio (anyio) Worker with ``concurrency``; bulk through ``Worker.enqueue_many``
(one pipeline)."""

from __future__ import annotations

from typing import Any

from probe import hit
from streaq import Worker

NAME = "streaq"
DISTS = ["streaq", "coredis", "anyio"]
CONCURRENCY = 50
APPEND = False
MODEL = f"asyncio Worker, concurrency={CONCURRENCY}"
BULK = "Worker.enqueue_many (one pipeline), 1,000 at a time"
CHUNK = 1000


def _worker(url: str, concurrency: int = CONCURRENCY) -> tuple[Worker, Any]:
    worker = Worker(redis_url=url, queue_name="bench", concurrency=concurrency)

    @worker.task()
    async def noop(t: float) -> None:
        hit(t)

    return worker, noop


class Client:
    def __init__(self, url: str) -> None:
        self.worker, self.task = _worker(url)

    async def setup(self) -> None:
        await self.worker.__aenter__()

    async def send(self, t: float) -> None:
        await self.task.enqueue(t)

    async def send_many(self, n: int) -> None:
        for start in range(0, n, CHUNK):
            tasks = [self.task.enqueue(0.0) for _ in range(min(CHUNK, n - start))]
            await self.worker.enqueue_many(tasks)

    async def close(self) -> None:
        await self.worker.__aexit__(None, None, None)


def work(url: str, concurrency: int) -> None:
    worker, _ = _worker(url, concurrency)
    worker.run_sync()
