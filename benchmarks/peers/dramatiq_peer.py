"""dramatiq with its Redis broker: one worker process with ``worker_threads`` threads (what
the ``dramatiq`` command runs in each of its processes); bulk through ``group(...).run()``."""

from __future__ import annotations

import time
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from probe import hit

NAME = "dramatiq"
DISTS = ["dramatiq", "redis", "hiredis"]
CONCURRENCY = 8
APPEND = False
MODEL = f"Worker, {CONCURRENCY} threads (its default per process)"
BULK = "group(...).run() (sends one message at a time; no pipelined API)"
CHUNK = 1000


def _noop(t: float) -> None:
    hit(t)


def _actor(url: str) -> Any:
    broker = RedisBroker(url=url)
    dramatiq.set_broker(broker)
    return broker, dramatiq.actor(_noop, actor_name="noop", queue_name="bench", broker=broker)


class Client:
    def __init__(self, url: str) -> None:
        self.broker, self.actor = _actor(url)

    def setup(self) -> None:
        pass

    def send(self, t: float) -> None:
        self.actor.send(t)

    def send_many(self, n: int) -> None:
        for start in range(0, n, CHUNK):
            dramatiq.group(self.actor.message(0.0) for _ in range(min(CHUNK, n - start))).run()

    def close(self) -> None:
        self.broker.close()


def work(url: str, concurrency: int) -> None:
    broker, _ = _actor(url)
    worker = dramatiq.Worker(broker, worker_threads=concurrency)
    worker.start()
    while True:
        time.sleep(3600)
