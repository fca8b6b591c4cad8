"""Full-text search over the floor (floor schema version 2): what is indexed, and how a
search reads it.

Indexed, in the same transaction as the fold that inserts the event (an ``AFTER INSERT``
trigger on ``events``; ``INSERT OR IGNORE`` of an entry already folded fires nothing, so
re-folding indexes nothing twice):

- ``events_fts``: an FTS5 table without content of its own (``content=''``,
  ``detail=column``, tokenizer ``unicode61 remove_diacritics 2``), one row per job event that
  carries text: ``enqueued`` (the name), ``dead`` (name, payload, error), ``retrying``
  (error), ``cancelled`` and ``cancel_requested`` (the reason). Column ``name`` is the job's
  name (for events without a ``name`` field, that of the job's ``enqueued`` event in the
  floor), ``body`` the rest. Its rowid encodes the stream id, ``(ms - EPOCH_MS) << 22 | seq``,
  so rowid order is stream order and a time range is a rowid range. An entry with
  ``seq >= 2**22`` (more than four million events in one millisecond) is not indexed.
- ``events_by_name``: an index on the ``name`` field of the events that have one
  (``enqueued``, ``dead``), with the time.
- ``events_ended``: an index on the ending events (``completed``, ``dead``, ``cancelled``,
  ``removed``), by event and time.

The payload of a job is in its ``dead`` event only (``enqueued`` carries the name, not the
payload), so the floor finds payload words of dead jobs; live rows hold the payload of
every job still in the server.
"""

from __future__ import annotations

import heapq
import json
import re
import sqlite3
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z, as the job ids
SEQ_BITS = 22
SEQ_LIMIT = 1 << SEQ_BITS
MS_SPAN = 1 << 41  # indexed ms: strictly within EPOCH_MS +- 2**41 (1954 to 2093): fits 64 bits
TEXT_EVENTS = ("enqueued", "dead", "retrying", "cancelled", "cancel_requested")
ENDED = ("completed", "dead", "cancelled", "removed")
_IN_TEXT = ", ".join(f"'{e}'" for e in TEXT_EVENTS)
_IN_ENDED = ", ".join(f"'{e}'" for e in ENDED)

# one row's FTS values; {r} is the row (NEW in the trigger, e in the migration)
_ROW = """(({r}.ms - {epoch}) * {limit} + {r}.seq,
    coalesce(json_extract({r}.fields, '$.name'), (SELECT json_extract(n.fields, '$.name')
        FROM events n WHERE n.job = {r}.job AND n.event = 'enqueued' LIMIT 1), ''),
    coalesce(json_extract({r}.fields, '$.payload'), '') || ' '
        || coalesce(json_extract({r}.fields, '$.error'), '') || ' '
        || coalesce(json_extract({r}.fields, '$.reason'), ''))"""
_WHEN = (
    "{r}.job IS NOT NULL AND {r}.event IN ({events}) AND {r}.seq < {limit}"
    " AND {r}.ms > {lo} AND {r}.ms < {hi}"
)


def _fill(template: str, r: str) -> str:
    return template.format(
        r=r, epoch=EPOCH_MS, limit=SEQ_LIMIT, events=_IN_TEXT,
        lo=EPOCH_MS - MS_SPAN, hi=EPOCH_MS + MS_SPAN,
    )  # fmt: skip


FTS_SCHEMA = [
    "CREATE VIRTUAL TABLE events_fts USING fts5(name, body, content='', detail=column,"
    " columnsize=0, tokenize='unicode61 remove_diacritics 2')",
    f"CREATE TRIGGER events_fts_add AFTER INSERT ON events WHEN {_fill(_WHEN, 'NEW')}"
    f" BEGIN INSERT INTO events_fts (rowid, name, body) VALUES {_fill(_ROW, 'NEW')}; END",
    "CREATE INDEX events_by_name ON events (json_extract(fields, '$.name'), ms, seq)"
    " WHERE json_extract(fields, '$.name') IS NOT NULL",
    f"CREATE INDEX events_ended ON events (event, ms, seq) WHERE event IN ({_IN_ENDED})",
]
BACKFILL = (
    f"INSERT INTO events_fts (rowid, name, body) SELECT {_fill(_ROW, 'e')[1:-1]}"
    f" FROM events e WHERE {_fill(_WHEN, 'e')} ORDER BY e.ms, e.seq"
)


def migrate_to_2(db: sqlite3.Connection) -> None:
    """Add the FTS table, its trigger and the two indexes, and index every event already in
    the floor (inside the caller's transaction)."""
    for statement in FTS_SCHEMA:
        db.execute(statement)
    db.execute(BACKFILL)


def rowid_of(ms: int, seq: int = 0) -> int:
    """The ``events_fts`` rowid of stream id ``ms-seq`` (clamped to the indexed span)."""
    ms = min(max(ms, EPOCH_MS - MS_SPAN + 1), EPOCH_MS + MS_SPAN - 1)
    return (ms - EPOCH_MS) * SEQ_LIMIT + min(seq, SEQ_LIMIT - 1)


# -- words ---------------------------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+")
MAX_WORDS = 16
MAX_WORD = 64


def fold_text(text: str) -> str:
    """Case- and accent-folded text, as the ``unicode61 remove_diacritics 2`` tokenizer
    compares it."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


@dataclass(frozen=True, slots=True)
class Term:
    word: str  # folded, letters and digits only
    prefix: bool  # the query word ended in '*': any word starting with it


def terms(text: str | None) -> list[Term]:
    """The words of a query: letters and digits only (every other character separates
    words, so quotes, ``*``, parentheses or ``NEAR`` can never be FTS syntax); a word
    directly followed by ``*`` matches as a prefix. At most :data:`MAX_WORDS` words."""
    if not text:
        return []
    found: list[Term] = []
    folded = fold_text(text)
    for m in _WORD.finditer(folded):
        prefix = folded[m.end() : m.end() + 1] == "*"
        term = Term(m.group()[:MAX_WORD], prefix)
        if term not in found:
            found.append(term)
    return found[:MAX_WORDS]


def match_expr(text_terms: list[Term], name_terms: list[Term]) -> str:
    """An FTS5 MATCH expression: every text term in any column and every name term in
    ``name``; each word is a quoted string (its characters are letters and digits)."""
    parts = [f'"{t.word}"' + ("*" if t.prefix else "") for t in text_terms]
    parts += [f'name : "{t.word}"' for t in name_terms]
    return " AND ".join(parts)


def words_of(text: str) -> set[str]:
    return set(_WORD.findall(fold_text(text)))


def text_matches(text_terms: list[Term], *texts: str | None) -> bool:
    """Whether every term is a word (or, with ``*``, the start of a word) of ``texts``."""
    if not text_terms:
        return True
    joined = " ".join(t for t in texts if t)
    folded = fold_text(joined)
    if not all(t.word in folded for t in text_terms):  # quick refusal, most rows
        return False
    words = words_of(joined)
    for t in text_terms:
        if t.prefix:
            if not any(w.startswith(t.word) for w in words):
                return False
        elif t.word not in words:
            return False
    return True


def snippet(text_terms: list[Term], *texts: str | None, width: int = 160) -> str:
    """About ``width`` characters of the first of ``texts`` that holds a term, around it
    (or the start of the first non-empty text)."""
    chosen = [t for t in texts if t]
    for text in chosen:
        folded = text.casefold()
        for t in text_terms:
            at = folded.find(t.word)
            if at >= 0 and len(folded) == len(text):
                start = max(0, at - width // 3)
                cut = text[start : start + width]
                return ("…" if start else "") + cut + ("…" if start + width < len(text) else "")
    if not chosen:
        return ""
    text = chosen[0]
    return text[:width] + ("…" if len(text) > width else "")


def fields_of(fields_json: str) -> dict[str, str]:
    value = json.loads(fields_json)
    return value if isinstance(value, dict) else {}


def iter_rows(db: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> Iterator[tuple]:  # type: ignore[type-arg]
    cur = db.execute(sql, params)
    while rows := cur.fetchmany(256):
        yield from rows


# -- searching the floor -------------------------------------------------------------------

ROW_CAP = 50_000  # candidate rows read per search, at most
JOB_CAP = 5_000  # distinct jobs checked per search, at most
_NO_LOWER = -(2**62)
_NO_UPPER = 2**62
_SELECT = "SELECT job, ms, event, fields FROM events"


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
    sql = f"{_SELECT} WHERE job = ? ORDER BY ms DESC, seq DESC LIMIT 500"
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


def _texts(fields: dict[str, str]) -> tuple[str | None, ...]:
    return (fields.get("payload"), fields.get("error"), fields.get("reason"), fields.get("name"))


def _candidates(db: sqlite3.Connection, q: FloorQuery, fts: bool) -> Iterator[tuple]:  # type: ignore[type-arg]
    """Rows (job, ms, event, fields) newest first, from the most selective index."""
    lo = _NO_LOWER if q.since_ms is None else q.since_ms
    hi = _NO_UPPER if q.until_ms is None else q.until_ms
    for job in q.job_ids:
        sql = f"{_SELECT} WHERE job = ? AND ms BETWEEN ? AND ? ORDER BY ms DESC, seq DESC LIMIT 1"
        yield from db.execute(sql, (job, lo, hi))
    if q.job_ids and not q.text_is_id:
        return
    if q.text and fts:
        names = terms(q.name) if q.name else []
        sql = (
            "SELECT e.job, e.ms, e.event, e.fields FROM events_fts f JOIN events e"
            f" ON e.ms = (f.rowid >> {SEQ_BITS}) + {EPOCH_MS}"
            f" AND e.seq = (f.rowid & {SEQ_LIMIT - 1})"
            " WHERE events_fts MATCH ? AND f.rowid BETWEEN ? AND ? ORDER BY f.rowid DESC"
        )
        args = (match_expr(list(q.text), names), rowid_of(lo), rowid_of(hi, SEQ_LIMIT - 1))
        yield from iter_rows(db, sql, args)
    elif q.name and fts and not q.text:
        sql = (
            f"{_SELECT} WHERE json_extract(fields, '$.name') = ? AND ms BETWEEN ? AND ?"
            " ORDER BY ms DESC, seq DESC"
        )
        yield from iter_rows(db, sql, (q.name, lo, hi))
    elif q.states and fts and not q.text and q.states <= set(ENDED):
        sql = (
            f"{_SELECT} WHERE event IN ({_IN_ENDED}) AND event = ? AND ms BETWEEN ? AND ?"
            " ORDER BY ms DESC, seq DESC"
        )
        runs = [iter_rows(db, sql, (s, lo, hi)) for s in sorted(q.states)]
        yield from heapq.merge(*runs, key=lambda r: -r[1])
    else:
        sql = f"{_SELECT} WHERE ms BETWEEN ? AND ? AND job IS NOT NULL ORDER BY ms DESC, seq DESC"
        yield from iter_rows(db, sql, (lo, hi))


def search_floor(db: sqlite3.Connection, q: FloorQuery, *, fts: bool) -> list[FloorHit]:
    """Up to ``q.limit`` jobs matching ``q``, newest matching event first. Bounded: at most
    :data:`ROW_CAP` candidate rows and :data:`JOB_CAP` distinct jobs are examined, so a
    search that filters most candidates out may return fewer hits than exist. Without the
    full-text index (a version-1 floor opened read-only) text and name are matched on each
    row of the time scan, within the same bounds."""
    hits: list[FloorHit] = []
    seen: set[str] = set()
    rows = 0
    indexed_text = fts and bool(q.text)
    for job, ms, _, raw in _candidates(db, q, fts):
        rows += 1
        if rows > ROW_CAP or len(seen) >= JOB_CAP or len(hits) >= q.limit:
            break
        if job in seen:
            continue
        fields = fields_of(raw)
        is_id = job in q.job_ids
        if (
            q.text
            and not indexed_text
            and not is_id
            and not text_matches(list(q.text), *_texts(fields))
        ):
            continue
        seen.add(job)
        s = summary(db, job)
        if q.name is not None and s.name != q.name:
            continue
        if q.states is not None and s.state not in q.states:
            continue
        if is_id and q.text and not q.text_is_id and not _job_text_matches(db, job, q.text):
            continue
        text = _texts(fields)
        snip = snippet(list(q.text), *text) if q.text else snippet([], s.payload, s.error, *text)
        hits.append(FloorHit(job, s.name, s.state or "unknown", ms, snip, s.error))
    return hits


def _job_text_matches(db: sqlite3.Connection, job: str, text: tuple[Term, ...]) -> bool:
    rows = db.execute(f"{_SELECT} WHERE job = ? ORDER BY ms DESC, seq DESC LIMIT 500", (job,))
    texts = [t for r in rows for t in _texts(fields_of(r[3]))]
    return text_matches(list(text), *texts)
