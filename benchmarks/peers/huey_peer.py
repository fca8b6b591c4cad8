"""huey with RedisHuey: one consumer process with thread workers; no bulk API."""

from __future__ import annotations

from huey import RedisHuey
from probe import hit

NAME = "huey"
DISTS = ["huey", "redis", "hiredis"]
CONCURRENCY = 8
APPEND = False
MODEL = f"consumer, {CONCURRENCY} thread workers (polls, 0.1 s initial delay)"
BULK = "none: one enqueue per job"

_HUEY: list[RedisHuey] = []


def _huey(url: str) -> tuple[RedisHuey, object]:
    huey = RedisHuey("bench", url=url, results=False)

    @huey.task(name="noop")
    def noop(t: float) -> None:
        hit(t)

    return huey, noop


class Client:
    def __init__(self, url: str) -> None:
        self.huey, self.task = _huey(url)

    def setup(self) -> None:
        self.huey.storage.conn.ping()

    def send(self, t: float) -> None:
        self.task(t)  # type: ignore[operator]

    def send_many(self, n: int) -> None:
        task = self.task
        for _ in range(n):
            task(0.0)  # type: ignore[operator]

    def close(self) -> None:
        pass


def work(url: str, concurrency: int) -> None:
    huey, _ = _huey(url)
    consumer = huey.create_consumer(workers=concurrency, worker_type="thread")
    consumer.run()
