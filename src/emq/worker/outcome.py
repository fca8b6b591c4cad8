"""What an attempt ends in: a small union, each member knowing its ack call. The rules
(each one tested):

- the handler returned: :class:`Complete`, sent with ``complete``, carrying its return
  value's JSON text when its handler or its queue keeps results (``result_ttl_ms``); a value
  that is not JSON then fails the attempt with no retry (``bad_result``: the handler ran, its
  result cannot be kept); a flow's child's carries it always, for its parent only
  (:class:`ChildComplete`, docs/flows.md);
- it raised :class:`~emq.worker.Permanent`: :class:`Fail` with no retry (straight to
  ``dead``);
- it raised :class:`~emq.RateLimited`: :class:`Hold`, sent with ``delay``: back to pending
  without spending an attempt, holding its lane (or the lane named, or the whole queue) for
  ``retry_in_ms``, fleet-wide;
- it raised anything else, or ran past its timeout: :class:`Fail` with a retry while the
  handler's ``max_attempts`` allows it (the row's own ``max_attempts`` is enforced by
  ``fail.lua``);
- it raised :class:`~emq.Sleeping` (``ctx.sleep(ms)``): :class:`Sleep`, sent with
  ``delay``: to the schedule for ``ms`` without spending an attempt, its recorded steps kept
  in its row (docs/steps.md);
- its lease was lost meanwhile: :class:`Discard`; nothing is sent, its result is never
  recorded (G4);
- the worker is shutting down past its grace period: :class:`Fail` with a retry (the attempt
  ran, so it counts); a cancelled job's (:mod:`.cancels`): :class:`Fail` with no retry, which
  ``fail.lua`` makes dead, cancelled.

An outcome queued for the server is an :class:`Ack`; the ack buffer (:mod:`.acks`) sends the
acks of one member and one queue together through that member's :meth:`~Complete.call`, and
when a re-sent call was refused reads the job's row and asks the member what it shows
(:meth:`~Complete.applied`). ``kind`` names a member in logs (``lease_lost``'s ``via``,
``uncertain_ack``'s ``kind``) and nowhere else; ``label`` names it in metrics and spans.
"""

from __future__ import annotations

import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeVar

from ..model.config import Backoff
from ..model.records import Answer
from ..queue._async.queue import AsyncQueue
from .heartbeat import Lease

ERROR_TAIL = 2_000
Call = Callable[[], Awaitable[list[Answer]]]
M = TypeVar("M", covariant=True)  # a member of the union
Row = str | None  # a field of the job's row, as read back (None: not there)
_FAILED = {
    "error": "failed",
    "permanent": "failed",
    "bad_result": "failed",
    "bad_payload": "failed",
}
_FAILED["ok"] = "completed"


@dataclass(eq=False, slots=True)
class Ack:
    """An outcome queued for its ack: the job's queue, its lease, and what to tell."""

    queue: AsyncQueue
    lease: Lease
    outcome: Sent


class Of(Protocol[M]):
    """An :class:`Ack` whose outcome is of one member (the acks one call sends)."""

    @property
    def lease(self) -> Lease: ...

    @property
    def outcome(self) -> M: ...


def _cancelled(token: Row, cancelled: Row, mine: str) -> bool:
    """The row of a cancelled job that this attempt's fail or hold ended (dead, cancelled)."""
    return cancelled is not None and token == mine


@dataclass(frozen=True, slots=True)
class Complete:
    """The handler returned; ``result`` (JSON text) is kept ``result_ttl_ms`` when kept."""

    result: str | None = None
    result_ttl_ms: int = 0
    kind: ClassVar[str] = "complete"
    where: ClassVar[str] = "complete"  # the component a failed call is logged under
    why: ClassVar[str] = "ok"
    error: ClassVar[str] = ""
    label: ClassVar[str] = "completed"

    @staticmethod
    def call(q: AsyncQueue, acks: Sequence[Of[Complete]], keeps: bool) -> Call:
        """Plain (pairs only) unless the queue keeps results or completed jobs or an outcome
        carries a result to keep; then each job keeps what its own outcome says (a handler's
        ``result_ttl_ms=0`` keeps no result on a queue that does). ``keeps`` False: nothing
        in this worker keeps anything, so no outcome is looked at."""
        options = q.core.options
        if keeps and (
            options.keep_completed
            or options.result_ttl_ms
            or any(a.outcome.result_ttl_ms for a in acks)
        ):
            kept = [
                (a.lease.id, a.lease.token, a.outcome.result, a.outcome.result_ttl_ms) for a in acks
            ]
            return lambda: q.complete_results(kept)
        pairs = [(a.lease.id, a.lease.token) for a in acks]
        return lambda: q.complete_many(pairs)

    @staticmethod
    def applied(token: Row, state: Row, cancelled: Row, mine: str) -> Answer | None:
        """What the row shows of a completion whose re-send was refused: deleted, or kept
        completed by this attempt (results, ``keep_completed``), means it was applied."""
        if token is None or (state == "completed" and token == mine):
            return Answer.COMPLETED
        return None


@dataclass(frozen=True, slots=True)
class ChildComplete:
    """A flow's child returned: ``result`` (JSON text) is kept for its parent only."""

    result: str
    kind: ClassVar[str] = "child"
    where: ClassVar[str] = "complete"
    why: ClassVar[str] = "ok"
    error: ClassVar[str] = ""
    label: ClassVar[str] = "completed"

    @staticmethod
    def call(q: AsyncQueue, acks: Sequence[Of[ChildComplete]], keeps: bool) -> Call:
        kids = [(a.lease.id, a.lease.token, a.outcome.result, 0) for a in acks]
        return lambda: q.complete_results(kids)

    applied = Complete.applied


@dataclass(frozen=True, slots=True)
class Fail:
    """The attempt failed: retried after ``backoff`` while ``retry``, else dead. ``why``:
    ``error``, ``permanent``, ``timeout``, ``shutdown``, ``no_handler``, ``bad_result``,
    ``bad_payload`` or ``cancelled``."""

    error: str
    retry: bool = True
    backoff: Backoff | None = None
    why: str = ""
    kind: ClassVar[str] = "fail"
    where: ClassVar[str] = "fail"

    @property
    def label(self) -> str:
        """``failed``, ``timeout``, ``cancelled``, ``shutdown`` or ``no_handler``."""
        if self.error.startswith("cancelled"):
            return "cancelled"
        return _FAILED.get(self.why, self.why or "failed")

    @staticmethod
    def call(q: AsyncQueue, acks: Sequence[Of[Fail]], keeps: bool) -> Call:
        items = [
            (a.lease.id, a.lease.token, a.outcome.error, a.outcome.retry, a.outcome.backoff)
            for a in acks
        ]
        return lambda: q.fail_many(items)

    @staticmethod
    def applied(token: Row, state: Row, cancelled: Row, mine: str) -> Answer | None:
        """The row still carrying this attempt's token in ``schedule`` or ``dead`` means the
        fail was applied (a cancelled job's: dead, cancelled)."""
        if _cancelled(token, cancelled, mine):
            return Answer.CANCELLED
        if token == mine and state in ("scheduled", "dead"):
            return Answer.SCHEDULED if state == "scheduled" else Answer.DEAD
        return None


@dataclass(frozen=True, slots=True)
class Hold:
    """The handler raised :class:`~emq.RateLimited`: back to pending, no attempt spent, and
    ``hold`` (a lane, or ``"*"``: the queue) held for ``hold_ms``, fleet-wide."""

    error: str
    hold_ms: int
    hold: str
    kind: ClassVar[str] = "hold"
    where: ClassVar[str] = "hold"
    why: ClassVar[str] = "rate_limited"
    label: ClassVar[str] = "rate_limited"

    @staticmethod
    def call(q: AsyncQueue, acks: Sequence[Of[Hold]], keeps: bool) -> Call:
        holds = [(a.lease.id, a.lease.token, 0, a.outcome.hold_ms, a.outcome.hold) for a in acks]
        return lambda: q.delay_many(holds)

    @staticmethod
    def applied(token: Row, state: Row, cancelled: Row, mine: str) -> Answer | None:
        if _cancelled(token, cancelled, mine):
            return Answer.CANCELLED
        if token == mine and state == "pending":
            return Answer.PENDING
        return None


@dataclass(frozen=True, slots=True)
class Sleep:
    """The handler called ``ctx.sleep(ms)`` (raised :class:`~emq.Sleeping`): given back to
    the schedule for ``ms`` (server clock), no attempt spent, its recorded steps kept; it
    runs again then (docs/steps.md)."""

    ms: int
    kind: ClassVar[str] = "sleep"
    where: ClassVar[str] = "sleep"
    why: ClassVar[str] = "sleep"
    error: ClassVar[str] = ""
    label: ClassVar[str] = "sleeping"

    @staticmethod
    def call(q: AsyncQueue, acks: Sequence[Of[Sleep]], keeps: bool) -> Call:
        items = [(a.lease.id, a.lease.token, a.outcome.ms) for a in acks]
        return lambda: q.delay_many(items)

    @staticmethod
    def applied(token: Row, state: Row, cancelled: Row, mine: str) -> Answer | None:
        """The row still carrying this attempt's token in ``schedule`` (or ``pending``, once
        due and promoted) means the give-back was applied (a cancelled job's: dead,
        cancelled)."""
        if _cancelled(token, cancelled, mine):
            return Answer.CANCELLED
        if token == mine and state in ("scheduled", "pending"):
            return Answer.SCHEDULED
        return None


@dataclass(frozen=True, slots=True)
class Discard:
    """The lease was lost (refused by the heartbeat or an ack): nothing is sent (G4)."""

    kind: ClassVar[str] = "discard"
    why: ClassVar[str] = "lease_lost"
    error: ClassVar[str] = ""
    label: ClassVar[str] = "lease_lost"


Sent = Complete | ChildComplete | Fail | Hold | Sleep
"""The outcomes that are sent to the server (as an :class:`Ack`)."""
Outcome = Sent | Discard

COMPLETE = Complete()
DISCARD = Discard()


def describe(exc: BaseException) -> str:
    """The error stored in ``last_error``: the exception line first, then the traceback tail.

    An exception of one of emq's public classes is named as a user imports it (``Permanent:
    ...``, ``LeaseLost: ...``), not by the module that defines it; any other class is named
    as Python names it (a user's own ``myapp.tasks.PaymentDeclined: ...``, ``ValueError:
    ...``)."""
    public = _public_names(exc)
    head = _renamed("".join(traceback.format_exception_only(exc)).strip(), public)
    tail = _renamed("".join(traceback.format_exception(exc)).strip(), public)
    if len(tail) > ERROR_TAIL:
        tail = "..." + tail[-ERROR_TAIL:]
    return f"{head}\n{tail}" if tail != head else head


def _public_names(exc: BaseException) -> dict[str, str]:
    """``module.Class`` -> ``Class`` for each exception in ``exc``'s chain whose class ``emq``
    exports under that name (``emq.Permanent`` is ``emq.worker.options.Permanent``)."""
    import emq

    names: dict[str, str] = {}
    seen: BaseException | None = exc
    for _ in range(10):  # a chain is short; a cycle ends here
        if seen is None:
            break
        cls, name = type(seen), type(seen).__name__
        if name in emq.__all__ and getattr(emq, name, None) is cls and cls.__module__ != "emq":
            names[f"{cls.__module__}.{cls.__qualname__}"] = cls.__qualname__
        seen = seen.__cause__ or seen.__context__
    return names


def _renamed(text: str, names: dict[str, str]) -> str:
    """``text`` with each line that starts with a name of ``names`` (an exception's line in a
    traceback: ``emq.worker.options.Permanent: ...``) starting with its short name."""
    if not names:
        return text
    lines = text.split("\n")
    for i, ln in enumerate(lines):
        for full, short in names.items():
            if ln == full or ln.startswith(f"{full}:"):
                lines[i] = short + ln[len(full) :]
    return "\n".join(lines)


def failed(
    attempts: int,
    limit: int | None,
    backoff: Backoff | None,
    error: str,
    why: str,
    *,
    retry: bool = True,
) -> Fail:
    """A failed attempt, retried unless ``retry`` is False or ``attempts`` reached ``limit``
    (the handler's ``max_attempts``, or the worker's; the row's own is enforced by fail.lua)."""
    if limit is not None and attempts >= limit:
        retry = False
    return Fail(error, retry, backoff, why)
