"""emq: a reliable job queue for Python on Valkey and Redis.

Every change of a job's state is one Lua script that the server runs as one indivisible step.
Delivery is at least once: a job runs again only if its worker dies or outlives its lease
before acknowledging it (see docs/guarantees.md).
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .archive import Archive, Floor
    from .calls.control import Cancel
    from .calls.flows import Child, Flow, FlowIds, chain, group
    from .calls.logs import JobLog
    from .errors import (
        AuthenticationFailed,
        CancelRequested,
        DuplicateConflict,
        EmqError,
        InvalidArguments,
        InvalidId,
        InvalidInput,
        InvalidName,
        InvalidOption,
        InvalidPayload,
        InvalidUrl,
        JobCancelled,
        JobDead,
        JobNotFound,
        LayoutTooNew,
        LeaseLost,
        NotWaiting,
        ResultTimeout,
        ScriptError,
        ServerError,
        ServerOutOfMemory,
        ServerRefused,
        ServerUnreachable,
        TaskNotBound,
        UnsafeServer,
        WorkerFailed,
        WrongState,
    )
    from .model.config import Backoff, QueueOptions
    from .model.events import Event
    from .model.lanes import Lane, Limits, RateLimited
    from .model.records import (
        Answer,
        Claimed,
        Claims,
        EnqueuedId,
        Job,
        JobSpec,
        Step,
        SweepResult,
    )
    from .model.states import JobState, Location
    from .queue._async.partitions import AsyncPartitionedQueue
    from .queue._async.queue import AsyncQueue
    from .queue._sync.partitions import PartitionedQueue
    from .queue._sync.queue import Queue
    from .worker import JobContext, Permanent, Worker, WorkerOptions
    from .worker.batches import BatchContext, BatchResult
    from .worker.bound_task import BoundTask
    from .worker.context import Sleeping
    from .worker.tasks import BatchTask, ContextTask, Task, Tasks

__all__ = [
    "Answer",
    "Archive",
    "AsyncPartitionedQueue",
    "AsyncQueue",
    "AuthenticationFailed",
    "Backoff",
    "BatchContext",
    "BatchResult",
    "BatchTask",
    "BoundTask",
    "Cancel",
    "CancelRequested",
    "Child",
    "Claimed",
    "Claims",
    "ContextTask",
    "DuplicateConflict",
    "EmqError",
    "EnqueuedId",
    "Event",
    "Floor",
    "Flow",
    "FlowIds",
    "InvalidArguments",
    "InvalidId",
    "InvalidInput",
    "InvalidName",
    "InvalidOption",
    "InvalidPayload",
    "InvalidUrl",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobDead",
    "JobLog",
    "JobNotFound",
    "JobSpec",
    "JobState",
    "Lane",
    "LayoutTooNew",
    "LeaseLost",
    "Limits",
    "Location",
    "NotWaiting",
    "PartitionedQueue",
    "Permanent",
    "Queue",
    "QueueOptions",
    "RateLimited",
    "ResultTimeout",
    "ScriptError",
    "ServerError",
    "ServerOutOfMemory",
    "ServerRefused",
    "ServerUnreachable",
    "Sleeping",
    "Step",
    "SweepResult",
    "Task",
    "TaskNotBound",
    "Tasks",
    "UnsafeServer",
    "Worker",
    "WorkerFailed",
    "WorkerOptions",
    "WrongState",
    "chain",
    "group",
]

__version__ = "0.1.0"

_WHERE = {
    "Answer": "model.records",
    "AsyncPartitionedQueue": "queue._async.partitions",
    "AsyncQueue": "queue._async.queue",
    "AuthenticationFailed": "errors",
    "Backoff": "model.config",
    "BatchContext": "worker.batches",
    "BatchResult": "worker.batches",
    "BatchTask": "worker.tasks",
    "BoundTask": "worker.bound_task",
    "Cancel": "calls.control",
    "CancelRequested": "errors",
    "Child": "calls.flows",
    "Claimed": "model.records",
    "Claims": "model.records",
    "ContextTask": "worker.tasks",
    "DuplicateConflict": "errors",
    "EmqError": "errors",
    "EnqueuedId": "model.records",
    "Event": "model.events",
    "Flow": "calls.flows",
    "FlowIds": "calls.flows",
    "InvalidArguments": "errors",
    "InvalidId": "errors",
    "InvalidInput": "errors",
    "InvalidName": "errors",
    "InvalidOption": "errors",
    "InvalidPayload": "errors",
    "InvalidUrl": "errors",
    "Job": "model.records",
    "JobCancelled": "errors",
    "JobContext": "worker",
    "JobDead": "errors",
    "JobLog": "calls.logs",
    "JobNotFound": "errors",
    "JobSpec": "model.records",
    "JobState": "model.states",
    "Lane": "model.lanes",
    "LayoutTooNew": "errors",
    "LeaseLost": "errors",
    "Limits": "model.lanes",
    "Location": "model.states",
    "NotWaiting": "errors",
    "Permanent": "worker",
    "PartitionedQueue": "queue._sync.partitions",
    "Queue": "queue._sync.queue",
    "QueueOptions": "model.config",
    "RateLimited": "model.lanes",
    "ResultTimeout": "errors",
    "ScriptError": "errors",
    "ServerError": "errors",
    "ServerOutOfMemory": "errors",
    "ServerRefused": "errors",
    "ServerUnreachable": "errors",
    "Sleeping": "worker.context",
    "Step": "model.records",
    "SweepResult": "model.records",
    "Task": "worker.tasks",
    "TaskNotBound": "errors",
    "Tasks": "worker.tasks",
    "UnsafeServer": "errors",
    "Worker": "worker",
    "WorkerFailed": "errors",
    "WorkerOptions": "worker",
    "WrongState": "errors",
    "chain": "calls.flows",
    "group": "calls.flows",
    "Archive": "archive",
    "Floor": "archive",
}
"""Where each public name lives: ``import emq`` loads none of them (so ``emq --help``
starts fast); the first use of a name imports its module, once."""


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562) and keep the name here."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'emq' has no attribute {name!r}")
    value = getattr(import_module(f".{where}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
