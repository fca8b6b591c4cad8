"""``EmqTaskBackend``: Django's task framework (DEP 14) on emq.

A task is one emq job: its name is the task's module path, its payload
``{"args": [...], "kwargs": {...}}`` (JSON), its queue the task's ``queue_name``, its id the
result's id. ``manage.py emq_worker`` (:mod:`.handlers`) runs it. Results are read back from
the job's own row (kept ``result_ttl_ms`` after it completes; a failed task is an emq dead
letter, kept until it is removed or redriven), so ``get_result`` answers in any process with
one read per configured queue at most, plus the job's history when it had more than one
attempt. See docs/django.md.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.module_loading import import_string

from ...calls.call import check_job_name
from ...errors import EmqError, InvalidId, InvalidName, InvalidOption
from ...model.checks import check_int
from ...model.config import MAX_ATTEMPTS, MAX_KEEP_MS, QueueOptions
from ...model.ids import minted_at_ms
from ...model.keys import QueueKeys
from ...model.records import Job
from ...queue._sync.queue import Queue
from ...server.urls import check_url
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    ResultDoesNotExist,
    Task,
    TaskResult,
    TaskResultStatus,
    task_enqueued,
)
from .results import delay_ms, emq_priority, moment, to_result

DEFAULT_RESULT_TTL_MS = 86_400_000  # a day
OPTIONS = {"url", "result_ttl_ms", "max_attempts"}
MAX_NAME = 128  # emq's longest job name


class EmqTaskBackend(BaseTaskBackend):  # type: ignore[misc]  # the framework is untyped
    """``TASKS = {"default": {"BACKEND": "emq.contrib.django.EmqTaskBackend", "QUEUES":
    [...], "OPTIONS": {...}}}``. ``OPTIONS``: ``url`` (else ``EMQ_URL``), ``result_ttl_ms``
    (how long a successful task's result stays readable after it finished; a day by default),
    ``max_attempts`` (1 by default: a task that raises is FAILED; more retry it with emq's
    backoff). Bad settings raise :class:`~emq.errors.InvalidOption` when the backend is
    first used, before any key is written."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = dict(self.options)
        unknown = sorted(set(options) - OPTIONS)
        if unknown:
            raise InvalidOption(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {unknown}; known: {sorted(OPTIONS)}"
            )
        if not self.queues:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['QUEUES'] must name a queue or more")
        for name in self.queues:
            QueueKeys.of(name)  # InvalidName now, not at the first enqueue
        url = options.get("url") or os.environ.get("EMQ_URL")
        if not url:
            raise InvalidOption(f"TASKS[{alias!r}] needs OPTIONS['url'] (or EMQ_URL)")
        self.url: str = check_url(url)
        self.result_ttl_ms: int = check_int(
            "result_ttl_ms", options.get("result_ttl_ms", DEFAULT_RESULT_TTL_MS), 1,
            MAX_KEEP_MS, "ms",
        )  # fmt: skip
        self.max_attempts: int = check_int(
            "max_attempts", options.get("max_attempts", 1), 1, MAX_ATTEMPTS
        )
        self._queues: dict[str, Queue] = {}

    @property
    def queue_options(self) -> QueueOptions:
        """What the backend's queues are opened with: results kept ``result_ttl_ms``. The
        first process to call a queue stores these as its settings (docs/control.md, Queue
        settings), so every worker of the queue keeps results."""
        return QueueOptions(result_ttl_ms=self.result_ttl_ms)

    def queue(self, name: str) -> Queue:
        """The emq queue ``name`` of this backend (opened once per backend object: Django
        keeps one backend per thread)."""
        q = self._queues.get(name)
        if q is None:
            q = self._queues[name] = Queue.from_url(self.url, name, options=self.queue_options)
        return q

    def validate_task(self, task: Any) -> None:
        super().validate_task(task)
        path = task.module_path
        if len(path) > MAX_NAME or not _is_name(path):
            raise InvalidTask(
                f"the task's module path {path!r} cannot name an emq job: at most "
                f"{MAX_NAME} characters from A-Z a-z 0-9 . _ : / -"
            )

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """One emq job, admitted in one step; the result is READY, its id the job's."""
        self.validate_task(task)
        result = TaskResult(
            task=task, id="", status=TaskResultStatus.READY, enqueued_at=None,
            started_at=None, finished_at=None, last_attempted_at=None, args=list(args),
            kwargs=dict(kwargs), backend=self.alias, errors=[], worker_ids=[],
        )  # fmt: skip  # built first: it normalises args and kwargs to JSON types
        payload: dict[str, Any] = {"args": result.args, "kwargs": result.kwargs}
        if task.run_after is not None:
            payload["run_after"] = task.run_after.isoformat()
        job_id = self.queue(task.queue_name).enqueue(
            task.module_path,
            payload,
            delay_ms=delay_ms(task.run_after, timezone.now()),
            priority=emq_priority(task.priority),
            max_attempts=self.max_attempts,
        )
        object.__setattr__(result, "id", str(job_id))
        object.__setattr__(result, "enqueued_at", moment(minted_at_ms(job_id)))
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        """The task's result as its job stands now, from any process; raises the
        framework's ``TaskResultDoesNotExist`` for an id no configured queue has (never
        enqueued, removed, or finished longer ago than its retention)."""
        found = self.find(result_id)
        if found is None:
            raise ResultDoesNotExist(f"no task result {result_id!r} in queues {self._names()}")
        q, job = found
        task = load_task(job.name)
        history = None
        if job.attempts > 1:  # only then do the first start and earlier errors differ
            try:
                history = q.history(job.id)
            except EmqError:  # archived without a local floor: the row alone answers
                history = None
        return to_result(self.alias, on_queue(task, q.name), job, history)

    def find(self, job_id: str) -> tuple[Queue, Job] | None:
        """The job ``job_id`` and its queue: the first configured queue that has it."""
        for name in self._names():
            q = self.queue(name)
            try:
                job = q.job(job_id)
            except (InvalidId, InvalidName):
                return None
            if job is not None:
                return q, job
        return None

    def _names(self) -> list[str]:
        return sorted(self.queues)


def load_task(path: str) -> Any:
    """The :class:`Task` a job name (a module path) names, imported; raises the framework's
    invalid-task error for a name that is not one."""
    try:
        obj = import_string(path)
    except ImportError as exc:
        raise InvalidTask(f"cannot import task {path!r}: {exc}") from exc
    if not isinstance(obj, Task) or obj.module_path != path:
        raise InvalidTask(f"{path!r} is not a task (a function decorated with @task)")
    return obj


def on_queue(task: Any, queue: str) -> Any:
    """``task`` as it ran: on the queue its job is in."""
    return task if task.queue_name == queue else task.using(queue_name=queue)


def _is_name(text: str) -> bool:
    try:
        check_job_name(text)
    except InvalidName:
        return False
    return True
