"""Run a worker in burst mode in this process and say what became of each job it claimed.

``run_worker(worker)`` (``await arun_worker(worker)`` in async code) runs ``worker`` with
``burst=True`` until nothing is claimable and nothing is held, then returns a
:class:`WorkerRun`: job id -> :class:`JobRun`. What it reports comes from two real sources,
no mock in between:

- the queues' event streams: every transition script appends its event in the same step as
  the transition (docs/events.md), so ``outcome`` and ``attempts`` are what the server did:
  ``completed``, ``retrying`` (failed, waiting in the schedule for its backoff),
  ``dead``, ``cancelled`` (dead, cancelled), ``delayed`` (given back without spending an
  attempt: ``RateLimited``), ``stalled`` (its lease lapsed and the sweep recovered it), or
  ``claimed`` (leased when the run ended: a forced stop);
- the handlers, wrapped for the run: ``result`` is what its last attempt returned and
  ``exception`` what it raised, as Python objects (``error`` is the text the server stored).

A burst run leaves a retry whose backoff has not passed in the schedule (outcome
``retrying``); register the handler with ``backoff=Backoff.exactly(0)`` to see every
attempt in one run. Only the jobs the run claimed are reported, from the streams of the
queues the worker serves by name (not those of a partitioned queue's partitions). A
stream that holds fewer claims than the run made (events off: ``events_maxlen=0``, or
trimmed) raises :class:`~emq.errors.EmqError` rather than report less.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import EmqError, InvalidOption
from ..model.events import Event, last_id
from ..queue._async.queue import AsyncQueue
from ..server.clients import aclose_client
from ..worker import Worker, WorkerStats
from ..worker.options import Handler, HandlerSpec
from ..worker.runtime import QueueLike

ENDINGS = {
    "completed": "completed",
    "retrying": "retrying",
    "dead": "dead",
    "cancelled": "cancelled",
    "delayed": "delayed",
    "stalled": "stalled",
    "claimed": "claimed",
}
"""The events that end (or begin) an attempt -> the outcome they stand for."""


@dataclass(frozen=True, slots=True)
class JobRun:
    """What one job went through in a run. ``outcome``: see :mod:`emq.testing.runs`;
    ``attempts``: the job's attempt count at its last event (1 for one run of the handler);
    ``events``: the names of the job's events during the run, in order."""

    id: str
    queue: str
    name: str | None
    outcome: str
    attempts: int
    result: Any = None
    error: str | None = None
    exception: BaseException | None = None
    events: tuple[str, ...] = ()


class WorkerRun(Mapping[str, JobRun]):
    """Job id -> :class:`JobRun`, queue by queue in the order of each job's first event in
    the run; ``stats`` are
    the worker's counters (:class:`~emq.worker.WorkerStats`) after the run."""

    def __init__(self, jobs: dict[str, JobRun], stats: WorkerStats) -> None:
        self._jobs = jobs
        self.stats = stats

    def __getitem__(self, job_id: str) -> JobRun:
        return self._jobs[job_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def outcomes(self) -> dict[str, str]:
        """Job id -> outcome, for a one-line assert."""
        return {i: j.outcome for i, j in self._jobs.items()}

    def named(self, name: str) -> list[JobRun]:
        """The runs of the jobs named ``name``."""
        return [j for j in self._jobs.values() if j.name == name]

    def __repr__(self) -> str:
        return f"WorkerRun({self.outcomes()!r})"


@dataclass(slots=True)
class _Seen:
    """What the wrapped handlers saw of one job, from its last attempt in this process."""

    name: str
    result: Any = None
    exception: BaseException | None = None


def _wrapped(spec: HandlerSpec, seen: dict[str, _Seen]) -> HandlerSpec:
    """``spec`` with its function wrapped to note each attempt's return value or exception
    (re-raised: the worker decides the outcome as it would without the wrapper)."""

    def note(ctx: Any, result: Any = None, exc: BaseException | None = None) -> None:
        seen[ctx.id] = _Seen(ctx.name, result, exc)

    if spec.is_async:

        async def run_async(payload: Any, ctx: Any) -> Any:
            try:
                result = await spec.call(payload, ctx)
            except BaseException as exc:
                note(ctx, exc=exc)
                raise
            note(ctx, result)
            return result

        fn: Handler = functools.wraps(spec.fn)(run_async)
    else:

        def run_sync(payload: Any, ctx: Any) -> Any:
            try:
                result = spec.call(payload, ctx)
            except BaseException as exc:
                note(ctx, exc=exc)
                raise
            note(ctx, result)
            return result

        fn = functools.wraps(spec.fn)(run_sync)
    return dataclasses.replace(spec, fn=fn, takes_ctx=True)


def _worker(
    worker: Worker | Mapping[str, Handler],
    queue: QueueLike | Iterable[QueueLike] | None,
    url: str | None,
    kwargs: dict[str, Any],
) -> Worker:
    if isinstance(worker, Worker):
        if queue is not None or kwargs:
            raise InvalidOption("give either a Worker, or handlers with queue= (and url=)")
        return worker
    if not isinstance(worker, Mapping):
        raise InvalidOption(f"run_worker takes a Worker or a dict of handlers, got {worker!r}")
    if queue is None:
        raise InvalidOption("run_worker(handlers) needs queue= (a name with url=, or a Queue)")
    return Worker(queue, worker, url=url, **kwargs)


async def _positions(queues: Iterable[AsyncQueue]) -> dict[str, str]:
    """Each queue's last stream id now: the run's events are the ones above it."""
    out = {}
    for q in queues:
        out[q.name] = last_id(await q.client.xrevrange(q.core.keys.events, "+", "-", count=1))
    return out


def _story(queue: str, job: str, events: list[Event], seen: _Seen | None) -> JobRun:
    ends = [e for e in events if e.event in ENDINGS]
    last = ends[-1]
    attempts = [int(e.fields["attempts"]) for e in events if "attempts" in e.fields]
    errors = [e.fields["error"] for e in events if e.fields.get("error")]
    names = [e.fields["name"] for e in events if "name" in e.fields]
    name = seen.name if seen is not None else (names[-1] if names else None)
    outcome = ENDINGS[last.event]
    return JobRun(
        id=job,
        queue=queue,
        name=name,
        outcome=outcome,
        attempts=attempts[-1] if attempts else 0,
        result=seen.result if seen is not None and outcome == "completed" else None,
        error=errors[-1] if errors and outcome != "completed" else None,
        exception=seen.exception if seen is not None else None,
        events=tuple(e.event for e in events),
    )


async def _read(
    queues: list[AsyncQueue], start: dict[str, str], seen: dict[str, _Seen]
) -> tuple[dict[str, JobRun], int]:
    """The story of each job claimed since ``start``, and how many claims the streams hold."""
    found: dict[str, JobRun] = {}
    claims = 0
    for q in queues:
        by_job: dict[str, list[Event]] = {}
        async for e in q.events(after=start[q.name]):
            if e.job is not None:
                by_job.setdefault(e.job, []).append(e)
        for job, events in by_job.items():
            n = sum(e.event == "claimed" for e in events)
            if n:
                claims += n
                run = _story(q.name, job, events, seen.get(job))
                if run.name is None and (row := await q.job(job)) is not None:
                    run = dataclasses.replace(run, name=row.name)  # its handler never ran
                found[job] = run
    return found, claims


async def arun_worker(
    worker: Worker | Mapping[str, Handler],
    *,
    queue: QueueLike | Iterable[QueueLike] | None = None,
    url: str | None = None,
    **worker_kwargs: Any,
) -> WorkerRun:
    """Run ``worker`` (or ``Worker(queue, handlers, url=url, **worker_kwargs)``) in burst
    mode on this event loop and return what became of each job it claimed (see
    :mod:`emq.testing.runs`). A given Worker gets ``burst=True`` and wrapped handlers for
    this run only; both are put back after it. Raises what the run raises
    (:class:`~emq.errors.WorkerFailed`, :class:`~emq.errors.ServerUnreachable`, ...)."""
    w = _worker(worker, queue, url, worker_kwargs)
    seen: dict[str, _Seen] = {}
    options, handlers = w.options, w.handlers
    client = w._factory().asyncio()  # the worker's own server, as its run will reach it
    try:
        queues = [AsyncQueue(client, name) for name in w.queue_names]
        start = await _positions(queues)
        claimed = w.stats.claimed  # a Worker's counters add up over its runs
        w.handlers = {n: _wrapped(spec, seen) for n, spec in handlers.items()}
        w.configure(burst=True)
        try:
            await w.run()
        finally:
            w.options, w.handlers = options, handlers
        found, claims = await _read(queues, start, seen)
    finally:
        await aclose_client(client)
    if claims < w.stats.claimed - claimed:
        raise EmqError(
            f"the run claimed {w.stats.claimed - claimed} jobs but the event streams hold "
            f"{claims} claims: events are off (events_maxlen=0) or were trimmed "
            "(events_maxlen, an archiver); run_worker reads the outcomes there"
        )
    return WorkerRun(found, w.stats)


def run_worker(
    worker: Worker | Mapping[str, Handler],
    *,
    queue: QueueLike | Iterable[QueueLike] | None = None,
    url: str | None = None,
    **worker_kwargs: Any,
) -> WorkerRun:
    """:func:`arun_worker` on a new event loop, for sync tests. From a running event loop
    (an ``async def`` test) it refuses: ``await arun_worker(...)`` there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun_worker(worker, queue=queue, url=url, **worker_kwargs))
    raise EmqError("run_worker() was called on a running event loop: await arun_worker() there")
