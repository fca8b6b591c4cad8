# Generated from emq/queue/_async/deadletters.py by scripts/unasync.py: edit that file instead.
"""Dead letters of a queue grouped by error, and redrive or purge of *every* dead job that
matches a filter, in bounded chunks with progress.

What they decide is decided in :mod:`emq.calls.deadletters` (no I/O).

Guarantees:

- A scan reads the dead set in pages of :data:`~emq.calls.deadletters.SCAN_PAGE` ids by the time of
  death (one round trip each) up to the server's time when it started, so it ends however
  fast jobs die meanwhile.
- A bulk move takes a snapshot of the matching ids, then moves them
  :data:`~emq.calls.deadletters.BULK_CHUNK` at a time. Each job's move is one script step (the
  queue's ``redrive`` / ``remove`` scripts), so a crash or a stop mid-way leaves every job in
  exactly one location: moved, or still dead.
- Before each chunk the rows are read again; a job no longer dead (redriven, removed by
  someone else meanwhile) or no longer matching is *skipped*, never an error. A redrive
  moves only jobs still dead at its own step (``redrive.lua``); a purge removes a job only
  if its row did not change between that read and the removal (``WATCH`` on the rows, the
  removals in one ``MULTI``), so it never deletes a job that left the dead set meanwhile.
  At maxmemory, a round the server refused for memory (nothing of it ran) is sent again in
  ``remove``'s allow-oom shape (:func:`emq.lua.scripts.at_maxmemory`: no event), so a purge
  frees memory there; Redis refuses any command queued in a ``MULTI`` at maxmemory (Valkey
  does not), so there the purge stays refused (``Queue.remove`` and ``obliterate`` run).
- ``progress(done, total)`` is called once the snapshot is taken (``done`` = 0) and after
  every chunk; ``done`` counts moved and skipped jobs and ends equal to ``total``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import NoScriptError, ResponseError, WatchError

from ...calls.deadletters import (
    BULK_CHUNK,
    MAX_PAGES,
    ROW_FIELDS,
    SCAN_PAGE,
    BulkResult,
    DeadFilter,
    Group,
    Grouper,
    chunks,
    kept,
)
from ...errors import ServerOutOfMemory
from ...lua import scripts
from ...model.ids import check_id

if TYPE_CHECKING:
    from .queue import Queue

Progress = Callable[[int, int], None]
Dead = tuple[str, int, str | None, str | None]  # id, ms of death, name, error
Purged = tuple[int, list[str]] | None  # removed, ids to try again; None: a row changed
WATCH_TRIES = 8  # a purge chunk whose rows keep changing is read again at most this often
EVERY = DeadFilter()


def _rows(queue: Queue, ids: list[str]) -> list[list[str | None]]:
    """``HMGET`` of :data:`ROW_FIELDS` of each id, one round trip."""
    with queue.client.pipeline(transaction=False) as p:
        for job_id in ids:
            p.hmget(queue.core.keys.job(job_id), list(ROW_FIELDS))
        with scripts.translated():
            return cast(list[list[str | None]], p.execute())


def _scan(queue: Queue, f: DeadFilter, page: int, sample: int | None) -> list[Dead]:
    """Every dead job matching ``f``: (id, ms of death, name, error), oldest first. The dead
    set is walked with ``ZSCAN`` (``page`` ids a round trip), which returns every job that
    stays dead for the whole walk however the set changes meanwhile (seen twice: kept once);
    jobs dying after the walk started are left out (their time is past its start).
    ``sample``: stop once that many dead ids were looked at (in no particular order)."""
    with scripts.translated():
        seconds, micros = queue.client.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    seen: set[str] = set()
    found: list[Dead] = []
    cursor = 0
    for _ in range(MAX_PAGES):
        with scripts.translated():
            cursor, got = queue.client.zscan(queue.core.keys.dead, cursor, count=page)
        entries = cast(list[tuple[str, float]], got)
        fresh = [(i, int(s)) for i, s in entries if i not in seen and f.in_time(int(s), now_ms)]
        seen.update(i for i, _ in entries)
        if fresh:
            rows = _rows(queue, [i for i, _ in fresh])
            for (job_id, died), (state, name, error) in zip(fresh, rows, strict=True):
                if state == "dead" and f.matches(name, error):
                    found.append((job_id, died, name, error))
        if cursor == 0 or (sample is not None and len(seen) >= sample):
            break
    return sorted(found, key=lambda d: (d[1], d[0]))


def groups(
    queue: Queue, f: DeadFilter = EVERY, *, page: int = SCAN_PAGE, sample: int | None = None
) -> list[Group]:
    """The dead jobs matching ``f`` grouped by error key (:func:`~emq.calls.deadletters.error_key`),
    biggest group first. ``sample``: group only the first that many dead jobs the walk meets
    (about that many: whole pages), to bound the time on a huge dead set."""
    grouper = Grouper()
    for job_id, died, name, error in _scan(queue, f, page, sample):
        grouper.add(job_id, died, name, error)
    return grouper.groups()


def matching(queue: Queue, f: DeadFilter = EVERY, *, page: int = SCAN_PAGE) -> list[str]:
    """The ids of the dead jobs matching ``f``, oldest death first (a snapshot)."""
    return [job_id for job_id, _, _, _ in _scan(queue, f, page, None)]


def redrive(
    queue: Queue,
    f: DeadFilter = EVERY,
    *,
    chunk: int = BULK_CHUNK,
    keep_counters: bool = False,
    progress: Progress | None = None,
) -> BulkResult:
    """Redrive every dead job matching ``f`` to pending, ``chunk`` ids per step (module
    doc). ``keep_counters``: as :meth:`~emq.Queue.redrive`."""
    ids = matching(queue, f)
    moved = done = 0
    if progress is not None:
        progress(0, len(ids))
    for part in chunks(ids, chunk):
        still = kept(part, _rows(queue, part), f)
        if still:
            moved += len(queue.redrive_many(still, keep_counters=keep_counters))
        done += len(part)
        if progress is not None:
            progress(done, len(ids))
    return BulkResult(len(ids), moved, len(ids) - moved)


def purge(
    queue: Queue,
    f: DeadFilter = EVERY,
    *,
    chunk: int = BULK_CHUNK,
    progress: Progress | None = None,
    only: Iterable[str] | None = None,
) -> BulkResult:
    """Delete every dead job matching ``f`` (row and all), ``chunk`` ids per step (module
    doc). ``only``: these ids instead of every dead job, each deleted only if it is still dead
    and matches ``f`` when its step runs (a job redriven meanwhile is left alone)."""
    queue.check_server()
    ids = matching(queue, f) if only is None else [check_id(i) for i in dict.fromkeys(only)]
    removed = done = 0
    if progress is not None:
        progress(0, len(ids))
    for part in chunks(ids, chunk):
        removed += _purge_chunk(queue, part, f)
        done += len(part)
        if progress is not None:
            progress(done, len(ids))
    return BulkResult(len(ids), removed, len(ids) - removed)


def _purge_chunk(queue: Queue, ids: list[str], f: DeadFilter) -> int:
    """Remove those of ``ids`` still dead and matching, each only if its row is unchanged
    since it was read; returns how many were removed. A part whose rows changed meanwhile is
    read again; after a second change it is split in halves (down to one id, tried at most
    :data:`WATCH_TRIES` times), so a busy queue slows a purge down but leaves it correct."""
    removed = 0
    parts: list[tuple[list[str], int]] = [(ids, 0)]
    while parts:  # bounded: a part is split at most log2(len(ids)) times, each tried a few
        todo, tries = parts.pop()
        try:
            done = _purge_once(queue, todo, f)
        except ServerOutOfMemory as exc:  # refused whole: once more, in the allow-oom shape
            done = _purge_once(queue, todo, f, exc)
        if done is not None:
            removed += done[0]
            todo = done[1]  # not applied (the script cache was flushed): once more
            if not todo:
                continue
        if len(todo) > 1 and tries >= 1:
            half = len(todo) // 2
            parts += [(todo[:half], 0), (todo[half:], 0)]
        elif tries + 1 < WATCH_TRIES:
            parts.append((todo, tries + 1))
    if queue._guard.durable("remove"):
        queue._run_pipelined("remove", [])  # waits for the fsync (or replicas)
    return removed


def _purge_once(
    queue: Queue, ids: list[str], f: DeadFilter, oom: ServerOutOfMemory | None = None
) -> Purged:
    """One ``WATCH`` / read / ``MULTI`` / ``EXEC`` round: (removed, ids to try again), or
    None if a watched row changed (nothing was applied). ``oom``: the server refused the
    round for memory; this one sends ``remove``'s allow-oom shape."""
    script, shaped = scripts.SCRIPTS["remove"], None
    if oom is not None and (shaped := scripts.at_maxmemory(script, oom, [])) is None:
        raise oom
    shape = script if shaped is None else shaped[0]
    with scripts.translated():
        queue.client.script_load(shape.source)
        try:
            with queue.client.pipeline(transaction=True) as tx:
                p: Any = tx  # redis-py leaves watch / multi untyped
                p.watch(*(queue.core.keys.job(i) for i in ids))
                todo = kept(ids, _rows(queue, ids), f)
                if not todo:
                    return 0, []
                p.multi()
                for job_id in todo:
                    call = queue.core.remove(job_id)
                    args = call.args if shaped is None else scripts.quiet(script, call.args)
                    p.execute_command("EVALSHA", shape.sha, len(call.keys), *call.keys, *args)
                replies = p.execute(raise_on_error=False)
        except WatchError:
            return None
    again = []
    for job_id, reply in zip(todo, replies, strict=True):
        if isinstance(reply, NoScriptError):
            again.append(job_id)  # flushed since the load: not applied
        elif isinstance(reply, ResponseError):
            raise scripts.refusal(reply, script)
    return len(todo) - len(again), again
