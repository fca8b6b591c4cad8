# Generated from emq/queue/_async/history.py by scripts/unasync.py: edit that file instead.
"""A job's whole story: the floor merged with the live stream above W.

Order of reads, and why it has no gap: take W from the floor (t0), read the live stream from
W upward (t1), then read the job's rows from the floor (t2). An entry at or below W was in the
floor at t0. An entry above W was either still in the stream when it was read, or the
archiver trimmed it before then, which it does only after folding it, so it is in the floor
at t2. The floor only grows and always holds a prefix of the stream, so the union is every
entry up to the end of the stream at t1; entries in both are counted once (by stream id),
and the result is in stream order.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, cast

import redis

from ...archive.floor import Floor, default_path
from ...calls.jobs import QueueCore
from ...calls.logs import JobLog
from ...errors import EmqError
from ...model.events import Event
from ...model.ids import check_id
from ...model.keys import QueueKeys
from .stream import read_range


class _Source(Protocol):
    """What a history is read from: a queue (or its reads), its client and its calls."""

    @property
    def client(self) -> redis.Redis: ...

    @property
    def core(self) -> QueueCore: ...


FloorArg = Floor | str | Path | None


def _resolve(queue: str, floor: FloorArg) -> tuple[Floor | None, bool]:
    """The floor to read and whether this call opened it (and so must close it)."""
    if isinstance(floor, Floor):
        return floor, False
    path = Path(floor) if floor is not None else default_path(queue)
    if not path.exists():
        if floor is not None:
            raise EmqError(f"no floor at {path}")
        return None, False
    return Floor(path, queue=queue, readonly=True), True


def _no_floor(keys: QueueKeys, cached: str | None) -> None:
    if cached not in (None, "0-0"):
        raise EmqError(
            f"queue {keys.queue!r} is archived (W={cached}) and its older events are only in "
            "its floor; pass floor=<path> (default .emq/floor/<queue>.sqlite3)"
        )


def merge(job_id: str, floor_rows: Iterable[Event], live: Iterable[Event]) -> list[Event]:
    """Union by stream id, in stream order."""
    by_id = {e.id: e for e in floor_rows}
    by_id.update((e.id, e) for e in live if e.job == job_id)
    return sorted(by_id.values(), key=lambda e: e.key)


def history(queue: _Source, job_id: str, floor: FloorArg = None) -> list[Event]:
    """Every event of ``job_id``, in order, with no gap and no duplicate (module doc). The
    floor, an SQLite file, is read without blocking an event loop."""
    keys = queue.core.keys
    check_id(job_id)
    db, owned = _resolve(keys.queue, floor)
    try:
        if db is None:
            _no_floor(keys, cast(str | None, queue.client.get(keys.events_archived)))
            return merge(job_id, [], [e for e in read_range(queue.client, keys)])
        w = db.watermark()
        live = [e for e in read_range(queue.client, keys, "-" if w is None else w)]
        return merge(job_id, db.job_events(job_id), live)
    finally:
        if owned and db is not None:
            db.close()


def floor_logs(queue: str, job_id: str, floor: FloorArg = None) -> list[JobLog]:
    """The ``ctx.log`` lines of ``job_id`` that the archiver copied into the floor when it
    folded the job's end ([] without a floor: ``floor`` defaults to
    ``.emq/floor/<queue>.sqlite3``, as for a history), read without blocking an event loop."""
    db, owned = _resolve(queue, floor)
    if db is None:
        return []
    try:
        return db.job_logs(check_id(job_id))
    finally:
        if owned:
            db.close()
