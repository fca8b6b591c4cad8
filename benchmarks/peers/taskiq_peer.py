"""taskiq with taskiq-redis's RedisStreamBroker (the one its README leads with: acknowledged
deliveries); one receiver process with ``max_async_tasks``; no bulk API."""

from __future__ import annotations

import asyncio
from typing import Any

from probe import hit
from taskiq.api import run_receiver_task
from taskiq_redis import RedisStreamBroker

NAME = "taskiq"
DISTS = ["taskiq", "taskiq-redis", "redis", "hiredis"]
CONCURRENCY = 50
APPEND = False
MODEL = f"asyncio receiver, max_async_tasks={CONCURRENCY} (RedisStreamBroker)"
BULK = "none: asyncio.gather of kiq, 1,000 at a time"
CHUNK = 1000


def _broker(url: str) -> tuple[RedisStreamBroker, Any]:
    # consumer_id "0": a worker started after the backlog was written still reads it
    broker = RedisStreamBroker(url=url, queue_name="bench", consumer_id="0")

    @broker.task(task_name="noop")
    async def noop(t: float) -> None:
        hit(t)

    return broker, noop


class Client:
    def __init__(self, url: str) -> None:
        self.broker, self.task = _broker(url)

    async def setup(self) -> None:
        await self.broker.startup()

    async def send(self, t: float) -> None:
        await self.task.kiq(t)

    async def send_many(self, n: int) -> None:
        for start in range(0, n, CHUNK):
            await asyncio.gather(*(self.task.kiq(0.0) for _ in range(min(CHUNK, n - start))))

    async def close(self) -> None:
        await self.broker.shutdown()


def work(url: str, concurrency: int) -> None:
    async def main() -> None:
        broker, _ = _broker(url)
        await broker.startup()
        await run_receiver_task(broker, max_async_tasks=concurrency)

    asyncio.run(main())
