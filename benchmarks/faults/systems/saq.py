"""saq: one asyncio Worker process (``concurrency`` handlers at once) on its Redis queue.

A worker moves a job from the queued list to the active list (``BLMOVE``) and marks it active;
nothing is renewed while it runs. The sweep (one worker at a time, under a lock) aborts an
active job past its ``timeout`` (or ``heartbeat``) and re-queues it while it has retries left.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from saq import CronJob, Queue, Worker

NAME = "saq"
DISTS = ["saq", "redis", "hiredis"]
QUEUE = "faults"
TIMEOUT_S = 10
HEARTBEAT_S = 5
SWEEP_S = 60
ABORT_WAIT_S = 5
RETRIES = 25
PROMISE = (
    "no acknowledgement: a 'Heartbeat monitor for abandoned jobs' and 'Sweeping stuck jobs' "
    "(README, 'Comparison to ARQ'); the sweep aborts a job past its timeout or heartbeat and "
    "retries it while it has retries left (Job docstring: timeout, heartbeat, retries, "
    "default 1 attempt)"
)
SETTINGS = {
    f"retries={RETRIES}": "the sweep re-queues a stuck job only while attempts < retries; the "
    "default 1 means a dead worker's job is finished as aborted (lost to the producer)",
    f"timeout={TIMEOUT_S}": "a job active for longer is stuck (saq's default 10 s); the "
    "worker cancels its own job at the same bound",
    f"heartbeat={HEARTBEAT_S}": "the README's monitor for abandoned jobs: a job not touched "
    f"for {HEARTBEAT_S} s is stuck. saq touches a job when it starts; a longer handler must call "
    "job.update() itself (a 50-100 ms job never needs to). Off by default",
    f"timers={{'sweep': {SWEEP_S}}}": "how often a worker sweeps the active list: saq's "
    "default, kept. The sweep's lock lasts one interval while the sweep waits up to 5 s on "
    "each stuck job's abort, so a shorter interval lets a second worker's sweep start on the "
    "same stuck jobs and retry them twice (the quick worker-sigkill run: 5 jobs ran twice "
    "with a 5 s sweep, none with 60 s)",
    "key=J<n>": "saq refuses to enqueue a key already queued, active or scheduled",
}
# Stuck after HEARTBEAT_S, noticed at the next sweep; the sweep then handles stuck jobs one at a
# time, waiting up to ABORT_WAIT_S for each (dead) worker to acknowledge the abort before it
# retries that job: a dead worker holding CONCURRENCY jobs is re-queued in full only after
# CONCURRENCY waits. CONCURRENCY is the harness's worker concurrency.
CONCURRENCY = 4
RECOVERY_S = float(min(TIMEOUT_S, HEARTBEAT_S) + SWEEP_S + ABORT_WAIT_S * CONCURRENCY)
SCENARIOS: dict[str, str | None] = {
    "worker-sigkill": None,
    "worker-sigstop": None,
    "server-kill": None,
    "power-loss": None,
    "partition": None,
    "oom": None,
    "cron": None,
    "fan-in": "saq has no fan-in: no job dependencies or callbacks (Queue.map waits in the "
    "caller's process)",
}

_STATE: dict[str, Any] = {}


async def job(ctx: dict[str, Any], *, n: int) -> None:
    ledger = _STATE["ledger"]
    await asyncio.to_thread(ledger.started, n)
    await asyncio.sleep(_STATE["job_ms"] / 1000)
    await asyncio.to_thread(ledger.finished, n)


async def tick(ctx: dict[str, Any]) -> None:
    # The cron job's scheduled time (integer epoch seconds) is the tick's key.
    await asyncio.to_thread(_STATE["ledger"].tick, str(int(ctx["job"].scheduled)))


def _queue(url: str) -> Queue:
    return Queue.from_url(url, name=QUEUE)


async def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    q = _queue(url)
    await q.connect()
    start = time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        n = first + i
        try:
            done = await q.enqueue("job", key=f"J{n:012d}", n=n, timeout=TIMEOUT_S,
                                   heartbeat=HEARTBEAT_S, retries=RETRIES)  # fmt: skip
        except Exception:
            done = None
        if done is None:
            await asyncio.to_thread(ledger.refused, n)
        else:
            await asyncio.to_thread(ledger.acked, n)
    await q.disconnect()


def _worker(q: Queue, concurrency: int, **extra: Any) -> Worker:
    return Worker(q, functions=[job], concurrency=concurrency, timers={"sweep": SWEEP_S},
                  **extra)  # fmt: skip


def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    _STATE.update(ledger=ledger, job_ms=job_ms)

    async def main() -> None:
        await _worker(_queue(url), concurrency).start()

    asyncio.run(main())


async def _counts(url: str) -> tuple[int, int]:
    """(in flight, waiting). In flight is every job saq holds as active or aborting: a job the
    sweep is aborting has already left the active list and is not yet queued again."""
    q = _queue(url)
    await q.connect()
    try:
        incomplete = int(await q.count("incomplete"))  # queued, scheduled and active
        active = int(await q.count("active"))
        held = 0
        async for key in q.redis.scan_iter(match=f"saq:job:{QUEUE}:*", count=1000):
            raw = await q.redis.get(key)
            job = q.deserialize(raw) if raw else None
            held += int(job is not None and job.status in ("active", "aborting"))
        return max(held, active), max(0, incomplete - active)
    finally:
        await q.disconnect()


async def inflight(url: str) -> int | None:
    return (await _counts(url))[0]


async def waiting(url: str) -> int | None:
    return (await _counts(url))[1]


def cron(url: str, ledger: Any, every_s: float, seconds: float) -> None:
    _STATE.update(ledger=ledger, job_ms=0)
    step = max(1, round(every_s))
    # croniter reads a sixth field as seconds.
    schedule = CronJob(tick, cron=f"* * * * * */{step}", unique=True, timeout=TIMEOUT_S,
                       heartbeat=HEARTBEAT_S, retries=RETRIES)  # fmt: skip

    async def main() -> None:
        w = _worker(_queue(url), 4, cron_jobs=[schedule])
        task = asyncio.create_task(w.start())
        await asyncio.sleep(seconds)
        await w.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
