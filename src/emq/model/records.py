"""What callers get back from a queue: admitted ids, leased jobs, sweep results, job rows.

Plain, immutable values; :mod:`emq.calls.jobs` builds them from script replies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EnqueuedId(str):
    """A job id returned by enqueue; ``created`` is False when nothing was written because
    the id (or dedup key) already existed with the same contents."""

    created: bool

    def __new__(cls, value: str, created: bool = True) -> EnqueuedId:
        obj = super().__new__(cls, value)
        obj.created = created
        return obj


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job to enqueue, validated on construction. ``lifo``: the job goes ahead of the jobs
    waiting at its priority, the newest lifo job first (docs/control.md). ``queue`` and
    ``on_failure`` are for a job of a flow (``enqueue_flow``, docs/flows.md): the queue it
    lives in (None: its parent's), and what its death does to its parent,
    ``"fail_parent"`` (the default), ``"ignore"`` or ``"continue"``."""

    name: str
    payload: Any = None
    delay_ms: int = 0
    priority: int = 0
    max_attempts: int | None = None
    key: str | None = None
    id: str | None = None
    lane: str | None = None
    lifo: bool = False
    queue: str | None = None
    on_failure: str = "fail_parent"


@dataclass(frozen=True, slots=True)
class Claimed:
    """A leased job. ``token`` fences every finishing call; ``deadline_ms`` is on the server
    clock; ``lane`` is None for the default lane; ``parent`` is a flow's child's parent
    (docs/flows.md; ``<id>@<queue>`` when it is in another queue), None for any other job;
    ``trace``: the W3C traceparent its producer's span stored (docs/observability.md)."""

    id: str
    token: int
    name: str
    payload: Any
    attempts: int
    stalled: int
    deadline_ms: int
    lane: str | None = None
    parent: str | None = None  # a flow's child: its parent (its result is sent for it)
    trace: str | None = None  # the producer span's W3C traceparent (emq.observe.otel), if stored


@dataclass(frozen=True, slots=True)
class UnreadablePayload:
    """The payload of a claimed job whose stored text is not JSON (a row edited by hand, a
    partial restore): the worker fails the job (``bad_payload``, no retry: it cannot heal)
    instead of calling its handler, and goes on claiming. ``text``: the start of the stored
    text; ``why``: the decoder's message."""

    text: str
    why: str


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one sweep did: ``recovered`` back to pending, ``dead`` dead-lettered, ``missing``
    ids found in ``active`` without their row (evicted or deleted by hand: dropped from the set,
    counted in the ``missing`` metric, a ``missing`` event each; never silently), and
    ``cancelled`` ids whose lapsed lease was of a job with a cancel requested: dead, cancelled,
    never recovered (not counted as a stall)."""

    recovered: list[str] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)


class Claims(list[Claimed]):
    """The jobs one claim leased, plus ``missing``: ids the claim found in ``pending`` or
    ``schedule`` without their row (dropped from the set, counted in the ``missing`` metric and
    emitted as a ``missing`` event each; the worker logs them), and ``retry_in_ms``: when fewer
    jobs than asked were leased because of a rate limit or a hold, how long until the soonest
    one ends (0 otherwise), and ``blocked``: a concurrency limit (the queue's or a lane's)
    held jobs back, so the queue is not empty; a finishing job wakes parked workers."""

    def __init__(
        self, jobs: list[Claimed], missing: list[str], retry_in_ms: int = 0, blocked: bool = False
    ) -> None:
        super().__init__(jobs)
        self.missing = missing
        self.retry_in_ms = retry_in_ms
        self.blocked = blocked


class Answer(StrEnum):
    """The closed set of per-job answers of the finishing scripts (``ANSWER`` in
    ``lua/includes/answers.lua``). ``LOST``: the job exists but the token no longer holds its
    lease; ``GONE``: the job has no row (completed, or removed); ``CANCELLED``: the job was
    cancelled (``Queue.cancel``): it is dead with its row's ``cancelled`` set, or (extend) its
    worker should stop it."""

    COMPLETED = "completed"
    LOST = "lost"
    GONE = "gone"
    PENDING = "pending"
    SCHEDULED = "scheduled"
    DEAD = "dead"
    CANCELLED = "cancelled"


STEP_FIELD = "step:"  # a recorded durable step's row field: step:<name> (docs/steps.md)


@dataclass(frozen=True, slots=True)
class Step:
    """A durable step its job recorded (``ctx.step``, docs/steps.md): ``name``, ``result``
    (the step's return value, decoded JSON; an :class:`UnreadablePayload` if the stored
    text is damaged) and ``at_ms``, when it was recorded (server ms; 0 if damaged)."""

    name: str
    result: Any
    at_ms: int


def steps_of(fields: dict[str, str]) -> tuple[Step, ...]:
    """The steps a row records (its ``step:<name>`` fields, each ``<ms> <JSON text>``), in
    recorded order: by time, then name."""
    out = []
    for key, value in fields.items():
        if key.startswith(STEP_FIELD):
            out.append(_step(key[len(STEP_FIELD) :], value))
    out.sort(key=lambda s: (s.at_ms, s.name))
    return tuple(out)


def _step(name: str, value: str) -> Step:
    at, _, text = value.partition(" ")
    try:
        return Step(name, json.loads(text), int(at))
    except ValueError as exc:
        return Step(name, UnreadablePayload(value[:200], str(exc)), 0)


@dataclass(frozen=True, slots=True)
class Job:
    """A snapshot of a job's row. ``attempts``, ``stalled`` and ``token`` are 0 until the
    first claim (the row stores them from then on); ``created_at`` is the server-clock ms at
    which the job's id was minted (the row does not store it). ``run_at_ms``: when a job in
    the schedule (a delayed enqueue, a retry in its backoff) is due, its score there;
    ``lease_deadline_ms``: when an active job's lease lapses, its score in ``active``; both
    server-clock ms, read at the same instant as the row, None when the job is not there."""

    id: str
    state: str
    name: str
    payload: Any
    attempts: int
    stalled: int
    token: int
    priority: int
    max_attempts: int
    created_at: int
    last_error: str | None
    fields: dict[str, str]
    run_at_ms: int | None = None
    lease_deadline_ms: int | None = None

    @property
    def lane(self) -> str | None:
        """The job's lane, None for the default lane."""
        return self.fields.get("lane") or None

    @property
    def lifo(self) -> bool:
        """True for a job enqueued with ``lifo=True``."""
        return self.fields.get("lifo") == "1"

    @property
    def worker(self) -> str | None:
        """The registry id of the worker that claimed its latest attempt (``emq workers``);
        for an active job, the worker holding its lease. None if no worker claimed it."""
        return self.fields.get("worker") or None

    @property
    def claimed_at(self) -> int | None:
        """When its latest attempt was claimed (server ms), read from its token, which the
        claim derives from the server clock in us (later only if that clock stepped back);
        None before its first claim."""
        return self.token // 1000 if self.token else None

    @property
    def died_at(self) -> int | None:
        """When a dead job died (server ms); None for any other job."""
        at = self.fields.get("died_at")
        return None if at is None else int(at)

    @property
    def progress(self) -> Any:
        """The latest progress its handler reported (decoded JSON; ``ctx.progress``), None
        if none was; at most one ``progress_interval_ms`` behind the handler."""
        text = self.fields.get("progress")
        return None if text is None else json.loads(text)

    @property
    def progress_at(self) -> int | None:
        """When the latest progress was stored (server ms); None if none was."""
        at = self.fields.get("progress_at")
        return None if at is None else int(at)

    @property
    def cancelled(self) -> str | None:
        """The reason a cancelled job was given (may be ""), None unless it was cancelled;
        a cancelled job is ``dead`` (docs/control.md, Cancellation)."""
        return self.fields.get("cancelled")

    @property
    def cancel_requested(self) -> str | None:
        """The reason of a cancel asked for while the job is leased (its worker has not
        reacted yet), None if none is pending."""
        return self.fields.get("cancel")

    @property
    def result(self) -> Any:
        """A kept completed job's return value (decoded JSON); None if none was kept."""
        text = self.fields.get("result")
        return None if text is None else json.loads(text)

    @property
    def completed_at(self) -> int | None:
        """When a kept completed job completed (server ms); None for any other job."""
        at = self.fields.get("completed_at")
        return None if at is None else int(at)

    @property
    def steps(self) -> tuple[Step, ...]:
        """The durable steps the job recorded (``ctx.step``), in recorded order (by time,
        then name); empty if none (docs/steps.md)."""
        return steps_of(self.fields)
