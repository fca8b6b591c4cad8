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
from collections.abc import Iterable, Sequence
from typing import Any

from .calls import MAX_BATCH, Arg, Call, QueueCore, _pairs, decode_answers
from .checks import check_int
from .config import MAX_KEEP_MS
from .errors import InvalidOption, InvalidPayload, JobCancelled, JobDead, JobNotFound
from .ids import check_id
from .payloads import encode_payload
from .records import Answer

SLICE_S = 2.0  # the longest one BLPOP of a result() waiter blocks before it re-checks the row
WAITING = "waiting"
NOT_KEPT = (
    "completed, but its result was not kept: set QueueOptions(result_ttl_ms=...) or the "
    "handler's result_ttl_ms to keep results"
)


def encode_result(value: Any, limit: int) -> str:
    """A handler's return value as JSON text, or :class:`InvalidPayload` saying what to fix
    (the same rules as a payload's, :func:`emq.payloads.encode_payload`)."""
    try:
        return encode_payload(value, limit)
    except InvalidPayload as exc:
        message = str(exc).replace("payload", "result", 1).replace("a result", "the result")
        raise InvalidPayload(f"the handler's return value is not kept: {message}") from None


def complete(
    core: QueueCore, items: Iterable[tuple[str, int, str | None, int]]
) -> Call[list[Answer]]:
    """Complete jobs keeping what the queue and each item ask for: per item ``(id, token,
    result JSON text or None, result_ttl_ms)``; with ``result_ttl_ms`` > 0 the result is
    kept (``None`` keeps ``null``), and the queue's ``keep_completed`` keeps the row. A
    flow's child keeps a result given for its parent whatever its ttl (docs/flows.md). Per
    job: ``COMPLETED``, ``LOST`` or ``GONE``."""
    k = core.keys
    age, count = core.options.keep_completed or (0, 0)
    args: list[Arg] = [k.prefix, core._maxlen, 1, age, count]
    n = 0
    for job_id, token, result, ttl in items:
        args += _pairs([(job_id, token)])
        if ttl.__class__ is not int or not 0 <= ttl <= MAX_KEEP_MS:
            check_int("result_ttl_ms", ttl, 0, MAX_KEEP_MS, "ms")
        # with ttl 0 a given result is still sent: a flow's parent keeps its child's
        args += ["null" if result is None else result, ttl] if ttl else [result or "", 0]
        n += 1
    if n == 0:
        raise InvalidOption("complete needs at least one job")
    if n > MAX_BATCH:
        raise InvalidOption(f"at most {MAX_BATCH} jobs per call")
    keys = [k.active, k.metrics, k.events, k.meta, k.completed]
    return Call("complete", keys, args, decode_answers)


def await_result(core: QueueCore, job_id: str, *, register: bool) -> Call[list[Any]]:
    """Look at a job for ``result()``: its outcome if it ended, else ``[WAITING, state]``
    with the caller counted as a waiter (``register``; a re-check counts it only if the row
    shows none, as after a restart that lost the count)."""
    k, job_id = core.keys, check_id(job_id)
    args: list[Arg] = [1 if register else 0]
    return Call("await_result", [k.job(job_id), k.done(job_id)], args, list)


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
