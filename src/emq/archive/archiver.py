"""The archiver: fold the event stream into the floor, and only then trim it.

One cycle, in this order (each step is a named pause point for tests, see ``Hook``):

0. ``claimed``: take or renew the archiver lease ``events:archiver`` (value: the floor's id,
   so only one floor archives a queue; the same floor reopened after a crash re-takes it at
   once) and write the floor's W to ``events:archived``. From then on the transition scripts
   append without trimming: the archiver owns retention. This also repairs a stale cache.
   Then the continuity check below runs against the floor's W.
1. ``read``: ``XRANGE (W +`` in chunks, at most ``batch`` entries.
2. ``folded``: insert them into the floor and record the new W, in one SQLite transaction,
   idempotent by stream id. A job whose end (``completed``, ``dead``, ``cancelled``) is among
   them has its ``ctx.log`` lines (``logs:<id>``, read between steps 1 and 2) copied into the
   floor's ``job_logs`` in the same transaction, replacing what an earlier end copied.
3. ``cached``: ``SET events:archived W`` for other readers (it never runs ahead of the floor).
4. ``trimmed``: ``XTRIM events MINID W`` (exact), inside ``WATCH``/``MULTI`` on the lease;
   when W lies inside an entry of several events (keyspace layout 2), at that entry's id, so
   the entry is kept whole. ``trimmed`` counts entries, not events.

Why ``MINID`` at W and never ``MAXLEN``: ``MINID W`` removes exactly the ids below W, all of
which are in the floor, whatever was appended since the read; a ``MAXLEN`` trim after a read
counts entries, so entries appended meanwhile push unarchived ones out. ``MINID W`` keeps the
entry W itself: it is already in the floor, and it is the witness of continuity. While the
archiver alone trims, the stream's first entry is W (or below it, after a crash before the
trim); a first entry *above* W means something else trimmed (e.g. ``events:archived`` was
deleted and the scripts' ``MAXLEN`` took over), and the cycle reports that ``gap``. A first
entry below W that the floor lacks (a recreated stream, a foreign floor) stops the cycle
before it trims anything.

Crash safety: a crash before step 2 commits leaves the floor as it was (the next cycle reads
the same slice); after it, the rows and W are on disk, and the next cycle repeats steps 0, 3
and 4 (re-reading nothing). No step loses an entry and none folds one twice. Deleting
``events:archived`` while no archiver runs hands retention back to the scripts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import redis

from ..calls.logs import MAX_LINES, JobLog, decode_logs
from ..errors import EmqError, ScriptError, ServerRefused, ServerUnreachable
from ..model.events import READ_CHUNK, Event, last_id, parse_id
from ..queue._sync.queue import Queue
from ..queue._sync.stream import read_range
from .floor import Floor, default_path

log = logging.getLogger("emq.archive")
# what a cycle retries: the server is away or refuses (OOM, READONLY, NOPERM); WatchError is
# handled inside a cycle, anything else is raised
SERVER_ERRORS = (redis.RedisError, ServerUnreachable, ServerRefused, ScriptError)

Hook = Callable[[str], None]
PAUSE_POINTS = ("claimed", "read", "folded", "cached", "trimmed")
LOG_ENDS = ("completed", "dead", "cancelled")  # a job's end whose log lines the floor keeps


class ArchiveConflict(EmqError):
    """Trimming would be unsafe: another floor holds the lease, or the stream holds entries
    below W that this floor never folded."""


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one cycle did. ``gap`` is ``(W, first id)`` when the stream starts above W."""

    read: int
    folded: int
    watermark: str | None
    trimmed: int
    gap: tuple[str, str] | None = None


@dataclass(slots=True)
class Totals:
    cycles: int = 0
    read: int = 0
    folded: int = 0
    trimmed: int = 0
    gaps: list[tuple[str, str]] = field(default_factory=list)

    def add(self, r: CycleResult) -> None:
        self.cycles += 1
        self.read += r.read
        self.folded += r.folded
        self.trimmed += r.trimmed
        if r.gap:
            self.gaps.append(r.gap)


def open_floor(queue: str, floor: Floor | str | Path | None) -> Floor:
    if isinstance(floor, Floor):
        if floor.queue != queue:
            raise ArchiveConflict(f"{floor!r} is not the floor of queue {queue!r}")
        return floor
    return Floor(floor if floor is not None else default_path(queue), queue=queue)


class Archive:
    """Archives one queue's event stream into a floor (see the module doc for the cycle).

    ``batch`` bounds one cycle's read (and its transaction); ``lease_ms`` is how long the
    lease outlives a stopped archiver before another floor may take over; ``hook`` is called
    with each pause point's name (tests pause or crash there).
    """

    def __init__(
        self,
        queue: Queue,
        floor: Floor | str | Path | None = None,
        *,
        batch: int = 10_000,
        chunk: int = READ_CHUNK,
        lease_ms: int = 60_000,
        hook: Hook | None = None,
    ) -> None:
        if batch < 1 or chunk < 1 or lease_ms < 1:
            raise EmqError("batch, chunk and lease_ms must be >= 1")
        self.queue = queue
        self.client: redis.Redis = queue.client
        self.keys = queue.core.keys
        self.floor = open_floor(queue.name, floor)
        self.batch, self.chunk, self.lease_ms = batch, chunk, lease_ms
        self.hook = hook

    def _pause(self, point: str) -> None:
        if self.hook is not None:
            self.hook(point)

    def cycle(self) -> CycleResult:
        """One bounded cycle: claim, read above W, fold, cache W, trim ``MINID`` W."""
        w = self.floor.watermark()
        self._claim(w)
        gap = None if w is None else self._check_continuity(w)
        self._pause("claimed")
        entries = self._read(w)
        self._pause("read")
        folded = self.floor.fold(entries, self._logs_of(entries))
        w = self.floor.watermark()
        self._pause("folded")
        trimmed = 0
        if w is not None:
            self._cache(w)
            self._pause("cached")
            trimmed = self._trim(w)
        self._pause("trimmed")
        return CycleResult(len(entries), folded, w, trimmed, gap)

    def catch_up(self, max_cycles: int = 1_000_000) -> Totals:
        """Run cycles until one reads less than a full batch (the stream is drained above W)."""
        totals = Totals()
        for _ in range(max_cycles):
            r = self.cycle()
            totals.add(r)
            if r.read < self.batch:
                break
        return totals

    # steps ---------------------------------------------------------------------------------

    def _claim(self, w: str | None) -> None:
        me = self.floor.floor_id
        lk = self.keys.events_archiver
        if not self.client.set(lk, me, nx=True, px=self.lease_ms):
            holder = cast(str | None, self.client.get(lk))
            if holder != me:
                raise ArchiveConflict(
                    f"queue {self.queue.name!r} is archived by another floor ({holder}); "
                    f"its lease {lk} lapses {self.lease_ms} ms after that archiver stops"
                )
            self.client.pexpire(lk, self.lease_ms)
        self._cache(w or "0-0")

    def _read(self, w: str | None) -> list[Event]:
        start = "-" if w is None else "(" + w
        out: list[Event] = []
        for event in read_range(self.client, self.keys, start, "+", min(self.chunk, self.batch)):
            out.append(event)
            if len(out) >= self.batch:
                break
        return out

    def _logs_of(self, entries: list[Event]) -> dict[str, list[JobLog]]:
        """The log lines of the jobs whose end is in ``entries`` (those with lines), read in
        pipelines of 1,000 lists. The lines of a job reach the server before its end does."""
        ended = list(dict.fromkeys(e.job for e in entries if e.event in LOG_ENDS and e.job))
        out: dict[str, list[JobLog]] = {}
        for start in range(0, len(ended), 1_000):
            ids = ended[start : start + 1_000]
            with self.client.pipeline(transaction=False) as p:
                for job_id in ids:
                    p.lrange(self.keys.logs(job_id), -MAX_LINES, -1)
                found = p.execute()
            out.update((i, decode_logs(x)) for i, x in zip(ids, found, strict=True) if x)
        return out

    def _cache(self, w: str) -> None:
        self.client.set(self.keys.events_archived, w)

    def _check_continuity(self, w: str) -> tuple[str, str] | None:
        first = cast(list[Any], self.client.xrange(self.keys.events, "-", "+", count=1))
        if not first:
            return None
        first_id = str(first[0][0])
        if parse_id(first_id) < parse_id(w) and not self.floor.contains(first_id):
            raise ArchiveConflict(
                f"the stream of {self.queue.name!r} starts at {first_id}, below W={w}, with an "
                "entry this floor never folded (was the stream recreated, or is this floor "
                "another server's?); refusing to trim"
            )
        if parse_id(first_id) > parse_id(w):
            log.warning("events of %s between %s and %s left the stream without being folded",
                        self.queue.name, w, first_id)  # fmt: skip
            return (w, first_id)
        return None

    def _trim_point(self, w: str) -> str:
        """The id of the entry that holds W: W itself, or below it when that entry holds
        several events (one call's, keyspace layout 2). ``MINID`` there keeps the entry whole:
        it is the witness of continuity, and it may hold events above W not yet folded."""
        held = cast(list[Any], self.client.xrevrange(self.keys.events, w, "-", count=1))
        if held and parse_id(last_id(held)) >= parse_id(w):
            return str(held[0][0])
        return w

    def _trim(self, w: str) -> int:
        w = self._trim_point(w)
        lk = self.keys.events_archiver
        me = self.floor.floor_id
        with self.client.pipeline(transaction=True) as p:
            try:
                p.watch(lk)  # type: ignore[no-untyped-call]
                if p.get(lk) != me:
                    raise ArchiveConflict(f"lost the archiver lease {lk} before trimming")
                p.multi()
                p.xtrim(self.keys.events, minid=w, approximate=False)
                p.pexpire(lk, self.lease_ms)
                trimmed, _ = p.execute()
            except redis.WatchError:
                raise ArchiveConflict(f"the archiver lease {lk} changed; not trimming") from None
        return int(trimmed)

    # the loop and the rest ------------------------------------------------------------------

    def run(
        self,
        every_s: float = 1.0,
        stop: threading.Event | None = None,
        after_cycle: Callable[[Totals], None] | None = None,
    ) -> None:
        """Catch up (at most 100 cycles at a time), call ``after_cycle`` (e.g. ship closed
        segments), wait ``every_s``; until ``stop`` is set. A server error (unreachable, out of
        memory, a refusal) is logged once per episode and retried with backoff (up to 30 s);
        an :class:`ArchiveConflict` or any other error ends the loop by raising (it needs a
        human); the loop never ends silently.
        On the way out the lease is released (``events:archived`` is kept: retention stays with
        an archiver until :meth:`release` is called)."""
        stop = stop or threading.Event()
        failures = 0
        try:
            while not stop.is_set():
                wait = every_s
                try:
                    totals = self.catch_up(max_cycles=100)
                    if after_cycle is not None:
                        after_cycle(totals)
                except SERVER_ERRORS as exc:
                    failures += 1
                    if failures == 1:
                        log.warning("archive cycle of %s failed, retrying with backoff: %s",
                                    self.queue.name, exc)  # fmt: skip
                    wait = min(30.0, every_s * 2 ** min(failures, 8))
                else:
                    if failures:
                        log.warning("archive cycle of %s succeeds again", self.queue.name)
                    failures = 0
                stop.wait(wait)
        finally:
            self.release_lease()

    def release_lease(self) -> None:
        """Give up the lease if this floor holds it, so another floor may take over."""
        lk = self.keys.events_archiver
        with self.client.pipeline(transaction=True) as p:
            try:
                p.watch(lk)  # type: ignore[no-untyped-call]
                if p.get(lk) == self.floor.floor_id:
                    p.multi()
                    p.delete(lk)
                    p.execute()
            except redis.WatchError:
                pass

    def release(self) -> None:
        """Stop owning retention: release the lease and delete ``events:archived``, so the
        transition scripts cap the stream with ``MAXLEN`` again. Only do this once no archiver
        runs for the queue; events trimmed after this are never folded."""
        self.release_lease()
        self.client.delete(self.keys.events_archived)

    def status(self) -> dict[str, Any]:
        """W, the cached W, the lease holder, the stream's length, first and last ids, the
        entries above W (``lag``) and how far behind in ms, the floor's rows and segments."""
        w = self.floor.watermark()
        with self.client.pipeline(transaction=True) as p:
            p.get(self.keys.events_archived)
            p.get(self.keys.events_archiver)
            p.xlen(self.keys.events)
            p.xrange(self.keys.events, "-", "+", count=1)
            p.xrevrange(self.keys.events, "+", "-", count=1)
            cached, holder, length, first, last = p.execute()
        # entries at or below W still in the stream: just W after a trim, at most a batch more
        below = len(cast(list[Any], self.client.xrange(self.keys.events, "-", w))) if w else 0
        segments = self.floor.segments()
        return {
            "queue": self.queue.name,
            "floor": str(self.floor.path),
            "watermark": w,
            "cached_watermark": cached,
            "lease_holder": holder,
            "this_floor": self.floor.floor_id,
            "stream_length": int(length),
            "stream_first": first[0][0] if first else None,
            "stream_last": last[0][0] if last else None,
            "lag": int(length) - below,
            "lag_ms": parse_id(last[0][0])[0] - parse_id(w)[0] if last and w else None,
            "floor_rows": self.floor.count(),
            "segments_closed": len(segments),
            "segments_shipped": sum(1 for s in segments if s.shipped_ms is not None),
        }

    def close(self) -> None:
        self.floor.close()
