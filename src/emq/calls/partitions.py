"""Partitioned queues, the part that does no I/O: names, routing, the plan of an enqueue,
sums and merges of what the partitions answer (docs/partitions.md).

A queue ``hot`` made with ``QueueOptions(partitions=N)`` is N queues named ``hot..0`` to
``hot..<N-1>`` (:func:`partition_name`). Each is an ordinary queue with its own hash tag, so
its own cluster slot, and every script and every guarantee of a queue holds per partition
unchanged. What ties them together is on the server: the field ``partitions`` of the plain
queue's ``emq:{hot}:meta`` holds N, written once by the first producer (``HSETNX``) and read by
every later producer, worker and reader, so none of them needs a flag and none can route
with another N.

Routing. A job's partition is a function of its id: ``crc32(id) mod N``
(:func:`partition_of`). A job with a dedup key goes to ``crc32(key) mod N``, so one key always
meets its one dedup record; emq mints its id among those whose own hash names that partition
(:class:`EnqueuePlan`), so a read by id still goes straight to it. A job with an explicit id
goes to its id's partition, so the id stays unique queue-wide. Giving both an id and a key is
refused (the two could name different partitions). Jobs that emq did not route (a repeating
schedule's ticks, a flow's children, jobs enqueued into a partition by name) are found by
looking in every partition. Jobs in the plain queue ``hot`` (put there by name) are counted
and found with the partitions, and served by a worker of ``hot`` that starts while they are
there.
"""

from __future__ import annotations

import asyncio
import heapq
import re
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import NoReturn, TypeVar

from ..errors import InvalidName, InvalidOption
from ..model.checks import shown
from ..model.config import MAX_PARTITIONS
from ..model.ids import check_id
from ..model.keys import QUEUE_NAME, check_queue_name
from ..model.records import Job

T = TypeVar("T")

SEP = ".."
"""Between a partitioned queue's name and a partition's number: ``hot..0``. A name ending in
``..<digits>`` is reserved for partitions (docs/partitions.md, Names)."""
FIELD = "partitions"
"""The field of the plain queue's ``meta`` HASH that holds its partition count."""
_PARTITION = re.compile(r"(.+)\.\.(0|[1-9][0-9]?)")


def partition_name(base: str, p: int) -> str:
    """The name of partition ``p`` of queue ``base``."""
    return f"{base}{SEP}{p}"


def partition_names(base: str, n: int) -> list[str]:
    """Every partition's name, after checking ``base`` and that the longest name fits the
    queue-name grammar (1-128 characters)."""
    check_queue_name(base)
    longest = partition_name(base, n - 1)
    if not QUEUE_NAME.fullmatch(longest):
        room = 128 - len(longest) + len(base)
        raise InvalidName(
            f"queue name {shown(base)} is too long for {n} partitions: their names add "
            f"'{SEP}<n>', so it may have at most {room} characters"
        )
    return [partition_name(base, p) for p in range(n)]


def split_name(name: str) -> tuple[str, int] | None:
    """``(base, p)`` if ``name`` has the form of a partition's name, else None."""
    m = _PARTITION.fullmatch(name)
    if m is None or int(m[2]) >= MAX_PARTITIONS:
        return None
    return m[1], int(m[2])


def partition_of(text: str, n: int) -> int:
    """The partition of a job id or dedup key among ``n``: ``crc32(text) mod n``, the same in
    every process and every version of Python."""
    return zlib.crc32(text.encode("utf-8")) % n


def refuse_plain(cls_name: str, name: str, n: int) -> NoReturn:
    """The error for a plain queue shell given ``QueueOptions(partitions=n)``."""
    twin = "AsyncPartitionedQueue" if cls_name.startswith("Async") else "PartitionedQueue"
    raise InvalidOption(
        f"{cls_name} serves one hash slot, but QueueOptions(partitions={n}) splits queue "
        f"{shown(name)} into {n}: use emq.{twin}.from_url(url, {name!r}, options=...) to "
        f"enqueue and read, and Worker({name!r}, url=url) to serve it (docs/partitions.md)"
    )


def check_stored(name: str, asked: int | None, stored: object) -> int | None:
    """The partition count to use, from what this client asks (None: whatever is stored)
    and what the server holds (None: nothing yet); None if nothing is stored and nothing
    asked. Raises InvalidOption on a mismatch: routing by another N would send jobs, keys and
    ids to other partitions."""
    if stored is None:
        return asked
    text = str(stored)
    if not text.isdigit() or not 2 <= int(text) <= MAX_PARTITIONS:
        raise InvalidOption(
            f"queue {shown(name)} has a partition count the server holds as {shown(text)} "
            f"(field {FIELD!r} of its meta): not 2..{MAX_PARTITIONS}; fix or delete it"
        )
    if asked is not None and asked != int(text):
        raise InvalidOption(
            f"queue {shown(name)} is stored on the server with {text} partitions, and this "
            f"client asks for {asked}: a different count would route jobs, dedup keys and ids "
            f"to other partitions, so it is refused and nothing was written. Use "
            f"QueueOptions(partitions={text}), or leave partitions out to read it, or "
            "partition a queue of another name"
        )
    return int(text)


def not_partitioned(name: str) -> InvalidOption:
    return InvalidOption(
        f"queue {shown(name)} is not partitioned on this server (its meta holds no "
        f"{FIELD!r}): give options=QueueOptions(partitions=N) to split it, or use Queue"
    )


def check_pair(key: str | None, job_id: str | None) -> tuple[str | None, str | None]:
    """``(key, job_id)``, unless both are given (refused: the two may route apart)."""
    if job_id is not None and key is not None:
        raise InvalidOption(
            f"job id {shown(job_id)} comes with dedup key {shown(key)}: on a partitioned "
            "queue the key chooses the partition, and an id emq did not mint may hash to "
            "another one. Give the key alone (emq mints an id routed with it) or the id alone"
        )
    return key, job_id


class EnqueuePlan:
    """Which partition each job of a batch goes to, and its id (no I/O).

    Built from each job's ``(key, id)`` (checked: not both). Feed it minted ids while
    :meth:`wanted` asks for some. A job with a key takes the first unused minted id whose hash
    names the key's partition; a job with neither id nor key takes the first unused id, and
    goes where that id hashes. Ids are taken in mint order within each partition, so each
    partition admits a batch's jobs in the batch's order (its FIFO); minted ids that fit no job
    are dropped. A batch without keys uses every minted id, in order."""

    def __init__(self, pairs: Sequence[tuple[str | None, str | None]], n: int) -> None:
        self.n = n
        self.ids: list[str | None] = []
        self.target: list[int | None] = []  # a key's or an explicit id's partition
        keyed = False
        for key, job_id in pairs:
            if job_id is not None:
                self.ids.append(check_id(job_id))
                self.target.append(partition_of(job_id, n))
            else:
                self.ids.append(None)
                self.target.append(None if key is None else partition_of(key, n))
                keyed = keyed or key is not None
        self._keyed = keyed
        self._pools: list[deque[str]] = [deque() for _ in range(n)]
        self._heads: list[tuple[str, int]] = []  # (a pool's first id, its partition), lazily
        self._next = 0  # the first job that may still need an id

    def feed(self, minted: Sequence[str]) -> None:
        if not self._keyed:  # every id in mint order to the jobs without one
            it = iter(minted)
            for i in range(self._next, len(self.ids)):
                if self.ids[i] is None:
                    job_id = self.ids[i] = next(it)
                    self.target[i] = partition_of(job_id, self.n)
            self._next = len(self.ids)
            return
        for job_id in minted:
            p = partition_of(job_id, self.n)
            if not self._pools[p]:
                heapq.heappush(self._heads, (job_id, p))
            self._pools[p].append(job_id)

    def _take(self, p: int | None) -> str | None:
        """The first unused id of partition ``p`` (None: of any), or None if none is left."""
        pools, heads = self._pools, self._heads
        if p is None:
            while heads:
                job_id, q = heads[0]
                if pools[q] and pools[q][0] == job_id:
                    p = q
                    break
                heapq.heappop(heads)  # stale: its pool's head was taken by a keyed job
            else:
                return None
        pool = pools[p]
        if not pool:
            return None
        job_id = pool.popleft()
        if pool:
            heapq.heappush(heads, (pool[0], p))
        return job_id

    def wanted(self) -> int:
        """Give ids to the jobs in order as far as the minted ids go; how many more ids to
        mint (0: every job has one)."""
        if not self._keyed:
            return 0 if self._next else sum(1 for i in self.ids if i is None)
        pools = self._pools
        i = self._next
        while i < len(self.ids):
            if self.ids[i] is None:
                job_id = self._take(self.target[i])
                if job_id is None:
                    break
                self.ids[i] = job_id
                self.target[i] = partition_of(job_id, self.n)
            i += 1
        self._next = i
        if i == len(self.ids):
            return 0
        keyed = [0] * self.n
        plain = 0
        for j in range(i, len(self.ids)):
            p = self.target[j]
            if self.ids[j] is not None:
                continue
            if p is None:
                plain += 1
            else:
                keyed[p] += 1
        short = max(max(k - len(pools[p]), 0) for p, k in enumerate(keyed))
        return plain + (short * self.n + short // 4 + self.n if short else 0)

    def by_partition(self) -> dict[int, list[int]]:
        """partition -> the indexes of its jobs in the batch, in batch order (call once
        :meth:`wanted` returned 0: then every job has its id in :attr:`ids`)."""
        out: dict[int, list[int]] = {}
        for i, p in enumerate(self.target):
            assert p is not None and self.ids[i] is not None, "wanted() must return 0 first"
            out.setdefault(p, []).append(i)
        return out


def sum_counts(parts: Sequence[dict[str, int]]) -> dict[str, int]:
    """The counts of a partitioned queue: each field summed over its partitions."""
    total: dict[str, int] = {}
    for counts in parts:
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
    return total


def merge_jobs(found: Sequence[list[Job]], location: str, offset: int, limit: int) -> list[Job]:
    """One listing from every partition's first ``offset + limit`` jobs: ``pending`` by
    priority then id, ``completed`` newest id first, the other locations by id (mint
    order; a partition orders its own ``schedule``, ``active`` and ``dead`` by time)."""
    jobs = [j for part in found for j in part]
    if location == "pending":
        jobs.sort(key=lambda j: (j.priority, j.id))
    else:
        jobs.sort(key=lambda j: j.id, reverse=location == "completed")
    return jobs[offset : offset + limit]


def unwrap(results: Sequence[T | BaseException]) -> list[T]:
    """The results of :func:`agather` or :func:`gather`, raising the first error."""
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return list(results)  # type: ignore[arg-type]


async def agather(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T | BaseException]:
    """Run ``calls`` concurrently (the partitions may be on different nodes); every one
    runs to its end, and an error is returned in its place."""
    return await asyncio.gather(*(c() for c in calls), return_exceptions=True)


def gather(calls: Sequence[Callable[[], T]]) -> list[T | BaseException]:
    """The sync twin of :func:`agather`: one call after another, every one run."""
    out: list[T | BaseException] = []
    for call in calls:
        try:
            out.append(call())
        except Exception as exc:
            out.append(exc)
    return out
