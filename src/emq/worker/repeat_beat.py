"""The worker's side of repeating jobs: fire each queue's due ticks, and know when the next
one is due so the maintenance task wakes for it (a 200 ms schedule fires each tick on time,
though the beat itself runs at most once a second).

Each :meth:`RepeatBeat.fire` of a queue is ``Queue.fire_repeats()``: one cheap read
(``due_repeats.lua``: TIME and the first score of ``repeats``) when nothing is due, a second
round trip (``fire_repeats.lua``) when something is. Its reply carries the server's clock and
the earliest next tick; the wait until then is taken on the local monotonic clock from the
moment the reply arrived, so it is never early (a wake-up up to half a round trip late).
A queue without schedules is read once per beat (``everyone=True``) and not in between.

A due schedule whose stored spec yields no tick (edited by hand into an unknown zone or a bad
cron) is skipped and logged once per key; while one is due, its queue is fired once per beat,
not in between (its stored next tick stays in the past).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence

from ..queue._async.queue import AsyncQueue
from .log import event

SLACK_S = 0.001  # wake a ms after the tick: the server's clock must have reached it


class RepeatBeat:
    def __init__(self, queues: Sequence[AsyncQueue], log: logging.Logger) -> None:
        self._queues = queues
        self._log = log
        self._broken: set[tuple[str, str]] = set()  # (queue, key) already logged
        self._due_at = [0.0] * len(queues)  # monotonic s when each queue's next tick is due
        self.fired = 0  # jobs made by this worker's firing (any other firer may make others)

    def wait_s(self) -> float:
        """Seconds until the soonest known next tick (inf: none known until the next beat)."""
        return max(0.0, min(self._due_at, default=math.inf) - time.monotonic())

    async def fire(self, everyone: bool = False) -> None:
        """Fire the due ticks of every queue whose next tick is due (``everyone``: of every
        queue, a cheap read where none is due: how a new schedule is noticed)."""
        for i, q in enumerate(self._queues):
            if not everyone and self._due_at[i] > time.monotonic():
                continue
            done = await q.fire_repeats()
            got = time.monotonic()
            self.fired += len(done.jobs)
            for key in done.broken:
                if (q.name, key) not in self._broken:
                    self._broken.add((q.name, key))
                    event(self._log, "error", "a repeating schedule's stored spec yields no "
                          "tick; it is skipped until repeat() writes it again", "repeat_broken",
                          queue=q.name, key=key)  # fmt: skip
            if done.broken:
                self._due_at[i] = math.inf  # its next tick is past: fire again at the next beat
            elif done.next_ms is None:
                self._due_at[i] = math.inf
            else:
                self._due_at[i] = got + max(0, done.next_ms - done.now_ms) / 1000 + SLACK_S
