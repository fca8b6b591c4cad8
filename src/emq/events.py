"""The event stream of a queue as a typed contract, and ways to read it.

Every transition script appends its events to ``emq:{<queue>}:events`` inside the same script
as the transition, so an event exists if and only if its transition happened. Each entry has
an ``event`` field (its name) and, for job events, a ``job`` field; :data:`EVENT_FIELDS` lists
every other field per name (``docs/events.md`` is the prose form, and a test checks both
against the ``emit(...)`` calls of every ``lua/*.lua`` file).

Reading: :func:`iter_events` (sync) and :func:`aiter_events` (asyncio) return the entries
whose id is above a position, in stream order, with a blocking ``XREAD`` when following (the
server wakes the reader; there is no sleep-and-poll loop). The live stream is a window: once
an archiver has folded entries into its floor it trims them, so a reader that falls further
behind than the archiver's cadence can miss entries that only the floor still holds. Use
:func:`emq.archive.history` for a complete, gap-free record of one job.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import redis
import redis.asyncio

from .errors import InvalidOption
from .keys import QueueKeys

# name -> the fields besides ``event`` and ``job`` (job events carry ``job``; see JOB_EVENTS)
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "enqueued": ("attempts", "name", "state"),
    "promoted": (),
    "missing": ("from",),
    "claimed": ("attempts", "token"),
    "lease_lost": ("token", "via"),
    "completed": ("attempts",),
    "retrying": ("attempts", "error", "delay_ms"),
    "dead": ("attempts", "error", "name", "payload", "stalled"),
    "ready": (),  # a flow's parent left waiting: its last child finished (docs/flows.md)
    "delayed": ("attempts", "delay_ms"),
    "stalled": ("attempts", "stalled"),
    "redriven": ("attempts", "to"),
    "removed": ("attempts", "from"),
    "paused": (),
    "resumed": (),
    "drained": ("count",),
    "lane_paused": ("lane",),
    "lane_resumed": ("lane",),
    "rate_limited": ("lane", "until", "by"),
    "limits_set": ("lane", "concurrency", "rate", "weight", "lane_concurrency", "lane_rate"),
    "rescheduled": ("delay_ms", "state"),
    "reprioritised": ("priority",),
    "payload_updated": (),
    "progress": ("progress",),
    "cancel_requested": ("reason", "attempts"),
    "cancelled": ("from", "reason", "attempts"),
    "repeat_skipped": ("repeat", "skipped", "tick"),
}
QUEUE_EVENTS = frozenset(
    {"paused", "resumed", "drained", "lane_paused", "lane_resumed", "rate_limited", "limits_set",
     "repeat_skipped"}
)  # fmt: skip
# name -> fields only some writers add: a repeating schedule's job is ``enqueued`` with
# ``repeat`` (the schedule's key)
OPTIONAL_FIELDS: dict[str, tuple[str, ...]] = {"enqueued": ("repeat",)}
JOB_EVENTS = frozenset(EVENT_FIELDS) - QUEUE_EVENTS

READ_CHUNK = 1_000


def parse_id(entry_id: str) -> tuple[int, int]:
    """``"<ms>-<seq>"`` as a pair of ints, which orders like the stream does."""
    ms, _, seq = entry_id.partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        raise InvalidOption(f"{entry_id!r} is not a stream id like 1700000000000-0") from None


def format_id(ms: int, seq: int) -> str:
    return f"{ms}-{seq}"


def id_after(entry_id: str) -> str:
    """The smallest stream id strictly greater than ``entry_id``."""
    ms, seq = parse_id(entry_id)
    return format_id(ms, seq + 1) if seq < 2**64 - 1 else format_id(ms + 1, 0)


@dataclass(frozen=True, slots=True)
class Event:
    """One stream entry. ``id`` is the stream id; its ms part is the server time of the append.

    ``job`` is None for queue-level events (``paused``, ``resumed``, ``drained``); ``fields``
    holds every other field with its value as the script wrote it (a string).
    """

    id: str
    event: str
    job: str | None
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, int]:
        return parse_id(self.id)

    @property
    def time_ms(self) -> int:
        return self.key[0]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "event": self.event, "job": self.job, "fields": self.fields}

    @classmethod
    def from_entry(cls, entry_id: str, entry: Mapping[str, str]) -> Event:
        rest = dict(entry)
        name = rest.pop("event", "")
        job = rest.pop("job", None)
        return cls(entry_id, name, job, rest)

    @classmethod
    def from_row(cls, entry_id: str, name: str, job: str | None, fields_json: str) -> Event:
        return cls(entry_id, name, job, cast(dict[str, str], json.loads(fields_json)))


def _entries(reply: Any) -> list[Event]:
    return [Event.from_entry(i, f) for i, f in reply or []]


def _xread_entries(reply: Any) -> list[Event]:
    # RESP2: [[stream, [(id, fields), ...]]]; RESP3: {stream: [[(id, fields), ...]]}
    if not reply:
        return []
    if isinstance(reply, dict):
        (batch,) = reply.values()
        return _entries(batch[0] if batch and isinstance(batch[0], list) else batch)
    return _entries(reply[0][1])


def read_range(
    client: redis.Redis, keys: QueueKeys, start: str = "-", end: str = "+", chunk: int = READ_CHUNK
) -> Iterator[Event]:
    """Entries from ``start`` to ``end`` (``XRANGE`` syntax, ``(`` for exclusive), in chunks."""
    while True:
        batch = _entries(client.xrange(keys.events, start, end, count=chunk))
        yield from batch
        if len(batch) < chunk:
            return
        start = "(" + batch[-1].id


async def aread_range(
    client: redis.asyncio.Redis,
    keys: QueueKeys,
    start: str = "-",
    end: str = "+",
    chunk: int = READ_CHUNK,
) -> list[Event]:
    """The async twin of :func:`read_range`, collected into a list."""
    out: list[Event] = []
    while True:
        batch = _entries(await client.xrange(keys.events, start, end, count=chunk))
        out += batch
        if len(batch) < chunk:
            return out
        start = "(" + batch[-1].id


def _position(after: str) -> str:
    if after in ("$", "-", "0"):
        return {"-": "0-0", "0": "0-0"}.get(after, after)
    parse_id(after)
    return after


def _last_id(info: Any) -> str:
    if not info:
        return "0-0"
    entry = cast(Sequence[Any], info[0])
    return str(entry[0])


def iter_events(
    client: redis.Redis,
    keys: QueueKeys,
    *,
    after: str = "0-0",
    follow: bool = False,
    block_ms: int = 5_000,
    count: int = 100,
) -> Iterator[Event]:
    """Events whose id is above ``after`` (``"0-0"``: the whole live stream; ``"$"``: only
    events appended from now on). Without ``follow`` it stops at the end of the stream; with
    it, it blocks in ``XREAD BLOCK`` for new entries (each call waits up to ``block_ms``
    server-side, then is re-issued from the last id seen, so nothing appended in between is
    missed)."""
    pos = _position(after)
    if pos == "$":
        pos = _last_id(client.xrevrange(keys.events, "+", "-", count=1))
    while True:
        reply = client.xread({keys.events: pos}, count=count, block=block_ms if follow else None)
        batch = _xread_entries(reply)
        yield from batch
        if batch:
            pos = batch[-1].id
        elif not follow:
            return


async def aiter_events(
    client: redis.asyncio.Redis,
    keys: QueueKeys,
    *,
    after: str = "0-0",
    follow: bool = False,
    block_ms: int = 5_000,
    count: int = 100,
) -> AsyncGenerator[Event, None]:
    """The asyncio twin of :func:`iter_events`, with the same arguments and meaning. With
    ``follow`` it never ends by itself: break out of the loop (then ``await it.aclose()``) or
    cancel the task to stop."""
    pos = _position(after)
    if pos == "$":
        pos = _last_id(await client.xrevrange(keys.events, "+", "-", count=1))
    while True:
        block = block_ms if follow else None
        reply = await client.xread({keys.events: pos}, count=count, block=block)
        batch = _xread_entries(reply)
        for event in batch:
            yield event
        if batch:
            pos = batch[-1].id
        elif not follow:
            return
