"""What code under test enqueued: the jobs waiting in a queue, read without running a worker.

``enqueued(queue)`` lists every job not yet claimed: in ``pending``, in the ``schedule``
(enqueued with a delay, or a retry in its backoff) and ``waiting`` (a flow's parent), in the
order their ids were minted, which is the order they were enqueued in. Each is a
:class:`~emq.Job` snapshot: ``name``, ``payload``, ``state``, ``priority``, ``run_at_ms``, ...
A test asserts on it::

    signup(emq_queue, "ada@example.com")  # the code under test enqueues a "welcome" job
    [job] = enqueued(emq_queue, "welcome")
    assert job.payload == {"to": "ada@example.com"}
"""

from __future__ import annotations

from typing import Protocol

from ..model.records import Job

WAITING = ("pending", "schedule", "waiting")
PAGE = 1_000


class _Reads(Protocol):
    def jobs(self, location: str, offset: int = 0, limit: int = 100) -> list[Job]: ...


class _AsyncReads(Protocol):
    async def jobs(self, location: str, offset: int = 0, limit: int = 100) -> list[Job]: ...


def _pick(found: list[Job], name: str | None) -> list[Job]:
    return sorted((j for j in found if name is None or j.name == name), key=lambda j: j.id)


def enqueued(queue: _Reads, name: str | None = None) -> list[Job]:
    """The jobs waiting in ``queue`` (a :class:`~emq.Queue` or
    :class:`~emq.PartitionedQueue`), oldest first; only those named ``name`` if given.
    Each location is read a page at a time, so a job that moves while it is read may be
    missed or seen twice: call it while nothing else changes the queue."""
    found: list[Job] = []
    for location in WAITING:
        offset = 0
        while page := queue.jobs(location, offset, PAGE):
            found += page
            offset += len(page)
            if len(page) < PAGE:
                break
    return _pick(found, name)


async def aenqueued(queue: _AsyncReads, name: str | None = None) -> list[Job]:
    """:func:`enqueued` for an :class:`~emq.AsyncQueue` (or
    :class:`~emq.AsyncPartitionedQueue`)."""
    found: list[Job] = []
    for location in WAITING:
        offset = 0
        while page := await queue.jobs(location, offset, PAGE):
            found += page
            offset += len(page)
            if len(page) < PAGE:
                break
    return _pick(found, name)
