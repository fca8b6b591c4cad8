"""emq: the Worker with its defaults, a short lease so recovery fits in a bounded run."""

from __future__ import annotations

import asyncio
from typing import Any

from emq import AsyncQueue, Queue, QueueOptions, Worker, WorkerOptions

NAME = "emq"
DISTS = ["emq", "redis", "hiredis"]
QUEUE = "faults"
LEASE_MS = 3_000
SWEEP_MS = 1_000
PROMISE = (
    "at least once; a job runs twice only when its worker died or lost its lease after the "
    "handler started and before the ack landed; a lapsed lease is recovered exactly once; a "
    "stale completion is refused (docs/guarantees.md, G1-G6)"
)
SETTINGS = {
    "lease_ms=3000": "a worker frozen or cut off for longer loses its jobs to the sweep "
    "(the default is 30 s; shortened so the run stays short)",
    "stalled_interval_ms=1000": "the sweep runs every second on each worker's beat",
    "max_attempts=25, max_stalled=25": "a job is retried, never dead-lettered, within a run",
    "durability='aof' under server-kill and power-loss": "an enqueue or ack returns once "
    "the server fsynced it (docs/guarantees.md, Durability)",
}
RECOVERY_S = (LEASE_MS + SWEEP_MS) / 1000
SCENARIOS: dict[str, str | None] = {
    s: None
    for s in ("worker-sigkill", "worker-sigstop", "server-kill", "power-loss", "partition",
              "oom", "cron", "fan-in")
}  # fmt: skip


def _options() -> QueueOptions:
    import os

    durable = os.environ.get("FAULTS_DURABLE") == "1"
    return QueueOptions(durability="aof" if durable else "none")


def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    import time

    q = Queue.from_url(url, QUEUE, options=_options())
    start = time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        job = first + i
        try:
            q.enqueue("job", {"id": job}, id=f"J{job:012d}", max_attempts=25)
        except Exception:
            ledger.refused(job)
            continue
        ledger.acked(job)
    q.close()


def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    async def job(payload: Any) -> None:
        await asyncio.to_thread(ledger.started, payload["id"])
        await asyncio.sleep(job_ms / 1000)
        await asyncio.to_thread(ledger.finished, payload["id"])

    options = WorkerOptions(concurrency=concurrency, lease_ms=LEASE_MS,
                            stalled_interval_ms=SWEEP_MS, max_stalled=25)  # fmt: skip
    w = Worker(QUEUE, {"job": job}, url=url, options=options, queue_options=_options())
    w.run_sync()


def inflight(url: str) -> int | None:
    with Queue.from_url(url, QUEUE) as q:
        return int(q.counts()["active"])


def waiting(url: str) -> int | None:
    with Queue.from_url(url, QUEUE) as q:
        counts = q.counts()
        return int(counts["pending"]) + int(counts["schedule"])


def cron(url: str, ledger: Any, every_s: float, seconds: float) -> None:
    async def tick(payload: Any, ctx: Any) -> None:
        await asyncio.to_thread(ledger.tick, str(ctx.id))

    async def main() -> None:
        q = AsyncQueue.from_url(url, QUEUE)
        await q.set_repeat("tick", "tick", every_ms=int(every_s * 1000))
        w = Worker(QUEUE, {"tick": tick}, url=url)
        task = asyncio.create_task(w.run())
        await asyncio.sleep(seconds)
        w.stop()
        await task
        await q.close()

    asyncio.run(main())


def fanin(url: str, ledger: Any, first: int, count: int, width: int) -> None:
    from emq import JobSpec

    with Queue.from_url(url, QUEUE, options=_options()) as q:
        for g in range(first, first + count):
            children = [JobSpec("job", {"id": g * 1000 + i}, max_attempts=25)
                        for i in range(width)]  # fmt: skip
            q.enqueue_flow(JobSpec("callback", {"group": g}, max_attempts=25), children)
