"""arq: asyncio worker (``max_jobs`` handlers at once); no bulk enqueue API."""

from __future__ import annotations

import asyncio
from typing import Any

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.worker import Worker
from probe import hit

NAME = "arq"
DISTS = ["arq", "redis", "hiredis"]
CONCURRENCY = 50
APPEND = False
MODEL = f"asyncio Worker, max_jobs={CONCURRENCY} (defaults otherwise: poll_delay 0.5 s)"
BULK = "none: asyncio.gather of enqueue_job, 1,000 at a time"
CHUNK = 1000


class Client:
    def __init__(self, url: str) -> None:
        self.settings = RedisSettings.from_dsn(url)
        self.pool: ArqRedis | None = None

    async def setup(self) -> None:
        self.pool = await create_pool(self.settings)

    async def send(self, t: float) -> None:
        assert self.pool is not None
        await self.pool.enqueue_job("noop", t)

    async def send_many(self, n: int) -> None:
        assert self.pool is not None
        pool = self.pool
        for start in range(0, n, CHUNK):
            await asyncio.gather(
                *(pool.enqueue_job("noop", 0.0) for _ in range(min(CHUNK, n - start)))
            )

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.aclose()


async def noop(ctx: dict[str, Any], t: float) -> None:
    hit(t)


def work(url: str, concurrency: int) -> None:
    worker = Worker(
        functions=[noop], redis_settings=RedisSettings.from_dsn(url), max_jobs=concurrency
    )
    worker.run()
