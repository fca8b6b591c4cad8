"""Reading a queue's event stream: a range of entries, or every entry above a position.

The live stream is a window: once an archiver has folded entries into its floor it trims
them, so a reader that falls further behind than the archiver's cadence can miss entries that
only the floor still holds. :mod:`emq.queue._async.history` gives a complete, gap-free record
of one job. Entries decode to :class:`emq.model.events.Event`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import redis.asyncio

from ...model.events import READ_CHUNK, Event, entries, last_id, position, xread_entries
from ...model.keys import QueueKeys


async def aread_range(
    client: redis.asyncio.Redis,
    keys: QueueKeys,
    start: str = "-",
    end: str = "+",
    chunk: int = READ_CHUNK,
) -> AsyncIterator[Event]:
    """Entries from ``start`` to ``end`` (``XRANGE`` syntax, ``(`` for exclusive), read in
    chunks of ``chunk`` as the caller consumes them."""
    while True:
        batch = entries(await client.xrange(keys.events, start, end, count=chunk))
        for event in batch:
            yield event
        if len(batch) < chunk:
            return
        start = "(" + batch[-1].id


async def aiter_events(
    client: redis.asyncio.Redis,
    keys: QueueKeys,
    *,
    after: str = "0-0",
    follow: bool = False,
    block_ms: int = 5_000,
    count: int = 100,
) -> AsyncIterator[Event]:
    """Events whose id is above ``after`` (``"0-0"``: the whole live stream; ``"$"``: only
    events appended from now on). Without ``follow`` it stops at the end of the stream; with
    it, it blocks in ``XREAD BLOCK`` for new entries (each call waits up to ``block_ms``
    server-side, then is re-issued from the last id seen, so nothing appended in between is
    missed): it never ends by itself, so break out of the loop or cancel the task to stop."""
    pos = position(after)
    if pos == "$":
        pos = last_id(await client.xrevrange(keys.events, "+", "-", count=1))
    while True:
        block = block_ms if follow else None
        reply = await client.xread({keys.events: pos}, count=count, block=block)
        batch = xread_entries(reply)
        for event in batch:
            yield event
        if batch:
            pos = batch[-1].id
        elif not follow:
            return
