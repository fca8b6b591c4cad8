"""A task with the options of its enqueues: what ``task.using(...)`` returns, and what every
task is (:mod:`.tasks`). Its ``enqueue`` checks the arguments against the task's signature
before anything is written."""

from __future__ import annotations

from typing import Any, Generic, ParamSpec, Protocol

from ..errors import InvalidOption, InvalidPayload
from ..model.records import EnqueuedId, JobSpec
from ..queue._async.partitions import AsyncPartitionedQueue
from ..queue._async.queue import AsyncQueue
from ..queue._sync.partitions import PartitionedQueue
from ..queue._sync.queue import Queue
from .signature import Signature

P = ParamSpec("P")
SyncTarget = Queue | PartitionedQueue
AsyncTarget = AsyncQueue | AsyncPartitionedQueue
_TARGETS = (Queue, PartitionedQueue, AsyncQueue, AsyncPartitionedQueue)


class Sender(Protocol):
    """Where a task's enqueues go: its queue's :class:`~emq.Tasks`."""

    queue_name: str

    def sync_queue(self) -> SyncTarget: ...

    def async_queue(self) -> AsyncTarget: ...


class Sent(Protocol):
    """What :class:`BoundTask` needs of its task (a :class:`~emq.Task` is one)."""

    name: str
    signature: Signature
    tasks: Sender

    def check(self, send: dict[str, Any]) -> None: ...


class BoundTask(Generic[P]):
    """A task with the options of its enqueues (``task.using(...)``): ``enqueue`` and
    ``aenqueue`` take the function's own arguments and return the job's id."""

    __slots__ = ("_queue", "_send", "_task")

    def __init__(
        self,
        task: Sent,
        send: dict[str, Any],
        queue: SyncTarget | AsyncTarget | None = None,
    ) -> None:
        self._task = task
        self._send = send
        self._queue = queue

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueuedId:
        """Admit one job of this task (``Queue.enqueue``) with these arguments as its payload,
        checked against the function first (:class:`~emq.errors.InvalidArguments`: nothing
        is written)."""
        task = self._task
        payload = task.signature.payload(args, kwargs)
        q = self._queue if self._queue is not None else task.tasks.sync_queue()
        if not isinstance(q, Queue | PartitionedQueue):
            raise InvalidOption(f"task {task.name!r}: enqueue needs a Queue; use aenqueue")
        try:
            return q.enqueue(task.name, payload, **self._send)
        except InvalidPayload as exc:
            raise task.signature.refusal(payload, exc) from exc

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueuedId:
        """:meth:`enqueue` through an async queue (``AsyncQueue.enqueue``)."""
        task = self._task
        payload = task.signature.payload(args, kwargs)
        q = self._queue if self._queue is not None else task.tasks.async_queue()
        if not isinstance(q, AsyncQueue | AsyncPartitionedQueue):
            raise InvalidOption(f"task {task.name!r}: aenqueue needs an AsyncQueue; use enqueue")
        try:
            return await q.enqueue(task.name, payload, **self._send)
        except InvalidPayload as exc:
            raise task.signature.refusal(payload, exc) from exc

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """This task's job with these arguments (checked now) and options, as a
        :class:`~emq.JobSpec` for ``Queue.enqueue_many`` or a flow (docs/flows.md)."""
        return JobSpec(self._task.name, self._task.signature.payload(args, kwargs), **self._send)

    def using(
        self,
        *,
        queue: Queue | AsyncQueue | PartitionedQueue | AsyncPartitionedQueue | None = None,
        delay_ms: int | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        key: str | None = None,
        id: str | None = None,
        lane: str | None = None,
        lifo: bool | None = None,
    ) -> BoundTask[P]:
        """The same task with these enqueue options (as ``Queue.enqueue`` takes them; None:
        unchanged), checked now; ``queue``: send through this one (any queue's name) instead.
        The options never mix with the function's own parameters, whatever their names."""
        given = {"delay_ms": delay_ms, "priority": priority, "max_attempts": max_attempts,
                 "key": key, "id": id, "lane": lane, "lifo": lifo}  # fmt: skip
        send = {**self._send, **{k: v for k, v in given.items() if v is not None}}
        self._task.check(send)
        if queue is not None and not isinstance(queue, _TARGETS):
            raise InvalidOption(f"using(queue=...) takes a Queue or an AsyncQueue, got {queue!r}")
        return BoundTask(self._task, send, queue if queue is not None else self._queue)

    def __repr__(self) -> str:
        return f"<task {self._task.name!r} of {self._task.tasks.queue_name!r} {self._send}>"
