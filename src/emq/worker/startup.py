"""A run's first read of the server: the queues to serve, a partitioned one as its partitions.

A long-running worker may start before its server (a supervisor that starts both at once, a
server restarting): that read waits for the server as every later call rides out an outage
(logged once, jittered backoff, a stop or SIGTERM meanwhile ends the run cleanly). A burst
run fails at once with the error, as a one-off command does. A refused login (a wrong
password, :class:`~emq.errors.AuthenticationFailed`) or a missing permission does not pass
by itself: it is raised at once either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import RedisClusterException

from ..errors import ServerRefused
from ..model.config import QueueOptions
from ..queue._async.partition_count import expand_queues
from ..server.clients import aclose_client
from .connect import OUTAGE_ERRORS, REFUSED_LOGIN, ClientFactory, Outage, nap
from .log import event
from .runner import SIGNALS

T = TypeVar("T")
NOT_UP_YET = ("LOADING", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN")
"""The refusals of a server (or a cluster) that is still starting: waited through."""


def not_up_yet(exc: BaseException) -> bool:
    """Whether ``exc`` says the server is not up yet: unreachable, loading, a cluster none of
    whose nodes answers or that does not serve every slot yet. A refused login is not."""
    if isinstance(exc, REFUSED_LOGIN):
        return False
    if isinstance(exc, RedisClusterException) and "cannot be connected" in str(exc):
        return True
    if isinstance(exc, ServerRefused):
        return exc.reason in NOT_UP_YET
    return isinstance(exc, OUTAGE_ERRORS)


async def reach(
    outage: Outage, read: Callable[[], Awaitable[T]], stop: asyncio.Event, *, wait: bool
) -> T | None:
    """``read()`` once it succeeds. With ``wait``, a server that is not up yet
    (:func:`not_up_yet`) is waited for as any outage is (logged once by ``outage``, as
    ``where: start``; jittered backoff) until it answers, or until ``stop`` is set: then None.
    Without ``wait``, and for any other error, the error is raised at once."""
    while True:
        try:
            result = await read()
        except Exception as exc:
            if not wait or not not_up_yet(exc):
                raise
            await nap(outage.failed(exc, "start"), stop)
            if stop.is_set():
                return None
            continue
        outage.ok("start")
        return result


async def first_read(
    factory: ClientFactory,
    queues: dict[str, QueueOptions | None],
    stop: asyncio.Event,
    log: logging.Logger,
    *,
    wait: bool,
    signals: bool,
) -> dict[str, QueueOptions | None] | None:
    """The queues a run serves (:func:`~emq.queue._async.partition_count.expand_queues`),
    read through :func:`reach`; None once stopped while waiting for the server. With
    ``signals`` (the main thread), SIGTERM/SIGINT set ``stop`` meanwhile."""

    async def read() -> dict[str, QueueOptions | None]:
        client = factory.asyncio()  # made anew each try: a cluster is detected once it answers
        try:
            return await expand_queues(client, queues)
        finally:
            await aclose_client(client)

    def on_signal(sig: signal.Signals) -> None:
        event(log, "info", "stopping gracefully", "stopping", signal=sig.name)
        stop.set()

    loop = asyncio.get_running_loop()
    if signals:
        for sig in SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await reach(Outage(log, factory.shown_url), read, stop, wait=wait)
    finally:
        if signals:
            for sig in SIGNALS:
                with contextlib.suppress(ValueError, RuntimeError):
                    loop.remove_signal_handler(sig)
