"""The one place that knows where Django's task framework lives: ``django.tasks`` (Django 6
and later) when it is there, else the ``django_tasks`` backport (Django 5.2 on Python 3.11).

Everything the rest of :mod:`emq.contrib.django` uses from the framework is named here, under
one name whichever module provided it. The framework is untyped for us (Django ships no
types), so its names are ``Any``.
"""

from __future__ import annotations

import importlib
from typing import Any

try:
    _root: Any = importlib.import_module("django.tasks")
    FRAMEWORK = "django.tasks"
except ImportError:  # Django before 6: the backport
    _root = importlib.import_module("django_tasks")
    FRAMEWORK = "django_tasks"

try:
    _base: Any = importlib.import_module(f"{FRAMEWORK}.base")
except ImportError:  # a later layout: the task and its result in their own module
    _base = importlib.import_module(f"{FRAMEWORK}.task")
_backends: Any = importlib.import_module(f"{FRAMEWORK}.backends.base")
_exceptions: Any = importlib.import_module(f"{FRAMEWORK}.exceptions")
_signals: Any = importlib.import_module(f"{FRAMEWORK}.signals")

BaseTaskBackend: Any = _backends.BaseTaskBackend
Task: Any = getattr(_root, "Task", None) or _base.Task  # the backport's root lacks it
TaskContext: Any = _root.TaskContext
TaskError: Any = _base.TaskError
TaskResult: Any = _root.TaskResult
TaskResultStatus: Any = _root.TaskResultStatus
TASK_MIN_PRIORITY: int = _base.TASK_MIN_PRIORITY
TASK_MAX_PRIORITY: int = _base.TASK_MAX_PRIORITY
task_backends: Any = _root.task_backends
task_enqueued: Any = _signals.task_enqueued

# Django 6 renamed a few exceptions of the backport; take whichever this version has
InvalidTask: type[Exception] = getattr(_exceptions, "InvalidTask", None) or (
    _exceptions.InvalidTaskError
)
ResultDoesNotExist: type[Exception] = getattr(_exceptions, "TaskResultDoesNotExist", None) or (
    _exceptions.ResultDoesNotExist
)

__all__ = [
    "FRAMEWORK",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTask",
    "ResultDoesNotExist",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
]
