"""Search a queue's jobs: the live rows in the server and the archive floor (SQLite FTS5).

What is searched where (``docs/search.md``):

- **Live rows**, bounded: the newest :data:`LIVE_SCAN` ids of each location set (by score,
  highest first: the latest deaths, completions, run-at times, deadlines; the back of
  ``pending``; in lane mode that bound is shared by the lanes' pending sets; and the newest
  :data:`LIVE_SCAN` packed jobs, the back of ``ready``), or only the location ``state``
  names, read with ``HMGET`` in pipelines of :data:`CHUNK` rows (a packed job, which has no
  row, by its entry in ``packed``, read with it). A queue with millions of rows costs at
  most ``7 x LIVE_SCAN`` row reads per search, never a scan of the whole keyspace. A job id
  (``job_id``, or a ``text`` that is one) is read directly.
- **The floor**, through its indexes (:mod:`emq.archive.fts`): the job index for an id, the
  full-text index for ``text`` and ``name``, the index of the rare ends (dead, cancelled,
  removed), else the primary key (time); at most ``ROW_CAP`` candidate rows and ``JOB_CAP``
  jobs examined per search (:mod:`emq.archive.fts_query`). Payload words are in the floor
  for dead jobs only (the ``dead`` event carries the payload; ``enqueued`` does not).

Criteria, all optional and combined with AND: ``text`` (every word of it is a word of the
job's name, payload or error; ``word*`` matches a prefix; quotes, ``*``, parentheses and
operators are never query syntax), ``job_id`` (exact), ``name`` (exact), ``state``, and a time
range on the time of the matching record (a live row's death, completion or creation; in the
floor, the matching event). A job found in both places is one hit, ``source="both"``, its
state the live one. Hits are newest first; a job's current state decides ``state``, so a
floor hit whose job lives on in another state is dropped. A state a job has only while it
is live (pending, schedule, active, waiting) is answered by the live rows alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..calls.call import packed_row
from ..errors import InvalidOption
from ..model.checks import shown
from ..model.ids import ID_PATTERN, check_id, minted_at_ms
from ..model.lanes import DEFAULT_LANE
from .floor import Floor, FloorError, default_path
from .fts import ENDED, Term, snippet, terms
from .fts import text_matches as _matches
from .fts_query import FloorHit, FloorQuery, search_floor

if TYPE_CHECKING:
    from ..queue._async.queue import AsyncQueue
    from ..queue._sync.queue import Queue

LIVE_SCAN = 1_000  # ids read per location set, newest first
CHUNK = 500  # rows per pipeline
MAX_LIMIT = 1_000
MAX_TEXT = 1_000
LOCATIONS = ("pending", "schedule", "active", "waiting", "dead", "completed")
WAITING_OR_RUNNING = ("pending", "schedule", "active", "waiting")  # live rows only
STATES = frozenset(LOCATIONS) | frozenset(ENDED)
ROW_FIELDS = ("state", "name", "payload", "last_error", "created_at", "died_at",
              "completed_at", "cancelled")  # fmt: skip
FloorArg = Floor | str | Path | None


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """What to look for; every criterion given must hold. ``state``: a location (pending,
    schedule, active, waiting, dead, completed) or an ended state the floor knows
    (completed, dead, cancelled, removed); ``since_ms``/``until_ms``: server ms, inclusive."""

    text: str | None = None
    job_id: str | None = None
    name: str | None = None
    state: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class Hit:
    """One job found. ``source``: ``"live"`` (its row), ``"floor"`` (the archive) or
    ``"both"``; ``ms``: the time of the matching record; ``snippet``: a short excerpt of the
    text that matched (or of the payload); ``error``: the job's last error, if any."""

    job_id: str
    name: str | None
    state: str
    ms: int
    source: str
    snippet: str
    error: str | None


@dataclass(frozen=True, slots=True)
class _Plan:
    q: SearchQuery
    text: tuple[Term, ...]
    ids: tuple[str, ...]  # rows to read directly
    locations: tuple[str, ...]  # location sets to scan
    states: frozenset[str] | None  # states a hit may answer to


def _int_or_none(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOption(f"{what} must be an int (ms) or None, got {shown(value)}")
    return value


def plan(query: SearchQuery) -> _Plan:
    """Check ``query`` (an :class:`~emq.errors.InvalidOption` or ``InvalidId`` names what
    is wrong) and decide what to read."""
    if not isinstance(query, SearchQuery):
        raise InvalidOption(f"expected a SearchQuery, got {shown(query)}")
    q = query
    if isinstance(q.limit, bool) or not isinstance(q.limit, int) or not 0 < q.limit <= MAX_LIMIT:
        raise InvalidOption(f"limit must be an int within 1..{MAX_LIMIT}, got {shown(q.limit)}")
    if q.text is not None and (not isinstance(q.text, str) or len(q.text) > MAX_TEXT):
        raise InvalidOption(f"text must be a str of at most {MAX_TEXT} characters")
    if q.name is not None and (not isinstance(q.name, str) or not 0 < len(q.name) <= 256):
        raise InvalidOption("name must be a non-empty str of at most 256 characters")
    since, until = _int_or_none(q.since_ms, "since_ms"), _int_or_none(q.until_ms, "until_ms")
    if since is not None and until is not None and since > until:
        raise InvalidOption(f"since_ms ({since}) is after until_ms ({until})")
    state = "schedule" if q.state == "scheduled" else q.state
    if state is not None and (not isinstance(state, str) or state not in STATES):
        raise InvalidOption(
            f"unknown state {shown(q.state)}; use one of {', '.join(sorted(STATES))}"
        )
    ids: tuple[str, ...] = ()
    if q.job_id is not None:
        ids = (check_id(q.job_id),)
    elif q.text is not None and ID_PATTERN.fullmatch(q.text.strip()):
        ids = (q.text.strip(),)
    if state is None:
        locations: tuple[str, ...] = LOCATIONS
    else:
        locations = {"cancelled": ("dead",), "removed": ()}.get(state, (state,))
    states = None
    if state is not None:
        states = frozenset({state, "cancelled"} if state == "dead" else {state})
    return _Plan(replace(q, state=state), tuple(terms(q.text)), ids, locations, states)


# -- live rows (pure) ------------------------------------------------------------------------


def _row_ms(job_id: str, row: dict[str, str]) -> int:
    """When the job died or completed, else when it was created (its id's mint time: a row
    does not store it, docs/keyspace.md, unless an older emq wrote it)."""
    for f in ("died_at", "completed_at", "created_at"):
        if (v := row.get(f)) and v.lstrip("-").isdigit():
            return int(v)
    return minted_at_ms(job_id)


def _live_state(row: dict[str, str]) -> str:
    state = row.get("state") or "unknown"
    return "schedule" if state == "scheduled" else state


def _answers(state: str, cancelled: bool) -> set[str]:
    return {state, "cancelled"} if cancelled or state == "cancelled" else {state}


def live_hit(p: _Plan, job_id: str, row: dict[str, str]) -> Hit | None:
    """The hit a live row makes for ``p``, None if it does not match."""
    q = p.q
    error = row.get("last_error") or None
    texts = (row.get("payload"), error, row.get("cancelled"), row.get("name"), job_id)
    by_id = q.job_id is None and job_id in p.ids  # the text is this job's id
    if p.text and not by_id and not _matches(list(p.text), *texts):
        return None
    if q.name is not None and row.get("name") != q.name:
        return None
    state = _live_state(row)
    if p.states is not None and not (_answers(state, "cancelled" in row) & p.states):
        return None
    ms = _row_ms(job_id, row)
    if (q.since_ms is not None and ms < q.since_ms) or (q.until_ms is not None and ms > q.until_ms):
        return None
    snip = snippet(list(p.text), *texts) if p.text else snippet([], row.get("payload"), error)
    return Hit(job_id, row.get("name"), state, ms, "live", snip, error)


def _decode(values: Sequence[Any], entry: str | None = None) -> dict[str, str]:
    """A live row's fields from its ``HMGET`` reply; without a row, those of the packed
    ``entry`` read with it (None: not packed)."""
    row = {k: str(v) for k, v in zip(ROW_FIELDS, values, strict=True) if v is not None}
    if row.get("state") or entry is None:
        return row
    return {k: v for k, v in packed_row(entry).items() if k in ROW_FIELDS}


def merge(p: _Plan, live: Iterable[Hit], floor: Iterable[FloorHit],
          rows: dict[str, dict[str, str]]) -> list[Hit]:  # fmt: skip
    """Union by job: a floor hit with a live row takes the row's state (and is dropped if
    that state is not wanted); ``rows`` are the live rows of floor hits the scan missed."""
    out = {h.job_id: h for h in live}
    for f in floor:
        if f.job in out:
            h = out[f.job]
            out[f.job] = replace(h, source="both", ms=max(h.ms, f.ms), name=h.name or f.name)
            continue
        row = rows.get(f.job)
        if row:
            state, cancelled = _live_state(row), "cancelled" in row
        else:
            state, cancelled = f.state, False
        if p.states is not None and not (_answers(state, cancelled) & p.states):
            continue
        name = (row or {}).get("name") or f.name
        error = (row or {}).get("last_error") or f.error
        out[f.job] = Hit(f.job, name, state, f.ms, "both" if row else "floor", f.snippet, error)
    found = sorted(out.values(), key=lambda h: (h.ms, h.job_id), reverse=True)
    return found[: p.q.limit]


# -- the floor ---------------------------------------------------------------------------------


def _open_floor(queue: str, floor: FloorArg) -> tuple[Floor | None, bool]:
    """The floor to read, and whether this call opened it. No file: None (live rows only).
    A version-1 floor is upgraded (opened for writing once) so it has its full-text index;
    if it cannot be written it is read without one."""
    if isinstance(floor, Floor):
        return floor, False
    path = Path(floor) if floor is not None else default_path(queue)
    if not path.is_file():
        return None, False
    db = Floor(path, queue=queue, readonly=True)
    if not db.has_fts:
        db.close()
        try:
            db = Floor(path, queue=queue)
        except FloorError:
            db = Floor(path, queue=queue, readonly=True)
    return db, True


def floor_part(queue: str, p: _Plan, floor: FloorArg) -> list[FloorHit]:
    """The floor's hits for ``p``: none without a floor, or for a state a job has only while
    it is live (pending, schedule, active, waiting), which its row answers."""
    if p.q.state in WAITING_OR_RUNNING:
        return []
    db, owned = _open_floor(queue, floor)
    if db is None:
        return []
    fq = FloorQuery(
        job_ids=p.ids, text=p.text, text_is_id=p.q.job_id is None and bool(p.ids),
        name=p.q.name, states=p.states, since_ms=p.q.since_ms,
        until_ms=p.q.until_ms, limit=p.q.limit,
    )  # fmt: skip
    try:
        with db.reading() as conn:
            return search_floor(conn, fq, fts=db.has_fts)
    finally:
        if owned:
            db.close()


# -- I/O ----------------------------------------------------------------------------------------


def _set_keys(queue: Queue | AsyncQueue, p: _Plan, lanes: Sequence[str]) -> list[tuple[str, int]]:
    """The sets to scan and how many ids of each: each location's newest LIVE_SCAN; in lane
    mode the lanes' pending sets (the first LIVE_SCAN lanes) share LIVE_SCAN between them."""
    if p.q.job_id is not None:
        return []
    k = queue.core.keys
    own = [k.completed if loc == "completed" else k.location(loc) for loc in p.locations]
    lanes = lanes[:LIVE_SCAN]
    share = max(1, LIVE_SCAN // max(1, len(lanes)))
    return [(k.lane_pending(name), share) for name in lanes] + [(key, LIVE_SCAN) for key in own]


def search(queue: Queue, query: SearchQuery, *, floor: FloorArg = None) -> list[Hit]:
    """Jobs of ``queue`` matching ``query``, newest first: its live rows (bounded, module
    doc) and its floor (default ``.emq/floor/<queue>.sqlite3``; no file: live rows only)."""
    p = plan(query)
    live = _live_sync(queue, p)
    found = floor_part(queue.name, p, floor)
    seen = {h.job_id for h in live}
    missed = [f.job for f in found if f.job not in seen]
    return merge(p, live, found, _rows_sync(queue, missed))


async def asearch(queue: AsyncQueue, query: SearchQuery, *, floor: FloorArg = None) -> list[Hit]:
    """The asyncio twin of :func:`search`; the floor is read in a worker thread."""
    p = plan(query)
    live = await _live_async(queue, p)
    found = await asyncio.to_thread(floor_part, queue.name, p, floor)
    seen = {h.job_id for h in live}
    missed = [f.job for f in found if f.job not in seen]
    return merge(p, live, found, await _rows_async(queue, missed))


def _scans_packed(p: _Plan) -> bool:
    """Whether the scan reads the newest packed jobs (the back of ``ready``): when it scans
    ``pending``. The slice is read last, and turned newest first by :func:`_newest_packed`."""
    return p.q.job_id is None and "pending" in p.locations


def _newest_packed(p: _Plan, sets: list[Any]) -> list[Any]:
    if _scans_packed(p):
        sets[-1] = sets[-1][::-1]
    return sets


def _scan_ids(p: _Plan, sets: Sequence[Sequence[str]]) -> list[str]:
    return list(dict.fromkeys([*p.ids, *(i for members in sets for i in members)]))


def _lane_mode(queue: Queue, p: _Plan) -> bool:
    if "pending" not in p.locations or p.q.job_id is not None:
        return False
    return bool(queue.client.hget(queue.core.keys.meta, "lanes") == "1")


async def _alane_mode(queue: AsyncQueue, p: _Plan) -> bool:
    if "pending" not in p.locations or p.q.job_id is not None:
        return False
    return bool(await queue.client.hget(queue.core.keys.meta, "lanes") == "1")


def _live_sync(queue: Queue, p: _Plan) -> list[Hit]:
    lanes: list[str] = []
    if _lane_mode(queue, p):
        lanes = [lane.name for lane in queue.lanes() if lane.name != DEFAULT_LANE]
    keys = _set_keys(queue, p, lanes)
    with queue.client.pipeline(transaction=False) as pipe:
        for key, count in keys:
            pipe.zrange(key, 0, count - 1, desc=True)
        if _scans_packed(p):
            pipe.lrange(queue.core.keys.ready, -LIVE_SCAN, -1)
        sets = _newest_packed(p, pipe.execute()) if keys else []
    ids = _scan_ids(p, sets)
    rows = _rows_sync(queue, ids)
    return [h for i in ids if i in rows and (h := live_hit(p, i, rows[i]))]


async def _live_async(queue: AsyncQueue, p: _Plan) -> list[Hit]:
    lanes: list[str] = []
    if await _alane_mode(queue, p):
        lanes = [lane.name for lane in await queue.lanes() if lane.name != DEFAULT_LANE]
    keys = _set_keys(queue, p, lanes)
    async with queue.client.pipeline(transaction=False) as pipe:
        for key, count in keys:
            pipe.zrange(key, 0, count - 1, desc=True)
        if _scans_packed(p):
            pipe.lrange(queue.core.keys.ready, -LIVE_SCAN, -1)
        sets = _newest_packed(p, await pipe.execute()) if keys else []
    ids = _scan_ids(p, sets)
    rows = await _rows_async(queue, ids)
    return [h for i in ids if i in rows and (h := live_hit(p, i, rows[i]))]


def _rows_sync(queue: Queue, ids: Sequence[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for at in range(0, len(ids), CHUNK):
        chunk = ids[at : at + CHUNK]
        with queue.client.pipeline(transaction=False) as pipe:
            for i in chunk:
                pipe.hmget(queue.core.keys.job(i), list(ROW_FIELDS))
                pipe.hget(queue.core.keys.packed, i)
            got = pipe.execute()
            for i, values, entry in zip(chunk, got[::2], got[1::2], strict=True):
                if (row := _decode(values, entry)).get("state"):
                    out[i] = row
    return out


async def _rows_async(queue: AsyncQueue, ids: Sequence[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for at in range(0, len(ids), CHUNK):
        chunk = ids[at : at + CHUNK]
        async with queue.client.pipeline(transaction=False) as pipe:
            for i in chunk:
                pipe.hmget(queue.core.keys.job(i), list(ROW_FIELDS))
                pipe.hget(queue.core.keys.packed, i)
            got = await pipe.execute()
            for i, values, entry in zip(chunk, got[::2], got[1::2], strict=True):
                if (row := _decode(values, entry)).get("state"):
                    out[i] = row
    return out
