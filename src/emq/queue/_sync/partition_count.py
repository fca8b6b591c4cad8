# Generated from emq/queue/_async/partition_count.py by scripts/unasync.py: edit that file instead.
"""The partition count a server holds for each partitioned queue: read, checked and stored
(docs/partitions.md), on a sync client.

The count is the field ``partitions`` of the plain queue's ``meta`` HASH
(:data:`emq.calls.partitions.FIELD`): one key, in the queue's own slot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import redis

from ...calls.partitions import FIELD, check_stored, not_partitioned, partition_names
from ...lua import scripts
from ...model.config import QueueOptions
from ...model.keys import QueueKeys


def stored_counts(client: redis.Redis, names: Iterable[str]) -> dict[str, int]:
    """Name -> partition count, for each of ``names`` that the server holds as partitioned
    (one pipelined ``HGET`` of each name's ``meta``, one slot each)."""
    todo = sorted(set(names))
    if not todo:
        return {}
    with scripts.translated():
        with client.pipeline(transaction=False) as p:
            for name in todo:
                p.hget(QueueKeys.of(name).meta, FIELD)
            got = p.execute()
    out: dict[str, int] = {}
    for name, stored in zip(todo, got, strict=True):
        n = check_stored(name, None, stored)
        if n is not None:
            out[name] = n
    return out


def resolve_count(client: redis.Redis, name: str, asked: int | None) -> int:
    """The partition count of queue ``name``: the one the server holds, checked against
    ``asked``; if none is held, ``asked`` is stored (``HSETNX``: the first writer wins, and a
    later one with another count is refused). Raises InvalidOption when nothing is held and
    nothing asked."""
    meta = QueueKeys.of(name).meta
    with scripts.translated():
        stored = client.hget(meta, FIELD)
    n = check_stored(name, asked, stored)
    if n is None:
        raise not_partitioned(name)
    if stored is None:
        partition_names(name, n)  # a name too long for its partitions: refused, not written
        with scripts.translated():
            if not client.hsetnx(meta, FIELD, n):  # another writer came first
                n = check_stored(name, asked, client.hget(meta, FIELD)) or n
    return n


def expand_queues(
    client: redis.Redis, queues: dict[str, QueueOptions | None]
) -> dict[str, QueueOptions | None]:
    """A worker's queues with every partitioned one replaced by its partitions (in order,
    each once), and followed by the plain queue of its name when that holds live jobs now
    (left from before the split, or put there by name): then the run serves them too. A queue
    given ``QueueOptions(partitions=N)`` has N checked against (or stored as) the server's
    count; any other name is partitioned when the server says so."""
    held = stored_counts(client, queues)
    out: dict[str, QueueOptions | None] = {}
    for name, options in queues.items():
        asked = options.partitions if options and options.partitions > 1 else None
        n = held.get(name)
        if asked is not None:
            n = resolve_count(client, name, asked)
        if n is None:
            out.setdefault(name, options)
            continue
        plain = dataclasses.replace(options, partitions=1) if options else None
        for part in partition_names(name, n):
            out.setdefault(part, plain)
        if live_jobs(client, name):
            out.setdefault(name, plain)
    return out


def live_jobs(client: redis.Redis, name: str) -> bool:
    """Whether queue ``name`` holds jobs pending (packed ones too), leased, scheduled or
    waiting (or is in lane mode, whose waiting jobs are in its lanes' sets): commands a
    worker's role has."""
    keys = QueueKeys.of(name)
    with scripts.translated():
        with client.pipeline(transaction=False) as p:
            for key in (keys.pending, keys.active, keys.schedule, keys.location("waiting")):
                p.zcard(key)
            p.hlen(keys.packed)
            p.hget(keys.meta, "lanes")
            *sizes, lanes = p.execute()
    return any(sizes) or lanes == "1"
