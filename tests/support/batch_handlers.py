"""A batch handler's worker for child processes (``emq worker
tests.support.batch_handlers:worker``, its queue named by ``EMQTEST_QUEUE``).

``bulk`` records each job of its batch as ``start:<id>:<pid>`` in the queue's runs list
(:func:`~.worker_handlers.runs_key`), waits for one token on the gate (so a test can kill the
process while the whole batch is surely running), then records ``done:<id>:<pid>``.
"""

from __future__ import annotations

import os
from typing import Any

import redis

from emq import BatchContext, Worker

from .worker_handlers import gate_key, runs_key

QUEUE = os.environ.get("EMQTEST_QUEUE", "emqtest-batches")
worker = Worker(QUEUE, url=os.environ.get("EMQ_URL"))


@worker.handler("bulk", batch_size=6, batch_wait_ms=60_000)
def bulk(payloads: list[Any], ctx: BatchContext) -> None:
    client = redis.Redis.from_url(os.environ["EMQ_URL"], decode_responses=True)
    pid = os.getpid()
    client.rpush(runs_key(QUEUE), *[f"start:{job}:{pid}" for job in ctx.ids])
    client.blpop([gate_key(QUEUE)], timeout=300)
    client.rpush(runs_key(QUEUE), *[f"done:{job}:{pid}" for job in ctx.ids])
