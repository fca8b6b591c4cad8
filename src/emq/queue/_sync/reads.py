# Generated from emq/queue/_async/reads.py by scripts/unasync.py: edit that file instead.
"""``Reads``: what ``Queue`` reads without changing anything.

Counts, rows, listings, lanes, the event stream and a job's history. Each read sees one
instant of the server: plain commands sent in one MULTI, or one read-only script. Counts, a
job and a listing read the queue's keyspace layout first (in the same MULTI) and refuse a
queue of a newer layout (:mod:`emq.model.layout`) rather than misread it.

In layout 3 a waiting job may be packed: an entry of ``packed`` without a row, its id in
claim order in ``ready`` (:class:`emq.model.keys.QueueKeys`). Every read here counts, finds
and lists a packed job as the pending job its row would be.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import redis

from ...calls.call import COUNT_FIELDS, Call, decode_counts, decode_job
from ...calls.jobs import QueueCore
from ...calls.logs import MAX_LINES, JobLog, decode_logs
from ...errors import InvalidOption, ServerOutOfMemory
from ...lua import scripts
from ...model.events import Event
from ...model.ids import check_id
from ...model.lanes import DEFAULT_LANE, Lane, Limits, lane_arg
from ...model.layout import FIELD as LAYOUT_FIELD
from ...model.layout import check_layout
from ...model.records import Job
from ...model.states import Location
from .stream import iter_events

if TYPE_CHECKING:
    from ...archive.floor import Floor

JOB_READS = 4  # the replies of one job's reads (Reads._read_job)
READY_SLICE = (100, 10_000)  # the fewest and most ids of ``ready`` one LRANGE reads
READY_SCAN = 100_000  # the most ids of ``ready`` one listing reads (tombstones included)


def _layout_checked(replies: list[Any], prefix: str) -> list[Any]:
    """The replies of a MULTI that began with ``HGET meta layout``, after it: a newer layout
    is refused before any other reply is looked at (its keys may have other types), then the
    first error among them is raised."""
    check_layout(replies[0], prefix)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies[1:]


class Reads:
    """Reads of one queue; mixed into ``Queue``, which provides the client and core."""

    client: redis.Redis
    core: QueueCore

    def _run(self, call: Call[Any]) -> Any:  # provided by Queue
        raise NotImplementedError

    def is_paused(self) -> bool:
        with scripts.translated():
            return bool(self.client.hget(self.core.keys.meta, "paused") == "1")

    def counts(self) -> dict[str, int]:
        """The size of each location and the lifetime counters, read at one instant;
        ``pending`` counts the packed jobs too (``HLEN packed``, never ``ready``'s length),
        and in lane mode the waiting jobs of the other lanes (read by ``lanes()`` right
        after); ``outbox``: a flow's messages to other queues not yet delivered."""
        k = self.core.keys
        with scripts.translated():
            with self.client.pipeline(transaction=True) as p:
                p.hget(k.meta, LAYOUT_FIELD)
                for loc in Location:
                    p.zcard(k.location(loc.value))
                p.hmget(k.metrics, list(COUNT_FIELDS))
                p.hget(k.meta, "lanes")
                p.hlen(k.outbox)
                p.hlen(k.packed)
                replies = p.execute(raise_on_error=False)
                *sizes, metrics, lane_mode, outbox, packed = _layout_checked(replies, k.prefix)
        sizes[0] += packed
        if lane_mode == "1":
            _, lanes = self._run(self.core.lanes(leased=False))
            sizes[0] += sum(lane.pending for lane in lanes if lane.name != DEFAULT_LANE)
        return decode_counts(sizes, metrics, outbox)

    def lanes(self) -> list[Lane]:
        """Every lane with waiting or leased jobs or settings of its own (the default lane
        first, then by name): counts, weight, limits, paused, and when it may next be served."""
        return list((self._run(self.core.lanes()))[1])

    def limits(self) -> Limits:
        """The queue's own limits and per-lane defaults, paused flag and holds."""
        return cast(Limits, (self._run(self.core.lanes(leased=False)))[0])

    def job(self, job_id: str) -> Job | None:
        """A snapshot of the job's row, with its run-at or lease deadline (read in the same
        MULTI); a packed job (no row, an entry in ``packed``, read in the same MULTI) as the
        row it stands for; None if it has neither (completed, removed). Redis refuses a MULTI
        at maxmemory: there the four are read one after another, in one round trip."""
        check_id(job_id)
        for one_instant in (True, False):
            try:
                with scripts.translated():
                    with self.client.pipeline(transaction=one_instant) as p:
                        p.hget(self.core.keys.meta, LAYOUT_FIELD)
                        self._read_job(p, job_id)
                        replies = p.execute(raise_on_error=False)
                        row, run_at, deadline, packed = _layout_checked(
                            replies, self.core.keys.prefix
                        )
                break
            except ServerOutOfMemory:
                if not one_instant:
                    raise
        return decode_job(job_id, row, run_at, deadline, packed)

    def job_logs(self, job_id: str, *, floor: Floor | str | Path | None = None) -> list[JobLog]:
        """The job's ``ctx.log`` lines, oldest first (its newest 1,000), each with when the
        server stored it and the attempt that logged it; read while the job lives and for
        the queue's ``log_ttl_ms`` after its last line, its row gone or not. Once they have
        expired (or were deleted), the copy the archiver made when it folded the job's end,
        from ``floor`` (default ``.emq/floor/<queue>.sqlite3``, when it exists). Empty when
        the job logged nothing, or its lines are in neither (docs/control.md, Job logs)."""
        key = self.core.keys.logs(check_id(job_id))
        with scripts.translated():
            items = self.client.lrange(key, -MAX_LINES, -1)
        if items:
            return decode_logs(cast(list[str], items))
        from .history import floor_logs

        return floor_logs(self.core.keys.queue, job_id, floor)

    def _read_job(self, p: Any, job_id: str) -> None:
        """Queue the reads of one job on ``p``: its row, its scores in schedule and active,
        its packed entry (:data:`JOB_READS` replies)."""
        k = self.core.keys
        p.hgetall(k.job(job_id))
        p.zscore(k.schedule, job_id)
        p.zscore(k.active, job_id)
        p.hget(k.packed, job_id)

    def jobs(
        self, location: str, offset: int = 0, limit: int = 100, *, lane: str | None = None
    ) -> list[Job]:
        """Jobs of a location in its order. ``pending`` is in claim order over every lane (or
        one ``lane``): by priority, then id, the packed jobs (the default lane's, priority 0)
        among the others of priority 0 (:meth:`_pending_ids`); the other locations hold every
        lane's jobs in one set (``lane`` filters them). ``completed`` lists the kept completed
        jobs (``keep_completed``), newest first."""
        newest = location == "completed"
        key = self.core.keys.completed if newest else self.core.location_key(location)
        if offset < 0 or not 0 < limit <= 10_000:
            raise InvalidOption("offset must be >= 0 and limit within 1..10000")
        want = None if lane is None else lane_arg(lane)
        with scripts.translated():
            layout = self.client.hget(self.core.keys.meta, LAYOUT_FIELD)
            check_layout(layout, self.core.keys.prefix)
            if key == self.core.keys.pending:
                ids = self._pending_ids(offset, limit, want)
            else:
                last = -1 if want else offset + limit - 1
                ids = cast(list[str], self.client.zrange(key, 0, last, desc=newest))
                ids = ids if want else ids[offset:]
            with self.client.pipeline(transaction=True) as p:
                for job_id in ids:
                    self._read_job(p, job_id)
                got = p.execute()
        reads = zip(ids, *(got[i::JOB_READS] for i in range(JOB_READS)), strict=True)
        found = [j for i, r, at, dl, pk in reads if (j := decode_job(i, r, at, dl, pk))]
        if want is not None and key != self.core.keys.pending:
            found = [j for j in found if (j.lane or DEFAULT_LANE) == want][offset:]
        return found[:limit]

    def _pending_ids(self, offset: int, limit: int, lane: str | None) -> list[str]:
        """The ids of the waiting jobs ``offset`` to ``offset + limit`` in claim order, over
        every lane or one ``lane``: each waiting set's first ``offset + limit`` and as many
        packed jobs (the default lane's) merged by (priority, id), a packed job at priority
        0, each id once. Bounded: never more than ``offset + limit`` ids of a set."""
        k = self.core.keys
        if lane is not None:
            names = [lane]
        elif self.client.hget(k.meta, "lanes") == "1":
            names = [x.name for x in (self._run(self.core.lanes(leased=False)))[1]]
            names += [] if DEFAULT_LANE in names else [DEFAULT_LANE]  # only packed jobs wait
        else:
            names = [DEFAULT_LANE]
        end = offset + limit
        with self.client.pipeline(transaction=True) as p:
            for name in names:
                p.zrange(k.lane_pending(name), 0, end - 1, withscores=True)
            sets = p.execute()
        scored = [[(s, i) for i, s in pairs] for pairs in sets]
        if DEFAULT_LANE in names:
            scored.append([(0.0, i) for i in self._packed_ids(end)])
        merged = dict.fromkeys(i for _, i in heapq.merge(*scored))
        return list(merged)[offset:end]

    def _packed_ids(self, most: int) -> list[str]:
        """The first ``most`` packed jobs' ids in claim order (``ready``'s), each once:
        ``ready`` read in slices (each at least twice the last, within :data:`READY_SLICE`),
        an id kept while ``packed`` holds it (an id it no longer holds was unpacked or
        claimed, and is skipped), until ``most`` are found, all that ``packed`` holds are,
        ``ready`` ends, or :data:`READY_SCAN` ids were read. Each slice is one instant; a
        claim between two slices may shift ``ready`` under the next one."""
        k = self.core.keys
        found: dict[str, None] = {}
        start, size = 0, 0
        while start < READY_SCAN:
            size = min(max(most - len(found), READY_SLICE[0], 2 * size), READY_SLICE[1])
            with self.client.pipeline(transaction=True) as p:
                p.hlen(k.packed)
                p.lrange(k.ready, start, start + size - 1)
                total, ids = p.execute()
            if not total or not ids:
                break
            entries = self.client.hmget(k.packed, ids)
            found.update((i, None) for i, e in zip(ids, entries, strict=True) if e is not None)
            start += len(ids)
            if len(found) >= min(most, total) or len(ids) < size:
                break
        return list(found)[:most]

    def events(self, after: str = "0-0", *, follow: bool = False) -> Iterator[Event]:
        """The live event stream above ``after`` (``"0-0"``: all of it; ``"$"``: only what is
        appended from now on). It stops at the stream's end unless ``follow=True``, which
        waits for new events and never ends by itself (``after="$"`` without ``follow``
        yields nothing). See :func:`emq.queue._sync.stream.iter_events`."""
        return iter_events(self.client, self.core.keys, after=after, follow=follow)

    def history(self, job_id: str, *, floor: Floor | str | Path | None = None) -> list[Event]:
        """Every event of ``job_id`` in order, floor and live tail merged with no gap and no
        duplicate (see :func:`emq.queue._sync.history`); ``floor`` defaults to
        ``.emq/floor/<queue>.sqlite3``."""
        from .history import history

        return history(self, job_id, floor)
