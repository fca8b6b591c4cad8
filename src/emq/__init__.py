"""emq: a reliable job queue for Python on Valkey and Redis.

Every change of a job's state is one Lua script that the server runs as one indivisible step.
Delivery is at least once: a job runs again only if its worker dies or outlives its lease
before acknowledging it (see docs/guarantees.md).
"""

from typing import TYPE_CHECKING, Any

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
from .queue import Queue
from .records import Answer, Claimed, Claims, EnqueuedId, Job, JobSpec, SweepResult
from .states import JobState, Location
from .worker import JobContext, Permanent, Worker, WorkerOptions

__all__ = [
    "Answer",
    "Archive",
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

if TYPE_CHECKING:
    from .archive import Archive, Floor


def __getattr__(name: str) -> Any:
    """``Archive`` and ``Floor`` are imported on first use: the core (queues, worker) never
    loads the archive (SQLite, optional S3) unless a program asks for it."""
    if name in ("Archive", "Floor"):
        from . import archive

        return getattr(archive, name)
    raise AttributeError(f"module 'emq' has no attribute {name!r}")
