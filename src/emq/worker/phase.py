"""The phase of a job a worker holds, and its legal arrows (docs/worker.md#a-jobs-story).

Every job a worker has claimed is in exactly one phase, from its claim until its ack (or
give-back) has been answered::

    READY --start--> RUNNING --decide--> DECIDED --acked--> ACKED
      |                 |
      |                 +--drop--> DROPPED          (its lease was lost while it ran)
      +--decide_unstarted--> DECIDED                (cancelled before it started)
      +--drop_unstarted--> DROPPED                  (its lease was lost before it started)
      +--give_back--> GIVING_BACK --given_back--> GIVEN_BACK    (a stop hands it back)

- ``READY``: claimed and leased (prefetched, or claimed ahead), waiting for a slot.
- ``RUNNING``: its handler was started (a slot taken; a job whose name has no handler fails at
  once from here); no outcome yet.
- ``DECIDED``: its outcome is decided and queued for its ack: the handler returned or raised,
  or its attempt was cut off (timeout, shutdown, cancel grace), or it was cancelled before it
  started. Its lease is still renewed until the ack has landed.
- ``ACKED``: the server answered its ack (whatever the answer: completed, scheduled, dead,
  cancelled, pending, or lost). Not renewed any more.
- ``DROPPED``: its lease was lost (the heartbeat was refused) before an outcome was queued;
  nothing is sent for it (G4).
- ``GIVING_BACK``: a graceful stop is giving it back unstarted (``delay 0`` in flight).
- ``GIVEN_BACK``: that ``delay`` was answered (or its deadline passed).

A handler that outlives its decided attempt (a sync handler past its timeout or the grace
period: a thread cannot be killed; an async one unwinding its cancellation) is not a phase of
the job: the job's story goes on (its ack is sent and lands) while the handler still holds
its slot, and the slots count those (:attr:`~.execute.Executor.abandoned`).

Threads. Each arrow is one method of :class:`Phased`, and every call of one is made on the
event loop; the heartbeat thread only reads ``phase`` (to leave a refusal or a cancel to an
outcome already on its way). An arrow is one attribute assignment, and one attribute read is
atomic under the GIL, so the thread sees the phase before or after an arrow, never between.
The phases it acts on (:data:`UNDECIDED`) are left once and never re-entered, so a read that
is already stale when the thread acts on it can only be an ``UNDECIDED`` one: the thread
hands the refusal (or cancel) to the loop, and the loop, which reads the phase afresh, finds
the job decided and leaves it to its ack's answer. The thread never writes a phase; what it
owns is its own set of the leases it renews (:attr:`~.heartbeat.Heartbeat.held`, under its
lock), which the loop reads to learn of a refusal before the thread's report has reached it.
An arrow that its phase does not have raises :class:`PhaseError`: a bug in the worker, never
a server's answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class Phase(StrEnum):
    READY = "ready"
    RUNNING = "running"
    DECIDED = "decided"
    ACKED = "acked"
    DROPPED = "dropped"
    GIVING_BACK = "giving_back"
    GIVEN_BACK = "given_back"


# module constants: the arrows compare identities, without an enum lookup per job
READY, RUNNING, DECIDED, ACKED = Phase.READY, Phase.RUNNING, Phase.DECIDED, Phase.ACKED
DROPPED, GIVING_BACK, GIVEN_BACK = Phase.DROPPED, Phase.GIVING_BACK, Phase.GIVEN_BACK

ARROWS: Mapping[Phase, frozenset[Phase]] = {
    READY: frozenset({RUNNING, DECIDED, DROPPED, GIVING_BACK}),
    RUNNING: frozenset({DECIDED, DROPPED}),
    DECIDED: frozenset({ACKED}),
    ACKED: frozenset(),
    DROPPED: frozenset(),
    GIVING_BACK: frozenset({GIVEN_BACK}),
    GIVEN_BACK: frozenset(),
}
"""Every legal arrow, ``from -> {to, ...}``; the methods of :class:`Phased` are exactly these."""

METHODS: Mapping[str, tuple[Phase, Phase]] = {
    "start": (READY, RUNNING),
    "decide_unstarted": (READY, DECIDED),
    "drop_unstarted": (READY, DROPPED),
    "give_back": (READY, GIVING_BACK),
    "decide": (RUNNING, DECIDED),
    "drop": (RUNNING, DROPPED),
    "acked": (DECIDED, ACKED),
    "given_back": (GIVING_BACK, GIVEN_BACK),
}
"""The method of each arrow (``tests/worker/test_phase.py`` checks it against :data:`ARROWS`)."""

UNDECIDED = frozenset({READY, RUNNING})
"""The phases in which nothing is on its way to the server for a job yet: a refused lease or
a cancel is then the worker's to act on; past them, the answer of the ack (or give-back)
rules."""


class PhaseError(RuntimeError):
    """An arrow was asked of a job in a phase that does not have it: a bug in the worker."""


def _refuse(job: Phased, to: Phase) -> PhaseError:
    legal = ", ".join(sorted(ARROWS[job.phase])) or "none, it is final"
    who = f"{getattr(job, 'queue', '?')}/{getattr(job, 'id', '?')}"
    return PhaseError(
        f"internal error: job {who} cannot go {job.phase} -> {to} (from {job.phase}: {legal})"
    )


class Phased:
    """Something with a :class:`Phase`: each lease a worker holds (and so each held job).
    One method per arrow; each refuses, with :class:`PhaseError`, a phase it does not leave
    from. Called only on the event loop (see the module's docstring)."""

    __slots__ = ("phase",)
    phase: Phase

    def start(self) -> None:
        """READY -> RUNNING: a slot is taken and its handler started."""
        if self.phase is not READY:
            raise _refuse(self, RUNNING)
        self.phase = RUNNING

    def decide_unstarted(self) -> None:
        """READY -> DECIDED: cancelled before it started; it fails without running."""
        if self.phase is not READY:
            raise _refuse(self, DECIDED)
        self.phase = DECIDED

    def drop_unstarted(self) -> None:
        """READY -> DROPPED: its lease was lost before it started; it never runs here."""
        if self.phase is not READY:
            raise _refuse(self, DROPPED)
        self.phase = DROPPED

    def give_back(self) -> None:
        """READY -> GIVING_BACK: a stop gives it back unstarted (``delay 0``)."""
        if self.phase is not READY:
            raise _refuse(self, GIVING_BACK)
        self.phase = GIVING_BACK

    def decide(self) -> None:
        """RUNNING -> DECIDED: its outcome is decided and queued for its ack."""
        if self.phase is not RUNNING:
            raise _refuse(self, DECIDED)
        self.phase = DECIDED

    def drop(self) -> None:
        """RUNNING -> DROPPED: its lease was lost; its result is never sent (G4)."""
        if self.phase is not RUNNING:
            raise _refuse(self, DROPPED)
        self.phase = DROPPED

    def acked(self) -> None:
        """DECIDED -> ACKED: the server answered its ack."""
        if self.phase is not DECIDED:
            raise _refuse(self, ACKED)
        self.phase = ACKED

    def given_back(self) -> None:
        """GIVING_BACK -> GIVEN_BACK: its give-back was answered (or timed out)."""
        if self.phase is not GIVING_BACK:
            raise _refuse(self, GIVEN_BACK)
        self.phase = GIVEN_BACK
