"""What a worker does when the server goes away.

A worker's clients (:mod:`.connections`) have redis-py's automatic command retry turned off,
so the worker alone decides what is safe to re-send: a claim is re-sent with the same request
id (the server kept its reply for ``lease_ms``, so the same jobs come back), a complete or fail
is re-sent and a refusal is then checked against the row (see ``docs/worker.md``).
:class:`Outage` logs once per outage and hands out jittered backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from ..errors import AuthenticationFailed, ScriptError, ServerRefused
from ..lua.scripts import refusal
from ..queue.shared import UNREACHABLE
from ..server.clients import aclose_client, adisconnect, cluster_unreachable, is_cluster_client
from ..server.durability import NotDurable
from .log import event

T = TypeVar("T")

OUTAGE_ERRORS = UNREACHABLE
"""Errors that mean "the server is unreachable (or restarting)"."""
SERVER_ERRORS: tuple[type[BaseException], ...] = (
    *UNREACHABLE,
    redis.RedisError,
    RedisClusterException,
    ServerRefused,
    ScriptError,
    NotDurable,
)
"""Every error that comes from the server (unreachable, or refusing: OOM, BUSY, READONLY,
NOPERM, a script cache flushed again and again; with ``durability="aof"``, an fsync not
confirmed in time: the re-send waits for it again), and a cluster client's own (no node
answers, the slot map cannot be read). A worker component retries through these with backoff;
any other exception is a bug in emq or the worker stops (it exits non-zero)."""
REFUSED_LOGIN = (AuthenticationFailed, redis.AuthenticationError)
"""A wrong or missing password: a refusal, although redis-py's is a ``ConnectionError``."""
CANCEL_WAIT_S = 0.2
"""How long :func:`park` waits for a cancelled ``BLPOP`` to end (redis-py sometimes swallows
the cancel of a blocking command: :func:`_end`)."""

QUIET = 3


def describe_error(exc: BaseException) -> tuple[str, str]:
    """``(kind, text)`` of a server error for a log line: kind is ``unreachable`` (the server
    is away), ``refused`` (it answered no: OOM, BUSY, READONLY, NOPERM, ...) or ``error``."""
    if isinstance(exc, redis.ResponseError):
        exc = refusal(exc)  # a raw reply from a plain command: said as emq says it
    if isinstance(exc, REFUSED_LOGIN):  # redis-py's is a ConnectionError: not an outage
        kind = "refused"
    elif isinstance(exc, OUTAGE_ERRORS) or cluster_unreachable(exc):
        kind = "unreachable"
    elif isinstance(exc, ServerRefused | redis.ResponseError):
        kind = "refused"
    else:
        kind = "error"
    return kind, f"{type(exc).__name__}: {exc}"[:500]


class Outage:
    """One worker's episodes of server trouble, shared by every component (the loop's claim,
    park, acks and maintenance, and the heartbeat thread).

    An episode starts with the first failure of any component and ends once every component
    that failed during it has succeeded again; it is logged once when it starts (with the
    component, the cause and the server's redacted URL) and once when it ends. The first
    ``QUIET`` unreachable failures in a row are retried at once and not logged: after a server
    restart each pooled connection is dead, and one failed use of each is no outage.
    :meth:`failed` returns the delay before the component's next try: exponential from
    ``base_s`` to ``cap_s``, drawn from its upper half so a fleet does not retry in lockstep.
    """

    def __init__(
        self, log: logging.Logger, url: str = "", base_s: float = 0.05, cap_s: float = 2.0
    ) -> None:
        self._log = log
        self._url = url
        self._base = base_s
        self._cap = cap_s
        self._lock = threading.Lock()
        self._failing: dict[str, int] = {}  # component -> failures in a row
        self._logged = False
        self._first = 0.0
        self._kinds: set[str] = set()
        self.count = 0  # episodes logged

    @property
    def down(self) -> bool:
        return bool(self._failing)

    def failed(self, exc: BaseException, where: str) -> float:
        """Record a failed call of component ``where``; returns the delay before its next
        try."""
        kind, text = describe_error(exc)
        with self._lock:
            if not self._failing:
                self._first = time.monotonic()
                self._kinds = set()
            tries = self._failing[where] = self._failing.get(where, 0) + 1
            self._kinds.add(kind)
            if kind == "unreachable" and tries <= QUIET and not self._logged:
                return 0.0
            if not self._logged:
                self._logged = True
                self.count += 1
                what = "server unreachable" if kind == "unreachable" else "server call failed"
                event(self._log, "warning" if kind == "unreachable" else "error",
                      f"{what} ({where}); retrying with backoff", "outage",
                      where=where, kind=kind, error=text, url=self._url)  # fmt: skip
            delay = min(self._cap, self._base * 2 ** min(tries, 16))
        return random.uniform(delay / 2, delay)

    def ok(self, where: str) -> None:
        """Record a successful call of ``where``; logs the end of an episode once."""
        if where not in self._failing:  # the hot path: nothing was failing here
            return
        with self._lock:
            self._failing.pop(where, None)
            if self._failing or not self._logged:
                if not self._failing:
                    self._logged = False
                return
            self._logged = False
            down_s = time.monotonic() - self._first
            kinds = sorted(self._kinds)
        event(self._log, "warning", "server calls succeed again", "reconnected",
              down_ms=round(down_s * 1000), kinds=kinds, url=self._url)  # fmt: skip


async def first(stop: asyncio.Event, *aws: Awaitable[Any]) -> None:
    """Wait for the first of ``aws`` or ``stop``. Tasks made here from coroutines are
    cancelled after; futures passed in are left to the caller."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    made = [t for t, a in zip(tasks, aws, strict=True) if t is not a]
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([*tasks, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in made:
            t.cancel()
        stopped.cancel()


async def nap(seconds: float, stop: asyncio.Event | None) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def retry(
    outage: Outage,
    where: str,
    send: Callable[[], Awaitable[T]],
    *,
    stop: asyncio.Event | None = None,
    deadline: float | None = None,
) -> tuple[T | None, bool]:
    """The one outage-retry loop of a worker: send until it succeeds, backing off through
    every server error (unreachable, out of memory, any refusal; logged once per episode by
    ``outage``). Returns ``(result, retried)``; the result is None once ``stop`` is set or the
    monotonic ``deadline`` has passed. Any other exception is raised: a bug is never retried."""
    retried = False
    while True:
        try:
            result = await send()
        except SERVER_ERRORS as exc:
            retried = True
            await nap(outage.failed(exc, where), stop)
            late = deadline is not None and time.monotonic() >= deadline
            if late or (stop is not None and stop.is_set()):
                return None, retried
            continue
        outage.ok(where)
        return result, retried


async def park(
    blocking: Any, keys: list[str], wait_ms: int, outage: Outage, stop: asyncio.Event,
    *extra: Awaitable[Any],
) -> None:  # fmt: skip
    """``BLPOP`` on ``keys`` for up to ``wait_ms`` on the ``blocking`` client, ended early by
    ``stop`` or any of ``extra``. On a cluster one command may not span slots, so the keys of
    each slot get a ``BLPOP`` of their own, all at once, and the first to return ends the wait
    (the queues of one worker, the partitions of a queue: docs/partitions.md). A server error
    is an outage episode (logged once, then a backoff nap); anything else is raised. The wait
    ends promptly whatever redis-py does with a cancel (:func:`_end`)."""
    pops = [
        asyncio.ensure_future(blocking.blpop(group, timeout=wait_ms / 1000))
        for group in slot_groups(blocking, keys)
    ]
    await first(stop, *pops, *extra)
    done = [pop for pop in pops if pop.done()]
    await _end(blocking, [pop for pop in pops if not pop.done()])
    if not done:
        return
    exc = next((e for pop in done if (e := pop.exception()) is not None), None)
    if isinstance(exc, SERVER_ERRORS):
        await nap(outage.failed(exc, "park"), stop)
    elif exc is not None:
        raise exc
    else:
        outage.ok("park")


async def _end(blocking: Any, pops: list[asyncio.Future[Any]]) -> None:
    """Cancel the ``BLPOP`` s still waiting and see them end. redis-py sometimes swallows the
    cancel of a blocking command (a known redis-py limitation; on a cluster client often),
    which then waits out its own timeout, ``poll_ms``. So after ``CANCEL_WAIT_S`` a plain
    client's connections are dropped, which ends such a ``BLPOP`` at once (the next park
    connects anew); a cluster client's are not (a dropped connection makes it relearn its slot
    map, and its old nodes' connections leak): its ``BLPOP`` is left to end by its timeout, or
    when :func:`close_blocking` closes the client. The wait never blocks the caller."""
    for pop in pops:
        pop.cancel()
    if not pops:
        return
    _, stuck = await asyncio.wait(pops, timeout=CANCEL_WAIT_S)
    if stuck and not is_cluster_client(blocking):
        await adisconnect(blocking)
        _, stuck = await asyncio.wait(stuck, timeout=CANCEL_WAIT_S)
    for pop in pops:
        if pop in stuck:
            strays = _STRAYS.setdefault(blocking, set())
            strays.add(pop)
            pop.add_done_callback(strays.discard)
        pop.add_done_callback(_retrieved)


def _retrieved(pop: asyncio.Future[Any]) -> None:
    """Read a finished ``BLPOP``'s outcome, so none is reported as never retrieved."""
    if not pop.cancelled():
        pop.exception()


_STRAYS: weakref.WeakKeyDictionary[Any, set[asyncio.Future[Any]]] = weakref.WeakKeyDictionary()


async def close_blocking(blocking: Any) -> None:
    """Close the blocking client, then see each ``BLPOP`` left running end (closing the client
    drops its connection)."""
    await aclose_client(blocking)
    strays = _STRAYS.pop(blocking, set())
    if strays:
        await asyncio.wait(strays, timeout=CANCEL_WAIT_S * 5)


def slot_groups(client: Any, keys: list[str]) -> list[list[str]]:
    """``keys`` as one group, or on a cluster client one group per hash slot."""
    if not is_cluster_client(client):
        return [keys]
    groups: dict[int, list[str]] = {}
    for key in keys:
        groups.setdefault(key_slot(key.encode()), []).append(key)
    return list(groups.values())
