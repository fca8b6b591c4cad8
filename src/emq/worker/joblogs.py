"""The log flusher: what ``ctx.log(line)`` records reaches the server in batches.

A :class:`~.flusher.Flusher`, as the progress flusher (:mod:`.progress`) is: ``put`` never
blocks on the server; it appends the line under a lock (from the handler's thread or the loop)
and wakes the task only when it was idle. The task sends every unsent line of every job in one
``job_log`` script call per queue (chunks of 1,000 lines), then waits ``progress_interval_ms``
before the next send, so a handler that logs in a tight loop costs the server one call per
interval, not one per line. Before a batch of acknowledgements is sent, :meth:`flush_jobs`
sends the unsent lines of those jobs (one call, only if some have one), so a job's last lines
are stored before its outcome; it waits first for a send already in flight (which may hold
lines of those jobs: an ack sent on another connection could otherwise land before them, and
the lines be refused). Each line is fenced by its attempt's lease token: a line of a lease this
worker no longer holds is refused by the server, and that job's unsent lines are dropped.

Bounded: a job's unsent lines are at most :data:`~emq.calls.logs.MAX_LINES` (the oldest are
dropped first, as the server trims them). A queue whose ``log_ttl_ms`` is 0 stores no lines:
they are dropped here. A server error while sending is logged once per episode; the lines
are kept and sent after a backoff. Like progress, logs are advisory: lines still unsent
when the worker stops, or when a lease is lost, are dropped.

:class:`Logs` joins the story's ``before_ack`` hooks (:mod:`.hooks`) with the first line a
handler logs, and stays: a worker whose handlers never log never calls it.
"""

from __future__ import annotations

import asyncio
from collections import deque

from ..calls.call import MAX_BATCH
from ..calls.logs import MAX_LINES
from ..model.records import Answer
from .connect import SERVER_ERRORS
from .flusher import Flusher
from .heartbeat import Lease

Lines = dict[Lease, deque[str]]


class Logs(Flusher):
    """The unsent log lines of each held job, and the task that sends them."""

    what = "logs"

    def _start(self) -> None:
        self._unsent: Lines = {}
        self.dropped = 0  # lines dropped: over the cap, refused, or not kept by the queue

    def put(self, lease: Lease, line: str) -> None:
        """Keep ``line`` (from :func:`~emq.calls.logs.encode_line`) for ``lease``; from any
        thread."""
        with self._lock:
            lines = self._unsent.get(lease)
            if lines is None:
                lines = self._unsent[lease] = deque(maxlen=MAX_LINES)
            elif len(lines) == MAX_LINES:
                self.dropped += 1
            lines.append(line)
            wake = self._stored()
        if wake:
            self._wake_task()

    async def run(self) -> None:
        """Send what is unsent, then wait one interval; wait while nothing is unsent. Ends
        only by cancellation (or a bug, which the runner reports)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                async with self._sending:
                    due = self._take(None)
                    if not due:
                        break
                    try:
                        await self._send(due)
                    except SERVER_ERRORS as exc:
                        self._restore(due)
                        pause = self._outage.failed(exc, "logs")
                    else:
                        self._outage.ok("logs")
                        pause = self._interval
                await asyncio.sleep(pause)

    def _take(self, leases: list[Lease] | None) -> Lines:
        """The unsent lines of ``leases`` (None: of every job), taken out; with None and
        nothing unsent, the task goes idle."""
        with self._lock:
            if leases is None:
                due, self._unsent = self._unsent, {}
                if not due:
                    self._idle = True
                return due
            return {x: lines for x in leases if (lines := self._unsent.pop(x, None))}

    def _restore(self, sent: Lines) -> None:
        with self._lock:
            for lease, lines in sent.items():
                newer = self._unsent.get(lease)
                if newer is not None:
                    lines.extend(newer)  # the deque keeps the newest MAX_LINES
                self._unsent[lease] = lines

    async def flush_jobs(self, leases: list[Lease]) -> None:
        """Send the unsent lines of ``leases`` now (their outcome is about to be sent). No
        I/O when none of them has one."""
        if not self._unsent and not self._sending.locked():
            return
        async with self._sending:  # lines in flight land first
            due = self._take(leases)
            if due:
                await self._send_logged(due)

    before_ack = flush_jobs  # the hook: a batch of acks is about to be sent

    async def _send(self, due: Lines) -> None:
        by_queue: dict[str, list[tuple[str, int, str]]] = {}
        for lease, lines in due.items():
            items = by_queue.setdefault(lease.queue, [])
            items.extend((lease.id, lease.token, line) for line in lines)
        for name, items in by_queue.items():
            q = self._queues[name]
            if q.core.options.log_ttl_ms == 0:  # the queue keeps no logs
                self.dropped += len(items)
                continue
            for start in range(0, len(items), MAX_BATCH):
                chunk = items[start : start + MAX_BATCH]
                answers = await q.append_logs_many(chunk)
                self.calls += 1
                for answer in answers:
                    if answer in (Answer.LOST, Answer.GONE):
                        self.dropped += 1
                    else:
                        self.sent += 1
