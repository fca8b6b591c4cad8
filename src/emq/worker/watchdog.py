"""The timeout watchdog: one timer, armed for the earliest deadline of the running attempts.

A started attempt with a limit (the handler's ``timeout_ms``, or the worker's) is armed once;
the deadlines sit in one deque per distinct limit, where they only grow, so the earliest of
each is at its front. When the timer fires, every attempt past its deadline and still
``RUNNING`` is handed to ``expire`` (the executor interrupts it: ``timeout``); entries of
attempts decided meanwhile are skipped. No timer, future or callback of its own per job.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Sized
from typing import Any

from .held import Held
from .phase import RUNNING


class Watchdog:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, live: Sized, expire: Callable[[Held], None]
    ) -> None:
        self._loop = loop
        self._live = live  # the running handlers: a deque is compacted past twice as many
        self._expire_one = expire
        self._due: dict[int, deque[Held]] = {}  # limit (ms) -> jobs in deadline order
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def arm(self, job: Held, now: float, timeout_ms: int) -> None:
        """Entries of decided jobs are dropped when a deque grows past twice the live jobs
        (amortised O(1) per job)."""
        at = job.deadline = now + timeout_ms / 1000
        due = self._due.get(timeout_ms)
        if due is None:
            due = self._due[timeout_ms] = deque()
        due.append(job)
        if len(due) > 2 * len(self._live) + 64:
            self._due[timeout_ms] = deque(j for j in due if j.phase is RUNNING)
        if self._timer is None or at < self._timer_at:
            self._schedule(at)

    def _schedule(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(at, self._expire)

    def _expire(self) -> None:
        self._timer = None
        now, fronts = self._loop.time(), []
        for due in self._due.values():
            while due and (due[0].phase is not RUNNING or due[0].deadline <= now):
                job = due.popleft()
                if job.phase is RUNNING:
                    self._expire_one(job)
            if due:
                fronts.append(due[0].deadline)
        if fronts:
            self._schedule(min(fronts))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def call_soon_from_thread(
    loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any
) -> None:
    """Run ``fn(*args)`` on ``loop`` from another thread (a handler's, the heartbeat's); once
    the loop has closed there is nothing left to tell."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)
