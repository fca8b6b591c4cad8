"""rq: forking ``Worker`` processes, ``Retry`` on every job, short monitoring and maintenance
intervals so a dead worker's job is re-queued within a bounded run.

rq runs one job at a time per worker; ``concurrency`` workers are forked children of the
agent that die with it (``PR_SET_PDEATHSIG``), so killing the agent kills every worker the
way a lost container would. Each worker forks a work horse per job (rq's default) in its own
process group; the handler ties the horse to its worker the same way, so a killed worker takes
its running job with it, as a dead container or machine does (left alone, an orphaned horse
would finish its job and the fault would test nothing).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import time
from typing import Any

from redis import Redis
from rq import Queue, Retry, Worker
from rq.registry import ScheduledJobRegistry, StartedJobRegistry

NAME = "rq"
DISTS = ["rq", "redis", "hiredis"]
QUEUE = "faults"
JOB_TIMEOUT = 30
MONITOR_S = 5
MAINTENANCE_S = 10
WORKER_TTL = 20
RETRIES = 25
PROMISE = (
    "a job whose worker was killed 'will eventually end up in FailedJobRegistry because a "
    "cleanup task will raise an AbandonedJobError'; with Retry the cleanup re-queues it "
    "instead (python-rq.org/docs/results, 'Dealing with Interruptions'; "
    "python-rq.org/docs/exceptions, 'Retrying Failed Jobs')"
)
SETTINGS = {
    f"retry=Retry(max={RETRIES})": "rq re-queues an abandoned job only when it has retries "
    "left; without Retry the cleanup moves it to FailedJobRegistry (lost to the producer)",
    f"job_timeout={JOB_TIMEOUT}": "bounds a hung job; the horse is killed and the job failed "
    "(then retried) after it",
    f"job_monitoring_interval={MONITOR_S}": "the worker heartbeats its horse's execution every "
    f"{MONITOR_S} s; rq extends the StartedJobRegistry entry to now + min(timeout, interval) "
    "+ 60 s on each beat (the +60 s is fixed in rq)",
    f"maintenance_interval={MAINTENANCE_S}": "how often a live worker runs clean_registries "
    "(StartedJobRegistry.cleanup re-queues abandoned jobs); rq's default is 600 s",
    f"worker_ttl={WORKER_TTL}": "an idle worker blocks in BLMOVE for worker_ttl - 15 s, and "
    "only runs maintenance between dequeues; the default 420 s would hide the cleanup",
    "intermediate queue (rq's own, fixed)": "a job a dead worker had moved off the queue but "
    "not yet registered as started is failed (then retried) by a maintenance pass more than "
    "60 s after a first pass saw it",
    "failure_ttl, result_ttl defaults": "failed jobs kept a year, results 500 s",
    "CronScheduler.register(interval=...)": "rq's cron (beta since 2.4) keeps its schedule in "
    "memory and enqueues at once when started; nothing stops two schedulers from both firing",
}
# No SCHEDULERS: rq's cron docs (python-rq.org/docs/cron) do not say how many CronSchedulers
# may run, so two of them are within its documented use and a tick run twice counts as such.
# Two paths back to the queue, both run by a live worker's maintenance (every MAINTENANCE_S, but
# only between dequeues: an idle BLMOVE delays it by up to worker_ttl - 15 s):
# - started: the execution entry expires min(timeout, monitoring) + 60 s after its last beat;
# - dequeued but not yet started (still in the intermediate list): a first pass marks it, a pass
#   more than 60 s later fails it, and Retry re-queues it. This is the longer one.
_PASS = MAINTENANCE_S + (WORKER_TTL - 15)
RECOVERY_S = float(max(min(JOB_TIMEOUT, MONITOR_S) + 60 + _PASS, _PASS + 60 + _PASS))
SCENARIOS: dict[str, str | None] = {
    s: None
    for s in ("worker-sigkill", "worker-sigstop", "server-kill", "power-loss", "partition",
              "oom", "cron", "fan-in")
}  # fmt: skip

_STATE: dict[str, Any] = {}


def job(job_id: int) -> None:
    """The benchmark's handler, run in a work horse forked from a worker set up by work()."""
    _die_with_worker()
    ledger = _STATE["ledger"]
    ledger.started(job_id)
    time.sleep(_STATE["job_ms"] / 1000)
    ledger.finished(job_id)


def callback(group: int) -> None:
    _die_with_worker()
    _STATE["ledger"].callback(group)


def tick() -> None:
    """rq's CronScheduler keeps no scheduled time: the tick's key is its enqueue time, floored
    to the interval, so two schedulers firing the same tick show as one tick run twice."""
    from rq import get_current_job

    _die_with_worker()
    current = get_current_job()
    at = current.enqueued_at if current is not None else None
    step = _STATE.get("step", 1)
    _STATE["ledger"].tick(str(int(at.timestamp()) // step * step) if at else "unknown")


def _queue(url: str) -> Queue:
    return Queue(QUEUE, connection=Redis.from_url(url))


def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    q = _queue(url)
    start = time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        n = first + i
        try:
            q.enqueue(job, n, job_id=f"J{n:012d}", retry=Retry(max=RETRIES),
                      job_timeout=JOB_TIMEOUT)  # fmt: skip
        except Exception:
            ledger.refused(n)
            continue
        ledger.acked(n)


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _die_with_worker() -> None:
    """In a work horse: die when the worker that forked it dies (and now, if it already has)."""
    worker = _STATE.get("worker_pid")
    if worker is None or os.getpid() == worker:
        return  # not in a horse (a SimpleWorker or a test calling the handler)
    _die_with_parent()
    if os.getppid() != worker:
        os._exit(1)


def _worker(url: str) -> None:
    _STATE["worker_pid"] = os.getpid()
    redis = Redis.from_url(url)
    w = Worker([Queue(QUEUE, connection=redis)], connection=redis,
               job_monitoring_interval=MONITOR_S, maintenance_interval=MAINTENANCE_S,
               worker_ttl=WORKER_TTL)  # fmt: skip
    w.work(logging_level=logging.WARNING)


def _fork(target: Any, *args: Any) -> int:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            _die_with_parent()
            target(*args)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    return pid


def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    _STATE.update(ledger=ledger, job_ms=job_ms)
    pids = {_fork(_worker, url) for _ in range(max(1, concurrency))}
    while pids:  # a worker that exits is replaced, as a supervisor would
        pid, _ = os.wait()
        if pid in pids:
            pids.discard(pid)
            pids.add(_fork(_worker, url))


def inflight(url: str) -> int | None:
    q = _queue(url)
    return int(StartedJobRegistry(queue=q).get_job_count(cleanup=False))


def waiting(url: str) -> int | None:
    q = _queue(url)
    redis = q.connection
    scheduled = ScheduledJobRegistry(queue=q).get_job_count(cleanup=False)
    return int(q.count) + int(scheduled) + int(redis.llen(q.intermediate_queue_key))


def _scheduler(url: str, every_s: float) -> None:
    from rq.cron import CronScheduler

    s = CronScheduler(Redis.from_url(url), logging_level=logging.WARNING)
    s.register(tick, QUEUE, interval=max(1, round(every_s)), job_timeout=JOB_TIMEOUT)
    s.start()


def cron(url: str, ledger: Any, every_s: float, seconds: float) -> None:
    _STATE.update(ledger=ledger, job_ms=0, step=max(1, round(every_s)))
    pids = [_fork(_scheduler, url, every_s), _fork(_worker, url)]
    time.sleep(seconds)
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    for pid in pids:
        os.waitpid(pid, 0)


def fanin(url: str, ledger: Any, first: int, count: int, width: int) -> None:
    q = _queue(url)
    for g in range(first, first + count):
        children = [q.enqueue(job, g * 1000 + i, job_id=f"J{g * 1000 + i:012d}",
                              retry=Retry(max=RETRIES), job_timeout=JOB_TIMEOUT)
                    for i in range(width)]  # fmt: skip
        q.enqueue(callback, g, job_id=f"C{g:012d}", depends_on=children,
                  retry=Retry(max=RETRIES), job_timeout=JOB_TIMEOUT)  # fmt: skip
