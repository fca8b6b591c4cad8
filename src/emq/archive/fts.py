"""Full-text search over the floor (floor schema version 2): what is indexed and how.

Indexed in the same transaction as the fold that inserts the event, by the fold itself
(:func:`index_events`, given only the entries that were not in the floor yet, so re-folding
an entry indexes nothing twice):

- ``events_fts``: an FTS5 table without content of its own (``content=''``,
  ``detail=column``, tokenizer ``unicode61 remove_diacritics 2``), one row per job event that
  carries text: ``enqueued`` (the name), ``dead`` (name, payload, error), ``retrying``
  (error), ``cancelled`` and ``cancel_requested`` (the reason). Column ``name`` is the job's
  name (for events without a ``name`` field, that of the job's ``enqueued`` event in the
  floor), ``body`` the job id and the rest. Its rowid encodes the stream id,
  ``(ms - EPOCH_MS) << 22 | seq``, so rowid order is stream order and a time range is a
  rowid range. An entry with ``seq >= 2**22`` (more than four million events in one
  millisecond) is not indexed.
- ``events_ended``: an index of the rare ending events (``dead``, ``cancelled``, ``removed``)
  by event and time; ``completed`` events are common enough to be found by the time scan.

A search by name uses the ``name`` column of ``events_fts`` (every job has an ``enqueued``
row there), then compares the name exactly. Not a trigger: an FTS5 insert made by a trigger
flushes the index at every row (a statement savepoint each), which made the fold 3 to 6
times slower; one ``executemany`` per fold does not. (An index on the ``name`` field and
``completed`` in ``events_ended`` were tried and left out: together they cost the fold a
fifth of its speed for what the FTS table and the time scan already answer.)

The payload of a job is in its ``dead`` event only (``enqueued`` carries the name, not the
payload), so the floor finds payload words of dead jobs; live rows hold the payload of
every job still in the server.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..model.events import Event

EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z, as the job ids
SEQ_BITS = 22
SEQ_LIMIT = 1 << SEQ_BITS
MS_SPAN = 1 << 41  # indexed ms: strictly within EPOCH_MS +- 2**41 (1954 to 2093): fits 64 bits
TEXT_EVENTS = ("enqueued", "dead", "retrying", "cancelled", "cancel_requested")
ENDED = ("completed", "dead", "cancelled", "removed")
RARE_ENDS = ("dead", "cancelled", "removed")  # indexed by events_ended
IN_RARE_ENDS = "event IN (" + ", ".join(f"'{e}'" for e in RARE_ENDS) + ")"
_IN_TEXT = ", ".join(f"'{e}'" for e in TEXT_EVENTS)

FTS_SCHEMA = [
    "CREATE VIRTUAL TABLE events_fts USING fts5(name, body, content='', detail=column,"
    " columnsize=0, tokenize='unicode61 remove_diacritics 2')",
    f"CREATE INDEX events_ended ON events (event, ms, seq) WHERE {IN_RARE_ENDS}",
]
_INSERT = "INSERT INTO events_fts (rowid, name, body) VALUES (?, ?, ?)"
BACKFILL = f"""INSERT INTO events_fts (rowid, name, body)
SELECT (e.ms - {EPOCH_MS}) * {SEQ_LIMIT} + e.seq,
    coalesce(json_extract(e.fields, '$.name'), (SELECT json_extract(n.fields, '$.name')
        FROM events n WHERE n.job = e.job AND n.event = 'enqueued' LIMIT 1), ''),
    e.job || ' ' || coalesce(json_extract(e.fields, '$.payload'), '') || ' '
        || coalesce(json_extract(e.fields, '$.error'), '') || ' '
        || coalesce(json_extract(e.fields, '$.reason'), '')
FROM events e WHERE e.job IS NOT NULL AND e.event IN ({_IN_TEXT}) AND e.seq < {SEQ_LIMIT}
    AND e.ms > {EPOCH_MS - MS_SPAN} AND e.ms < {EPOCH_MS + MS_SPAN}
ORDER BY e.ms, e.seq"""


def migrate_to_2(db: sqlite3.Connection) -> None:
    """Add the FTS table and ``events_ended``, and index every event already in the floor
    (inside the caller's transaction)."""
    for statement in FTS_SCHEMA:
        db.execute(statement)
    db.execute(BACKFILL)


Keyed = tuple[Event, tuple[int, int]]  # an entry and its stream id as (ms, seq)


def new_entries(db: sqlite3.Connection, entries: Sequence[Keyed]) -> list[Keyed]:
    """The entries not in the floor yet (one range read: a fold above W finds none there),
    each id once: what the fold's ``INSERT OR IGNORE`` is about to add."""
    if not entries:
        return []
    keys = [k for _, k in entries]
    lo, hi = min(keys), max(keys)
    sql = "SELECT ms, seq FROM events WHERE (ms, seq) >= (?, ?) AND (ms, seq) <= (?, ?)"
    seen = set(db.execute(sql, (*lo, *hi)).fetchall())
    if not seen and len(set(keys)) == len(keys):
        return list(entries)
    fresh = []
    for e, key in entries:
        if key not in seen:
            seen.add(key)
            fresh.append((e, key))
    return fresh


def index_events(db: sqlite3.Connection, fresh: Iterable[Keyed]) -> None:
    """Add ``events_fts`` rows for ``fresh`` (entries just inserted, never before)."""
    names: dict[str, str] = {}
    rows = []
    lo, hi = EPOCH_MS - MS_SPAN, EPOCH_MS + MS_SPAN
    for e, (ms, seq) in fresh:
        if e.job is None or e.event not in TEXT_EVENTS or seq >= SEQ_LIMIT or not lo < ms < hi:
            continue
        f = e.fields
        name = f.get("name")
        if name is None:
            name = names.get(e.job)
            if name is None:
                name = names[e.job] = _enqueued_name(db, e.job)
        elif e.event == "enqueued":
            names[e.job] = name
        body = " ".join(t for t in (e.job, f.get("payload"), f.get("error"), f.get("reason")) if t)
        rows.append(((ms - EPOCH_MS) * SEQ_LIMIT + seq, name, body))
    db.executemany(_INSERT, rows)


def _enqueued_name(db: sqlite3.Connection, job: str) -> str:
    sql = "SELECT json_extract(fields, '$.name') FROM events WHERE job = ? AND event = 'enqueued'"
    row = db.execute(sql + " LIMIT 1", (job,)).fetchone()
    return "" if row is None or row[0] is None else str(row[0])


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
    if text.isascii():
        return text.lower()
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
