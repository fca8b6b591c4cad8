"""taskiq with taskiq-redis's RedisStreamBroker, the broker with acknowledgements.

A stream entry stays in the consumer group's pending list until the receiver acks it (after
the task ran and its result was saved, taskiq's default). A dead worker's pending entries are
taken over by another consumer with XAUTOCLAIM once idle for ``idle_timeout``. That claim runs
in ``listen()`` right after a read that returned new entries: a worker that reads nothing
claims nothing, so entries a dead worker held stay pending until new work arrives. Cron is
TaskiqScheduler on taskiq-redis's ListRedisScheduleSource; taskiq has no fan-in.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from taskiq import Context, TaskiqDepends, TaskiqMessage, TaskiqMiddleware, TaskiqScheduler
from taskiq.acks import AcknowledgeType
from taskiq.api import run_receiver_task, run_scheduler_task
from taskiq.middlewares import SmartRetryMiddleware
from taskiq_redis import ListRedisScheduleSource, RedisStreamBroker

NAME = "taskiq"
DISTS = ["taskiq", "taskiq-redis", "redis", "hiredis"]
QUEUE = "faults"
GROUP = "taskiq"
IDLE_MS = 10_000
BLOCK_MS = 2_000
PROMISE = (
    "at least once with RedisStreamBroker: 'This broker supports acknowledgment of messages' "
    "(ListQueueBroker is the one 'if you don't want acknowledges'); an entry left unacked "
    "for idle_timeout is claimed by another worker (taskiq-redis README, 'Brokers'; "
    "RedisStreamBroker docstring)"
)
SETTINGS = {
    "RedisStreamBroker (not ListQueueBroker)": "the taskiq-redis broker with acknowledgements: "
    "an entry is acked only after its task ran, and a dead worker's entries can be claimed "
    "(ListQueueBroker pops a message and loses it if the worker dies)",
    "ack_type=when_saved (the default)": "the receiver acks after the task returned and its "
    "result was saved; when_received would ack before running (at most once)",
    f"idle_timeout={IDLE_MS}": "an entry pending for 10 s with no ack is claimed by another "
    "worker (the default is 600 s; shortened so a run stays bounded; every job here is far "
    "shorter, so no live job is claimed)",
    "unacknowledged_lock_timeout=5": "the claim's lock expires if the worker holding it dies "
    "(without it, 'the lock can remain locked indefinitely', its docstring)",
    "consumer_id='0'": "a consumer group created after entries were written still reads them "
    "(the default '$' skips them)",
    "SmartRetryMiddleware(default_retry_count=25, default_retry_label=True)": "a task that "
    "raises is retried with backoff (a handler here never raises)",
    "max_prefetch=0 (the default)": "the receiver reads ahead no more than it runs",
}
RECOVERY_S = (IDLE_MS + BLOCK_MS) / 1000
SCHEDULERS = "one"  # the cron scenario's two schedulers are more than taskiq allows
SCHEDULERS_DOC = (
    "'Please always run only one instance of the scheduler!' (taskiq docs, Guide, Scheduling tasks)"
)
SCENARIOS: dict[str, str | None] = {
    "worker-sigkill": None,
    "worker-sigstop": None,
    "server-kill": None,
    "power-loss": None,
    "partition": None,
    "oom": None,
    "cron": None,
    "fan-in": "taskiq has no fan-in (no group or chord with a completion callback)",
}
CRON_EVERY_S = 1.0  # interval schedules take whole seconds, at least 1

_ledger: Any = None
_job_s = 0.05
_CONTEXT = TaskiqDepends()


class _StampTick(TaskiqMiddleware):
    """Labels a ``tick`` with the second the scheduler sent it in (its loop runs on whole
    seconds): a tick's key, kept when the entry is claimed again."""

    def pre_send(self, message: TaskiqMessage) -> TaskiqMessage:
        if message.task_name == "tick":
            message.labels.setdefault("due", int(time.time()))
        return message


def _broker(url: str) -> tuple[RedisStreamBroker, dict[str, Any]]:
    broker = RedisStreamBroker(
        url=url, queue_name=QUEUE, consumer_group_name=GROUP, consumer_id="0",
        idle_timeout=IDLE_MS, xread_block=BLOCK_MS, unacknowledged_lock_timeout=5,
    ).with_middlewares(SmartRetryMiddleware(default_retry_count=25, default_retry_label=True,
                                            use_jitter=True, use_delay_exponent=True),
                       _StampTick())  # fmt: skip

    @broker.task(task_name="job")
    async def job(ident: int) -> None:
        await asyncio.to_thread(_ledger.started, ident)
        await asyncio.sleep(_job_s)
        await asyncio.to_thread(_ledger.finished, ident)

    @broker.task(task_name="tick")
    async def tick(context: Context = _CONTEXT) -> None:
        due = context.message.labels.get("due", context.message.task_id)
        await asyncio.to_thread(_ledger.tick, str(due))

    return broker, {"job": job, "tick": tick}


async def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    broker, tasks = _broker(url)
    await broker.startup()
    start = time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        ident = first + i
        try:
            await tasks["job"].kicker().with_task_id(f"J{ident:012d}").kiq(ident)
        except Exception:
            await asyncio.to_thread(ledger.refused, ident)
            continue
        await asyncio.to_thread(ledger.acked, ident)
    await broker.shutdown()


async def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    global _ledger, _job_s
    _ledger, _job_s = ledger, job_ms / 1000
    broker, _ = _broker(url)
    broker.is_worker_process = True
    await broker.startup()
    await run_receiver_task(broker, max_async_tasks=concurrency,
                            ack_time=AcknowledgeType.WHEN_SAVED)  # fmt: skip


def _client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)


def inflight(url: str) -> int | None:
    """Entries delivered to a consumer and not acked: the group's pending list."""
    with _client(url) as r:
        if not r.exists(QUEUE):
            return 0
        for g in r.xinfo_groups(QUEUE):
            if g["name"] in (GROUP, GROUP.encode()):
                return int(g["pending"])
        return 0


def waiting(url: str) -> int | None:
    """Entries the group has not delivered yet (its lag)."""
    with _client(url) as r:
        if not r.exists(QUEUE):
            return 0
        for g in r.xinfo_groups(QUEUE):
            if g["name"] in (GROUP, GROUP.encode()):
                lag = g.get("lag")
                return None if lag is None else int(lag)
        return int(r.xlen(QUEUE))


async def cron(url: str, ledger: Any, every_s: float, seconds: float) -> None:
    """A scheduler and a receiver in this process; an interval schedule of whole seconds.

    A tick's key is the second the scheduler sent it in. The schedule lives in Redis: a
    scheduler started again (or a second one) finds it there and adds none.
    """
    global _ledger
    _ledger = ledger
    broker, tasks = _broker(url)
    source = ListRedisScheduleSource(url, prefix="faults-schedule")
    scheduler = TaskiqScheduler(broker, sources=[source])
    broker.is_worker_process = True
    await broker.startup()
    await source.startup()
    from redis.asyncio import Redis

    async with Redis.from_url(url) as r:  # the first scheduler to start adds the schedule
        if await r.set("faults-schedule:made", "1", nx=True):
            await tasks["tick"].schedule_by_interval(source, max(1, round(every_s)))
    runners = [asyncio.create_task(run_receiver_task(broker, max_async_tasks=4)),
               asyncio.create_task(run_scheduler_task(scheduler))]  # fmt: skip
    await asyncio.sleep(seconds)
    for t in runners:
        t.cancel()
    await asyncio.gather(*runners, return_exceptions=True)
    await broker.shutdown()
