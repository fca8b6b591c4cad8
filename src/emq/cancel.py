"""Cancellation: the I/O-free builder of ``cancel.lua`` and what its answer means.

``Queue.cancel(job_id, reason)`` is one script call; what it does depends on where the job is
at that instant (docs/control.md, Cancellation):

- waiting (any lane) or scheduled: it never runs. It moves to ``dead`` in the same step, with
  the row's ``cancelled`` field set to the reason: :attr:`Cancel.CANCELLED`;
- leased: the row's ``cancel`` field is set and its worker is told by the answer to its next
  heartbeat; the worker stops the handler (``ctx.cancelled``, ``cancel_reason == "cancelled"``)
  and fails it, which ``fail.lua`` turns into a cancelled dead job: :attr:`Cancel.REQUESTED`.
  A handler that completes before its worker learned of the cancel is completed (too late);
- already dead: unchanged, :attr:`Cancel.DEAD` (:attr:`Cancel.CANCELLED` if a cancel put it
  there); a completed row kept by results or retention: unchanged, :attr:`Cancel.COMPLETED`;
- no row: :class:`~emq.errors.JobNotFound`.

Bad input (an id that is not an emq id, a reason that is not a string of at most
:data:`MAX_REASON` characters) is refused before anything is sent.
"""

from __future__ import annotations

from enum import StrEnum

from .calls import Call, QueueCore, check_text
from .checks import shown
from .errors import InvalidOption
from .ids import check_id

MAX_REASON = 1_000  # characters of a cancel's reason


class Cancel(StrEnum):
    """What :meth:`emq.Queue.cancel` did (the values are ``cancel.lua``'s answers)."""

    CANCELLED = "cancelled"  # it will never run: it is dead, cancelled (now or before)
    REQUESTED = "requested"  # it is running: its worker is told on its next heartbeat
    DEAD = "dead"  # it was already dead (not by a cancel): unchanged
    COMPLETED = "completed"  # it already completed (a kept row): unchanged


_CANCELS = {c.value: c for c in Cancel}


def check_reason(reason: object) -> str:
    """A cancel's reason: a string (may be empty) of at most :data:`MAX_REASON` characters
    that encodes as UTF-8, or :class:`~emq.errors.InvalidOption` saying what to fix."""
    if not isinstance(reason, str):
        raise InvalidOption(f"reason must be a string (may be empty), got {shown(reason)}")
    return check_text("reason", reason, MAX_REASON) if reason else reason


def cancel_call(core: QueueCore, job_id: str, reason: str = "") -> Call[Cancel]:
    """The ``cancel`` call of one job (validated first; nothing is built for bad input)."""
    checked = check_id(job_id)
    text = check_reason(reason)
    k = core.keys
    keys = [k.pending, k.active, k.schedule, k.dead, k.metrics, k.events, k.meta]
    return Call("cancel", keys, [k.prefix, core._maxlen, checked, text], _CANCELS.__getitem__)


def cancel_error(reason: str) -> str:
    """The ``last_error`` a cancelled job gets (as ``cancel.lua`` and ``fail.lua`` write it)."""
    return f"cancelled: {reason}" if reason else "cancelled"
