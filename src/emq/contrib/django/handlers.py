"""The worker side: an emq :class:`~emq.Worker` whose handlers are Django tasks.

A job's name is its task's module path; the worker imports that task the first time it
meets the name (:class:`TaskHandlers`), so any task of the project runs without being listed
anywhere. Each handler calls the task's function with the payload's ``args`` and ``kwargs``
(and a ``TaskContext`` first when the task takes one), in the worker's thread pool for a
sync task (Django's stale database connections closed before and after, as a request does)
or on its event loop for an ``async def`` one. What the function returns is the job's
result, kept ``result_ttl_ms`` (the handler's own, so it binds whatever the queue's stored
settings say); what it raises fails the attempt, and emq stores the exception line and its
traceback as the job's ``last_error``, which ``get_result`` reads back as the task's error.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.db import close_old_connections
from django.utils.module_loading import module_has_submodule

from ...errors import InvalidOption
from ...worker import HandlerSpec, JobContext, Worker
from .backend import EmqTaskBackend, load_task
from .compat import InvalidTask, Task, TaskContext, task_backends

BACKEND_ENV = "EMQ_DJANGO_BACKEND"  # the TASKS alias a worker serves ("default")
QUEUES_ENV = "EMQ_DJANGO_QUEUES"  # comma-separated queues (default: the backend's QUEUES)


class TaskHandlers(dict[str, HandlerSpec]):
    """The handlers of a Django worker: a task's handler is made when its name is first
    looked up. A name that does not import as a task gets a handler that raises why, so
    the job fails with that error (and is tried again, within its attempts, after a deploy
    that adds the task); it is not remembered."""

    def __init__(self, alias: str, result_ttl_ms: int) -> None:
        super().__init__()
        self.alias = alias
        self.result_ttl_ms = result_ttl_ms

    def get(self, name: str, default: Any = None) -> Any:
        spec = super().get(name)
        if spec is not None:
            return spec
        try:
            task = load_task(name)
        except Exception as exc:  # the module itself may raise anything at import
            why = str(exc) if isinstance(exc, InvalidTask) else (
                f"cannot import task {name!r}: {type(exc).__name__}: {exc}"
            )  # fmt: skip
            return HandlerSpec.of(name, _raiser(why))
        spec = self[name] = HandlerSpec.of(
            name, handler_for(task, self.alias), result_ttl_ms=self.result_ttl_ms
        )
        return spec


def _raiser(why: str) -> Callable[[Any], None]:
    def cannot_run(payload: Any) -> None:
        raise InvalidTask(why)

    return cannot_run


def _call(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    if not isinstance(payload, dict):
        raise TypeError(f"a task's payload is an object with args and kwargs, got {payload!r}")
    return list(payload.get("args") or []), dict(payload.get("kwargs") or {})


def handler_for(task: Any, alias: str) -> Callable[..., Any]:
    """The emq handler that runs ``task``: ``handler(payload, ctx)``, async for an async
    task. The context's result is the job as it stands (RUNNING, this attempt)."""
    func, with_context = task.func, task.takes_context

    if task_is_async(task):

        async def run_async(payload: Any, ctx: JobContext) -> Any:
            args, kwargs = _call(payload)
            if with_context:
                result = await task_backends[alias].aget_result(ctx.id)
                args.insert(0, TaskContext(task_result=result))
            return await func(*args, **kwargs)

        return run_async

    def run(payload: Any, ctx: JobContext) -> Any:
        args, kwargs = _call(payload)
        close_old_connections()
        try:
            if with_context:
                result = task_backends[alias].get_result(ctx.id)
                args.insert(0, TaskContext(task_result=result))
            return func(*args, **kwargs)
        finally:
            close_old_connections()

    return run


def task_is_async(task: Any) -> bool:
    return inspect.iscoroutinefunction(task.func)


def build_worker() -> Worker:
    """The worker of the backend ``EMQ_DJANGO_BACKEND`` names (``default``), serving the
    queues of ``EMQ_DJANGO_QUEUES`` (default: the backend's ``QUEUES``), on the backend's
    server. Django must be set up."""
    alias = os.environ.get(BACKEND_ENV) or "default"
    backend = task_backends[alias]
    if not isinstance(backend, EmqTaskBackend):
        raise InvalidOption(
            f"TASKS[{alias!r}] is {type(backend).__name__}, not emq.contrib.django.EmqTaskBackend"
        )
    queues = [q for q in (os.environ.get(QUEUES_ENV) or "").split(",") if q]
    worker = Worker(queues or sorted(backend.queues), url=backend.url,
                    queue_options=backend.queue_options)  # fmt: skip
    handlers = worker.handlers = TaskHandlers(alias, backend.result_ttl_ms)
    for path in discover():
        handlers.get(path)  # listed at start (and in the metrics) before their first job
    return worker


def discover() -> list[str]:
    """The module paths of the tasks in the ``tasks`` module of each installed app (the
    others are found when their first job arrives)."""
    found: list[str] = []
    for app in apps.get_app_configs():
        if not module_has_submodule(app.module, "tasks"):
            continue
        module = importlib.import_module(f"{app.name}.tasks")
        for value in vars(module).values():
            if isinstance(value, Task) and value.func.__module__ == module.__name__:
                found.append(value.module_path)
    return sorted(set(found))
