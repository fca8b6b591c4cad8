"""What the progress and log flushers share: values put from any thread, one task that sends
them, and a flush of some jobs' unsent values before their acks.

``put`` (in a subclass) stores under :attr:`Flusher._lock` and wakes the task only when it
was idle (:meth:`Flusher._stored`), so a handler that reports in a tight loop costs the loop
one wake-up, not one per value. The first wake-up joins the flusher to the story's
``before_ack`` hooks (:mod:`.hooks`): a worker whose handlers never report never calls it.
:attr:`Flusher._sending` is held while values are in flight, so an ack batch waits for
them: an ack sent on another connection could otherwise land first, and the values be
refused as gone. A server error while sending is logged once per episode (:class:`.Outage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from ..queue._async.queue import AsyncQueue
from .connect import SERVER_ERRORS, Outage
from .hooks import Hook, Hooks


class Flusher(Hook):
    """One sink for held jobs' advisory values; a subclass names itself (``what``, as the
    outage log says), keeps its unsent values (``_start``) and sends them (``_send``)."""

    what = "values"

    def __init__(
        self,
        queues: dict[str, AsyncQueue],
        interval_ms: int,
        outage: Outage,
        hooks: Hooks | None = None,
    ) -> None:
        self._queues = queues
        self._hooks = hooks
        self._interval_ms = interval_ms
        self._outage = outage
        self._lock = threading.Lock()
        self._sending = asyncio.Lock()  # held while values are in flight: an ack waits
        self._idle = True  # the task waits for a first value (put must wake it)
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self.sent = 0  # values the server stored
        self.calls = 0  # script calls that sent them
        self._start()

    def _start(self) -> None:
        """The subclass's own state, made once the shared state exists."""

    @property
    def _interval(self) -> float:
        """Seconds between two sends (``progress_interval_ms``)."""
        return self._interval_ms / 1000

    def _stored(self) -> bool:
        """Under :attr:`_lock`, after a value was stored: True when the task was idle and
        must be woken (:meth:`_wake_task`, outside the lock)."""
        if not self._idle:
            return False
        self._idle = False
        return True

    def _wake_task(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: the run is over
            self._loop.call_soon_threadsafe(self._woken)

    def _woken(self) -> None:
        """On the loop, after a value arrived while the task was idle."""
        if self._hooks is not None:
            self._hooks.join(self)  # from now on, the last values go before each ack batch
        self._wake.set()

    async def _send_logged(self, due: Any) -> bool:
        """Send ``due`` now; a server error is logged as an episode and the values dropped
        (advisory: the acks go on). True when it was sent."""
        try:
            await self._send(due)
        except SERVER_ERRORS as exc:
            self._outage.failed(exc, self.what)
            return False
        self._outage.ok(self.what)
        return True

    async def _send(self, due: Any) -> None:
        raise NotImplementedError
