"""A job the worker holds: :class:`Held`, from its claim until its ack (or give-back) lands."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import Any

from ..model.records import Claimed
from ..queue._async.queue import AsyncQueue
from .context import JobContext
from .heartbeat import Lease
from .options import HandlerSpec
from .phase import READY


class Held(Lease):
    """A job this worker holds a lease on. It is its own heartbeat :class:`Lease` (renewed
    until its ack lands) and carries its :class:`~.phase.Phase`. Its :class:`JobContext` is
    made on first use: a handler that takes only the payload never needs one."""

    __slots__ = (
        "_beat",
        "_ctx",
        "_report",
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
        report: Callable[[Lease, str], None] | None = None,
    ) -> None:
        self.queue = name
        self.id = claimed.id
        self.token = claimed.token
        self.phase = READY
        self.q = q
        self.claimed = claimed
        self._beat = beat
        self._report = report  # ctx.progress's sink: the worker's progress flusher
        self._ctx: JobContext | None = None
        self.spec: HandlerSpec | None = None
        self.task: asyncio.Task[None] | None = None
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
            c = self.claimed
            ctx = self._ctx = JobContext(
                queue=self.queue,
                id=c.id,
                name=c.name,
                token=c.token,
                attempts=c.attempts,
                stalled=c.stalled,
                beat=self._beat,
                lane=c.lane,
                report=None if self._report is None else functools.partial(self._report, self),
                read_children=functools.partial(self.q.children, c.id),
                loop=asyncio.get_running_loop(),
            )
        return ctx
