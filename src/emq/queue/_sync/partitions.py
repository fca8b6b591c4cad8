# Generated from emq/queue/_async/partitions.py by scripts/unasync.py: edit that file instead.
"""``PartitionedQueue``: one queue split into partitions, on a sync client.

A partition is an ordinary queue (``hot..0`` .. ``hot..<N-1>``, each its own hash slot), so
every step on a job is the partition's own script with its guarantees; this shell only routes
(:mod:`emq.calls.partitions` says how) and sums. It never sends one command across partitions:
each call goes to one partition, and a call on every partition is one call each, sent at once
(docs/partitions.md).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from ...calls.call import Arg
from ...calls.control import Cancel
from ...calls.logs import JobLog
from ...calls.partitions import (
    FIELD,
    EnqueuePlan,
    check_pair,
    gather,
    merge_jobs,
    partition_names,
    partition_of,
    sum_counts,
    unwrap,
)
from ...errors import InvalidOption, JobNotFound
from ...lua import scripts
from ...model.config import QueueOptions
from ...model.events import Event
from ...model.ids import check_id
from ...model.keys import QueueKeys
from ...model.records import EnqueuedId, Job, JobSpec
from ...observe import otel
from ..shared import note_landed
from .partition_count import resolve_count
from .queue import Queue

if TYPE_CHECKING:
    from ...archive.floor import Floor

T = TypeVar("T")
KEY = 6  # a job's dedup key in its ARGV group (emq.calls.jobs.QueueCore.job_group)


class PartitionedQueue:
    """A partitioned queue on a sync redis-py client (``decode_responses=True``).

    ``options.partitions`` (2..64) is the count to use: stored on the server by the first
    client that asks, and refused (InvalidOption, nothing written) when the server holds
    another one. Left at 1, the count is read from the server (a queue nobody partitioned is
    refused). The other options apply to every partition. The count is read or stored once,
    on the first call that needs it.
    """

    def __init__(
        self, client: redis.Redis, name: str, *, options: QueueOptions | None = None
    ) -> None:
        options = options or QueueOptions()
        self._asked = options.partitions if options.partitions > 1 else None
        partition_names(name, self._asked or 2)  # InvalidName now, before any key is written
        self.name = name
        self.client = client
        self.options = options
        self._plain = dataclasses.replace(options, partitions=1)
        self._base = Queue(client, name, options=self._plain)  # checks jobs; no I/O
        self._parts: list[Queue] | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_url(
        cls, url: str, name: str, *, options: QueueOptions | None = None
    ) -> PartitionedQueue:
        """Connect as :meth:`emq.Queue.from_url` does (the same kinds of URL)."""
        asked = (options or QueueOptions()).partitions
        partition_names(name, max(asked, 2))  # InvalidName before a client is made
        return cls(Queue.from_url(url, name).client, name, options=options)

    def close(self) -> None:
        self._base.close()

    def __enter__(self) -> PartitionedQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        n = len(self._parts) if self._parts is not None else self._asked
        return f"{type(self).__name__}({self.name!r}, partitions={n})"

    def partitions(self) -> list[Queue]:
        """Every partition's queue, in order (the count is read or stored on the first call)."""
        if self._parts is None:
            with self._lock:
                if self._parts is None:
                    n = resolve_count(self.client, self.name, self._asked)
                    names = partition_names(self.name, n)
                    self._parts = [Queue(self.client, x, options=self._plain) for x in names]
        return self._parts

    def partition_of(self, job_id: str) -> Queue:
        """The partition a job with this id is routed to (it holds every job emq routed)."""
        parts = self.partitions()
        return parts[partition_of(check_id(job_id), len(parts))]

    def partition_of_key(self, key: str) -> Queue:
        """The partition that holds the jobs with dedup key ``key``."""
        parts = self.partitions()
        return parts[partition_of(key, len(parts))]

    def new_ids(self, n: int) -> list[str]:
        """Mint ``n`` ids (:meth:`emq.Queue.new_ids`); a job enqueued with one of them
        goes to that id's partition."""
        parts = self.partitions()
        return parts[0].new_ids(n)

    # -- admission --------------------------------------------------------------------

    def enqueue(
        self,
        name: str,
        payload: Any = None,
        *,
        delay_ms: int = 0,
        priority: int = 0,
        max_attempts: int | None = None,
        key: str | None = None,
        id: str | None = None,
        lane: str | None = None,
        lifo: bool = False,
    ) -> EnqueuedId:
        """Admit one job into its partition (by ``key``, else by its id); as
        :meth:`emq.Queue.enqueue` otherwise. An id with a key is refused."""
        spec = JobSpec(name, payload, delay_ms, priority, max_attempts, key, id, lane, lifo)
        return (self.enqueue_many([spec]))[0]

    def enqueue_many(self, jobs: Iterable[JobSpec | tuple[str, Any]]) -> list[EnqueuedId]:
        """Admit many jobs: every job is checked first (nothing is sent if one is refused),
        then each partition admits its share as :meth:`emq.Queue.enqueue_many` does
        (one step per 1,000), the partitions at once. The ids come back in the batch's order.
        An error in one partition is raised once every partition has answered, with the ids
        the others admitted in its ``.landed``."""
        base = self._base
        groups = base._groups(jobs)  # every check of an enqueue, before any I/O
        pairs = [check_pair(str(g[KEY]) or None, str(g[0]) or None) for g in groups]
        parts = self.partitions()
        if size := base._largest_payload(groups):
            base._refuse_oversized(size, parts[0]._bulk_limit())
        plan = EnqueuePlan(pairs, len(parts))
        while wanted := plan.wanted():
            plan.feed(parts[0].new_ids(wanted))
        for group, job_id in zip(groups, plan.ids, strict=True):
            group[0] = job_id or ""
        shares = plan.by_partition()
        sends = [
            functools.partial(self._admit, parts[p], [groups[i] for i in share])
            for p, share in shares.items()
        ]
        results = gather(sends)
        out: list[EnqueuedId | None] = [None] * len(groups)
        error: BaseException | None = None
        for share, got in zip(shares.values(), results, strict=True):
            if isinstance(got, BaseException):
                error = error or got
                continue
            for i, job_id in zip(share, got, strict=True):
                out[i] = job_id
        if error is not None:
            note_landed(error, [x for x in out if x is not None])
            raise error
        return [x for x in out if x is not None]

    @staticmethod
    def _admit(q: Queue, groups: list[list[Arg]]) -> list[EnqueuedId]:
        """One partition's share, checked and with its ids: the end of the partition's own
        ``enqueue_many`` (its trace span, its steps, its name among the known queues)."""
        with otel.enqueue_span(q.name, groups) as trace:
            out = q._admit(groups, True, trace)
        q._announce([q.name])
        return out

    # -- reads ------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """The counts (:meth:`emq.Queue.counts`) of every partition and of the plain
        queue of this name, summed. Each is read at one instant; they are read at once, not
        at one instant together."""
        return sum_counts(unwrap(gather([q.counts for q in self._members()])))

    def partition_counts(self) -> list[dict[str, int]]:
        """Each partition's counts, in partition order."""
        parts = self.partitions()
        return unwrap(gather([q.counts for q in parts]))

    def job(self, job_id: str) -> Job | None:
        """A snapshot of the job's row from its partition (the routed one first, then the
        others), or None if no partition has it."""
        first = self.partition_of(job_id)
        found = first.job(job_id)
        if found is None and (other := self._locate(job_id, first)) is not None:
            found = other.job(job_id)
        return found

    def jobs(self, location: str, offset: int = 0, limit: int = 100) -> list[Job]:
        """Jobs of a location from every partition, merged (see
        :func:`emq.calls.partitions.merge_jobs` for the order)."""
        members = self._members()
        if offset < 0 or not 0 < limit <= 10_000:
            raise InvalidOption("offset must be >= 0 and limit within 1..10000")
        reads = [functools.partial(q.jobs, location, 0, offset + limit) for q in members]
        return merge_jobs(unwrap(gather(reads)), location, offset, limit)

    def is_paused(self) -> bool:
        """True when every partition (and the plain queue of this name) is paused."""
        return all(unwrap(gather([q.is_paused for q in self._members()])))

    def history(self, job_id: str, *, floor: Floor | str | Path | None = None) -> list[Event]:
        """Every event of ``job_id`` (:meth:`emq.Queue.history`) in its partition;
        ``floor`` defaults to the partition's own, ``.emq/floor/<partition>.sqlite3``."""
        first = self.partition_of(job_id)
        found = first.history(job_id, floor=floor)
        if not found and (other := self._locate(job_id, first)) is not None:
            found = other.history(job_id, floor=floor)
        return found

    def job_logs(self, job_id: str) -> list[JobLog]:
        """The job's ``ctx.log`` lines (:meth:`emq.Queue.job_logs`) from its partition
        (the routed one, then the others: its row may be gone)."""
        first = self.partition_of(job_id)
        for q in [first, *(q for q in self._members() if q is not first)]:
            if found := q.job_logs(job_id):
                return found
        return []

    def _members(self) -> list[Queue]:
        """The partitions, then the plain queue of this name (which holds what was put
        there by name; a worker of this name that starts while it does serves it too)."""
        return [*self.partitions(), self._base]

    def _locate(self, job_id: str, tried: Queue) -> Queue | None:
        """The member other than ``tried`` (a partition, or the plain queue) that holds a
        row of ``job_id`` or holds it packed (a pipelined ``EXISTS`` and ``HEXISTS`` each),
        or None."""
        others = [q for q in self._members() if q is not tried]
        with scripts.translated():
            with self.client.pipeline(transaction=False) as p:
                for q in others:
                    p.exists(q.core.keys.job(job_id))
                    p.hexists(q.core.keys.packed, job_id)
                found = p.execute()
        pairs = zip(others, found[::2], found[1::2], strict=True)
        return next((q for q, row, packed in pairs if row or packed), None)

    def _on_job(self, job_id: str, act: Callable[[Queue], T]) -> T:
        """``act`` on the routed partition; on JobNotFound, on the partition that has it."""
        first = self.partition_of(job_id)
        try:
            return act(first)
        except JobNotFound:
            other = self._locate(job_id, first)
            if other is None:
                raise
        return act(other)

    # -- one job by id ------------------------------------------------------------------

    def cancel(self, job_id: str, reason: str = "") -> Cancel:
        """:meth:`emq.Queue.cancel` in the job's partition."""
        return self._on_job(job_id, lambda q: q.cancel(job_id, reason))

    def result(self, job_id: str, timeout_s: float | None = None) -> Any:
        """:meth:`emq.Queue.result` in the job's partition."""
        return self._on_job(job_id, lambda q: q.result(job_id, timeout_s))

    def remove(self, job_id: str) -> str:
        """:meth:`emq.Queue.remove` in the job's partition."""
        return self._on_job(job_id, lambda q: q.remove(job_id))

    def promote(self, job_id: str) -> bool:
        """:meth:`emq.Queue.promote` in the job's partition."""
        return self._on_job(job_id, lambda q: q.promote(job_id))

    def reschedule(self, job_id: str, delay_ms: int) -> str:
        """:meth:`emq.Queue.reschedule` in the job's partition."""
        return self._on_job(job_id, lambda q: q.reschedule(job_id, delay_ms))

    def set_priority(self, job_id: str, priority: int) -> str:
        """:meth:`emq.Queue.set_priority` in the job's partition."""
        return self._on_job(job_id, lambda q: q.set_priority(job_id, priority))

    def update_payload(self, job_id: str, payload: Any) -> str:
        """:meth:`emq.Queue.update_payload` in the job's partition."""
        return self._on_job(job_id, lambda q: q.update_payload(job_id, payload))

    def redrive(self, job_id: str, *, keep_counters: bool = False) -> bool:
        """Move a dead job back to pending in its partition; False if it was not dead."""
        first = self.partition_of(job_id)
        if first.redrive(job_id, keep_counters=keep_counters):
            return True
        other = self._locate(job_id, first)
        return other is not None and other.redrive(job_id, keep_counters=keep_counters)

    def redrive_many(self, ids: Sequence[str], *, keep_counters: bool = False) -> list[str]:
        """Redrive each of ``ids`` in its partition; returns those moved."""
        return [i for i in ids if self.redrive(i, keep_counters=keep_counters)]

    # -- every partition ------------------------------------------------------------------

    def _each(self, act: Callable[[Queue], T]) -> list[T]:
        """``act`` on every partition and on the plain queue of this name, at once."""
        members = self._members()
        return unwrap(gather([functools.partial(act, q) for q in members]))

    def redrive_all(self, *, keep_counters: bool = False) -> int:
        return sum(self._each(lambda q: q.redrive_all(keep_counters=keep_counters)))

    def pause(self, lane: str | None = None) -> bool:
        """Pause every partition (or ``lane`` in each); True if one was not paused."""
        return any(self._each(lambda q: q.pause(lane)))

    def resume(self, lane: str | None = None) -> bool:
        return any(self._each(lambda q: q.resume(lane)))

    def drain(self) -> int:
        return sum(self._each(lambda q: q.drain()))

    def promote_due(self, limit: int = 1000) -> list[str]:
        return [i for ids in self._each(lambda q: q.promote_due(limit)) for i in ids]

    def sweep_all(self) -> int:
        """Sweep every partition's expired leases; how many were handled."""
        done = self._each(lambda q: q.sweep_all())
        return sum(len(r.recovered) + len(r.dead) + len(r.missing) for r in done)

    def obliterate(self, *, force: bool = False) -> int:
        """Obliterate every partition and the plain queue, then forget the partition count
        (a later producer may choose another)."""
        n = sum(self._each(lambda q: q.obliterate(force=force)))
        with scripts.translated():
            self.client.hdel(QueueKeys.of(self.name).meta, FIELD)
        self._parts = None
        return n

    def set_limits(self, *, per_partition: bool = False, **limits: Any) -> None:
        """:meth:`emq.Queue.set_limits` on every partition. A limit then holds per
        partition (``concurrency=10`` over 3 partitions lets 30 run), so it must be asked
        for with ``per_partition=True``; docs/partitions.md says why."""
        if not per_partition:
            raise InvalidOption(
                f"limits of partitioned queue {self.name!r} hold per partition (a "
                "concurrency of 10 over 3 partitions lets 30 jobs run, a rate of 100/s "
                "lets 300/s): pass per_partition=True and divide a queue-wide limit "
                "yourself, or keep the queue unpartitioned for an exact one"
            )
        self._each(lambda q: q.set_limits(**limits))
