"""The worker runtime: :class:`Worker`, its options, the job context and ``Permanent``.

See ``docs/worker.md`` for how it runs and ``docs/guarantees.md`` for what it promises.
"""

from .context import Cancelled, JobContext
from .options import HandlerSpec, Permanent, WorkerOptions, WorkerStats
from .runtime import Worker

__all__ = [
    "Cancelled",
    "HandlerSpec",
    "JobContext",
    "Permanent",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
]
