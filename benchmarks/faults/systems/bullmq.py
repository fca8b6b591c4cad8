"""bullmq (the Python port of BullMQ): its Worker with stalled-job checking tuned for a short run.

BullMQ keeps an active job under a lock the worker renews; a worker that stops renewing loses
the lock, and the stalled checker (run by every worker, at most once per ``stalledInterval``
across the queue) moves such a job back to wait, or to failed once it stalled more than
``maxStalledCount`` times. A job's handler failure is retried ``attempts`` times with backoff.
Job schedulers (``upsertJobScheduler``) are the cron; ``FlowProducer`` is the fan-in (a parent
runs once all its children completed).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bullmq import FlowProducer, Queue, Worker

NAME = "bullmq"
DISTS = ["bullmq", "redis", "hiredis"]
QUEUE = "faults"
LOCK_MS = 3_000
STALLED_MS = 1_000
PROMISE = (
    "at least once: a job whose worker stops renewing its lock is moved back to wait by the "
    "stalled checker, and may run twice (docs.bullmq.io/guide/jobs/stalled; "
    "guide/workers/stalled-jobs)"
)
SETTINGS = {
    f"lockDuration={LOCK_MS}": "the lock on an active job, renewed by its worker about every "
    "lockDuration/2 (lockRenewTime's default); the default is 30 s, shortened so recovery "
    "fits in a bounded run",
    f"stalledInterval={STALLED_MS}": "every worker runs the stalled checker, at most once per "
    "interval across the queue (default 30 s, shortened with the lock)",
    "maxStalledCount=25": "the default 1 fails a job that stalls twice; raised so a job is "
    "recovered, not failed, within a run (guide/jobs/stalled: 'you can increase this number')",
    "attempts=25, backoff exponential 100 ms": "a handler failure is retried "
    "(guide/retrying-failing-jobs); without attempts a failed job is never retried",
    "removeOnComplete={count: 1000}, removeOnFail={count: 5000}": "the 'good practice' of "
    "guide/workers/auto-removal-of-jobs: finished jobs do not fill the server",
    "jobId=J<id>": "a custom id per job (guide/jobs/job-ids): a repeated add of the same id "
    "is ignored",
    "server: AOF on, maxmemory-policy noeviction": "what guide/going-to-production asks of "
    "the server (run.py: AOF under server-kill and power-loss, once with appendfsync "
    "everysec and once with always, as for every system; noeviction always)",
}
EVENTS_MAXLEN = 1_000_000
RECOVERY_S = (LOCK_MS + STALLED_MS) / 1000
SCENARIOS: dict[str, str | None] = {
    s: None
    for s in ("worker-sigkill", "worker-sigstop", "server-kill", "power-loss", "partition",
              "oom", "cron", "fan-in")
}  # fmt: skip

JOB_OPTS: dict[str, Any] = {
    "attempts": 25,
    "backoff": {"type": "exponential", "delay": 100},
    "removeOnComplete": {"count": 1000},
    "removeOnFail": {"count": 5000},
}
WORKER_OPTS: dict[str, Any] = {
    "lockDuration": LOCK_MS,
    "stalledInterval": STALLED_MS,
    "maxStalledCount": 25,
    "removeOnComplete": {"count": 1000},
    "removeOnFail": {"count": 5000},
}


def _processor(ledger: Any, job_ms: int) -> Any:
    async def process(job: Any, token: str) -> None:
        if job.name == "callback":
            await asyncio.to_thread(ledger.callback, job.data["group"])
        elif job.name == "tick":
            await asyncio.to_thread(ledger.tick, _tick(job))
        else:
            await asyncio.to_thread(ledger.started, job.data["id"])
            await asyncio.sleep(job_ms / 1000)
            await asyncio.to_thread(ledger.finished, job.data["id"])

    return process


def _worker(url: str, ledger: Any, concurrency: int, job_ms: int) -> Worker:
    opts = {"connection": url, "concurrency": concurrency, **WORKER_OPTS}
    return Worker(QUEUE, _processor(ledger, job_ms), opts)


async def _queue(url: str) -> Queue:
    """A Queue whose events stream keeps a whole run (Node's ``streams.events.maxLen``; the
    port has no such option, so the same meta field is written), for ``stale``."""
    queue = Queue(QUEUE, {"connection": url})
    await queue.client.hset(queue.toKey("meta"), "opts.maxLenEvents", str(EVENTS_MAXLEN))
    return queue


async def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    try:
        queue = await _queue(url)
    except Exception:  # the server is down from the start: every enqueue is refused
        for job in range(first, first + count):
            await asyncio.to_thread(ledger.refused, job)
        return
    start = time.monotonic()
    try:
        for i in range(count):
            wait = start + i / rate - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            job = first + i
            try:
                await queue.add("job", {"id": job}, {**JOB_OPTS, "jobId": f"J{job:012d}"})
            except Exception:
                await asyncio.to_thread(ledger.refused, job)
                continue
            await asyncio.to_thread(ledger.acked, job)
    finally:
        await queue.close()


async def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    worker = _worker(url, ledger, concurrency, job_ms)
    try:
        await asyncio.Event().wait()
    finally:
        await worker.close()


async def _counts(url: str, *types: str) -> int:
    queue = Queue(QUEUE, {"connection": url})
    try:
        counts = await queue.getJobCounts(*types)
        return sum(int(v) for v in counts.values())
    finally:
        await queue.close()


async def inflight(url: str) -> int | None:
    return await _counts(url, "active")


async def waiting(url: str) -> int | None:
    return await _counts(url, "wait", "paused", "prioritized", "delayed", "waiting-children")


async def stale(url: str) -> dict[str, int | None]:
    """``accepted``: jobs with more than one ``completed`` event (a completion from a worker
    whose lock had lapsed; BullMQ refuses those with "Missing lock"); ``refused``: None,
    BullMQ records a refused completion nowhere but in the worker's error."""
    return {"accepted": await completed_twice(url), "refused": None}


async def completed_twice(url: str) -> int:
    import redis.asyncio as aioredis

    client = aioredis.from_url(url)
    key, start, seen = f"bull:{QUEUE}:events", "-", {}
    try:
        while True:
            page = await client.xrange(key, start, "+", count=10_000)
            for _, fields in page:
                if fields.get(b"event") == b"completed":
                    job = fields.get(b"jobId", b"")
                    seen[job] = seen.get(job, 0) + 1
            if len(page) < 10_000:
                break
            start = "(" + page[-1][0].decode()
    finally:
        await client.aclose()
    return sum(1 for n in seen.values() if n > 1)


def _tick(job: Any) -> str:
    """A tick's scheduled second: its id is ``repeat:<scheduler>:<ms>``."""
    ms = str(job.id).rsplit(":", 1)[-1]
    return str(int(ms) // 1000) if ms.isdigit() else str(job.id)


async def cron(url: str, ledger: Any, every_s: float, seconds: float) -> None:
    queue = await _queue(url)
    await queue.upsertJobScheduler("tick", {"every": int(every_s * 1000)}, "tick", {}, JOB_OPTS)
    worker = _worker(url, ledger, 1, 0)
    try:
        await asyncio.sleep(seconds)
    finally:
        await worker.close()
        await queue.close()


async def fanin(url: str, ledger: Any, first: int, count: int, width: int) -> None:
    await (await _queue(url)).close()
    flows = FlowProducer({"connection": url})
    try:
        for g in range(first, first + count):
            children = [
                {"name": "job", "queueName": QUEUE, "data": {"id": g * 1000 + i},
                 "opts": {**JOB_OPTS, "jobId": f"J{g * 1000 + i:012d}"}}
                for i in range(width)
            ]  # fmt: skip
            await flows.add({"name": "callback", "queueName": QUEUE, "data": {"group": g},
                             "opts": {**JOB_OPTS, "jobId": f"G{g:012d}"},
                             "children": children})  # fmt: skip
    finally:
        await flows.close()
