"""The progress flusher: what ``ctx.progress(value)`` reports reaches the server throttled.

A handler may call ``ctx.progress`` in a tight loop; the server sees at most one write per job
per ``WorkerOptions.progress_interval_ms`` (the latest value wins, the ones in between are
never sent), and the jobs of one queue that are due together share one ``progress`` script
call (fenced by each lease's token: a value from a lease this worker no longer holds is
refused by the server and dropped here). ``put`` never blocks on the server: it stores the
encoded value under a lock (from the handler's thread or the loop) and wakes the flusher task
only when it was idle. Before a batch of acknowledgements is sent, :meth:`flush_jobs` sends
the last unsent value of those jobs (one call, only if some have one), so a completed job's
row and stream show its final progress before its ``completed`` event.

A server error while sending (unreachable, out of memory) is logged once per episode; the
values are kept (unless a newer one arrived) and sent after a backoff. Progress is advisory:
a value still unsent when the worker stops, or when its lease is lost, is dropped.

:class:`Progress` joins the story's ``before_ack`` hooks (:mod:`.hooks`) with the first value
a handler reports (on the loop, before that handler's outcome can be queued), and stays:
a worker whose handlers never report progress never calls it.

It also holds ``ctx.log``'s flusher, :attr:`Progress.logs` (:mod:`.joblogs`, built the same
way, its own hook), and :meth:`Progress.run` runs both: one task, one sink for a held job.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable

from ..model.records import Answer
from .connect import SERVER_ERRORS
from .flusher import Flusher
from .heartbeat import Lease
from .joblogs import Logs

CHUNK = 1_000
PRUNE_AT = 4_096  # send times kept before the stale ones are dropped


class Progress(Flusher):
    """The latest unsent progress of each held job, and the task that sends it."""

    what = "progress"

    def _start(self) -> None:
        self._latest: dict[Lease, str] = {}  # values not sent yet (the latest per job)
        self._sent_at: dict[Lease, float] = {}  # monotonic time of each job's last send
        hooks = self._hooks
        self.logs = Logs(self._queues, self._interval_ms, self._outage, hooks)  # ctx.log's
        if hooks is not None:
            hooks.add(self.logs, joined=False)  # joins with the first line logged

    def put(self, lease: Lease, text: str) -> None:
        """Keep ``text`` (JSON) as the latest progress of ``lease``; from any thread."""
        with self._lock:
            self._latest[lease] = text
            wake = self._stored()
        if wake:
            self._wake_task()

    async def run(self) -> None:
        """Run the progress sender and the log flusher (:meth:`.joblogs.Logs.run`) until
        cancelled (a bug in either ends both, which the runner reports)."""
        async with asyncio.TaskGroup() as both:
            both.create_task(self._send_values(), name="emq-progress-values")
            both.create_task(self.logs.run(), name="emq-logs")

    async def _send_values(self) -> None:
        """Send what is due, sleep until the next job's interval has passed; wait while
        nothing is unsent."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                async with self._sending:
                    due, next_at = self._take_due(time.monotonic())
                    failure = None
                    if due:
                        try:
                            await self._send(due)
                        except SERVER_ERRORS as exc:
                            self._restore(due)
                            failure = exc
                if failure is not None:
                    await asyncio.sleep(self._outage.failed(failure, "progress"))
                    continue
                if due:
                    self._outage.ok("progress")
                if next_at is None:
                    break
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    def _take_due(self, now: float) -> tuple[list[tuple[Lease, str]], float | None]:
        """The values whose job's interval has passed (taken out), and when the next of the
        others is due (None: nothing is left, and the task goes idle)."""
        due: list[tuple[Lease, str]] = []
        next_at = math.inf
        with self._lock:
            for lease, text in self._latest.items():
                at = self._sent_at.get(lease, -math.inf) + self._interval
                if at <= now:
                    due.append((lease, text))
                else:
                    next_at = min(next_at, at)
            for lease, _ in due:
                del self._latest[lease]
                self._sent_at[lease] = now
            if len(self._sent_at) > PRUNE_AT:  # past their interval they throttle nothing
                old = [x for x, at in self._sent_at.items() if at + self._interval <= now]
                for lease in old:
                    del self._sent_at[lease]
            if not self._latest and not due:
                self._idle = True
                return due, None
        return due, (now if due and next_at == math.inf else next_at)

    def _restore(self, sent: list[tuple[Lease, str]]) -> None:
        with self._lock:
            for lease, text in sent:
                self._latest.setdefault(lease, text)  # a newer value wins

    async def flush_jobs(self, leases: Iterable[Lease]) -> None:
        """Send the unsent progress of ``leases`` now (their outcome is about to be sent) and
        forget them. A send in flight lands first (else the ack could overtake it and the
        value be refused as gone). No I/O when none of them has an unsent value."""
        if not self._latest and not self._sent_at and not self._sending.locked():
            return
        async with self._sending:
            due: list[tuple[Lease, str]] = []
            with self._lock:
                for lease in leases:
                    text = self._latest.pop(lease, None)
                    self._sent_at.pop(lease, None)
                    if text is not None:
                        due.append((lease, text))
            if due:
                await self._send_logged(due)

    before_ack = flush_jobs  # the hook: a batch of acks is about to be sent

    async def _send(self, due: list[tuple[Lease, str]]) -> None:
        by_queue: dict[str, list[tuple[Lease, str]]] = {}
        for lease, text in due:
            by_queue.setdefault(lease.queue, []).append((lease, text))
        for name, items in by_queue.items():
            q = self._queues[name]
            for start in range(0, len(items), CHUNK):
                chunk = items[start : start + CHUNK]
                answers = await q.set_progress_many([(x.id, x.token, t) for x, t in chunk])
                self.calls += 1
                for (lease, _), answer in zip(chunk, answers, strict=True):
                    if answer in (Answer.LOST, Answer.GONE):
                        self._forget(lease)
                    else:
                        self.sent += 1

    def _forget(self, lease: Lease) -> None:
        with self._lock:
            self._latest.pop(lease, None)
            self._sent_at.pop(lease, None)
