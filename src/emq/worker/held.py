"""A job the worker holds: :class:`Held`, from its claim until its ack (or give-back) lands."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import Any, Protocol

from ..model.records import Claimed
from ..queue._async.queue import AsyncQueue
from .context import JobContext
from .heartbeat import Lease
from .options import HandlerSpec
from .phase import READY


class Sink(Protocol):
    def put(self, lease: Lease, text: str) -> None: ...


class Reports(Sink, Protocol):
    """Where a held job's ``ctx.progress`` values (``put``) and ``ctx.log`` lines
    (``logs.put``) go: the worker's progress flusher (:class:`~.progress.Progress`)."""

    @property
    def logs(self) -> Sink: ...


class Held(Lease):
    """A job this worker holds a lease on. It is its own heartbeat :class:`Lease` (renewed
    until its ack lands) and carries its :class:`~.phase.Phase`. Its :class:`JobContext` is
    made on first use: a handler that takes only the payload never needs one."""

    __slots__ = (
        "_beat",
        "_ctx",
        "_report",
        "batch",
        "claimed",
        "context",
        "deadline",
        "q",
        "span",
        "spec",
        "started_at",
        "task",
    )

    def __init__(
        self,
        q: AsyncQueue,
        name: str,
        claimed: Claimed,
        beat: Callable[[], None],
        report: Reports | None = None,
    ) -> None:
        self.queue = name
        self.id = claimed.id
        self.token = claimed.token
        self.phase = READY
        self.q = q
        self.claimed = claimed
        self._beat = beat
        self._report = report  # ctx.progress's and ctx.log's sinks: the worker's flushers
        self._ctx: JobContext | None = None
        self.spec: HandlerSpec | None = None
        self.task: asyncio.Task[None] | None = None
        self.batch: tuple[Held, ...] | None = None  # the jobs of its batch handler's call
        self.deadline = 0.0  # loop time past which the attempt times out (if it has a limit)
        # set only by an observer (.observe: metrics or tracing): the handler's start (loop
        # time), its consumer span, and the context the handler runs in (the span current)
        self.started_at = 0.0
        self.span: Any = None
        self.context: contextvars.Context | None = None

    @property
    def ctx(self) -> JobContext:
        ctx = self._ctx
        if ctx is None:
            c, r = self.claimed, self._report
            ctx = self._ctx = JobContext(
                queue=self.queue,
                id=c.id,
                name=c.name,
                token=c.token,
                attempts=c.attempts,
                stalled=c.stalled,
                beat=self._beat,
                lane=c.lane,
                report=None if r is None else functools.partial(r.put, self),
                read_children=functools.partial(self.q.children, c.id),
                loop=asyncio.get_running_loop(),
                lines=None if r is None else functools.partial(r.logs.put, self),
                steps=self.q,
            )
        return ctx
