"""An example worker: three handlers, run with the CLI or as a script.

    emq worker examples.tasks:worker             # serve the "example" queue until Ctrl-C
    python examples/tasks.py                      # enqueue a few jobs, run them, exit

Handlers should be idempotent: emq delivers at least once (see docs/guarantees.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from typing import Any

from emq import Backoff, JobContext, Permanent, Queue, Worker, WorkerOptions

worker = Worker("example", options=WorkerOptions(concurrency=8, lease_ms=10_000))


@worker.handler("send_email", max_attempts=5, backoff=Backoff(base_ms=500, cap_ms=10_000))
async def send_email(payload: dict[str, Any], ctx: JobContext) -> None:
    """Async: runs on the event loop. A real one would call an SMTP or HTTP API."""
    if "@" not in payload.get("to", ""):
        raise Permanent(f"not an address: {payload.get('to')!r}")  # straight to dead
    await asyncio.sleep(0.01)


@worker.handler("thumbnail", timeout_ms=5_000)
def thumbnail(payload: dict[str, Any], ctx: JobContext) -> str:
    """Sync: runs in a worker thread. Long loops call ctx.heartbeat() to stop early when
    the lease is lost or the attempt timed out."""
    digest = b""
    for step in range(payload.get("steps", 3)):
        ctx.heartbeat(progress=step)
        digest = hashlib.sha256(digest + str(payload).encode()).digest()
    return digest.hex()


@worker.handler("report")
def report(payload: dict[str, Any]) -> None:
    """A handler may take the payload alone."""
    print(f"report for {payload['month']}", file=sys.stderr)


def main() -> int:
    from emq.embedded.standalone import EmbeddedServer

    url = os.environ.get("EMQ_URL") or EmbeddedServer(".emq").start()
    with Queue.from_url(url, "example") as q:
        q.enqueue_many(
            [
                ("send_email", {"to": "ada@example.com"}),
                ("send_email", {"to": "nobody"}),
                ("thumbnail", {"image": "cat.png", "steps": 5}),
                ("report", {"month": "2025-01"}),
            ]
        )
        worker.url = url
        worker.configure(burst=True)
        worker.run_sync()
        counts = q.counts()
    print(f"completed {worker.stats.completed}, dead {worker.stats.dead}; queue: {counts}")
    return 0 if worker.stats.completed == 3 and worker.stats.dead == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
