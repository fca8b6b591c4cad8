"""arq: one asyncio Worker process, ``max_jobs`` handlers at once, pessimistic execution.

A job stays in the queue's sorted set until it succeeded or failed; a worker takes it by
setting ``arq:in-progress:<id>`` (``PSETEX``, never renewed) for ``job_timeout + 10`` s. A job
whose worker died is taken again once that key expired, by the next poll of a live worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.constants import in_progress_key_prefix
from arq.cron import cron as arq_cron
from arq.worker import Worker, func

NAME = "arq"
DISTS = ["arq", "redis", "hiredis"]
QUEUE = "faults"
JOB_TIMEOUT = 10
POLL_S = 0.5
MAX_TRIES = 25
PROMISE = (
    "jobs may run more than once: pessimistic execution, a job stays queued until it succeeded "
    "or failed and a cancelled or abandoned job runs again; 'arq favours multiple times over "
    "zero times' (arq-docs.helpmanual.io, Usage, 'Jobs may be called more than once!')"
)
SETTINGS = {
    f"job_timeout={JOB_TIMEOUT}": "a running job is cancelled after it; it also sets how long "
    f"the in-progress key lives (job_timeout + 10 s = {JOB_TIMEOUT + 10} s): a dead worker's "
    "job is re-run only after that (the default 300 s is shortened so the run stays short)",
    f"max_tries={MAX_TRIES}": "every start counts a try (arq:retry:<id>); a job restarted "
    "after its worker died is re-run, not failed, within a run (default 5)",
    "retry_jobs=True": "a job cancelled by a worker shutdown or raising Retry is re-queued "
    "(the default)",
    "keep_result=3600": "the result, and with it the job id's uniqueness, is kept an hour "
    "(the default), so an id enqueued again after finishing is refused",
    f"poll_delay={POLL_S}": "how often a worker polls the queue for due jobs (the default)",
    "_job_id=J<n>": "arq refuses to enqueue an id already queued, running or with a result",
}
RECOVERY_S = float(JOB_TIMEOUT + 10 + POLL_S)
SCENARIOS: dict[str, str | None] = {
    "worker-sigkill": None,
    "worker-sigstop": None,
    "server-kill": None,
    "power-loss": None,
    "partition": None,
    "oom": None,
    "cron": None,
    "fan-in": "arq has no fan-in: no job dependencies, groups or callbacks",
}

_STATE: dict[str, Any] = {}


async def job(ctx: dict[str, Any], n: int) -> None:
    ledger = _STATE["ledger"]
    await asyncio.to_thread(ledger.started, n)
    await asyncio.sleep(_STATE["job_ms"] / 1000)
    await asyncio.to_thread(ledger.finished, n)


async def tick(ctx: dict[str, Any]) -> None:
    # A unique cron job's id is "cron:<name>:<scheduled unix ms>", the same on every worker.
    ms = str(ctx["job_id"]).rsplit(":", 1)[-1]
    key = str(int(ms) // 1000) if ms.isdigit() else str(ctx["job_id"])
    await asyncio.to_thread(_STATE["ledger"].tick, key)


def _settings(url: str) -> RedisSettings:
    return RedisSettings.from_dsn(url)


async def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    pool = await create_pool(_settings(url), default_queue_name=QUEUE)
    start = time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        n = first + i
        try:
            done = await pool.enqueue_job("job", n, _job_id=f"J{n:012d}", _queue_name=QUEUE)
        except Exception:
            done = None
        if done is None:
            await asyncio.to_thread(ledger.refused, n)
        else:
            await asyncio.to_thread(ledger.acked, n)
    await pool.aclose()


def _worker(url: str, concurrency: int, **extra: Any) -> Worker:
    return Worker(
        functions=[func(job, name="job", max_tries=MAX_TRIES)],
        queue_name=QUEUE,
        redis_settings=_settings(url),
        max_jobs=concurrency,
        job_timeout=JOB_TIMEOUT,
        max_tries=MAX_TRIES,
        retry_jobs=True,
        keep_result=3600,
        poll_delay=POLL_S,
        **extra,
    )


def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    _STATE.update(ledger=ledger, job_ms=job_ms)
    asyncio.set_event_loop(asyncio.new_event_loop())
    _worker(url, concurrency).run()


async def _queued(url: str) -> tuple[int, int]:
    pool = await create_pool(_settings(url), default_queue_name=QUEUE)
    try:
        ids = [x.decode() for x in await pool.zrange(QUEUE, 0, -1)]
        running = 0
        for job_id in ids:
            running += int(await pool.exists(in_progress_key_prefix + job_id))
        return running, len(ids) - running
    finally:
        await pool.aclose()


async def inflight(url: str) -> int | None:
    return (await _queued(url))[0]


async def waiting(url: str) -> int | None:
    return (await _queued(url))[1]


def cron(url: str, ledger: Any, every_s: float, seconds: float) -> None:
    _STATE.update(ledger=ledger, job_ms=0)
    step = max(1, round(every_s))
    schedule = arq_cron(tick, name="tick", second=set(range(0, 60, step)), unique=True)

    async def main() -> None:
        w = Worker(functions=[func(job, name="job")], cron_jobs=[schedule], queue_name=QUEUE,
                   redis_settings=_settings(url), handle_signals=False,
                   poll_delay=POLL_S)  # fmt: skip
        task = asyncio.create_task(w.async_run())
        await asyncio.sleep(seconds)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await w.close()

    asyncio.run(main())
