"""A worker's side of :meth:`emq.Queue.cancel`: stopping a job it holds.

The heartbeat learns of a cancel from its ``extend`` answer (``cancelled``; the lease is still
extended) and hands the job here, on the loop, once (:meth:`Cancels.requested`). Rules (each
one tested in ``tests/control/test_cancel_worker.py``):

- a job claimed but not started yet is not started: its outcome is a ``fail`` at once;
- a running handler is told: ``ctx.cancelled`` is set with ``ctx.cancel_reason ==
  "cancelled"`` and ``ctx.cancel_message`` = the reason given; ``ctx.heartbeat()`` raises
  :class:`~emq.worker.context.Cancelled`;
- however the handler then ends (returns, raises, ``Cancelled``, ``RateLimited``), its outcome
  is a ``fail`` with no retry, which ``fail.lua`` turns into a cancelled dead job (answer
  ``cancelled``): never a completion, never a retry;
- a handler still running ``cancel_grace_ms`` after it was told is abandoned: the same
  ``fail`` is sent now; an async handler's task is cancelled and its slot freed, so the
  worker takes new work; a sync handler's thread cannot be killed, so, as for a timeout
  (:mod:`.execute`), it keeps its slot until it returns, and its result is ignored.

A handler that returned before its worker learned of the cancel (its ``complete`` already
queued or sent) is completed: the cancel came too late (``docs/control.md``).

:class:`Cancels` joins the story's ``on_outcome`` hooks (:mod:`.hooks`) while it holds a
cancelled job, and leaves them once it holds none: a worker that never sees a cancel pays
nothing per job for it.
"""

from __future__ import annotations

import asyncio
import logging

from .execute import Executor
from .heartbeat import Lease
from .held import Held
from .hooks import Hook, Hooks
from .log import event
from .options import WorkerStats
from .outcome import Discard, Fail, Outcome
from .phase import GIVING_BACK, READY, RUNNING

CANCELLED = Fail("cancelled: the handler was stopped", retry=False, why="cancelled")
ABANDONED = Fail("cancelled: the handler ran past cancel_grace_ms", retry=False, why="cancelled")


class Cancels(Hook):
    """The cancelled jobs a worker still holds, each with its grace timer. As an
    ``on_outcome`` hook it makes sure a cancelled job is never completed or retried."""

    def __init__(
        self,
        *,
        jobs: Executor,
        hooks: Hooks,
        grace_ms: int,
        stats: WorkerStats,
        log: logging.Logger,
    ) -> None:
        self._jobs = jobs
        self._hooks = hooks
        self._grace_s = grace_ms / 1000
        self._stats = stats
        self._log = log
        self.jobs: dict[Held, asyncio.TimerHandle | None] = {}  # told, outcome not decided

    def requested(self, lease: Lease, message: str) -> None:
        """The heartbeat's extend answered ``cancelled`` for ``lease`` (on the loop)."""
        job = lease
        if not isinstance(job, Held) or job in self.jobs:
            return
        phase = job.phase
        if phase not in (READY, RUNNING, GIVING_BACK) or job not in self._jobs.renewed:
            return  # decided, or no longer renewed: its ack (or the refusal) rules
        event(self._log, "info", "job cancelled: stopping it", "cancel_requested",
              queue=job.queue, job=job.id, token=job.token, reason=message)  # fmt: skip
        job.ctx.cancel("cancelled", message)
        if phase is GIVING_BACK:
            return  # given back meanwhile (the drain): delay.lua ends it, cancelled
        if phase is READY:  # claimed ahead, not started: it never runs
            self._jobs.cancel_ready(job, CANCELLED)
            return
        loop = asyncio.get_running_loop()
        self.jobs[job] = loop.call_later(self._grace_s, self._abandon, job)
        self._hooks.join(self)

    def on_outcome(self, job: Held, outcome: Outcome) -> Outcome:
        """What to send for ``job``: a handler that ended after it was told is failed with no
        retry (fail.lua makes it dead, cancelled), whatever it returned or raised."""
        if job not in self.jobs:
            return outcome
        timer = self._pop(job)
        if timer is not None:
            timer.cancel()
        if isinstance(outcome, Discard) or outcome.why == "cancelled":
            return outcome
        return CANCELLED

    def _pop(self, job: Held) -> asyncio.TimerHandle | None:
        timer = self.jobs.pop(job, None)
        if not self.jobs:
            self._hooks.leave(self)
        return timer

    def _abandon(self, job: Held) -> None:
        """The grace period passed and the handler still runs: send its outcome now."""
        self._pop(job)
        if job.phase is not RUNNING:
            return
        self._stats.cancel_abandoned += 1
        event(self._log, "warning", "cancelled handler still running after cancel_grace_ms: "
              "abandoned", "cancel_abandoned", queue=job.queue, job=job.id,
              token=job.token)  # fmt: skip
        self._jobs.decide(job, ABANDONED)
        self._jobs.stop_task(job)  # its slot frees once the task unwinds

    def close(self) -> None:
        for timer in self.jobs.values():
            if timer is not None:
                timer.cancel()
        self.jobs.clear()
        self._hooks.leave(self)
