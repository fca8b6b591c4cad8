"""Assertions over raw keys, shared by the tests."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from emq import Queue
from emq.calls.call import split_packed
from emq.model.keys import QueueKeys
from emq.model.states import STATE_OF_LOCATION, Location
from emq.server.clients import node_client


def node_of(client: redis.Redis, queue: str) -> redis.Redis:
    """The server that holds ``queue``: ``client`` itself, or on a cluster the node of the
    queue's slot (for its INFO: blocked clients, commandstats)."""
    return node_client(client, QueueKeys.of(queue).metrics)


def _sets(client: redis.Redis, k: QueueKeys) -> dict[str, set[str]]:
    """Each location set's ids; ``pending`` holds the members of every lane's waiting set,
    which share no id."""
    out = {loc.value: set(client.zrange(k.location(loc.value), 0, -1)) for loc in Location}
    for key in client.scan_iter(match=k.prefix + "lane:*:pending", count=1000):
        lane_ids = set(client.zrange(key, 0, -1))
        assert not lane_ids & out["pending"], f"{key} shares ids with another waiting set"
        out["pending"] |= lane_ids
    return out


def packed_ids(client: redis.Redis, queue: str) -> set[str]:
    """The ids of the jobs waiting packed, without a row (layout 3: the fields of
    ``packed``); ``ready`` may hold more (ids since unpacked or claimed)."""
    return set(client.hkeys(QueueKeys.of(queue).packed))


def locations(client: redis.Redis, queue: str) -> dict[str, set[str]]:
    """Each location's ids; ``pending`` holds the waiting jobs of every lane and the packed
    jobs (which :func:`assert_consistent` checks are in no set)."""
    out = _sets(client, QueueKeys.of(queue))
    out["pending"] |= packed_ids(client, queue)
    return out


def where(client: redis.Redis, queue: str, job_id: str) -> list[str]:
    """Every location that holds ``job_id`` (G1: must be one, or none once completed); a
    packed job is ``pending``, and an id both packed and in a set is listed for each."""
    k = QueueKeys.of(queue)
    found = [loc for loc, ids in _sets(client, k).items() if job_id in ids]
    return found + (["pending"] if client.hexists(k.packed, job_id) else [])


def _check_packed(client: redis.Redis, k: QueueKeys, seen: dict[str, str]) -> set[str]:
    """The packed ids, after asserting that each is in no location set, has no row, decodes
    as a packed entry and waits in ``ready``, and that the queue is in layout 3 or later."""
    entries: dict[str, str] = client.hgetall(k.packed)
    if not entries:
        return set()
    layout = client.hget(k.meta, "layout")
    assert int(layout or 1) >= 3, f"packed jobs in a queue in layout {layout or 1}"
    ready = set(client.lrange(k.ready, 0, -1))
    for job_id, entry in entries.items():
        assert job_id not in seen, f"{job_id} is packed and also in {seen[job_id]}"
        assert not client.exists(k.job(job_id)), f"{job_id} is packed and also has a row"
        assert split_packed(entry) is not None, f"{job_id}: not a packed entry: {entry!r}"
        assert job_id in ready, f"{job_id} is packed but not in ready: never claimed"
    return set(entries)


def assert_consistent(client: redis.Redis, queue: str) -> dict[str, set[str]]:
    """G1 over the whole queue: each id in exactly one location, its row present with the
    matching state, or packed (layout 3: in ``packed`` and ``ready``, in no set, no row); no
    row without a location, except a kept completed job's (results, ``keep_completed``):
    state ``completed``, in no location set, with an expiry. Returns :func:`locations`."""
    k = QueueKeys.of(queue)
    locs = _sets(client, k)
    seen: dict[str, str] = {}
    for loc, ids in locs.items():
        for job_id in ids:
            assert job_id not in seen, f"{job_id} is in both {seen[job_id]} and {loc}"
            seen[job_id] = loc
            state = client.hget(k.job(job_id), "state")
            assert state == STATE_OF_LOCATION[Location(loc)].value, (job_id, loc, state)
    packed = _check_packed(client, k, seen)
    rows = {key.rsplit(":", 1)[1] for key in client.scan_iter(match=k.prefix + "job:*", count=1000)}
    kept = {
        r
        for r in rows - set(seen)
        if client.hget(k.job(r), "state") == "completed" and client.pttl(k.job(r)) > 0
    }
    assert rows - kept == set(seen), f"rows without a location: {rows - kept - set(seen)}"
    locs["pending"] |= packed
    return locs


def expire_leases(client: redis.Redis, queue: str, *ids: str) -> None:
    """Move leases into the past (score 1 ms) instead of sleeping: expiry reads the server clock."""
    k = QueueKeys.of(queue)
    targets = ids or tuple(client.zrange(k.active, 0, -1))
    for job_id in targets:
        client.zadd(k.active, {job_id: 1}, xx=True)


async def until(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``cond`` until it is truthy (its value is returned); ``timeout`` bounds a hang,
    never a speed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Flushing:
    """``SCRIPT FLUSH`` in a loop on a thread of its own (bounded at 20,000 flushes) for as
    long as the ``with`` block runs; ``count`` is how many went through."""

    def __init__(self, url: str) -> None:
        self.url, self.count = url, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        c = redis.Redis.from_url(self.url)
        try:
            while not self._done.is_set() and self.count < 20_000:
                c.script_flush()
                self.count += 1
        finally:
            c.close()

    def __enter__(self) -> Flushing:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(10)


def make_dead(queue: Queue, jobs: list[tuple[str, Any]], error: str) -> list[str]:
    """Enqueue ``jobs`` and fail each for good: they end dead with ``error``."""
    ids = [str(i) for i in queue.enqueue_many(jobs)]
    for _ in range(len(ids) // 1000 + 2):  # bounded: 1,000 claims a call
        claimed = queue.claim(1000, lease_ms=60_000)
        if not claimed:
            break
        queue.fail_many([(c.id, c.token, error, False, None) for c in claimed])
    return ids


EXPIRING = (":claim:", ":admitted:")  # a claim's stored reply, an enqueue call's mark (60 s)


def expiring(key: str) -> bool:
    """Whether ``key`` is one a queue leaves behind to expire on its own (at most 60 s)."""
    return any(part in key for part in EXPIRING)


def log_records(log: Path, event: str | None = None) -> list[dict[str, Any]]:
    """The JSON records a live process has finished writing to ``log``.

    A process that is still running may be halfway through a line: only lines
    ended by a newline are read, so a record caught mid-write is left for the
    next read instead of failing it.
    """
    text = log.read_text()
    complete = text[: text.rfind("\n") + 1]
    records = [json.loads(line) for line in complete.splitlines() if line.startswith("{")]
    return [r for r in records if event is None or r.get("event") == event]
