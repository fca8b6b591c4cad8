"""The worker registry: which workers are alive, where, on which queues, doing how much.

Each running :class:`~emq.worker.Worker` keeps one entry on the server: the STRING
``{emq}:worker:<id>`` (JSON of a :class:`WorkerInfo`, ``PX`` a few beats long), listed in the
ZSET ``{emq}:workers`` (member = id, score = when the entry expires, ms, the worker's clock).
The worker's maintenance task rewrites both about once a second (:func:`apublish`) and
deletes them on a graceful stop (:func:`aunpublish`); a worker that dies stops rewriting and
its entry expires by itself within :func:`ttl_ms` (the ZSET member is pruned later by other
workers' beats; a listing ignores a member whose entry is gone).

Guarantees: :func:`list_workers` returns only entries that have not expired, so a worker dead
for longer than its TTL is never listed; a live worker is listed unless its registry writes
are failing (a refusal is logged by the worker once per episode, and the worker goes on).
The fields are as the worker last wrote them: ``running`` is at most a beat old.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

import redis
import redis.asyncio

from ..model.keys import KNOWN_QUEUES, WORKERS, worker_key

EVERY_S = 1.0
"""How often a worker rewrites its entry (at most; its maintenance beat carries it)."""
TTL_BEATS = 5
MIN_TTL_MS = 5_000
PRUNE_AFTER_MS = 60_000
"""A ZSET member whose entry expired this long ago (by the writer's clock) is removed; the
margin keeps a worker whose clock is behind from having its live entry pruned by another."""
WORKER_ID = re.compile(r"[A-Za-z0-9._:-]{1,200}")
_GET_CHUNK = 500


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One live worker, as it last wrote itself. ``running``: handlers running at that beat;
    ``started_ms`` and ``beat_ms``: wall-clock ms (the worker's clock) of its start and of
    that beat; ``metrics_port``: the port of its Prometheus endpoint (0: none); ``layout``:
    the newest keyspace layout it serves (docs/keyspace.md, Layout versions; 1 for an entry
    of an emq that wrote none), which ``emq upgrade`` checks. ``batches``: its batch
    handlers, ``(name, batch_size, batch_wait_ms)`` each; ``filling``: jobs it holds that
    wait for their batch to fill (docs/batches.md)."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    running: int
    started_ms: int
    beat_ms: int
    version: str
    metrics_port: int = 0
    layout: int = 1
    batches: tuple[tuple[str, int, int], ...] = ()
    filling: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkerInfo | None:
        """The entry, or None if it is not one this emq wrote (a hand-written key)."""
        try:
            d: Any = json.loads(text)
            info = cls(
                id=str(d["id"]),
                host=str(d["host"]),
                pid=int(d["pid"]),
                queues=tuple(str(q) for q in d["queues"]),
                concurrency=int(d["concurrency"]),
                running=int(d["running"]),
                started_ms=int(d["started_ms"]),
                beat_ms=int(d["beat_ms"]),
                version=str(d["version"]),
                metrics_port=int(d.get("metrics_port", 0)),
                layout=int(d.get("layout", 1)),
                batches=tuple((str(n), int(s), int(w)) for n, s, w in d.get("batches", ())),
                filling=int(d.get("filling", 0)),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return info if WORKER_ID.fullmatch(info.id) else None


def new_worker_id() -> str:
    """``<host>:<pid>:<random>``, unique per worker run; the host is cut to safe characters."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:100] or "host"
    return f"{host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def hostname() -> str:
    return socket.gethostname()


def now_ms() -> int:
    return int(time.time() * 1000)


def ttl_ms(every_s: float = EVERY_S) -> int:
    """How long an entry outlives its last write: a few of its writer's beats."""
    return max(MIN_TTL_MS, int(TTL_BEATS * every_s * 1000))


def _publish(p: Any, info: WorkerInfo, ttl: int) -> None:
    expires = info.beat_ms + ttl
    p.set(worker_key(info.id), info.to_json(), px=ttl)
    p.zadd(WORKERS, {info.id: expires})
    p.zremrangebyscore(WORKERS, "-inf", f"({info.beat_ms - PRUNE_AFTER_MS}")
    if info.queues:
        p.sadd(KNOWN_QUEUES, *info.queues)


async def apublish(client: redis.asyncio.Redis, info: WorkerInfo, ttl: int | None = None) -> None:
    """Write (or rewrite) ``info``'s entry for ``ttl`` ms, and add its queues to the known
    queues, in one round trip (not a transaction: each write stands alone)."""
    async with client.pipeline(transaction=False) as p:
        _publish(p, info, ttl or ttl_ms())
        await p.execute()


def publish(client: redis.Redis, info: WorkerInfo, ttl: int | None = None) -> None:
    """The sync twin of :func:`apublish`."""
    with client.pipeline(transaction=False) as p:
        _publish(p, info, ttl or ttl_ms())
        p.execute()


async def aunpublish(client: redis.asyncio.Redis, worker_id: str) -> None:
    """Delete a worker's entry (a graceful stop)."""
    async with client.pipeline(transaction=False) as p:
        p.delete(worker_key(worker_id))
        p.zrem(WORKERS, worker_id)
        await p.execute()


def _ids(found: Iterable[str | bytes]) -> list[str]:
    out = []
    for raw in found:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if WORKER_ID.fullmatch(text):
            out.append(text)
    return out


def _infos(entries: Sequence[str | bytes | None]) -> list[WorkerInfo]:
    infos = [i for e in entries if e is not None and (i := WorkerInfo.from_json(e))]
    return sorted(infos, key=lambda i: (i.host, i.pid, i.started_ms, i.id))


def list_workers(client: redis.Redis) -> list[WorkerInfo]:
    """Every live worker (its entry not expired), sorted by host, pid and start."""
    ids = _ids(cast(list[str], client.zrangebyscore(WORKERS, now_ms() - PRUNE_AFTER_MS, "+inf")))
    entries: list[str | bytes | None] = []
    for i in range(0, len(ids), _GET_CHUNK):
        with client.pipeline(transaction=False) as p:
            for wid in ids[i : i + _GET_CHUNK]:
                p.get(worker_key(wid))
            entries += p.execute()
    return _infos(entries)


async def alist_workers(client: redis.asyncio.Redis) -> list[WorkerInfo]:
    """The asyncio twin of :func:`list_workers`."""
    found = await client.zrangebyscore(WORKERS, now_ms() - PRUNE_AFTER_MS, "+inf")
    ids = _ids(cast(list[str], found))
    entries: list[str | bytes | None] = []
    for i in range(0, len(ids), _GET_CHUNK):
        async with client.pipeline(transaction=False) as p:
            for wid in ids[i : i + _GET_CHUNK]:
                p.get(worker_key(wid))
            entries += await p.execute()
    return _infos(entries)
