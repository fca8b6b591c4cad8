"""Control of one job after it was enqueued, I/O-free.

**Cancellation**: the builder of ``cancel.lua`` and what its answer means.

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

**Edits** of one waiting job, and a running job's progress.

Each edit is one script (``lua/promote_job.lua``, ``reschedule.lua``, ``set_priority.lua``,
``update_payload.lua``) applied only while the job is pending or scheduled: any other state
(active, dead, a kept completed row) is refused with :class:`~emq.errors.NotWaiting` naming
the state, a missing job with :class:`~emq.errors.JobNotFound`, and nothing is written.
Every input is checked here first (a bad id, priority, delay or payload raises an
:class:`~emq.errors.InvalidInput` subclass before a key is built).

``progress.lua`` stores the latest progress of running jobs, fenced by their lease tokens;
the worker's flusher (:mod:`emq.worker.progress`) is its one sender. docs/control.md states
what each does in each state.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from ..errors import InvalidOption, InvalidPayload
from ..model.checks import check_int, shown
from ..model.config import MAX_DELAY_MS
from ..model.ids import check_id
from ..model.payloads import encode_payload
from ..model.records import Answer
from .call import MAX_BATCH, PRIORITY_RANGE, Arg, Call, check_text
from .jobs import QueueCore

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
    that encodes as UTF-8 and holds no record or unit separator, or
    :class:`~emq.errors.InvalidOption` saying what to fix."""
    if not isinstance(reason, str):
        raise InvalidOption(f"reason must be a string (may be empty), got {shown(reason)}")
    if "\x1e" in reason or "\x1f" in reason:
        raise InvalidOption(
            "reason must not hold the record or unit separator (U+001E, U+001F): they join "
            "the events of a stream entry"
        )
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


PROGRESS_MAX_BYTES = 65_536  # a progress value's JSON text, at most (it is written on every send)

_ANSWERS = {a.value: a for a in Answer}


def promote(core: QueueCore, job_id: str) -> Call[bool]:
    """A scheduled job to pending now: True if moved, False if it was pending already."""
    k = core.keys
    keys = [k.schedule, k.pending, k.events, k.wake, k.meta]
    args: list[Arg] = [k.prefix, core.options.events_maxlen, check_id(job_id)]
    return Call("promote_job", keys, args, lambda r: r == 1)


def reschedule(core: QueueCore, job_id: str, delay_ms: int) -> Call[str]:
    """Pending or scheduled -> scheduled at server now + ``delay_ms`` (0: pending now);
    returns ``"pending"`` or ``"scheduled"``."""
    job_id = check_id(job_id)
    check_int("delay_ms", delay_ms, 0, MAX_DELAY_MS, "ms")
    k = core.keys
    keys = [k.pending, k.schedule, k.events, k.wake, k.meta]
    args: list[Arg] = [k.prefix, core.options.events_maxlen, job_id, delay_ms]
    return Call("reschedule", keys, args, str)


def set_priority(core: QueueCore, job_id: str, priority: int) -> Call[str]:
    """A waiting job's priority (lower runs first); returns where it is."""
    job_id = check_id(job_id)
    check_int("priority", priority, *PRIORITY_RANGE)
    k = core.keys
    keys = [k.pending, k.schedule, k.events, k.meta]
    args: list[Arg] = [k.prefix, core.options.events_maxlen, job_id, priority]
    return Call("set_priority", keys, args, str)


def update_payload(core: QueueCore, job_id: str, payload: Any) -> Call[str]:
    """A waiting job's payload, checked as an enqueue's (JSON, ``max_payload_bytes``);
    returns where the job is."""
    job_id = check_id(job_id)
    text = encode_payload(payload, core.options.max_payload_bytes)
    k = core.keys
    keys = [k.pending, k.schedule, k.events, k.meta]
    args: list[Arg] = [k.prefix, core.options.events_maxlen, job_id, text]
    return Call("update_payload", keys, args, str)


def encode_progress(value: Any) -> str:
    """A progress value's JSON text (at most :data:`PROGRESS_MAX_BYTES`), or
    :class:`~emq.errors.InvalidPayload` saying what to fix."""
    try:
        return encode_payload(value, PROGRESS_MAX_BYTES, any_keys=True)
    except InvalidPayload as exc:
        message = str(exc).replace("payload", "progress value", 1)
        message = message.replace("raise QueueOptions.max_payload_bytes or ", "report less: ")
        raise InvalidPayload(message) from None


def progress(core: QueueCore, items: Iterable[tuple[str, int, str]]) -> Call[list[int | Answer]]:
    """Store the latest progress (JSON text, from :func:`encode_progress`) of held jobs:
    per job the time it was stored (server ms), or ``Answer.LOST`` / ``Answer.GONE``."""
    k = core.keys
    args: list[Arg] = [k.prefix, core.options.events_maxlen]
    for job_id, token, text in items:
        args += [check_id(job_id), check_int("token", token, 1, 2**62), text]
    if len(args) == 2:
        raise InvalidOption("progress needs at least one (job_id, token, value)")
    if len(args) > 2 + 3 * MAX_BATCH:
        raise InvalidOption(f"at most {MAX_BATCH} jobs per progress call")
    return Call("progress", [k.active, k.events], args, _decode_stored)


def _decode_stored(reply: list[Any]) -> list[int | Answer]:
    return [x if x.__class__ is int else _ANSWERS[x] for x in reply]
