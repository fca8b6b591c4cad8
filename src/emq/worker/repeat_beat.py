"""The worker's side of repeating jobs: fire each queue's due ticks, and know when the next
one is due so the maintenance task wakes for it (a 200 ms schedule fires each tick on time,
though the beat itself runs at most once a second).

Each :meth:`RepeatBeat.fire` of a queue is ``Queue.fire_repeats()``: one cheap read
(``due_repeats.lua``: TIME and the first score of ``repeats``) when nothing is due, a second
round trip (``fire_repeats.lua``) when something is. Its reply carries the server's clock and
the earliest next tick; the wait until then is taken on the local monotonic clock from the
moment the reply arrived, so it is never early (a wake-up up to half a round trip late).
A queue without schedules is read once per beat (``everyone=True``) and not in between.

A due schedule whose stored state cannot be fired (a hand edit or a partial restore: its next
tick ahead of its due score, a field missing or garbled, a due entry without a row) is skipped,
parked by the round that found it (its due score moved ``BROKEN_BACKOFF_MS`` ahead, a due entry
without a row dropped: docs/control.md), and logged once per key with what is wrong with it
(``repeat_broken``); the queue's other schedules fire in the same round and the worker goes on
claiming: stored data of one schedule never stops the maintenance task.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence

from ..calls import repeats as rep
from ..queue._async.queue import AsyncQueue
from .log import event

SLACK_S = 0.001  # wake a ms after the tick: the server's clock must have reached it
AUDIT_S = 60.0  # how often a worker looks for schedules whose row has no due score


class RepeatBeat:
    def __init__(self, queues: Sequence[AsyncQueue], log: logging.Logger) -> None:
        self._queues = queues
        self._log = log
        self._broken: set[tuple[str, str]] = set()  # (queue, key) already logged
        self._due_at = [0.0] * len(queues)  # monotonic s when each queue's next tick is due
        self._audit_at = [0.0] * len(queues)  # monotonic s of each queue's next audit
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
            audit = everyone and time.monotonic() >= self._audit_at[i]
            done = await q.fire_repeats(audit=audit)
            if audit:
                self._audit_at[i] = time.monotonic() + AUDIT_S
            got = time.monotonic()
            self.fired += len(done.jobs)
            for key in done.broken:
                if (q.name, key) not in self._broken:
                    self._broken.add((q.name, key))
                    why = done.why.get(key, "its stored state cannot be fired")
                    event(self._log, "error", f"repeating schedule {key!r} of queue {q.name!r} "
                          f"cannot be fired: {why}; it is skipped and parked "
                          f"({rep.BROKEN_BACKOFF_MS} ms at a time) until repeat() writes "
                          "it again or unrepeat() removes it", "repeat_broken",
                          queue=q.name, key=key, why=why)  # fmt: skip
            if done.next_ms is None:
                self._due_at[i] = math.inf
            else:
                self._due_at[i] = got + max(0, done.next_ms - done.now_ms) / 1000 + SLACK_S
