"""The maintenance beat every worker runs: ``promote_due``, the outbox, the stalled sweep.

Each beat promotes due scheduled jobs (so they wake parked workers; ``claim`` promotes by
itself too) and delivers the queue's outbox (a flow's messages to other queues,
docs/flows.md), so a parent in another queue hears of its child's end within a beat.
Every ``stalled_interval_ms`` the worker tries to take the queue's
``stalled-check`` key with ``SET NX PX stalled_interval_ms``; only the taker sweeps, so a fleet
runs about one sweep per interval. The guard is an optimisation: two sweeps that do overlap
are still exact (G2), because the sweep is one script. The sweep is the only recovery path:
an expired lease goes back to ``pending``, or to ``dead`` once it has stalled ``max_stalled``
times, counted in-script.

The same task fires the queues' due repeat ticks (:mod:`.repeat_beat`): once per beat, and
between beats at each next tick's time, and keeps the worker's registry entry
(:mod:`.presence`, about once a second; its errors never reach the beat).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence

from ..lua.scripts import translated
from ..queue._async.queue import AsyncQueue
from .connect import SERVER_ERRORS, Outage
from .log import Report, event
from .options import WorkerOptions
from .presence import Presence
from .repeat_beat import RepeatBeat

POKE_GAP_S = 0.05  # at least this long between two beats a poke brings forward


class Maintenance:
    def __init__(
        self,
        queues: Sequence[AsyncQueue],
        options: WorkerOptions,
        outage: Outage,
        report: Report,
        presence: Presence | None = None,
    ) -> None:
        self._queues = queues
        self.presence = presence
        self._opts = options
        self._outage = outage
        self._report = report
        self._owner = uuid.uuid4().hex[:12]
        self._next_sweep = 0.0
        self._next_beat = 0.0  # monotonic s
        self._last_beat = 0.0
        self._poked = asyncio.Event()
        self.repeats = RepeatBeat(queues, report.log)

    @property
    def period_s(self) -> float:
        return min(self._opts.stalled_interval_ms, 1_000) / 1000

    async def run(self, stop: asyncio.Event) -> None:
        """Beat until ``stop`` is set. A server error (unreachable, out of memory, any
        refusal) is logged once per episode and the beat tried again after a backoff no
        longer than its period; any other exception ends the task with it (the worker then
        stops and its run raises: it never goes on without its sweeper)."""
        while not stop.is_set():
            wait = self.period_s
            if self.presence is not None:
                await self.presence.beat()  # never raises a server error
            try:
                # due repeat ticks first (on time), the beat once a period, and between two
                # beats the task wakes for the next tick (RepeatBeat knows when it is)
                await self.repeats.fire(everyone=time.monotonic() >= self._next_beat)
                if time.monotonic() >= self._next_beat:
                    self._last_beat = time.monotonic()
                    await self.beat()
                    self._next_beat = time.monotonic() + self.period_s
            except SERVER_ERRORS as exc:
                wait = min(wait, self._outage.failed(exc, "maintenance"))
            else:
                self._outage.ok("maintenance")
                wait = min(self._next_beat - time.monotonic(), self.repeats.wait_s())
            await self._nap(stop, wait)

    def poke(self) -> None:
        """A child whose parent is in another queue was just acked: its end waits in the
        outbox, so beat (promote and deliver) soon, at most every ``POKE_GAP_S``, rather
        than at the next period: a parent hears of it in milliseconds, not a beat."""
        self._next_beat = min(self._next_beat, self._last_beat + POKE_GAP_S)
        self._poked.set()

    async def _nap(self, stop: asyncio.Event, wait: float) -> None:
        """Sleep ``wait`` seconds, or until stopped or poked."""
        self._poked.clear()
        if wait <= 0:
            return
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._poked.wait())]
        try:
            await asyncio.wait(waits, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def beat(self) -> None:
        for q in self._queues:
            await q.promote_due(1000)
            try:  # a refused delivery (another queue's keys denied by an ACL, say) is
                delivered = await q.deliver_outbox()  # logged; it never stops the sweep
            except SERVER_ERRORS as exc:
                self._outage.failed(exc, "outbox")
                continue
            self._outage.ok("outbox")
            if delivered.broken:
                dropped = list(delivered.broken[:10])
                event(self._report.log, "error", "unreadable outbox entries dropped",
                      "outbox_broken", queue=q.name, entries=dropped)  # fmt: skip
        if time.monotonic() < self._next_sweep:
            return
        self._next_sweep = time.monotonic() + self._opts.stalled_interval_ms / 1000
        for q in self._queues:
            await self.sweep(q)

    async def sweep(self, q: AsyncQueue) -> bool:
        """Sweep ``q`` if this worker takes the ``stalled-check`` guard; True if it swept."""
        with translated():  # an OOM refusal of the guard is ServerOutOfMemory, like a script's
            taken = await q.client.set(
                q.core.keys.stalled_check, self._owner, nx=True, px=self._opts.stalled_interval_ms
            )
        if not taken:
            return False
        result = await q.sweep_all(self._opts.max_stalled, self._opts.sweep_limit)
        self._report.swept(q.name, result.recovered, result.dead, result.cancelled)
        if result.missing:
            self._report.missing(q.name, result.missing, "active")
        return True
