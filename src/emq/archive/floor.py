"""The floor: the durable SQLite archive of one queue's event stream.

One file per queue (default ``.emq/floor/<queue>.sqlite3``) in WAL mode with
``synchronous=FULL``, so a fold that returned is on disk before the archiver trims the stream.
The schema is versioned (``PRAGMA user_version`` and ``floor_meta.schema_version``) and
documented in ``docs/events.md``; a floor of version 1 opened for writing is upgraded to 2 in
one transaction (its full-text index built from the rows it holds):

- ``events``: one row per stream entry, primary key the stream id ``(ms, seq)`` (which is
  also the time index: ``ms`` is the server time of the append), indexed by job id.
- ``floor_meta``: ``schema_version``, ``queue``, ``floor_id`` (this floor's identity, used as
  the archiver's lease value), ``created_ms`` and ``watermark`` (W: the last stream id folded;
  every entry up to W is in ``events``).
- ``segments``: closed, immutable id ranges of ``events`` (numbered 1, 2, ...), with what
  shipping them to object storage recorded.
- version 2: ``events_fts`` (FTS5 over the events' text), ``events_by_name`` and
  ``events_ended``, written by the fold in its transaction (:mod:`emq.archive.fts`).
- ``job_logs``: the ``ctx.log`` lines of the jobs that ended, copied by the archiver when it
  folds a job's end (:data:`LOGS_SCHEMA`; created by any open for writing, no version change:
  a floor without it has no lines to read).

Guarantees: a fold is one transaction (rows, their index entries and the new W together, or
neither); it is
idempotent by stream id (``INSERT OR IGNORE``), so re-folding an entry changes nothing; W only
moves forward. A floor belongs to one queue and refuses to be opened for another.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..calls.logs import JobLog
from ..errors import EmqError
from ..model.events import Event, format_id, parse_id
from ..model.keys import check_queue_name
from .fts import FTS_SCHEMA, index_events, migrate_to_2, new_entries

SCHEMA_VERSION = 2
_HAS_LOGS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'job_logs'"
_LOGS_OF = "SELECT at_ms, attempt, line FROM job_logs WHERE job = ? ORDER BY n"
_compact = json.JSONEncoder(separators=(",", ":")).encode

SCHEMA = """
CREATE TABLE floor_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE events (
    ms     INTEGER NOT NULL,  -- stream id, ms part: server time of the append
    seq    INTEGER NOT NULL,  -- stream id, sequence part
    id     TEXT    NOT NULL,  -- the stream id as text, '<ms>-<seq>'
    job    TEXT,              -- job id; NULL for queue events (paused, resumed, drained)
    event  TEXT    NOT NULL,  -- event name (docs/events.md)
    fields TEXT    NOT NULL,  -- JSON object of the entry's other fields (string values)
    PRIMARY KEY (ms, seq)
) WITHOUT ROWID;
CREATE INDEX events_by_job ON events (job, ms, seq);
CREATE TABLE segments (
    no         INTEGER PRIMARY KEY,  -- 1, 2, 3, ... in id order, no gaps
    first_ms   INTEGER NOT NULL,
    first_seq  INTEGER NOT NULL,
    last_ms    INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    events     INTEGER NOT NULL,     -- rows in [first, last]
    closed_ms  INTEGER NOT NULL,
    sha256     TEXT,                 -- of the shipped (compressed) object; NULL until shipped
    bytes      INTEGER,
    shipped_ms INTEGER               -- NULL until body and manifest are both stored
);
"""


LOGS_SCHEMA = """CREATE TABLE IF NOT EXISTS job_logs (
    job     TEXT    NOT NULL,  -- job id
    n       INTEGER NOT NULL,  -- 0, 1, ... oldest first
    at_ms   INTEGER NOT NULL,  -- when the server stored the line (server clock)
    attempt INTEGER NOT NULL,  -- the attempt that logged it
    line    TEXT    NOT NULL,
    PRIMARY KEY (job, n)
) WITHOUT ROWID"""


class FloorError(EmqError):
    """The floor file cannot be used: another queue's, a newer schema, or not empty for a
    restore."""


@dataclass(frozen=True, slots=True)
class Segment:
    """A closed id range of the floor: ``[first, last]`` holding ``events`` rows."""

    no: int
    first: str
    last: str
    events: int
    sha256: str | None = None
    bytes: int | None = None
    shipped_ms: int | None = None


def default_path(queue: str, home: str | Path = ".emq") -> Path:
    """Where a queue's floor lives unless told otherwise: ``<home>/floor/<queue>.sqlite3``."""
    return Path(home) / "floor" / f"{check_queue_name(queue)}.sqlite3"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Floor:
    """The SQLite floor of one queue. Safe to share between threads (one lock per floor)."""

    def __init__(self, path: str | Path, *, queue: str, readonly: bool = False) -> None:
        self.path = Path(path)
        self.queue = check_queue_name(queue)
        self._lock = threading.Lock()
        try:
            self._connect(readonly)
        except BaseException as exc:
            if hasattr(self, "_db"):
                self._db.close()
            if isinstance(exc, OSError | sqlite3.Error):
                raise FloorError(f"cannot open the floor {self.path}: {exc}") from None
            raise

    def _connect(self, readonly: bool) -> None:
        if readonly:
            uri = self.path.absolute().as_uri() + "?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._open(readonly)

    def _open(self, readonly: bool) -> None:
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise FloorError(
                f"{self.path} has floor schema {version}; this emq reads up to {SCHEMA_VERSION}"
            )
        if version == 1 and not readonly:
            version = self._upgrade()
        if version == 0 and not readonly:
            with self._tx() as db:
                if int(db.execute("PRAGMA user_version").fetchone()[0]) == 0:
                    for statement in SCHEMA.split(";\n"):
                        if statement.strip():
                            db.execute(statement)
                    for statement in FTS_SCHEMA:
                        db.execute(statement)
                    meta = [
                        ("schema_version", str(SCHEMA_VERSION)),
                        ("queue", self.queue),
                        ("floor_id", uuid.uuid4().hex),
                        ("created_ms", str(_now_ms())),
                    ]
                    db.executemany("INSERT INTO floor_meta VALUES (?, ?)", meta)
                    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        elif version == 0:
            raise FloorError(f"{self.path} is not an emq floor (no schema)")
        owner = self._meta("queue")
        if owner != self.queue:
            raise FloorError(f"{self.path} is the floor of queue {owner!r}, not {self.queue!r}")
        if not readonly:
            self._db.execute(LOGS_SCHEMA)
        self.schema = int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _upgrade(self) -> int:
        """Version 1 to 2 in one transaction: the FTS table, trigger and indexes, and the
        rows already folded indexed. Returns the version now on disk."""
        with self._tx() as db:
            if int(db.execute("PRAGMA user_version").fetchone()[0]) == 1:
                migrate_to_2(db)
                db.execute("UPDATE floor_meta SET value = '2' WHERE key = 'schema_version'")
                db.execute("PRAGMA user_version=2")
            return int(db.execute("PRAGMA user_version").fetchone()[0])

    @property
    def has_fts(self) -> bool:
        """Whether this floor has the full-text index (schema 2; a read-only open of a
        version-1 floor does not)."""
        return self.schema >= 2

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection, held for reads only (under the floor's lock) for the whole block:
        :mod:`emq.archive.search` runs its queries in it."""
        with self._lock:
            yield self._db

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``): committed on exit, rolled back on error."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM floor_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @property
    def floor_id(self) -> str:
        return self._meta("floor_id") or ""

    def watermark(self) -> str | None:
        """W: the last stream id folded (every entry up to W is here), or None if none yet."""
        return self._meta("watermark")

    def fold(self, entries: Sequence[Event], logs: dict[str, list[JobLog]] | None = None) -> int:
        """Insert ``entries`` (ascending stream ids) and advance W to the last one, in one
        transaction, with ``logs`` (job id -> its lines, each job's replacing what the floor
        had). Returns how many rows were new; entries already present are skipped."""
        if not entries:
            return 0
        lines = [(j, n, x.at_ms, x.attempt, x.line) for j, xs in (logs or {}).items()
                 for n, x in enumerate(xs)]  # fmt: skip
        keyed = [(e, e.key) for e in entries]
        rows = [(*k, e.id, e.job, e.event, _compact(e.fields)) for e, k in keyed]
        with self._tx() as db:
            fresh = new_entries(db, keyed) if self.has_fts else []
            cur = db.executemany("INSERT OR IGNORE INTO events VALUES (?, ?, ?, ?, ?, ?)", rows)
            inserted = cur.rowcount
            index_events(db, fresh)
            db.executemany("DELETE FROM job_logs WHERE job = ?", [(j,) for j in logs or ()])
            db.executemany("INSERT INTO job_logs VALUES (?, ?, ?, ?, ?)", lines)
            self._advance(db, entries[-1].id)
        return inserted

    def _advance(self, db: sqlite3.Connection, new: str) -> None:
        row = db.execute("SELECT value FROM floor_meta WHERE key = 'watermark'").fetchone()
        if row is None or parse_id(new) > parse_id(str(row[0])):
            db.execute("INSERT OR REPLACE INTO floor_meta VALUES ('watermark', ?)", (new,))

    def contains(self, entry_id: str) -> bool:
        with self._lock:
            q = "SELECT 1 FROM events WHERE ms = ? AND seq = ?"
            return self._db.execute(q, parse_id(entry_id)).fetchone() is not None

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM events").fetchone()[0])

    def _events(self, sql: str, params: Sequence[object]) -> list[Event]:
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [Event.from_row(i, e, j, f) for i, e, j, f in rows]

    def job_events(self, job_id: str) -> list[Event]:
        """Every event of ``job_id`` in the floor, in stream order (uses ``events_by_job``)."""
        sql = "SELECT id, event, job, fields FROM events WHERE job = ? ORDER BY ms, seq"
        return self._events(sql, (job_id,))

    def job_logs(self, job_id: str) -> list[JobLog]:
        """The ``ctx.log`` lines the archiver copied for ``job_id``, oldest first."""
        with self._lock:
            if not self._db.execute(_HAS_LOGS).fetchone():  # a read-only floor from before
                return []
            rows = self._db.execute(_LOGS_OF, (job_id,)).fetchall()
        return [JobLog(at, attempt, line) for at, attempt, line in rows]

    def events_between(self, after: str, last: str, limit: int = 100_000) -> list[Event]:
        """Events with ``after < id <= last`` in stream order (by the primary key)."""
        sql = (
            "SELECT id, event, job, fields FROM events WHERE (ms, seq) > (?, ?)"
            " AND (ms, seq) <= (?, ?) ORDER BY ms, seq LIMIT ?"
        )
        return self._events(sql, (*parse_id(after), *parse_id(last), limit))

    def all_events(self) -> list[Event]:
        return self._events("SELECT id, event, job, fields FROM events ORDER BY ms, seq", ())

    # segments -----------------------------------------------------------------------------

    def segments(self) -> list[Segment]:
        with self._lock:
            rows = self._db.execute(
                "SELECT no, first_ms, first_seq, last_ms, last_seq, events, sha256, bytes,"
                " shipped_ms FROM segments ORDER BY no"
            ).fetchall()
        return [
            Segment(r[0], format_id(r[1], r[2]), format_id(r[3], r[4]), r[5], r[6], r[7], r[8])
            for r in rows
        ]

    def close_segments(self, size: int, *, flush: bool = False) -> list[Segment]:
        """Close every full run of ``size`` rows above the last segment into a new segment
        (and, with ``flush``, the remainder too). Closed ranges are immutable: every row is at
        or below W and the floor only grows above W."""
        if size < 1:
            raise FloorError(f"segment size must be >= 1, got {size}")
        made: list[Segment] = []
        with self._tx() as db:
            while True:
                last = db.execute(
                    "SELECT no, last_ms, last_seq FROM segments ORDER BY no DESC LIMIT 1"
                ).fetchone() or (0, -1, -1)
                keys = db.execute(
                    "SELECT ms, seq FROM events WHERE (ms, seq) > (?, ?) ORDER BY ms, seq LIMIT ?",
                    (last[1], last[2], size),
                ).fetchall()
                if not keys or (len(keys) < size and not flush):
                    return made
                seg = Segment(last[0] + 1, format_id(*keys[0]), format_id(*keys[-1]), len(keys))
                db.execute(
                    "INSERT INTO segments (no, first_ms, first_seq, last_ms, last_seq, events,"
                    " closed_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (seg.no, *keys[0], *keys[-1], seg.events, _now_ms()),
                )
                made.append(seg)

    def segment_events(self, seg: Segment) -> list[Event]:
        sql = (
            "SELECT id, event, job, fields FROM events WHERE (ms, seq) >= (?, ?)"
            " AND (ms, seq) <= (?, ?) ORDER BY ms, seq"
        )
        return self._events(sql, (*parse_id(seg.first), *parse_id(seg.last)))

    def mark_shipped(self, no: int, sha256: str, size: int) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE segments SET sha256 = ?, bytes = ?, shipped_ms = ? WHERE no = ?",
                (sha256, size, _now_ms(), no),
            )

    def restore_segment(self, seg: Segment, events: Sequence[Event]) -> None:
        """Add a shipped segment and its rows (restore), advancing W, in one transaction."""
        with self._tx() as db:
            nxt = db.execute("SELECT coalesce(max(no), 0) + 1 FROM segments").fetchone()[0]
            if seg.no != nxt:
                raise FloorError(f"segment {seg.no} restored out of order (expected {nxt})")
            db.execute(
                "INSERT INTO segments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (seg.no, *parse_id(seg.first), *parse_id(seg.last), seg.events, _now_ms(),
                 seg.sha256, seg.bytes, seg.shipped_ms or _now_ms()),
            )  # fmt: skip
            keyed = [(e, e.key) for e in events]
            fresh = new_entries(db, keyed) if self.has_fts else []
            rows = [(*k, e.id, e.job, e.event, _compact(e.fields)) for e, k in keyed]
            db.executemany("INSERT OR IGNORE INTO events VALUES (?, ?, ?, ?, ?, ?)", rows)
            index_events(db, fresh)
            self._advance(db, seg.last)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Floor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Floor({str(self.path)!r}, queue={self.queue!r})"
