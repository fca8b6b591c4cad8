"""``manage.py emq_worker`` as a real process: tasks run, and their results (a return value,
an exception with its traceback, an async task's, a context's) are read back in this
process; priority decides the order; a deferred task waits."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone
from django_tasks import TaskResultStatus
from django_tasks.exceptions import TaskResultDoesNotExist

from emq import Queue

from .conftest import manage

pytestmark = [pytest.mark.slow, pytest.mark.servers("valkey"), pytest.mark.timeout(90)]


def test_a_burst_worker_runs_every_kind_of_task(
    backend: Any, tasks: Any, queue: Queue, url: str, qname: str
) -> None:
    on = {"queue_name": qname}
    low = tasks.add.using(priority=-50, **on).enqueue(0, 0)
    high = tasks.add.using(priority=50, **on).enqueue(2, 3)
    failing = tasks.refuse.using(**on).enqueue("no")
    loud = tasks.shout.using(**on).enqueue("hi")
    ctx = tasks.attempt.using(**on).enqueue(tag="t")
    later = tasks.add.using(run_after=timezone.now() + dt.timedelta(hours=1), **on).enqueue(1, 1)
    stray = queue.enqueue("tests.contrib.django.project.tasks.Refused", {}, max_attempts=1)

    done = manage("emq_worker", "--burst", "--queue", qname, "--concurrency", "1",
                  url=url, qname=qname)  # fmt: skip
    assert done.returncode == 0, done.stderr

    ok = tasks.add.get_result(high.id)
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 5
    assert ok.errors == [] and ok.attempts == 1 and ok.worker_ids[0]
    assert ok.enqueued_at <= ok.started_at == ok.last_attempted_at <= ok.finished_at
    first, second = queue.job(high.id), queue.job(low.id)
    assert first is not None and second is not None and first.token < second.token  # 50 first

    bad = backend.get_result(failing.id)
    assert bad.status == TaskResultStatus.FAILED and bad.finished_at is not None
    (error,) = bad.errors
    assert error.exception_class_path == "tests.contrib.django.project.tasks.Refused"
    assert error.exception_class is tasks.Refused
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert "raise Refused(why)" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        bad.return_value  # noqa: B018

    assert tasks.shout.get_result(loud.id).return_value == "HI"
    seen = tasks.attempt.get_result(ctx.id).return_value
    assert seen == {"tag": "t", "id": ctx.id, "attempt": 1, "status": "RUNNING"}

    not_a_task = queue.job(stray)
    assert not_a_task is not None and not_a_task.state == "dead" and not_a_task.last_error
    assert not_a_task.last_error.startswith("django_tasks.exceptions.InvalidTaskError: ")
    assert "is not a task" in not_a_task.last_error

    waiting = backend.get_result(later.id)
    assert waiting.status == TaskResultStatus.READY
    job = queue.job(later.id)
    assert job is not None and job.state == "scheduled" and job.run_at_ms is not None


def test_an_expired_result_does_not_exist(backend: Any, tasks: Any, url: str, qname: str) -> None:
    gone = tasks.add.using(queue_name=qname).enqueue(1, 2)
    Queue.from_url(url, qname).remove(gone.id)
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(gone.id)


def test_processes_run_under_the_supervisor_and_a_stray_queue_is_refused(
    backend: Any, tasks: Any, url: str, qname: str
) -> None:
    results = [tasks.add.using(queue_name=qname).enqueue(i, i) for i in range(4)]
    done = manage("emq_worker", "--burst", "--processes", "2", "--queue", qname,
                  url=url, qname=qname)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"event": "supervising"' in done.stderr
    assert [backend.get_result(r.id).return_value for r in results] == [0, 2, 4, 6]
    stray = manage("emq_worker", "--burst", "--queue", "elsewhere", url=url, qname=qname)
    assert stray.returncode == 1 and "not in TASKS['default']['QUEUES']" in stray.stderr
