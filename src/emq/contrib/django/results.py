"""How a Django task maps onto an emq job and back: I/O-free.

- **Priority.** Django's ``-100..100`` runs the higher number first; emq's priority (a
  32-bit integer) runs the lower number first. A task's emq priority is therefore the
  negated Django priority: 100 -> -100 (first), 0 -> 0 (emq's default, so tasks interleave
  FIFO with other jobs of the queue), -100 -> 100 (last).
- **run_after.** emq schedules a delayed job at the server's clock at enqueue plus
  ``delay_ms``; the delay is ``run_after`` minus this process's clock at enqueue, rounded up
  to the millisecond, never negative (a ``run_after`` in the past runs at once).
- **Status.** ``pending``/``scheduled``/``waiting`` -> READY (a retry in its backoff too),
  ``active`` -> RUNNING, a kept ``completed`` row -> SUCCESSFUL, ``dead`` -> FAILED.
- **Errors.** A dead job's ``last_error`` is the exception line then its traceback when a
  task raised; its class path is read from that line (a builtin's gets ``builtins.``). An
  attempt that ended without an exception of the task (a timeout, a worker that died twice,
  a return value that is not JSON) is ``emq.errors.JobDead`` with emq's reason as its
  traceback text; a cancelled job's is ``emq.errors.JobCancelled``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from ...model.events import Event
from ...model.records import Job
from ...model.states import JobState
from .compat import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, TaskError, TaskResult, TaskResultStatus

TRACEBACK = "Traceback (most recent call last):"
DEAD_CLASS = "emq.errors.JobDead"
CANCELLED_CLASS = "emq.errors.JobCancelled"
_CLASS = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")
_STATUS = {
    JobState.PENDING: "READY",
    JobState.SCHEDULED: "READY",
    JobState.WAITING: "READY",
    JobState.ACTIVE: "RUNNING",
    JobState.COMPLETED: "SUCCESSFUL",
    JobState.DEAD: "FAILED",
}


def emq_priority(django_priority: int) -> int:
    """The emq priority of a task: its Django priority negated (module doc)."""
    return -int(django_priority)


def django_priority(emq_priority: int) -> int:
    """The Django priority of a job, clamped to Django's range (a job enqueued by another
    emq producer may carry any 32-bit priority)."""
    return max(TASK_MIN_PRIORITY, min(TASK_MAX_PRIORITY, -emq_priority))


def delay_ms(run_after: datetime | None, now: datetime) -> int:
    """Milliseconds from ``now`` to ``run_after`` (rounded up; 0 if it is not later)."""
    if run_after is None:
        return 0
    return max(0, math.ceil((run_after - now).total_seconds() * 1000))


def moment(ms: int | None) -> datetime | None:
    """A server-clock ms as Django wants a time: aware UTC with ``USE_TZ``, else naive in
    the current time zone."""
    if ms is None:
        return None
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return at if settings.USE_TZ else timezone.make_naive(at)


def task_error(text: str, *, cancelled: bool = False) -> Any:
    """A :class:`TaskError` from an emq error text (module doc)."""
    if cancelled:
        return TaskError(exception_class_path=CANCELLED_CLASS, traceback=text)
    head = text.partition("\n")[0]
    name = head.split(": ", 1)[0].strip()
    at = text.find(TRACEBACK)
    if at < 0:
        at = text.find("\n...")  # the traceback's tail only (emq keeps its last 2,000 chars)
        at = at + 1 if at >= 0 else -1
    if at < 0 or not _CLASS.fullmatch(name):
        return TaskError(exception_class_path=DEAD_CLASS, traceback=text)
    path = name if "." in name else f"builtins.{name}"
    return TaskError(exception_class_path=path, traceback=text[at:])


def earlier_attempts(events: Iterable[Event]) -> tuple[int | None, list[str]]:
    """From a job's history: when its first attempt was claimed (server ms; None if the
    history no longer has it) and the errors of its retried attempts, in order."""
    first: int | None = None
    errors: list[str] = []
    for e in events:
        if e.event == "claimed" and first is None:
            token = e.fields.get("token", "")
            first = int(token) // 1000 if token.isdigit() else e.time_ms
        elif e.event == "retrying" and e.fields.get("error"):
            errors.append(e.fields["error"])
    return first, errors


def to_result(alias: str, task: Any, job: Job, history: Iterable[Event] | None) -> Any:
    """The :class:`TaskResult` of ``job``, the emq job of ``task`` (read from its row, and
    from its ``history`` when it had more than one attempt: None when it had one)."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    run_after = payload.get("run_after")
    task = dataclasses.replace(
        task,
        priority=django_priority(job.priority),
        run_after=datetime.fromisoformat(run_after) if run_after else None,
    )
    status = TaskResultStatus[_STATUS.get(JobState(job.state), "READY")]
    started, retried = earlier_attempts(history or [])
    errors = [task_error(e) for e in retried]
    if status == TaskResultStatus.FAILED and job.last_error:
        errors.append(task_error(job.last_error, cancelled=job.cancelled is not None))
    worker = job.worker or ""
    result = TaskResult(
        task=task,
        id=job.id,
        status=status,
        enqueued_at=moment(job.created_at),
        started_at=moment(started or job.claimed_at),
        finished_at=moment(job.completed_at or job.died_at),
        last_attempted_at=moment(job.claimed_at),
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=alias,
        errors=errors,
        worker_ids=[""] * max(0, job.attempts - 1) + [worker] * (job.attempts > 0),
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result
