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
    "durability='aof' on a server with appendfsync always": "an enqueue or ack returns once "
    "the server fsynced it (docs/guarantees.md, Durability)",
    "durability='none' on a server with appendfsync everysec": "on Valkey WAITAOF answers "
    "under everysec before the fsync, so emq cannot confirm durability there and refuses "
    "durability='aof' (src/emq/server/durability.py): it then loses what any queue loses "
    "there, the writes of the last second",
    "events_maxlen=1000000": "the whole run's events stay, to count accepted completions",
}
CRON_EVERY_S = 1.0
RECOVERY_S = (LEASE_MS + SWEEP_MS) / 1000
SCENARIOS: dict[str, str | None] = {
    s: None
    for s in ("worker-sigkill", "worker-sigstop", "server-kill", "power-loss", "partition",
              "oom", "cron", "fan-in")
}  # fmt: skip


def _options() -> QueueOptions:
    import os

    # the server's setting is the scenario's (run.py), the same for every system; emq's
    # documented configuration for it: confirmed fsyncs where the server can confirm them
    confirmed = os.environ.get("FAULTS_APPENDFSYNC") == "always"
    return QueueOptions(durability="aof" if confirmed else "none", events_maxlen=1_000_000)


def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    import time

    q = Queue.from_url(url, QUEUE, options=_options())
    start, refused = time.monotonic(), 0
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        job = first + i
        try:
            q.enqueue("job", {"id": job}, max_attempts=25)
        except Exception as exc:
            if not refused:
                print(f"first refusal: {exc!r}", flush=True)
            refused += 1
            ledger.refused(job)
            continue
        ledger.acked(job)
    q.close()


def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    async def job(payload: Any) -> None:
        await asyncio.to_thread(ledger.started, payload["id"])
        await asyncio.sleep(job_ms / 1000)
        await asyncio.to_thread(ledger.finished, payload["id"])

    async def callback(payload: Any) -> None:  # a fan-in's parent: runs once its children did
        await asyncio.to_thread(ledger.callback, payload["group"])

    options = WorkerOptions(concurrency=concurrency, lease_ms=LEASE_MS,
                            stalled_interval_ms=SWEEP_MS, max_stalled=25)  # fmt: skip
    w = Worker(QUEUE, {"job": job, "callback": callback}, url=url, options=options,
               queue_options=_options())  # fmt: skip
    w.run_sync()


def inflight(url: str) -> int | None:
    with Queue.from_url(url, QUEUE) as q:
        return int(q.counts()["active"])


def waiting(url: str) -> int | None:
    with Queue.from_url(url, QUEUE) as q:
        counts = q.counts()
        return int(counts["pending"]) + int(counts["schedule"])


def stale(url: str) -> dict[str, int]:
    """``accepted``: jobs with more than one ``completed`` event (a second completion can only
    come from a lapsed lease); ``refused``: ``lease_lost`` events (stale acks emq refused)."""
    completed: dict[str, int] = {}
    refused = 0
    with Queue.from_url(url, QUEUE) as q:
        for e in q.events():
            if e.event == "completed" and e.job is not None:
                completed[e.job] = completed.get(e.job, 0) + 1
            elif e.event == "lease_lost":
                refused += 1
    return {"accepted": sum(1 for n in completed.values() if n > 1), "refused": refused}


def cron(url: str, ledger: Any, every_s: float, seconds: float) -> None:
    from emq.model.ids import minted_at_ms

    async def tick(payload: Any, ctx: Any) -> None:  # a tick's id carries its tick (ms)
        await asyncio.to_thread(ledger.tick, str(minted_at_ms(str(ctx.id)) // 1000))

    async def main() -> None:
        q = AsyncQueue.from_url(url, QUEUE)
        await q.repeat("tick", "tick", every_ms=int(every_s * 1000))
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
