"""A worker's entry in the worker registry (:mod:`emq.observe.registry`), kept by its
maintenance task.

:meth:`Presence.beat` rewrites the entry at most every :data:`emq.observe.registry.EVERY_S`
(its TTL is
a few of those), :meth:`Presence.leave` deletes it on a graceful stop. Neither ever raises a
server error or stops the worker: a refused write (an ACL without the registry's keys, a full
server) is logged once per episode of its own, so it never hides or prolongs an outage of the
worker's other calls; an unreachable server is left to those calls to report.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence, Sized
from typing import Any, Protocol

import redis.asyncio

from .. import __version__
from ..model.layout import LAYOUT
from ..observe import registry
from .connect import SERVER_ERRORS, Outage, describe_error

LEAVE_TIMEOUT_S = 2.0


class Load(Protocol):
    """What an entry says of the jobs a worker holds (its executor is one)."""

    @property
    def handlers(self) -> dict[str, Any]: ...

    @property
    def batches(self) -> Sized: ...

    def running(self) -> list[Any]: ...


class Presence:
    def __init__(
        self,
        client: redis.asyncio.Redis,
        queues: Sequence[str],
        concurrency: int,
        jobs: Callable[[], Load],
        log: logging.Logger,
        url: str = "",
        metrics_port: int = 0,
    ) -> None:
        self.client = client
        self.id = registry.new_worker_id()
        self._queues = tuple(queues)
        self._concurrency = concurrency
        self._jobs = jobs  # made after the presence: read at each beat
        self._metrics_port = metrics_port
        self._host = registry.hostname()
        self._started_ms = registry.now_ms()
        self._next = 0.0  # monotonic s of the next write
        self._written = False
        self.refusals = Outage(log, url)  # the registry's own episodes
        self.ttl_ms = registry.ttl_ms()

    def info(self) -> registry.WorkerInfo:
        """The entry: ``running`` counts jobs whose handler runs (a batch counts each job)."""
        jobs = self._jobs()
        batches = tuple(
            (s.name, s.batch_size, s.batch_wait_ms) for s in jobs.handlers.values() if s.batch_size
        )
        return registry.WorkerInfo(
            id=self.id,
            host=self._host,
            pid=os.getpid(),
            queues=self._queues,
            concurrency=self._concurrency,
            running=len(jobs.running()),
            started_ms=self._started_ms,
            beat_ms=registry.now_ms(),
            version=__version__,
            metrics_port=self._metrics_port,
            layout=LAYOUT,
            batches=batches,
            filling=len(jobs.batches),
        )

    async def beat(self) -> None:
        """Rewrite the entry if it is due; never raises a server error."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + registry.EVERY_S
        try:
            await registry.apublish(self.client, self.info(), self.ttl_ms)
        except SERVER_ERRORS as exc:
            if describe_error(exc)[0] != "unreachable":  # unreachable: the claim loop says so
                self.refusals.failed(exc, "registry")
            return
        self._written = True
        self.refusals.ok("registry")

    async def leave(self) -> None:
        """Delete the entry (a graceful stop), bounded in time; errors are ignored (the entry
        then expires by its TTL)."""
        if not self._written:
            return
        with contextlib.suppress(*SERVER_ERRORS, TimeoutError):
            await asyncio.wait_for(registry.aunpublish(self.client, self.id), LEAVE_TIMEOUT_S)
