"""The backend on a real server, without a worker: what an enqueue writes, and what
``get_result`` answers before a task runs."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from django_tasks import TaskResultStatus
from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist

from emq import InvalidOption, Queue
from emq.contrib.django import EmqTaskBackend


def test_a_view_enqueues_one_job_named_for_the_task(
    backend: Any, tasks: Any, queue: Queue, qname: str
) -> None:
    reply = Client().get("/enqueue", {"queue": qname, "a": 2, "b": 3})
    assert reply.status_code == 200
    result_id = reply.json()["id"]
    job = queue.job(result_id)
    assert job is not None and job.state == "pending" and job.max_attempts == 1
    assert job.name == "tests.contrib.django.project.tasks.add"
    assert job.payload == {"args": [2, 3], "kwargs": {}}
    result = tasks.add.get_result(result_id)
    assert result.status == TaskResultStatus.READY and result.args == [2, 3]
    assert result.task.queue_name == qname and result.worker_ids == [] and result.attempts == 0
    assert result.enqueued_at is not None and result.started_at is None


def test_priority_is_negated_and_run_after_schedules(
    backend: Any, tasks: Any, queue: Queue, qname: str
) -> None:
    urgent = tasks.add.using(queue_name=qname, priority=100).enqueue(1, 1)
    hour = timezone.now() + dt.timedelta(hours=1)
    later = tasks.add.using(queue_name=qname, priority=-7, run_after=hour).enqueue(1, 2)
    first, second = queue.job(urgent.id), queue.job(later.id)
    assert first is not None and first.priority == -100 and first.run_at_ms is None
    assert second is not None and second.priority == 7 and second.state == "scheduled"
    assert second.run_at_ms is not None and second.run_at_ms > second.created_at
    deferred = backend.get_result(later.id)
    assert deferred.status == TaskResultStatus.READY and deferred.task.priority == -7
    assert deferred.task.run_after == later.task.run_after


def test_an_unknown_id_does_not_exist(backend: Any) -> None:
    for unknown in ("JOB00000000000", "not-an-id"):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(unknown)


def test_bad_settings_and_tasks_are_refused_before_anything_is_written(
    backend: Any, tasks: Any, url: str
) -> None:
    with pytest.raises(InvalidOption, match="unknown keys"):
        EmqTaskBackend("x", {"QUEUES": ["q"], "OPTIONS": {"url": url, "ttl": 1}})
    with pytest.raises(InvalidOption, match="result_ttl_ms"):
        EmqTaskBackend("x", {"QUEUES": ["q"], "OPTIONS": {"url": url, "result_ttl_ms": 0}})
    with pytest.raises(InvalidTaskError, match="not valid"):
        tasks.add.using(queue_name="elsewhere")


async def test_aenqueue_and_aget_result(backend: Any, tasks: Any, queue: Queue, qname: str) -> None:
    result = await tasks.shout.using(queue_name=qname).aenqueue("hi")
    again = await tasks.shout.aget_result(result.id)
    assert again.status == TaskResultStatus.READY and again.args == ["hi"]
    job = queue.job(result.id)
    assert job is not None and job.name == "tests.contrib.django.project.tasks.shout"
