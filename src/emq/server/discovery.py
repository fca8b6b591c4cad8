"""Every queue known on the server, without scanning its keys: :func:`queue_names`.

The names live in one SET, ``{emq}:queues`` (:data:`emq.model.keys.KNOWN_QUEUES`). A producer adds
its queue's name once per :class:`~emq.Queue` object (after its first enqueue lands; never per
job, never inside a script), and every worker adds its queues on each registry beat
(:mod:`emq.observe.registry`). Reading the names is one ``SMEMBERS``: O(queues), not O(keys).

Queues made by an emq older than the set are found once by a ``SCAN`` of ``emq:{*}:*``: the
first listing that does not see the member :data:`SCANNED` in the set scans, adds what it
found and :data:`SCANNED`, and every later listing reads the set alone. A user whose ACL
refuses the ``SCAN`` (an operator scoped to some queues) gets the set's names; one refused the
write scans again on each listing.

Guarantee: every queue that a producer of this emq enqueued into, or a worker of this emq
served, is listed (once its write landed), until it is forgotten: ``Queue.obliterate`` forgets
its name once the queue's keys are gone, and ``Queue.forget()`` (``emq forget``) forgets a
name that has none; neither forgets a queue that still holds a job, its events, its counters
or its settings (:func:`has_keys`). A worker that still serves a forgotten queue adds it back
on its next beat, and a producer on its next ``Queue`` object's first enqueue.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import redis
import redis.asyncio

from ..model.keys import KNOWN_QUEUES, QUEUE_NAME, QueueKeys

SCANNED = "*"
"""The member that says the one-time scan for older queues is done (never a queue name)."""
_QUEUE_OF_KEY = re.compile(r"^emq:\{([A-Za-z0-9._-]{1,128})\}:")
_PATTERN = "emq:{*}:*"
_SCAN_COUNT = 1000
_ADD_CHUNK = 1000


def _text(v: str | bytes) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _names(members: Iterable[str | bytes]) -> set[str]:
    return {m for m in map(_text, members) if QUEUE_NAME.fullmatch(m)}


def _scanned(members: Iterable[str | bytes]) -> bool:
    return any(_text(m) == SCANNED for m in members)


_MARKS = ("admitted:", "claim:")  # a resent call's marks: they expire by themselves, and one
# left by an obliterated queue's last calls does not make it a queue again


def _queue_of(key: str | bytes) -> str | None:
    text = _text(key)
    m = _QUEUE_OF_KEY.match(text)
    if not m or text[m.end() :].startswith(_MARKS):
        return None
    return m[1]


def queue_names(client: redis.Redis) -> list[str]:
    """Every queue known on the server, sorted (see the module's guarantee)."""
    members = client.smembers(KNOWN_QUEUES)
    names = _names(members)
    if not _scanned(members):
        names |= _backfill(client)
    return sorted(names)


def _backfill(client: redis.Redis) -> set[str]:
    found: set[str] = set()
    try:
        for key in client.scan_iter(match=_PATTERN, count=_SCAN_COUNT):
            if name := _queue_of(key):
                found.add(name)
    except redis.ResponseError:  # SCAN refused (NOPERM): the set's names are what we know
        return found
    adds = [*sorted(found), SCANNED]  # SCANNED last: it lands only after every name did
    try:
        for i in range(0, len(adds), _ADD_CHUNK):
            client.sadd(KNOWN_QUEUES, *adds[i : i + _ADD_CHUNK])
    except redis.ResponseError:  # the write refused: scan again next time
        pass
    return found


async def aqueue_names(client: redis.asyncio.Redis) -> list[str]:
    """Every queue known on the server, sorted; the asyncio twin of :func:`queue_names`."""
    members = await client.smembers(KNOWN_QUEUES)
    names = _names(members)
    if not _scanned(members):
        names |= await _abackfill(client)
    return sorted(names)


async def _abackfill(client: redis.asyncio.Redis) -> set[str]:
    found: set[str] = set()
    try:
        async for key in client.scan_iter(match=_PATTERN, count=_SCAN_COUNT):
            if name := _queue_of(key):
                found.add(name)
    except redis.ResponseError:
        return found
    adds = [*sorted(found), SCANNED]
    try:
        for i in range(0, len(adds), _ADD_CHUNK):
            await client.sadd(KNOWN_QUEUES, *adds[i : i + _ADD_CHUNK])
    except redis.ResponseError:
        pass
    return found


def state_keys(name: str) -> list[str]:
    """The keys that hold what a queue is (its jobs' sets, its packed waiting jobs and their
    order, events, counters, flags and limits, stored settings, flow messages, repeating
    schedules): while one exists, the queue is not forgotten. A claim's stored reply
    (``claim:<request>``, at most 60 s) and a ``done:<id>`` list of ``result()`` waiters
    (60 s) are not among them: they expire on their own."""
    k = QueueKeys.of(name)
    sets = [k.pending, k.active, k.schedule, k.dead, k.location("waiting"), k.completed]
    packed = [k.packed, k.ready]  # layout 3: waiting jobs without a row, in claim order
    return [*sets, *packed, k.events, k.meta, k.settings, k.metrics, k.outbox, k.repeats]


def has_keys(client: redis.Redis, name: str) -> bool:
    """Whether queue ``name`` holds any of its :func:`state_keys` (one ``EXISTS``)."""
    return bool(client.exists(*state_keys(name)))


async def ahas_keys(client: redis.asyncio.Redis, name: str) -> bool:
    return bool(await client.exists(*state_keys(name)))


def is_known(client: redis.Redis, name: str) -> bool:
    """Whether ``name`` is among the known queues (``SISMEMBER``)."""
    return bool(client.sismember(KNOWN_QUEUES, name))


async def ais_known(client: redis.asyncio.Redis, name: str) -> bool:
    return bool(await client.sismember(KNOWN_QUEUES, name))
