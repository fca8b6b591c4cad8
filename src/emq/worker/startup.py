"""A run's start: its connections opened (on a cluster, each has read the slot map) and its
first read of the server, the queues to serve (a partitioned one as its partitions).

A long-running worker may start before its server (a supervisor that starts both at once, a
server restarting, a cluster none of whose seeds answers yet): the start waits for the server
as every later call rides out an outage (logged once, jittered backoff, a stop or SIGTERM
meanwhile ends the run cleanly). A burst run fails at once with the error, as a one-off
command does. A refused login (a wrong password, :class:`~emq.errors.AuthenticationFailed`)
or a missing permission does not pass by itself: it is raised at once either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import ServerRefused
from ..model.config import QueueOptions
from ..queue._async.partition_count import expand_queues
from ..server.clients import cluster_unreachable
from .connect import OUTAGE_ERRORS, REFUSED_LOGIN, Outage, nap
from .connections import ClientFactory, Connections, open_connections
from .log import event
from .options import WorkerOptions
from .runner import SIGNALS

T = TypeVar("T")
NOT_UP_YET = ("LOADING", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN")
"""The refusals of a server (or a cluster) that is still starting: waited through."""


def not_up_yet(exc: BaseException) -> bool:
    """Whether ``exc`` says the server is not up yet: unreachable, loading, a cluster none of
    whose nodes answers or that does not serve every slot yet. A refused login is not."""
    if isinstance(exc, REFUSED_LOGIN):
        return False
    if cluster_unreachable(exc):
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
    options: WorkerOptions,
    stop: asyncio.Event,
    log: logging.Logger,
    *,
    signals: bool,
) -> tuple[dict[str, QueueOptions | None], Connections] | None:
    """The run's connections (:func:`~.connections.open_connections`) and the queues it
    serves (:func:`~emq.queue._async.partition_count.expand_queues`), both through
    :func:`reach` (waiting for the server unless ``options.burst``); None once stopped while
    waiting for it. With ``signals`` (the main thread), SIGTERM/SIGINT set ``stop``
    meanwhile."""

    async def read() -> tuple[dict[str, QueueOptions | None], Connections]:
        conns = await open_connections(factory, options)  # made anew each try: a cluster is
        try:  # detected once it answers, and each client reads the slot map that answers
            return await expand_queues(conns.client, queues), conns
        except BaseException:
            await conns.close()
            raise

    def on_signal(sig: signal.Signals) -> None:
        event(log, "info", "stopping gracefully", "stopping", signal=sig.name)
        stop.set()

    loop = asyncio.get_running_loop()
    if signals:
        for sig in SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
    try:
        wait = not options.burst
        return await reach(Outage(log, factory.shown_url), read, stop, wait=wait)
    finally:
        if signals:
            for sig in SIGNALS:
                with contextlib.suppress(ValueError, RuntimeError):
                    loop.remove_signal_handler(sig)
