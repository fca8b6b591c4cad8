"""celery with its Redis broker: one worker with the prefork pool (its default) and one pool
child; bulk through ``group(...).apply_async()``; no result backend."""

from __future__ import annotations

from celery import Celery, group
from probe import hit

NAME = "celery"
DISTS = ["celery", "kombu", "redis", "hiredis"]
CONCURRENCY = 1
APPEND = False
MODEL = "worker, prefork pool, concurrency=1 child (prefetch multiplier 4, its default)"
BULK = "group(...).apply_async() (one message at a time; no pipelined API)"
CHUNK = 1000

app = Celery("bench")


@app.task(name="noop")
def noop(t: float) -> None:
    hit(t)


def _configure(url: str) -> None:
    app.conf.broker_url = url
    app.conf.task_default_queue = "bench"
    app.conf.worker_hijack_root_logger = False


class Client:
    def __init__(self, url: str) -> None:
        _configure(url)

    def setup(self) -> None:
        app.connection_for_write().ensure_connection(max_retries=1)

    def send(self, t: float) -> None:
        noop.delay(t)

    def send_many(self, n: int) -> None:
        for start in range(0, n, CHUNK):
            group(noop.s(0.0) for _ in range(min(CHUNK, n - start))).apply_async()

    def close(self) -> None:
        pass


def work(url: str, concurrency: int) -> None:
    _configure(url)
    app.worker_main(
        [
            "worker",
            "--pool=prefork",
            f"--concurrency={concurrency}",
            "--loglevel=WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
    )
