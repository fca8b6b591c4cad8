"""streaq: its asyncio Worker on Redis streams, with a short ``idle_timeout`` so recovery is quick.

streaq reads tasks with a consumer group: a delivered task stays in the group's pending list
until its worker acknowledges it on finish ("pessimistic execution"). A running worker renews
its tasks (XCLAIM resets their idle time) every 0.9 x ``idle_timeout``; any worker's next read
claims a task idle for longer than ``idle_timeout`` (XAUTOCLAIM, or XREADGROUP's CLAIM where the
server has it). Cron is ``Worker.cron`` (a crontab with an optional seconds field); fan-in is a
task started ``after=[children]``, queued once all of them finished successfully.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
from streaq import Worker

NAME = "streaq"
DISTS = ["streaq", "coredis", "anyio"]
QUEUE = "faults"
IDLE_S = 3
MAX_TRIES = 25
GROUP = "workers"  # streaq.constants.REDIS_GROUP
PROMISE = (
    "at least once ('pessimistic execution': a task is not removed from the queue until it "
    "succeeded or failed; one cancelled by a shutdown runs again, so tasks must cope with "
    "being called repeatedly) (streaq docs, Tasks > Task execution)"
)
SETTINGS = {
    f"idle_timeout={IDLE_S}": "a task whose worker stopped renewing it for this long is "
    "claimed by another worker's next read (the default is 60 s; shortened so recovery fits "
    "in a bounded run); renewal runs every 0.9 x idle_timeout",
    f"max_tries={MAX_TRIES}": "every delivery of a task counts as a try, a recovered one "
    "included; the default 3 fails a task its workers died under three times, so raised as "
    "for the other systems",
    "timeout=None": "streaq's default for tasks (no per-task deadline): a deadline bounds a "
    "hung handler, which these handlers never are; recovery of a dead worker's task is the "
    "idle_timeout's, not the timeout's",
    "concurrency=C, prefetch default (C)": "a worker holds up to 2 x C tasks delivered "
    "(running plus prefetched); a prefetched task is renewed only once it runs, so one left "
    "idle is claimed by another worker, and its start is fenced (refresh_timeout)",
    "cron: unique=True, timeout=1 h (its defaults for cron)": "one tick at a time: a tick "
    "that starts while an earlier one still holds the lock (a dead worker's, until recovered) "
    "fails as a clash",
}
# A dead worker's task becomes claimable IDLE_S after its last renewal; an idle worker's
# read claims only between blocking reads, which block for up to IDLE_S.
RECOVERY_S = 2 * IDLE_S
SCENARIOS: dict[str, str | None] = {
    s: None
    for s in ("worker-sigkill", "worker-sigstop", "server-kill", "power-loss", "partition",
              "oom", "cron", "fan-in")
}  # fmt: skip


def _worker(url: str, ledger: Any = None, job_ms: int = 0, concurrency: int = 4) -> Any:
    """A Worker with every task of the harness registered (any worker may run any of them)."""
    worker = Worker(redis_url=url, queue_name=QUEUE, concurrency=concurrency,
                    idle_timeout=IDLE_S)  # fmt: skip

    @worker.task(name="job", max_tries=MAX_TRIES)
    async def job(n: int) -> None:
        await anyio.to_thread.run_sync(ledger.started, n)
        await anyio.sleep(job_ms / 1000)
        await anyio.to_thread.run_sync(ledger.finished, n)

    @worker.task(name="callback", max_tries=MAX_TRIES)
    async def callback(group: int) -> None:
        await anyio.to_thread.run_sync(ledger.callback, group)

    @worker.task(name="tick", max_tries=MAX_TRIES)
    async def tick() -> None:
        await anyio.to_thread.run_sync(ledger.tick, _tick_second(tick.context.task_id))

    return worker


def _registered(worker: Any, name: str) -> Any:
    return worker.registry[name]


async def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    worker = _worker(url)
    job = _registered(worker, "job")
    try:
        await worker.__aenter__()  # connects and loads streaq's Lua library
    except Exception:  # the server is down or full from the start: every enqueue refused
        for n in range(first, first + count):
            await anyio.to_thread.run_sync(ledger.refused, n)
        return
    try:
        start = time.monotonic()
        for i in range(count):
            wait = start + i / rate - time.monotonic()
            if wait > 0:
                await anyio.sleep(wait)
            n = first + i
            task = job.enqueue(n)
            task.id = f"J{n:012d}"
            try:
                await task
            except Exception:
                await anyio.to_thread.run_sync(ledger.refused, n)
                continue
            await anyio.to_thread.run_sync(ledger.acked, n)
    finally:
        await worker.__aexit__(None, None, None)


def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    _worker(url, ledger, job_ms, concurrency).run_sync()


async def _stream_counts(url: str) -> tuple[int, int, int]:
    """(delivered and not acknowledged, in the stream and never delivered, delayed), read
    with a plain client: a Worker's context loads the Lua library, a write a full server
    refuses."""
    from coredis import Redis
    from coredis.exceptions import StreamConsumerGroupError

    worker = _worker(url)  # for its key names only
    pending = undelivered = delayed = 0
    async with Redis.from_url(url, decode_responses=True) as redis:
        for priority in worker.priorities:
            stream = worker.stream_key + priority
            delayed += await redis.zcard(worker.queue_key + priority)
            if not await redis.exists([stream]):
                continue
            length = await redis.xlen(stream)
            try:
                delivered = int((await redis.xpending(stream, GROUP)).pending)
            except StreamConsumerGroupError:  # no worker has started yet: none delivered
                delivered = 0
            pending += delivered
            undelivered += length - delivered
    return pending, undelivered, delayed


async def inflight(url: str) -> int | None:
    return (await _stream_counts(url))[0]


async def waiting(url: str) -> int | None:
    _, undelivered, delayed = await _stream_counts(url)
    return undelivered + delayed


def _tick_second(task_id: str) -> str:
    """The scheduled second of a cron tick: streaq names a tick's task by a hash of the cron's
    name and its fire time in ms (``_deterministic_id``), so the seconds of the last hour
    are tried; the task id itself where none matches."""
    from streaq.worker import _deterministic_id

    now = int(time.time())
    for second in range(now + 5, now - 3600, -1):
        if _deterministic_id(f"tick{second * 1000}") == task_id:
            return str(second)
    return task_id


def _crontab(every_s: float) -> str:
    """streaq's crontab takes a seconds field first (7 fields): every N whole seconds."""
    return f"*/{max(1, round(every_s))} * * * * * *"


async def cron(url: str, ledger: Any, every_s: float, seconds: float) -> None:
    worker = _worker(url, ledger, 0, 4)
    del worker.registry["tick"]

    @worker.cron(_crontab(every_s), name="tick", max_tries=MAX_TRIES)
    async def tick() -> None:
        await anyio.to_thread.run_sync(ledger.tick, _tick_second(tick.context.task_id))

    with anyio.move_on_after(seconds):
        await worker.run_async()


async def fanin(url: str, ledger: Any, first: int, count: int, width: int) -> None:
    worker = _worker(url)
    job, callback = _registered(worker, "job"), _registered(worker, "callback")
    async with worker:
        for g in range(first, first + count):
            ids = []
            for i in range(width):
                child = job.enqueue(g * 1000 + i)
                child.id = f"J{g * 1000 + i:012d}"
                await child
                ids.append(child.id)
            parent = callback.enqueue(g).start(after=ids)
            parent.id = f"G{g:012d}"
            await parent
