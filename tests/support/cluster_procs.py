"""Processes of the failover tests (tests/ops/test_cluster_failover.py, tests/ops/test_sentinel.py).

``worker``: ``emq worker tests.support.cluster_procs:worker``; each run of a job appends its id to
this process's file under ``$EMQ_TEST_RUNS`` (written before the completion is sent, so a
job run twice shows twice). ``python -m tests.support.cluster_procs produce``: enqueues jobs one
by one, each with an id minted before its first send and re-sent with that id until the
server acknowledges it; each acknowledged id is appended to ``$EMQ_TEST_RUNS/acked.txt``;
stops once ``$EMQ_TEST_RUNS/stop`` exists. Queue and durability come from the environment.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from emq import JobContext, JobSpec, Queue, QueueOptions, Worker

RUNS = Path(os.environ.get("EMQ_TEST_RUNS", "."))
QUEUE = os.environ.get("EMQ_TEST_QUEUE", "default")
OPTIONS = QueueOptions(
    durability=os.environ.get("EMQ_TEST_DURABILITY", "none"),  # type: ignore[arg-type]
    durability_timeout_ms=2_000,
)


def record(payload: Any, ctx: JobContext) -> None:
    with (RUNS / f"runs-{os.getpid()}.txt").open("a") as out:
        out.write(ctx.id + "\n")


worker = Worker(QUEUE, {"record": record}, queue_options=OPTIONS)


def produce() -> None:
    """Enqueue until told to stop; every error is retried with the same id (an enqueue is
    idempotent by id), so each acknowledged id was admitted exactly once."""
    url = os.environ["EMQ_URL"]
    acked = (RUNS / "acked.txt").open("a", buffering=1)
    errors = (RUNS / "producer-errors.txt").open("a", buffering=1)
    q = Queue.from_url(url, QUEUE, options=OPTIONS)
    n = 0
    while not (RUNS / "stop").exists():
        job_id = None
        while True:
            try:
                job_id = job_id or q.new_id()
                q.enqueue_many([JobSpec("record", n, id=job_id)])
                break
            except Exception as exc:
                errors.write(f"{time.time():.3f} {type(exc).__name__}: {exc}\n")
                time.sleep(0.05)
        acked.write(f"{time.time():.3f} {job_id}\n")
        n += 1
        time.sleep(0.002)


if __name__ == "__main__" and sys.argv[1:] == ["produce"]:
    produce()
