"""dramatiq on its Redis broker: a message is acked after its actor returns; a dead worker's
unacked messages go back to their queue when another worker's command runs the broker's
maintenance and finds that worker's heartbeat older than ``heartbeat_timeout``.

Maintenance runs on a random share of commands (``maintenance_chance`` per million, 1,000 by
default: about one command in a thousand). Here every command runs it, so a dead worker's
messages come back within ``heartbeat_timeout`` plus one poll, not after an unbounded wait.
Fan-in is a group with a completion callback: that needs the GroupCallbacks middleware (a
barrier on a rate limiter backend, the same Redis), not Results. dramatiq has no scheduler.

Requeueing is only for dead workers: after a connection error a live worker starts a fresh
consumer, and what its old one had fetched (or was fetching when the reply was lost) stays in
that worker's ``__acks__`` set, in flight, until the worker itself stops.
"""

from __future__ import annotations

import time
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits.backends import RedisBackend

NAME = "dramatiq"
DISTS = ["dramatiq", "redis", "hiredis"]
QUEUE = "faults"
HEARTBEAT_MS = 10_000
POLL_MS = 1_000
PROMISE = (
    "at least once: a message is acked once its actor returned, and the Redis broker's "
    "maintenance 'moves any unacked messages belonging to dead workers back to their queues' "
    "once a worker sent no heartbeat for heartbeat_timeout (dramatiq.brokers.redis.RedisBroker "
    "docstring and its dispatch.lua; dramatiq.io/reference.html#dramatiq.brokers.redis.RedisBroker)"
)
SETTINGS = {
    f"heartbeat_timeout={HEARTBEAT_MS}": "a worker silent for 10 s is dead and its unacked "
    "messages are requeued (the default is 60 s; shortened so a run stays bounded; a live "
    "worker's consumers poll every second, which is its heartbeat)",
    "maintenance_chance=1000000": "every broker command runs the maintenance that requeues "
    "dead workers' messages (the default, 1,000 per million, leaves a dead worker's messages "
    "stranded until about a thousand more commands ran)",
    "dead_message_ttl=7 days (default)": "dead-lettered messages are kept; no job here is "
    "dead-lettered (retries are not exhausted)",
    "Retries, max_retries=25 per actor": "an actor that raises is retried with backoff (on "
    "by default, 20 retries; a handler here never raises)",
    f"worker_timeout={POLL_MS}": "consumers poll at least every second (the default), so an "
    "idle live worker keeps its heartbeat fresh",
    "GroupCallbacks(RedisBackend) on the same Redis": "a group's completion callback needs "
    "this middleware (a barrier counting finished children); fan-in only",
}
RECOVERY_S = (HEARTBEAT_MS + POLL_MS) / 1000
SCENARIOS: dict[str, str | None] = {
    "worker-sigkill": None,
    "worker-sigstop": None,
    "server-kill": None,
    "power-loss": None,
    "partition": None,
    "oom": None,
    "cron": "dramatiq has no scheduler of its own: its docs send periodic messages from "
    "APScheduler (cookbook, 'Scheduling messages'), which is not dramatiq",
    "fan-in": None,
}

_ledger: Any = None
_job_s = 0.05


def _broker(url: str) -> tuple[RedisBroker, dict[str, Any]]:
    broker = RedisBroker(url=url, heartbeat_timeout=HEARTBEAT_MS, maintenance_chance=1_000_000)
    broker.add_middleware(GroupCallbacks(RedisBackend(url=url)))
    dramatiq.set_broker(broker)

    def job(ident: int) -> None:
        _ledger.started(ident)
        time.sleep(_job_s)
        _ledger.finished(ident)

    def callback(group: int) -> None:
        _ledger.callback(group)

    def actor(fn: Any, name: str) -> Any:
        return dramatiq.actor(fn, actor_name=name, queue_name=QUEUE, broker=broker,
                              max_retries=25)  # fmt: skip

    actors = {"job": actor(job, "job"), "callback": actor(callback, "callback")}
    return broker, actors


def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    broker, actors = _broker(url)
    start = time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        ident = first + i
        try:
            actors["job"].send(ident)
        except Exception:
            ledger.refused(ident)
            continue
        ledger.acked(ident)
    broker.close()


def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    global _ledger, _job_s
    _ledger, _job_s = ledger, job_ms / 1000
    broker, _ = _broker(url)
    worker = dramatiq.Worker(broker, worker_threads=concurrency, worker_timeout=POLL_MS)
    worker.start()
    while True:
        time.sleep(3600)


def _client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)


def inflight(url: str) -> int | None:
    """Messages fetched and not acked: the per-worker ``__acks__`` sets (delayed retries too)."""
    with _client(url) as r:
        return sum(int(r.scard(k)) for k in r.scan_iter(match="dramatiq:__acks__.*"))


def waiting(url: str) -> int | None:
    """Messages in the queue and its delay queue."""
    with _client(url) as r:
        return int(r.llen(f"dramatiq:{QUEUE}")) + int(r.llen(f"dramatiq:{QUEUE}.DQ"))


def fanin(url: str, ledger: Any, first: int, count: int, width: int) -> None:
    """``count`` groups of ``width`` ``job`` messages, each with a ``callback`` on completion."""
    broker, actors = _broker(url)
    for g in range(first, first + count):
        group = dramatiq.group(actors["job"].message(g * 1000 + i) for i in range(width))
        group.add_completion_callback(actors["callback"].message(g))
        group.run()
    broker.close()
