# Generated from emq/queue/_async/stream.py by scripts/unasync.py: edit that file instead.
"""Reading a queue's event stream: a range of entries, or every entry above a position.

The live stream is a window: once an archiver has folded entries into its floor it trims
them, so a reader that falls further behind than the archiver's cadence can miss entries that
only the floor still holds. :mod:`emq.queue._sync.history` gives a complete, gap-free record
of one job. Entries decode to :class:`emq.model.events.Event`, one per event: an entry of a
call's several events (keyspace layout 2) expands into them, each at its own position, so a
range or a resume that starts inside such an entry (a position a reader kept) yields exactly
the events above it: the entry that holds the start is read back first (``XREVRANGE start -
COUNT 1``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import redis

from ...model.events import (
    READ_CHUNK,
    Event,
    after_position,
    entries,
    last_id,
    position,
    xread_entries,
)
from ...model.keys import QueueKeys


def read_range(
    client: redis.Redis,
    keys: QueueKeys,
    start: str = "-",
    end: str = "+",
    chunk: int = READ_CHUNK,
) -> Iterator[Event]:
    """Entries from ``start`` to ``end`` (``XRANGE`` syntax, ``(`` for exclusive), read in
    chunks of ``chunk`` entries as the caller consumes them."""
    held = _held_at(client, keys, start, end)
    while True:
        reply = cast(list[Any], client.xrange(keys.events, start, end, count=chunk))
        batch, held = held + after_position(entries(reply), start, end), []
        yield from batch
        if len(reply) < chunk:
            return
        start = "(" + batch[-1].id if batch else "(" + str(reply[-1][0])


def _held_at(client: redis.Redis, keys: QueueKeys, start: str, end: str = "+") -> list[Event]:
    """The events in range of the entry below ``start`` (an entry of several events may start
    below a position inside it): the events ``XRANGE start`` alone would miss."""
    if start in ("-", "+"):
        return []
    # an exclusive start: the entry at it may hold more events; an inclusive one: the one below
    top = start.removeprefix("(") if start.startswith("(") else "(" + start
    below = client.xrevrange(keys.events, top, "-", count=1)
    return after_position(entries(below), start, end)


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
    missed): it never ends by itself, so break out of the loop or cancel the task to stop."""
    pos = position(after)
    if pos == "$":
        pos = last_id(client.xrevrange(keys.events, "+", "-", count=1))
    held = [] if pos in ("$", "0-0") else _held_at(client, keys, "(" + pos)
    while True:
        block = None if held or not follow else block_ms
        reply = client.xread({keys.events: pos}, count=count, block=block)
        batch, held = held + xread_entries(reply), []
        yield from batch
        if batch:
            pos = batch[-1].id
        elif not follow:
            return
