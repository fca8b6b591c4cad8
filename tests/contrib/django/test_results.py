"""What ``get_result`` reads from a job's row and history: the error of each attempt (the
class path from emq's error text), the first start and the workers of a job tried twice.
Attempts are driven by hand (claim, fail) on a real server; the texts are emq's own."""

from __future__ import annotations

from typing import Any

import pytest
from django.test.utils import override_settings
from django_tasks import TaskResultStatus

from emq import Queue
from emq.contrib.django.results import task_error
from emq.worker.outcome import describe


class Odd(Exception):
    pass


def _error_of(exc: BaseException) -> str:
    try:
        raise exc
    except BaseException as raised:
        return describe(raised)


@pytest.mark.parametrize(
    ("exc", "path"),
    [
        (ValueError("a: b\nsecond line"), "builtins.ValueError"),
        (Odd(), f"{__name__}.Odd"),
        (KeyError("k"), "builtins.KeyError"),
    ],
)
def test_a_raised_exception_gives_its_class_path_and_traceback(
    exc: BaseException, path: str
) -> None:
    error = task_error(_error_of(exc))
    assert error.exception_class_path == path and error.exception_class is type(exc)
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert "raise exc" in error.traceback


@pytest.mark.parametrize(
    "text",
    ["stalled", "timeout: the attempt ran past 5 s", "no handler registered for 'x.y'",
     "the handler's return value is not kept: result is not JSON-serialisable: set"],
)  # fmt: skip
def test_an_end_that_is_not_an_exception_is_job_dead(text: str) -> None:
    error = task_error(text)
    assert error.exception_class_path == "emq.errors.JobDead" and error.traceback == text
    assert task_error(text, cancelled=True).exception_class_path == "emq.errors.JobCancelled"


def test_a_cut_traceback_still_names_its_class() -> None:
    text = "builtins.ValueError: boom\n..." + "x" * 50 + "\nValueError: boom"
    error = task_error(text.replace("builtins.", ""))
    assert error.exception_class_path == "builtins.ValueError"
    assert error.traceback.startswith("...")


def test_a_job_tried_twice_reads_its_history(
    tasks: Any, url: str, qname: str, queue: Queue
) -> None:
    from django_tasks import task_backends

    config = {"BACKEND": "emq.contrib.django.EmqTaskBackend", "QUEUES": ["default", qname],
              "OPTIONS": {"url": url, "max_attempts": 2}}  # fmt: skip
    with override_settings(TASKS={"default": config}):
        backend = task_backends["default"]
        result = tasks.refuse.using(queue_name=qname).enqueue("no")
        (first,) = queue.claim(1, worker="w1")
        assert queue.fail(first.id, first.token, _error_of(KeyError("1")), delay_ms=0)
        (second,) = queue.claim(1, worker="w2")
        running = backend.get_result(result.id)
        assert running.status == TaskResultStatus.RUNNING and running.worker_ids == ["", "w2"]
        assert [e.exception_class_path for e in running.errors] == ["builtins.KeyError"]
        assert running.started_at <= running.last_attempted_at
        assert queue.fail(second.id, second.token, _error_of(Odd())) == "dead"
        failed = backend.get_result(result.id)
        assert failed.status == TaskResultStatus.FAILED and failed.attempts == 2
        paths = [e.exception_class_path for e in failed.errors]
        assert paths == ["builtins.KeyError", f"{__name__}.Odd"]
