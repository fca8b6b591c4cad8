"""Results and completed-job retention, I/O-free: the ``complete`` call that keeps rows
(``complete.lua`` with ``keep = 1``), the ``await_result`` call behind ``Queue.result``, and
what a waiter's answer means.

Guarantees (docs/control.md, "Results and completed-job retention"):

- a result is kept in the same step as the completion (one script call), never before the
  job completed and never for a job whose completion was refused (a stale lease);
- a kept result lives ``result_ttl_ms`` after the completion (server clock), or longer while
  ``keep_completed`` keeps the job: the row's lifetime is the larger of the two, and the
  retention trim never cuts a result short of its own ``result_ttl_ms``;
- ``Queue.result`` waits without polling: one script checks the row and counts the caller
  as a waiter in one step, then it blocks on ``done:<id>``, which every script that ends the
  job fills (``tell_waiters``); it blocks in slices of :data:`SLICE_S`, re-checking the row
  after each, so a notification lost to a server restart delays it by a slice at most.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidOption, InvalidPayload, JobCancelled, JobDead, JobNotFound
from ..model.ids import check_id
from ..model.payloads import encode_payload
from .call import Arg, Call
from .jobs import QueueCore

SLICE_S = 2.0  # the longest one BLPOP of a result() waiter blocks before it re-checks the row
WAITING = "waiting"
NOT_KEPT = (
    "completed, but its result was not kept: set QueueOptions(result_ttl_ms=...) or the "
    "handler's result_ttl_ms to keep results"
)


def encode_result(value: Any, limit: int) -> str:
    """A handler's return value as JSON text, or :class:`InvalidPayload` saying what to fix
    (a payload's rules, :func:`emq.model.payloads.encode_payload`, except that a dict key may
    be a number, a bool or None, written as a string, unless two collide)."""
    try:
        return encode_payload(value, limit, any_keys=True)
    except InvalidPayload as exc:
        message = str(exc).replace("payload", "result", 1).replace("a result", "the result")
        raise InvalidPayload(f"the handler's return value is not kept: {message}") from None


def await_result(core: QueueCore, job_id: str, *, register: bool) -> Call[list[Any]]:
    """Look at a job for ``result()``: its outcome if it ended, else ``[WAITING, state]``
    with the caller counted as a waiter (``register``; a re-check counts it only if the row
    shows none, as after a restart that lost the count)."""
    k, job_id = core.keys, check_id(job_id)
    args: list[Arg] = [1 if register else 0]
    return Call("await_result", [k.job(job_id), k.done(job_id), k.meta], args, list)


def check_timeout(timeout_s: float | None) -> float | None:
    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s < 0:
        raise InvalidOption(f"timeout_s must be None or seconds >= 0, got {timeout_s!r}")
    return float(timeout_s)


def outcome(job_id: str, reply: Sequence[Any]) -> Any:
    """The result in an ``await_result`` reply or a waiter's message, or the error it
    means: :class:`JobDead`, :class:`JobCancelled` or :class:`JobNotFound`."""
    kind = reply[0]
    value = reply[1] if len(reply) > 1 else ""
    if kind == "told":  # a message pushed by tell_waiters: 'outcome\nvalue'
        kind, _, value = str(value).partition("\n")
    if kind == "completed":
        if not value:
            raise JobNotFound(f"job {job_id} {NOT_KEPT}")
        return json.loads(value)
    if kind in ("dead", "cancelled"):
        cls = JobCancelled if kind == "cancelled" else JobDead
        first = value.partition("\n")[0]
        raise cls(f"job {job_id} ended {kind}: {first}", value)
    if kind == "removed":
        raise JobNotFound(f"job {job_id} was removed before it ended")
    if kind == "missing":
        raise JobNotFound(
            f"job {job_id} not found: never enqueued, removed, expired, or {NOT_KEPT}"
        )
    raise AssertionError(f"unexpected await_result reply {reply!r}")  # pragma: no cover
