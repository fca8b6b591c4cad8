"""huey: RedisHuey, one consumer process with ``concurrency`` thread workers.

A worker takes a task off the Redis list with ``BRPOP``: from then on the task exists only in
that process. huey has no in-flight state, no acknowledgement and no recovery: a task whose
consumer died mid-run is gone (its docs say so), so ``RECOVERY_S`` is 0 and such a task counts
as lost, never as stuck.
"""

from __future__ import annotations

import time
from typing import Any

from huey import RedisHuey, crontab, signals
from huey.api import group

NAME = "huey"
DISTS = ["huey", "redis", "hiredis"]
QUEUE = "faults"
RETRIES = 25
PROMISE = (
    "at most once: 'Huey does not guarantee at-least-once delivery of messages, and does not "
    "do acknowledgement of completed tasks'; a task running when the consumer is terminated "
    "is lost (huey.readthedocs.io, Consumer, 'Consumer shutdown')"
)
SETTINGS = {
    "RedisHuey (RedisStorage)": "huey's Redis storage: a list per queue, BRPOP to take a task; "
    "results kept in a hash (results=True, the default), needed by chords",
    f"retries={RETRIES}, retry_delay=0": "a task that raises is re-enqueued; huey retries "
    "only failures it saw, never a task whose consumer died",
    "SIGNAL_INTERRUPTED handler re-enqueues the task": "the docs' own recipe for tasks "
    "interrupted by a SIGTERM shutdown (huey.readthedocs.io, Signals, 'Using "
    "SIGNAL_INTERRUPTED'); it cannot run under SIGKILL, an OOM kill or a power loss",
    "worker_type='thread'": "the consumer's default; a SIGKILL ends every worker with it",
    "periodic=True on each cron consumer": "huey's docs say to run every consumer but one "
    "with --no-periodic, since each consumer enqueues every periodic task; the cron scenario "
    "runs two schedulers, outside what huey allows (SCHEDULERS)",
}
SCHEDULERS = "one"  # the cron scenario's two schedulers are more than huey allows
SCHEDULERS_DOC = (
    "only one consumer may enqueue periodic tasks: run every other one with -n / "
    "--no-periodic 'to avoid having duplicated periodic tasks' (huey.readthedocs.io, "
    "Consumer, 'Multiple consumers', added by its maintainer in coleifer/huey#726)"
)
RECOVERY_S = 0.0  # huey never recovers a dead consumer's task: there is nothing to wait for
CRON_EVERY_S = 60.0  # crontab has minute resolution; a consumer checks it every 60 s
SCENARIOS: dict[str, str | None] = {
    "worker-sigkill": None,
    "worker-sigstop": None,
    "server-kill": None,
    "power-loss": None,
    "partition": None,
    "oom": None,
    "cron": None,  # periodic_task(crontab(...)): every minute at best, no seconds
    "fan-in": None,  # group([...]).then(callback): a chord
}

_STATE: dict[str, Any] = {}


def _huey(url: str) -> tuple[RedisHuey, dict[str, Any]]:
    huey = RedisHuey(QUEUE, url=url)

    @huey.task(retries=RETRIES, name="job")
    def job(n: int) -> None:
        ledger = _STATE["ledger"]
        ledger.started(n)
        time.sleep(_STATE["job_ms"] / 1000)
        ledger.finished(n)

    @huey.task(retries=RETRIES, name="callback")
    def callback(g: int, results: Any = None) -> None:
        _STATE["ledger"].callback(g)

    @huey.signal(signals.SIGNAL_INTERRUPTED)
    def on_interrupted(signal: Any, task: Any, *args: Any, **kwargs: Any) -> None:
        huey.enqueue(task)

    return huey, {"job": job, "callback": callback}


def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    _, tasks = _huey(url)
    start = time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        n = first + i
        try:
            tasks["job"](n)
        except Exception:
            ledger.refused(n)
            continue
        ledger.acked(n)


def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    _STATE.update(ledger=ledger, job_ms=job_ms)
    huey, _ = _huey(url)
    huey.create_consumer(workers=concurrency, worker_type="thread").run()


def inflight(url: str) -> int | None:
    return None  # a taken task lives only in its worker's memory


def waiting(url: str) -> int | None:
    huey, _ = _huey(url)
    return int(huey.pending_count()) + int(huey.scheduled_count())


def cron(url: str, ledger: Any, every_s: float, seconds: float) -> None:
    _STATE.update(ledger=ledger, job_ms=0)
    huey, _ = _huey(url)

    @huey.periodic_task(crontab(minute="*"), name="tick")
    def tick() -> None:
        # crontab matches whole minutes: the minute it fired in is the tick's key.
        ledger.tick(str(int(time.time()) // 60 * 60))

    consumer = huey.create_consumer(workers=2, worker_type="thread", periodic=True)
    consumer.start()
    time.sleep(seconds)
    consumer.stop(graceful=True)


def fanin(url: str, ledger: Any, first: int, count: int, width: int) -> None:
    huey, tasks = _huey(url)
    job, callback = tasks["job"], tasks["callback"]
    for g in range(first, first + count):
        members = [job.s(g * 1000 + i) for i in range(width)]
        huey.enqueue(group(members).then(callback, g))
