"""emq: a reliable job queue for Python on Valkey and Redis.

Every change of a job's state is one Lua script that the server runs as one indivisible step.
Delivery is at least once: a job runs again only if its worker dies or outlives its lease
before acknowledging it (see docs/guarantees.md).
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .archive import Archive, Floor
    from .async_partitions import AsyncPartitionedQueue
    from .async_queue import AsyncQueue
    from .cancel import Cancel
    from .config import Backoff, QueueOptions
    from .errors import (
        CancelRequested,
        DuplicateConflict,
        EmqError,
        InvalidId,
        InvalidInput,
        InvalidName,
        InvalidOption,
        InvalidPayload,
        InvalidUrl,
        JobCancelled,
        JobDead,
        JobNotFound,
        LeaseLost,
        NotWaiting,
        ResultTimeout,
        ScriptError,
        ServerError,
        ServerOutOfMemory,
        ServerRefused,
        ServerUnreachable,
        UnsafeServer,
        WorkerFailed,
        WrongState,
    )
    from .events import Event
    from .flows import Child, Flow, FlowIds, chain, group
    from .lanes import Lane, Limits, RateLimited
    from .partitions import PartitionedQueue
    from .queue import Queue
    from .records import Answer, Claimed, Claims, EnqueuedId, Job, JobSpec, SweepResult
    from .states import JobState, Location
    from .worker import JobContext, Permanent, Worker, WorkerOptions

__all__ = [
    "Answer",
    "Archive",
    "AsyncPartitionedQueue",
    "AsyncQueue",
    "Backoff",
    "Cancel",
    "CancelRequested",
    "Child",
    "Claimed",
    "Claims",
    "DuplicateConflict",
    "EmqError",
    "EnqueuedId",
    "Event",
    "Floor",
    "Flow",
    "FlowIds",
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
    "JobNotFound",
    "JobSpec",
    "JobState",
    "Lane",
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
    "SweepResult",
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
    "Answer": "records",
    "AsyncPartitionedQueue": "async_partitions",
    "AsyncQueue": "async_queue",
    "Backoff": "config",
    "Cancel": "cancel",
    "CancelRequested": "errors",
    "Child": "flows",
    "Claimed": "records",
    "Claims": "records",
    "DuplicateConflict": "errors",
    "EmqError": "errors",
    "EnqueuedId": "records",
    "Event": "events",
    "Flow": "flows",
    "FlowIds": "flows",
    "InvalidId": "errors",
    "InvalidInput": "errors",
    "InvalidName": "errors",
    "InvalidOption": "errors",
    "InvalidPayload": "errors",
    "InvalidUrl": "errors",
    "Job": "records",
    "JobCancelled": "errors",
    "JobContext": "worker",
    "JobDead": "errors",
    "JobNotFound": "errors",
    "JobSpec": "records",
    "JobState": "states",
    "Lane": "lanes",
    "LeaseLost": "errors",
    "Limits": "lanes",
    "Location": "states",
    "NotWaiting": "errors",
    "Permanent": "worker",
    "PartitionedQueue": "partitions",
    "Queue": "queue",
    "QueueOptions": "config",
    "RateLimited": "lanes",
    "ResultTimeout": "errors",
    "ScriptError": "errors",
    "ServerError": "errors",
    "ServerOutOfMemory": "errors",
    "ServerRefused": "errors",
    "ServerUnreachable": "errors",
    "SweepResult": "records",
    "UnsafeServer": "errors",
    "Worker": "worker",
    "WorkerFailed": "errors",
    "WorkerOptions": "worker",
    "WrongState": "errors",
    "chain": "flows",
    "group": "flows",
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
