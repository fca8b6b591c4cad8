"""Searching the floor: candidate rows from its most selective index, each job checked on
its own newest events (name, state, error), bounded (:data:`ROW_CAP`, :data:`JOB_CAP`).

Used by :mod:`emq.archive.search`; the index itself is :mod:`emq.archive.fts`.
"""

from __future__ import annotations

import heapq
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .fts import (
    ENDED,
    EPOCH_MS,
    IN_RARE_ENDS,
    RARE_ENDS,
    SEQ_BITS,
    SEQ_LIMIT,
    Term,
    match_expr,
    rowid_of,
    snippet,
    terms,
    text_matches,
)  # fmt: skip

Row = tuple[Any, ...]


def fields_of(fields_json: str) -> dict[str, str]:
    value = json.loads(fields_json)
    return value if isinstance(value, dict) else {}


def iter_rows(db: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> Iterator[Row]:
    cur = db.execute(sql, params)
    while rows := cur.fetchmany(256):
        yield from rows


ROW_CAP = 50_000  # candidate rows read per search, at most
JOB_CAP = 5_000  # distinct jobs checked per search, at most
_NO_LOWER = -(2**62)
_NO_UPPER = 2**62
_SELECT = "SELECT job, ms, event, fields FROM events"
# events that move no job (a long job's progress events must not hide its state)
_MOVES = (
    "event NOT IN ('progress', 'lease_lost', 'cancel_requested', 'reprioritised',"
    " 'payload_updated', 'step', 'step_failed')"
)


@dataclass(frozen=True, slots=True)
class FloorHit:
    """A job found in the floor: its name and state as of the floor's last event of it."""

    job: str
    name: str | None
    state: str
    ms: int  # the matching event's time
    snippet: str
    error: str | None


@dataclass(frozen=True, slots=True)
class FloorQuery:
    job_ids: tuple[str, ...] = ()
    text: tuple[Term, ...] = ()
    text_is_id: bool = False  # the text is a job id: job_ids holds it, text may match too
    name: str | None = None
    states: frozenset[str] | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    limit: int = 50


def state_of(event: str, fields: dict[str, str]) -> str | None:
    """Where a job is after ``event`` (a location or an ended state), None if the event does
    not move it."""
    fixed = {
        "promoted": "pending", "claimed": "active", "completed": "completed",
        "retrying": "schedule", "dead": "dead", "stalled": "pending", "removed": "removed",
        "cancelled": "cancelled", "ready": "pending", "missing": "missing",
    }  # fmt: skip
    if event in fixed:
        return fixed[event]
    if event in ("enqueued", "rescheduled"):
        return "schedule" if fields.get("state") == "scheduled" else fields.get("state")
    if event == "redriven":
        return fields.get("to") or "pending"
    if event == "delayed":
        return "schedule" if fields.get("delay_ms", "0") not in ("", "0") else "pending"
    return None


@dataclass(slots=True)
class _Summary:
    name: str | None = None
    state: str | None = None
    error: str | None = None
    payload: str | None = None


def summary(db: sqlite3.Connection, job: str) -> _Summary:
    """A job's name, state, last error and (when dead) payload from its newest events."""
    s = _Summary()
    sql = f"{_SELECT} WHERE job = ? AND {_MOVES} ORDER BY ms DESC, seq DESC LIMIT 500"
    for _, _, event, raw in db.execute(sql, (job,)):
        f = fields_of(raw)
        s.state = s.state or state_of(event, f)
        s.name = s.name or f.get("name")
        s.payload = s.payload or (f.get("payload") if event == "dead" else None)
        if s.error is None and event in ("retrying", "dead"):
            s.error = f.get("error")
        elif s.error is None and event == "cancelled":
            s.error = "cancelled" + (f": {f['reason']}" if f.get("reason") else "")
    if s.name is None:
        row = db.execute(
            f"{_SELECT} WHERE job = ? AND event = 'enqueued' LIMIT 1", (job,)
        ).fetchone()
        s.name = None if row is None else fields_of(row[3]).get("name")
    return s


def _texts(fields: dict[str, str], job: str) -> tuple[str | None, ...]:
    return (
        fields.get("payload"),
        fields.get("error"),
        fields.get("reason"),
        fields.get("name"),
        job,
    )


def _candidates(db: sqlite3.Connection, q: FloorQuery, fts: bool) -> Iterator[Row]:
    """Rows (job, ms, event, fields) newest first, from the most selective index: the job
    index for ids, ``events_ended`` for a rare end (with or without a name: a ``dead`` row
    states its name), the FTS table for text and names, else the primary key (time)."""
    lo = _NO_LOWER if q.since_ms is None else q.since_ms
    hi = _NO_UPPER if q.until_ms is None else q.until_ms
    for job in q.job_ids:
        sql = f"{_SELECT} WHERE job = ? AND ms BETWEEN ? AND ? ORDER BY ms DESC, seq DESC LIMIT 1"
        yield from db.execute(sql, (job, lo, hi))
    if q.job_ids and not q.text_is_id:
        return
    names = terms(q.name) if q.name else []
    if fts and not q.text and q.states and q.states <= set(RARE_ENDS):
        sql = (
            f"{_SELECT} WHERE {IN_RARE_ENDS} AND event = ? AND ms BETWEEN ? AND ?"
            " ORDER BY ms DESC, seq DESC"
        )
        runs = [iter_rows(db, sql, (s, lo, hi)) for s in sorted(q.states)]
        yield from heapq.merge(*runs, key=lambda r: -r[1])
    elif fts and (q.text or names):
        sql = (
            "SELECT e.job, e.ms, e.event, e.fields FROM events_fts f JOIN events e"
            f" ON e.ms = (f.rowid >> {SEQ_BITS}) + {EPOCH_MS}"
            f" AND e.seq = (f.rowid & {SEQ_LIMIT - 1})"
            " WHERE events_fts MATCH ? AND f.rowid BETWEEN ? AND ? ORDER BY f.rowid DESC"
        )
        args = (match_expr(list(q.text), names), rowid_of(lo), rowid_of(hi, SEQ_LIMIT - 1))
        yield from iter_rows(db, sql, args)
    else:
        sql = f"{_SELECT} WHERE ms BETWEEN ? AND ? AND job IS NOT NULL ORDER BY ms DESC, seq DESC"
        yield from iter_rows(db, sql, (lo, hi))


def _row_fits(q: FloorQuery, fts: bool, job: str, event: str, fields: dict[str, str]) -> bool:
    """Whether a candidate row may stand for its job, before the job itself is read: what
    its index did not already check (text and name without the FTS table, a name the row
    states), and, for an ended state alone, that the row is that end."""
    if job in q.job_ids:
        return True
    if q.text and not fts and not text_matches(list(q.text), *_texts(fields, job)):
        return False
    if q.name is not None:
        named = fields.get("name")
        if named is not None and named != q.name:
            return False
        if named is None and not (fts and terms(q.name)):
            return False  # scanned rows: the job's enqueued (or dead) row names it
    if not q.text and q.states and q.states <= set(ENDED) and event in ENDED:
        return event in q.states
    return True


def search_floor(db: sqlite3.Connection, q: FloorQuery, *, fts: bool) -> list[FloorHit]:
    """Up to ``q.limit`` jobs matching ``q``, newest matching event first. Bounded: at most
    :data:`ROW_CAP` candidate rows and :data:`JOB_CAP` distinct jobs are examined, so a
    search that filters most candidates out may return fewer hits than exist. Without the
    full-text index (a version-1 floor opened read-only) text and name are matched on each
    row of the time scan, within the same bounds."""
    hits: list[FloorHit] = []
    seen: set[str] = set()
    rows = 0
    for job, ms, event, raw in _candidates(db, q, fts):
        rows += 1
        if rows > ROW_CAP or len(seen) >= JOB_CAP or len(hits) >= q.limit:
            break
        if job in seen:
            continue
        fields = fields_of(raw)
        if not _row_fits(q, fts, job, event, fields):
            continue
        seen.add(job)
        s = summary(db, job)
        if q.name is not None and s.name != q.name:
            continue
        if q.states is not None and s.state not in q.states:
            continue
        is_id = job in q.job_ids
        if is_id and q.text and not q.text_is_id and not _job_text_matches(db, job, q.text):
            continue
        text = _texts(fields, job)
        snip = snippet(list(q.text), *text) if q.text else snippet([], s.payload, s.error, *text)
        hits.append(FloorHit(job, s.name, s.state or "unknown", ms, snip, s.error))
    return hits


def _job_text_matches(db: sqlite3.Connection, job: str, text: tuple[Term, ...]) -> bool:
    rows = db.execute(f"{_SELECT} WHERE job = ? ORDER BY ms DESC, seq DESC LIMIT 500", (job,))
    texts = [t for r in rows for t in _texts(fields_of(r[3]), job)]
    return text_matches(list(text), *texts)
