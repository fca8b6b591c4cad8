"""Typed tasks: a function that is its own job name, payload check and enqueue.

``tasks = Tasks("emails", url=...)`` holds the tasks of one queue and knows where to send
them; ``@tasks.task()`` makes a function a :class:`Task`. Making tasks connects to nothing
and starts nothing, so a producer imports the module that defines them and enqueues:
``send.enqueue(to="a@b")`` (checked by mypy against ``send``'s own signature, through
``ParamSpec``, and at run time before anything is written). A worker runs them with
``Worker(..., tasks=tasks)`` or ``worker.include(tasks)``; ``@worker.task()`` makes one
straight on a worker. The payload is the JSON object of the arguments by parameter name
(:mod:`.signature`), so a job enqueued by name, ``q.enqueue("send", {"to": "a@b"})``, runs
the same task. See docs/tasks.md.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, Unpack, overload

from ..calls.call import check_job_name
from ..calls.jobs import QueueCore
from ..errors import InvalidOption, TaskNotBound
from ..model.config import Backoff, QueueOptions
from ..queue._async.partitions import AsyncPartitionedQueue
from ..queue._async.queue import AsyncQueue
from ..queue._sync.partitions import PartitionedQueue
from ..queue._sync.queue import Queue
from ..server.urls import check_url
from .batch_items import ItemSignature, batch_handler
from .batches import BatchContext
from .bound_task import _TARGETS, AsyncTarget, BoundTask, SyncTarget
from .child import TASK_FUNCTION
from .children import ref_of
from .context import JobContext
from .options import HandlerSpec, TaskOptions
from .signature import ChildTask, Signature

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
_SEND_FIELDS = ("delay_ms", "priority", "max_attempts", "key", "id", "lane", "lifo")


class Tasks:
    """The tasks of the queue ``queue``, and where they are sent.

    Where a ``task.enqueue`` goes, first found: the queue given to ``task.using(queue=q)``;
    a queue bound with :meth:`bind` (a :class:`~emq.Queue` for ``enqueue``, an
    :class:`~emq.AsyncQueue` for ``aenqueue``); one this object opens on ``url`` at its
    first enqueue (and closes in :meth:`close`). Nothing found:
    :class:`~emq.errors.TaskNotBound`, before anything is sent. Thread-safe.
    """

    def __init__(
        self, queue: str, *, url: str | None = None, options: QueueOptions | None = None
    ) -> None:
        self.core = QueueCore(queue, options)  # checks the name; validates enqueue options
        self.queue_name = queue
        self.url = check_url(url) if url is not None else None
        self.options = options
        self._tasks: dict[str, BaseTask[Any, Any]] = {}
        self._sync: SyncTarget | None = None
        self._async: AsyncTarget | None = None
        self._opened: list[Queue | AsyncQueue] = []
        self._lock = threading.Lock()
        self._served: list[Callable[[BaseTask[Any, Any]], None]] = []

    @classmethod
    def from_url(cls, url: str, queue: str, *, options: QueueOptions | None = None) -> Tasks:
        """``Tasks(queue, url=url)``: the queue is opened at the first enqueue, not now."""
        return cls(queue, url=url, options=options)

    def bind(self, queue: Queue | AsyncQueue | PartitionedQueue | AsyncPartitionedQueue) -> None:
        """Send this queue's tasks through ``queue`` (one of this queue's name): a sync one
        for ``enqueue``, an async one for ``aenqueue``; binding again replaces it."""
        if not isinstance(queue, _TARGETS):
            raise InvalidOption(f"Tasks.bind takes a Queue or an AsyncQueue, got {queue!r}")
        if queue.name != self.queue_name:
            raise InvalidOption(
                f"the tasks of {self.queue_name!r} cannot be bound to queue {queue.name!r}: "
                "send one call elsewhere with task.using(queue=...)"
            )
        with self._lock:
            if isinstance(queue, AsyncQueue | AsyncPartitionedQueue):
                self._async = queue
            else:
                self._sync = queue

    @overload
    def task(
        self, name: str | None = None, *, batch_size: None = None, **o: Unpack[TaskOptions]
    ) -> TaskDecorator: ...

    @overload
    def task(
        self, name: str | None = None, *, batch_size: int, **o: Unpack[TaskOptions]
    ) -> BatchTaskDecorator: ...

    def task(
        self,
        name: str | None = None,
        *,
        max_attempts: int | None = None,
        timeout_ms: int | None = None,
        backoff: Backoff | None = None,
        result_ttl_ms: int | None = None,
        lane: str | None = None,
        priority: int | None = None,
        isolation: str = "thread",
        max_memory_mb: int | None = None,
        max_jobs_per_child: int | None = None,
        batch_size: int | None = None,
        batch_wait_ms: int | None = None,
    ) -> Any:
        """Decorator: ``@tasks.task()`` makes the function a task of this queue.

        ``name``: its job name (default: the function's ``__name__``, as ``@worker.handler``
        does). ``max_attempts``, ``timeout_ms``, ``backoff``, ``result_ttl_ms``: its handler's
        policy on the worker (``Worker.register``); ``max_attempts`` is also each job's own.
        ``lane``, ``priority``: defaults of each enqueue (``using`` overrides them).
        ``isolation="process"`` (with ``max_memory_mb``, ``max_jobs_per_child``) runs it in
        a child process (docs/worker.md, Handlers in their own process). ``batch_size``
        (with ``batch_wait_ms``) makes a batch task: the function takes ``list[Item]`` and
        ``enqueue`` one item (docs/batches.md)."""
        if name is not None and not isinstance(name, str):
            raise InvalidOption("write @tasks.task() with its parentheses (or give a name)")
        policy = {"max_attempts": max_attempts, "timeout_ms": timeout_ms,
                  "backoff": backoff, "result_ttl_ms": result_ttl_ms, "isolation": isolation,
                  "max_memory_mb": max_memory_mb,
                  "max_jobs_per_child": max_jobs_per_child}  # fmt: skip
        send = {"max_attempts": max_attempts, "lane": lane, "priority": priority}
        send = {k: v for k, v in send.items() if v is not None}
        if batch_size is None and batch_wait_ms is None:
            return TaskDecorator(self, name, policy, send)
        policy |= {"batch_size": batch_size, "batch_wait_ms": batch_wait_ms}
        return BatchTaskDecorator(self, name, policy, send)

    def __iter__(self) -> Iterator[BaseTask[Any, Any]]:
        with self._lock:
            return iter(list(self._tasks.values()))

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, name: str) -> BaseTask[Any, Any]:
        return self._tasks[name]

    def __repr__(self) -> str:
        return f"Tasks({self.queue_name!r}, {sorted(self._tasks)})"

    def serve(self, queues: list[str], register: Callable[[BaseTask[Any, Any]], None]) -> None:
        """Give ``register`` (a worker's) every task, now and as each is made later; refused
        unless this queue is one of the worker's ``queues``."""
        if self.queue_name not in queues:
            raise InvalidOption(
                f"the tasks of {self.queue_name!r} run on a worker of that queue; this one "
                f"serves {queues}"
            )
        with self._lock:
            self._served.append(register)
            tasks = list(self._tasks.values())
        for task in tasks:
            register(task)

    def close(self) -> None:
        """Close the sync queue this object opened (bound ones are the caller's)."""
        for q in self._take_opened(Queue):
            q.close()

    async def aclose(self) -> None:
        """Close the async queue this object opened (bound ones are the caller's)."""
        for q in self._take_opened(AsyncQueue):
            await q.close()

    def _take_opened(self, kind: type[Any]) -> list[Any]:
        with self._lock:
            mine = [q for q in self._opened if isinstance(q, kind)]
            self._opened = [q for q in self._opened if not isinstance(q, kind)]
            if mine and isinstance(self._sync, kind):
                self._sync = None
            if mine and isinstance(self._async, kind):
                self._async = None
        return mine

    def _add(self, task: BaseTask[Any, Any]) -> None:
        with self._lock:
            if task.name in self._tasks:
                raise InvalidOption(
                    f"the queue {self.queue_name!r} already has a task named {task.name!r}; "
                    "give one of them another name: @tasks.task('other')"
                )
            self._tasks[task.name] = task
            served = list(self._served)
        for register in served:
            register(task)

    def sync_queue(self) -> SyncTarget:
        """The queue ``enqueue`` sends through (bound, or opened on ``url`` now)."""
        q = self._sync
        if q is None:
            with self._lock:
                if self._sync is None:
                    self._sync = self._open(Queue)
                q = self._sync
        return q

    def async_queue(self) -> AsyncTarget:
        """The queue ``aenqueue`` sends through (bound, or opened on ``url`` now)."""
        q = self._async
        if q is None:
            with self._lock:
                if self._async is None:
                    self._async = self._open(AsyncQueue)
                q = self._async
        return q

    def _open(self, kind: type[Queue] | type[AsyncQueue]) -> Any:
        if self.url is None:
            how = "an AsyncQueue" if kind is AsyncQueue else "a Queue"
            raise TaskNotBound(
                f"no queue to send the tasks of {self.queue_name!r} through: give Tasks a url=, "
                f"bind {how} (tasks.bind(q)) or pass one to task.using(queue=q)"
            )
        q = kind.from_url(self.url, self.queue_name, options=self.options)
        self._opened.append(q)
        return q


class BaseTask(BoundTask[P], Generic[P, R]):
    """What :class:`Task` and :class:`ContextTask` share: the function, its job name, its
    queue's :class:`Tasks`, its signature and the handler a worker registers."""

    __slots__ = ("__dict__", "fn", "handler", "is_async", "name", "policy", "signature", "tasks")

    def __init__(
        self,
        tasks: Tasks,
        fn: Callable[..., R],
        signature: Signature,
        policy: dict[str, Any],
        send: dict[str, Any],
    ) -> None:
        super().__init__(self, send)
        self.tasks = tasks
        self.fn = fn
        setattr(self, TASK_FUNCTION, fn)  # how a handler's child finds it under the task's name
        self.name = signature.name
        self.policy = policy  # Worker.register's keyword arguments
        self.signature = signature
        self.is_async = inspect.iscoroutinefunction(fn)
        self.handler = self._handler()
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]
        HandlerSpec.of(self.name, self.handler, **policy)  # refused now, not at the worker
        self.check(send)

    def check(self, send: dict[str, Any]) -> None:
        """Refuse enqueue options that ``Queue.enqueue`` would refuse, now."""
        fields: dict[str, Any] = {k: send.get(k) for k in _SEND_FIELDS}
        fields["delay_ms"] = fields["delay_ms"] or 0
        fields["priority"] = fields["priority"] or 0
        fields["lifo"] = bool(fields["lifo"])
        self.tasks.core.job_group(self.name, None, **fields)

    def _handler(self) -> Callable[[Any, JobContext], Any]:
        """``handler(payload, ctx)`` as ``Worker.register`` takes it: the payload unpacked into
        the function (:class:`~emq.Permanent` when it does not fit: no retry)."""
        fn, sig, takes_ctx = self.fn, self.signature, self.signature.takes_ctx
        if self.policy.get("isolation") == "process":
            if takes_ctx:
                raise InvalidOption(f"task {self.name!r}: a task in a child process has no ctx")
            return ChildTask(self.name, ref_of(self.name, fn))  # type: ignore[return-value]
        if self.is_async:

            async def run_async(payload: Any, ctx: JobContext) -> Any:
                args, kwargs = sig.call_args(payload)
                if takes_ctx:
                    return await fn(ctx, *args, **kwargs)  # type: ignore[misc]
                return await fn(*args, **kwargs)  # type: ignore[misc]

            return run_async

        def run(payload: Any, ctx: JobContext) -> Any:
            args, kwargs = sig.call_args(payload)
            return fn(ctx, *args, **kwargs) if takes_ctx else fn(*args, **kwargs)

        return run

    def __repr__(self) -> str:
        return f"<task {self.name!r} of {self.tasks.queue_name!r}>"


class Task(BaseTask[P, R]):
    """A function made a task: calling it runs the function (as a test does); ``enqueue`` /
    ``aenqueue`` (and ``using(...)``) send a job of it with the same arguments."""

    __slots__ = ()

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)


class ContextTask(BaseTask[P, R]):
    """A task whose function takes the job's :class:`~emq.JobContext` first: the worker
    gives it, so ``enqueue`` takes the other arguments only; a direct call takes it first."""

    __slots__ = ()

    def __call__(self, ctx: JobContext, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(ctx, *args, **kwargs)


class TaskDecorator:
    """What ``@tasks.task(...)`` applies: makes a :class:`Task` (a :class:`ContextTask`
    when the first parameter is the job's context) and adds it to its :class:`Tasks`."""

    __slots__ = ("_name", "_policy", "_send", "_tasks")

    def __init__(
        self, tasks: Tasks, name: str | None, policy: dict[str, Any], send: dict[str, Any]
    ) -> None:
        self._tasks, self._name, self._policy, self._send = tasks, name, policy, send

    @overload
    def __call__(self, fn: Callable[Concatenate[JobContext, P], R]) -> ContextTask[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R]) -> Task[P, R]: ...

    def __call__(self, fn: Callable[..., Any]) -> BaseTask[Any, Any]:
        if not callable(fn):
            raise InvalidOption(f"a task is made of a function, got {fn!r}")
        sig = Signature(check_job_name(self._name or getattr(fn, "__name__", "")), fn)
        kind = ContextTask if sig.takes_ctx else Task
        task: BaseTask[Any, Any] = kind(self._tasks, fn, sig, self._policy, self._send)
        self._tasks._add(task)
        return task


class BatchTask(BaseTask[[T], R]):
    """A batch task: ``enqueue(item)`` sends one job of one item (as does ``using(...)``);
    calling it runs the function on a list of items, as a test does."""

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        return self.fn(*args, **kwargs)

    def _handler(self) -> Callable[[Any, Any], Any]:
        assert isinstance(self.signature, ItemSignature)
        return batch_handler(self.signature, self.fn, self.is_async)  # type: ignore[no-any-return]


class BatchTaskDecorator:
    """What ``@tasks.task(batch_size=N)`` applies: makes a :class:`BatchTask`."""

    __slots__ = ("_name", "_policy", "_send", "_tasks")

    def __init__(
        self, tasks: Tasks, name: str | None, policy: dict[str, Any], send: dict[str, Any]
    ) -> None:
        if policy.get("isolation") == "process":
            raise InvalidOption(
                "a batch task runs in the worker (threads or asyncio); for a child process, "
                "register a batch handler: worker.register(name, fn, batch_size=..., "
                "isolation='process')"
            )
        self._tasks, self._name, self._policy, self._send = tasks, name, policy, send

    @overload
    def __call__(self, fn: Callable[[BatchContext, list[T]], R]) -> BatchTask[T, R]: ...

    @overload
    def __call__(self, fn: Callable[[list[T]], R]) -> BatchTask[T, R]: ...

    def __call__(self, fn: Callable[..., Any]) -> BatchTask[Any, Any]:
        if not callable(fn):
            raise InvalidOption(f"a task is made of a function, got {fn!r}")
        name = check_job_name(self._name or getattr(fn, "__name__", ""))
        sig = ItemSignature(name, fn)
        task: BatchTask[Any, Any] = BatchTask(self._tasks, fn, sig, self._policy, self._send)
        self._tasks._add(task)
        return task
