"""How a worker speaks: one structured record per event, and the counters that go with it.

Every record a worker writes goes through :func:`event`: the message for people, and
``record.emq`` holding ``event`` and its fields for machines (``emq worker`` prints them as
JSON lines). :class:`Report` turns what the server answered into those records and the
run's :class:`~.options.WorkerStats`.

A handler's own records say which job they are about: :class:`JobFields` (a filter ``emq
worker`` puts on its handler, and that a ``--log-config`` file may name) looks the job up
when a record is emitted (:func:`current_job`: the pool thread's job, or the job whose task
is running) and copies its id, name, queue and attempt onto the record. Nothing runs per job
for it: a job whose handler logs nothing costs nothing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..model.records import Answer
from .options import WorkerStats

DEBUG = logging.DEBUG

_RUNNING: weakref.WeakSet[Any] = weakref.WeakSet()  # the executors whose jobs may log
_THREAD = threading.local()  # .job: the job a pool thread runs now (None between jobs)


def watch(executor: Any) -> None:
    """Let :class:`JobFields` find the jobs ``executor`` runs (its ``live`` set of held jobs,
    each with its ``task``). Nothing is done per job: a record looks its job up when it is
    emitted, so a job whose handler logs nothing costs nothing."""
    _RUNNING.add(executor)


def in_job(job: Any, call: Callable[[Any, Any], Any], payload: Any, ctx: Any) -> Any:
    """A sync handler's call in its pool thread, the thread marked with its job for the
    handler's records."""
    _THREAD.job = job
    try:
        return call(payload, ctx)
    finally:
        _THREAD.job = None


def current_job() -> Any:
    """The held job whose handler emits a record now: this pool thread's, or the one whose
    task is the running task; None elsewhere."""
    job = getattr(_THREAD, "job", None)
    if job is not None:
        return job
    try:
        task = asyncio.current_task()
    except RuntimeError:  # a thread with no event loop
        return None
    if task is None:
        return None
    for executor in list(_RUNNING):
        for held in list(executor.live):
            if held.task is task:
                return held
    return None


class JobFields(logging.Filter):
    """Puts the running job on every record a handler emits: ``job_id``, ``job_name``,
    ``job_queue`` and ``job_attempt`` (empty outside a handler and on emq's own records,
    which carry their own fields in ``record.emq``). Usable in a ``logging.config``
    dictionary: ``{"filters": {"job": {"()": "emq.worker.log.JobFields"}}}``."""

    def filter(self, record: logging.LogRecord) -> bool:
        job = None if hasattr(record, "emq") else current_job()
        if job is None:
            record.job_id = record.job_name = record.job_queue = record.job_attempt = ""
        else:
            c = job.claimed
            record.job_id, record.job_name = c.id, c.name
            record.job_queue, record.job_attempt = job.queue, c.attempts
        return True


def event(log: logging.Logger, level: str, msg: str, name: str, /, **fields: Any) -> None:
    """One structured log record: ``record.emq`` holds ``event`` (``name``) and the fields."""
    lvl = logging.getLevelName(level.upper())
    if log.isEnabledFor(lvl):
        log.log(lvl, msg, extra={"emq": {"event": name, **fields}})


class LeaseLike(Protocol):
    queue: str
    id: str
    token: int


class Report:
    """Counts and logs the answers a run gets for its jobs."""

    def __init__(self, log: logging.Logger, stats: WorkerStats) -> None:
        self.log = log
        self.stats = stats

    def acked(self, lease: LeaseLike, kind: str, why: str, error: str, answer: str) -> None:
        """The server's answer to the ack of ``lease`` (``kind``: its outcome's name in logs,
        :mod:`.outcome`); each answer comes from one kind of call only, so it says what to
        count: ``pending`` is a hold's (``RateLimited``), ``scheduled`` and ``dead`` a fail's."""
        s = self.stats
        if answer == Answer.COMPLETED:
            s.completed += 1
            if self.log.isEnabledFor(DEBUG):
                event(self.log, "debug", "job completed", "completed",
                      queue=lease.queue, job=lease.id, token=lease.token)  # fmt: skip
        elif answer in (Answer.LOST, Answer.GONE):
            self.lost(lease, kind)
        elif answer == Answer.CANCELLED:  # Queue.cancel: dead, cancelled (fail, or a hold)
            s.cancelled += 1
            event(self.log, "info", f"job cancelled ({why})", "cancelled",
                  queue=lease.queue, job=lease.id, token=lease.token)  # fmt: skip
        elif kind == "sleep":  # ctx.sleep: to the schedule, no attempt spent (docs/steps.md)
            event(self.log, "info", "job sleeping", "sleeping",
                  queue=lease.queue, job=lease.id, token=lease.token)  # fmt: skip
        elif answer == Answer.PENDING:  # a hold (RateLimited): given back, its lane held
            s.rate_limited += 1
            event(self.log, "info", f"job rate limited: {error}", "rate_limited",
                  queue=lease.queue, job=lease.id, token=lease.token)  # fmt: skip
        else:
            s.dead += answer == Answer.DEAD
            s.retried += answer != Answer.DEAD
            first = error.splitlines()[0] if error else ""
            level = "warning" if answer == Answer.DEAD else "info"
            event(self.log, level, f"job failed ({why}): {answer}", str(answer),
                  queue=lease.queue, job=lease.id, token=lease.token, error=first)  # fmt: skip

    def lost(self, lease: LeaseLike, via: str) -> None:
        """A call for ``lease`` was refused: the result is discarded (G4)."""
        self.stats.lease_lost += 1
        self.stats.lost_ids = [*self.stats.lost_ids[-999:], lease.id]
        event(self.log, "warning", f"lease lost ({via} refused); result discarded", "lease_lost",
              queue=lease.queue, job=lease.id, token=lease.token, via=via)  # fmt: skip

    def missing(self, queue: str, ids: list[str], where: str) -> None:
        """Ids the server found without their row (evicted, deleted by hand): dropped there,
        counted in the queue's ``missing`` metric; logged and counted here."""
        self.stats.missing += len(ids)
        for job_id in ids:
            event(self.log, "error",
                  f"job id in {where} without its row (evicted or deleted by hand); dropped",
                  "missing", queue=queue, job=job_id, where=where)  # fmt: skip

    def swept(
        self, queue: str, recovered: list[str], dead: list[str], cancelled: Sequence[str] = ()
    ) -> None:
        """What a sweep this worker ran recovered and dead-lettered (``cancelled``: lapsed
        leases of cancelled jobs, dead, cancelled; counted in ``cancelled``)."""
        s = self.stats
        s.sweeps += 1
        s.recovered += len(recovered)
        s.swept_dead += len(dead)
        for job_id in recovered:
            event(self.log, "warning", "stalled job recovered to pending", "recovered",
                  queue=queue, job=job_id)  # fmt: skip
        for job_id in dead:
            event(self.log, "warning", "stalled job dead-lettered (max_stalled reached)",
                  "stalled_dead", queue=queue, job=job_id)  # fmt: skip
        s.cancelled += len(cancelled)
        for job_id in cancelled:
            event(self.log, "info", "lapsed lease of a cancelled job: dead, cancelled",
                  "cancelled", queue=queue, job=job_id, via="sweep")  # fmt: skip
