"""rq: ``rq worker`` (one job at a time, each in a forked work horse, as rq runs by default);
bulk through ``Queue.enqueue_many`` (one pipeline)."""

from __future__ import annotations

import logging

from probe import hit
from redis import Redis
from rq import Queue, Worker

NAME = "rq"
DISTS = ["rq", "redis", "hiredis"]
CONCURRENCY = 1
APPEND = True
MODEL = "Worker (fork per job, one job at a time)"
BULK = "Queue.enqueue_many (one pipeline)"
CHUNK = 1000


def noop(t: float) -> None:
    hit(t)


class Client:
    def __init__(self, url: str) -> None:
        self.redis = Redis.from_url(url)
        self.queue = Queue("bench", connection=self.redis)

    def setup(self) -> None:
        self.redis.ping()

    def send(self, t: float) -> None:
        self.queue.enqueue(noop, t)

    def send_many(self, n: int) -> None:
        for start in range(0, n, CHUNK):
            data = [Queue.prepare_data(noop, (0.0,)) for _ in range(min(CHUNK, n - start))]
            self.queue.enqueue_many(data)

    def close(self) -> None:
        self.redis.close()


def work(url: str, concurrency: int) -> None:
    redis = Redis.from_url(url)
    worker = Worker([Queue("bench", connection=redis)], connection=redis)
    worker.work(logging_level=logging.WARNING)
