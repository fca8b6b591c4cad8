"""A held job's story, top to bottom: fetch, run, record, report (Oban's executor is the model).

1. **Fetch** (:meth:`Executor.accept`): a claim's jobs are held, ``READY`` (:mod:`.phase`),
   and renewed by the heartbeat until their ack lands.
2. **Run** (:meth:`Executor.start_ready`): while a slot is free a ready job goes ``RUNNING``,
   an async handler in a task, a sync one in a thread of the pool (no handler: it fails),
   found by :func:`.log.current_job` for the records it emits (nothing is set per job).
3. **Record** (:meth:`Executor.decide`): its outcome (:mod:`.outcome`, which states the rules)
   is decided once, by the first of: the handler returning or raising, the watchdog
   (timeout), a refused lease, a cancel's grace period (:mod:`.cancels`), the shutdown. After
   the ``on_outcome`` hooks (:mod:`.hooks`) it is ``DECIDED``, queued for its batched ack
   (:mod:`.acks`), or ``DROPPED`` (its lease was lost: nothing is sent, G4).
4. **Report** (:meth:`Executor.acked`, :meth:`Executor.landed`): the server's answer is
   counted and logged; ``ACKED``, the lease is renewed no more.

A slot is held while the handler runs and freed the moment it returns, before its ack lands.
A sync handler's thread cannot be killed: told to stop (``ctx.cancelled``) on timeout or
shutdown, its result ignored, it keeps its slot until it returns, so ``concurrency`` bounds the
threads in use. No server I/O here; an async job costs one task, timeouts one watchdog. An
error of the story itself (never a handler's: that is its outcome) stops the worker loudly.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor as Pool
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..model.records import Answer, Claimed, UnreadablePayload
from ..queue._async.queue import AsyncQueue
from .acks import AckBuffer, keeps_completions
from .batches import Batches, BatchRuns
from .connect import Outage
from .heartbeat import Heartbeat, Lease
from .held import Held, Reports
from .hooks import Hooks, Outbox
from .log import Report, in_job, watch
from .options import HandlerSpec, WorkerOptions, WorkerStats
from .outcome import (
    COMPLETE,
    DISCARD,
    Ack,
    Discard,
    Fail,
    describe,
)
from .phase import READY, RUNNING
from .verdict import Verdict
from .watchdog import Watchdog, call_soon_from_thread

if TYPE_CHECKING:
    from .outcome import Outcome

COMPLETED = Answer.COMPLETED


class Executor:
    """The jobs a run holds (``ready``, and ``live``: those whose handler runs), and every
    step of their story. ``busy`` counts the slots taken; ``finished`` the handlers that
    returned (the claim-ahead is tuned from it)."""

    def __init__(
        self,
        handlers: dict[str, HandlerSpec],
        options: WorkerOptions,
        *,
        pool: Pool,
        heartbeat: Heartbeat,
        hooks: Hooks,
        outbox: Outbox,
        outage: Outage,
        report: Report,
        stats: WorkerStats,
        room: asyncio.Event,
        stop: asyncio.Event,
        crash: Callable[[str, BaseException], None],
        progress: Reports | None,
        keeps_results: bool,
        log: logging.Logger,
    ) -> None:
        self.handlers = handlers
        # False when no handler keeps results: a return value is then ignored (no encoding,
        # the plain ack) unless its queue's stored settings keep results or completed jobs
        self.keeps_results = keeps_results
        self.concurrency = options.concurrency
        self.timeout_ms = options.timeout_ms
        verdict = Verdict(options, outbox)  # what an attempt's end means: its outcome
        self.fail, self.completed, self.from_exception = (
            verdict.fail, verdict.completed, verdict.from_exception
        )  # fmt: skip
        self.pool = pool
        self.hooks = hooks
        self.room = room  # set when a slot frees, an outcome is decided or an ack lands
        self.loop = asyncio.get_running_loop()
        self.busy = 0  # handlers running (slots taken)
        self.live: set[Held] = set()  # jobs whose handler runs (its slot taken)
        self.ready: deque[Held] = deque()  # READY: claimed, not started
        self.finished = 0  # handlers returned
        self.stats = stats
        self._report = report
        self._debug = log.isEnabledFor(logging.DEBUG)  # per-job records only at debug
        self._hb = heartbeat
        self.renewed = heartbeat.held  # a lease refused meanwhile is gone from it
        self._progress = progress
        self._stop = stop
        self.crash = crash  # a bug of the story itself (not a handler's error) stops the run
        self._watchdog = Watchdog(self.loop, self.live, self._timed_out)
        watch(self)  # handlers' log records find their job in self.live
        self.arm = self._watchdog.arm
        self.acks = AckBuffer(outage, log, self.acked, self.landed, hooks, keeps_results)
        # batch handlers (docs/batches.md): their jobs fill a batch, then run in one call;
        # a worker with one claims up to its largest batch_size beyond its free slots
        self.batch_room = max((s.batch_size or 0 for s in handlers.values()), default=0)
        self.batches = Batches(self.loop, self.start_ready, crash)
        self._batch_runs = BatchRuns(self)

    # -- 1. fetch -------------------------------------------------------------------------

    def accept(self, q: AsyncQueue, claimed: list[Claimed]) -> None:
        """A claim of ``q`` leased ``claimed``: held, ``READY``, renewed, started if a slot
        is free."""
        name, beat, report = q.name, self._hb.beat_now, self._progress
        jobs = [Held(q, name, c, beat, report) for c in claimed]
        for hook in self.hooks.on_claimed:
            hook(name, claimed)
        self._hb.add_many(jobs)
        if self.batch_room:
            self._route(jobs)
        else:
            self.ready.extend(jobs)
        self.stats.claimed += len(jobs)
        self.start_ready()

    def _route(self, jobs: list[Held]) -> None:
        """A batch handler's job fills its batch; any other waits in ``ready``."""
        handlers = self.handlers
        for job in jobs:
            spec = handlers.get(job.claimed.name)
            if spec is not None and spec.batch_size:
                self.batches.add(job, spec)
            else:
                self.ready.append(job)

    # -- 2. run ---------------------------------------------------------------------------

    def start_ready(self) -> None:
        """Start due batches, then ready jobs, while a slot is free (none once stopping: the
        drain gives them back). The ``on_start`` hooks see each first."""
        if self._stop.is_set():
            return
        batches = self.batches
        while batches.due and self.busy < self.concurrency:
            self._batch_runs.start(*batches.take())
        handlers, loop, live, limit, ready = (
            self.handlers, self.loop, self.live, self.concurrency, self.ready
        )  # fmt: skip
        on_start = self.hooks.on_start
        now = loop.time()
        while ready and self.busy < limit:
            job = ready.popleft()
            job.start()
            if on_start:
                for hook in on_start:
                    hook(job)
            spec = job.spec = handlers.get(job.claimed.name)
            if spec is None:  # it fails at once, and takes no slot
                error = f"no handler registered for {job.claimed.name!r}"
                self.decide(job, self.fail(job, error, "no_handler"))
                continue
            if isinstance(job.claimed.payload, UnreadablePayload):  # cannot heal: no retry
                error = f"the stored payload is not JSON ({job.claimed.payload.why})"
                self.decide(job, self.fail(job, error, "bad_payload", retry=False))
                continue
            self.busy += 1
            live.add(job)
            timeout = spec.timeout_ms or self.timeout_ms
            if timeout:
                self.arm(job, now, timeout)
            if not spec.is_async:
                self._start_thread(job, spec)
                continue
            coro = self._run_async(job, spec.fn, spec.takes_ctx)
            job.task = loop.create_task(coro, context=job.context)  # traced: its span current

    def _start_thread(self, job: Held, spec: HandlerSpec) -> None:
        """A sync handler, in a thread of the pool (its slot taken, its timeout armed)."""
        try:
            call, payload = spec.call, job.claimed.payload
            if job.context is None:
                work = self.pool.submit(in_job, job, call, payload, job.ctx)
            else:  # traced: the handler runs with its consumer span current
                work = self.pool.submit(job.context.run, in_job, job, call, payload, job.ctx)
        except RuntimeError as exc:  # the pool was shut down: the worker is closing
            self._returned(job)
            self.decide(job, self.fail(job, describe(exc), "shutdown"))
            return
        loop, done = self.loop, self._thread_done
        work.add_done_callback(lambda w: call_soon_from_thread(loop, done, job, w))

    async def _run_async(self, job: Held, fn: Callable[..., Any], with_ctx: bool) -> None:
        try:  # the handler's own error is caught inside: it is the job's outcome
            outcome: Outcome | None
            try:
                if with_ctx:
                    value = await fn(job.claimed.payload, job.ctx)
                else:
                    value = await fn(job.claimed.payload)
            except asyncio.CancelledError:
                outcome = None
            except Exception as exc:
                outcome = self.from_exception(job, exc)
            else:
                if job.phase is RUNNING:  # the common case, inlined: returned, decided, slot freed
                    self.busy -= 1
                    self.live.discard(job)
                    keep = self.keeps_results or job.claimed.parent is not None
                    if keep or keeps_completions(job.q):
                        self.decide(job, self.completed(job, value))
                    else:
                        self.decide(job, COMPLETE)
                    self.finished += 1
                    if self.ready:
                        self.start_ready()
                    return
                outcome = None  # decided already (timeout, shutdown, cancel): the value is dropped
            self._returned(job)
            if job.phase is RUNNING:
                if outcome is None:  # cancelled by something other than the worker
                    outcome = self.fail(job, "cancelled: the handler was cancelled", "error")
                self.decide(job, outcome)
        except Exception as bug:  # an error of the story itself stops the run
            self.crash("executor", bug)

    def _thread_done(self, job: Held, work: Future[Any]) -> None:
        try:
            self._returned(job)
            if job.phase is not RUNNING:
                return
            if work.cancelled():
                self.decide(job, self.fail(job, "cancelled: the worker closed", "shutdown"))
                return
            exc = work.exception()
            self.decide(job, self.completed(job, work.result()) if exc is None else
                        self.from_exception(job, exc))  # fmt: skip
        except Exception as bug:
            self.crash("executor", bug)

    def _returned(self, job: Held) -> None:
        """A handler returned: its slot is free (its ack may still be on its way)."""
        self.busy -= 1
        self.live.discard(job)
        self.finished += 1
        if self.ready:
            self.start_ready()
        self.room.set()

    # -- 3. record ------------------------------------------------------------------------

    def decide(self, job: Held, outcome: Outcome) -> None:
        """``job``'s outcome: RUNNING -> DECIDED (READY -> DECIDED: cancelled before it
        started), or -> DROPPED when its lease was refused meanwhile (any outcome is then a
        discard). The ``on_outcome`` hooks may replace it; then it is queued for its ack."""
        if job.phase is READY:
            job.decide_unstarted()
        elif outcome is DISCARD or job not in self.renewed:
            outcome = DISCARD
            job.drop()
        else:
            job.decide()
        self.room.set()  # the drain waits for outcomes
        hooks = self.hooks.on_outcome
        if hooks:
            for hook in hooks:
                outcome = hook(job, outcome)
        if isinstance(outcome, Discard):
            return  # the lease was refused: the heartbeat renews it no more
        if outcome.why == "timeout":
            self.stats.timeouts += 1
        self.acks.put(Ack(job.q, job, outcome))

    # -- 4. report ------------------------------------------------------------------------

    def acked(self, ack: Ack, answer: str) -> None:
        """The server's answer to ``ack`` (DECIDED -> ACKED), counted and logged."""
        ack.lease.acked()
        if answer is COMPLETED and not self._debug:  # the hot path: count only
            self.stats.completed += 1
            return
        o = ack.outcome
        self._report.acked(ack.lease, o.kind, o.why, o.error, answer)

    def landed(self, batch: list[Ack]) -> None:
        """A batch of acks landed: its leases are renewed no more; the ``on_acked`` hooks."""
        self._hb.drop_many([a.lease for a in batch])
        self.room.set()
        for hook in self.hooks.on_acked:
            hook(batch)

    # -- the other arrows: a lost lease, a cancel before the start, a stop ------------------

    def lease_lost(self, lease: Lease) -> None:
        """The heartbeat was refused (on the loop): cancel the attempt, never send its
        result. A job not started yet is forgotten (READY -> DROPPED)."""
        self._report.lost(lease, "extend")
        if not isinstance(lease, Held):
            return
        lease.ctx.cancel("lease_lost")
        if lease.phase is RUNNING:
            self.interrupt(lease, "lease_lost")
        elif lease.phase is READY:
            self._unready(lease)
            lease.drop_unstarted()
            self.room.set()

    def cancel_ready(self, job: Held, outcome: Fail) -> None:
        """A job cancelled before it started never runs: ``outcome`` is queued now."""
        self._unready(job)
        self.decide(job, outcome)

    def _unready(self, job: Held) -> None:
        if not self.batches.discard(job):
            self.ready.remove(job)

    def interrupt(self, job: Held, why: str) -> None:
        """Stop an attempt: ``timeout``, ``shutdown`` or ``lease_lost``. Its outcome is
        decided now; an async handler is cancelled, a sync one told (``ctx.cancelled``)."""
        if job.phase is not RUNNING:
            return
        job.ctx.cancel(why)
        outcome: Outcome
        if why == "lease_lost":
            outcome = DISCARD
        elif why == "timeout":
            timeout = ((job.spec and job.spec.timeout_ms) or self.timeout_ms or 0) / 1000
            outcome = self.fail(job, f"timeout: the attempt ran past {timeout:g} s", "timeout")
        else:
            error = "interrupted: the worker shut down before the handler finished"
            outcome = self.fail(job, error, "shutdown")
        self.decide(job, outcome)
        self.stop_task(job)

    def stop_task(self, job: Held) -> None:
        """Cancel ``job``'s async handler, unless it runs a batch of which a job still runs."""
        task = job.task
        if task is None or task.done():
            return
        if job.batch is None or all(j.phase is not RUNNING for j in job.batch):
            task.cancel()

    def _timed_out(self, job: Held) -> None:
        self.interrupt(job, "timeout")

    def take_ready(self) -> list[Held]:
        """Every job not started, READY -> GIVING_BACK (a stop gives them back)."""
        jobs = [*self.ready, *self.batches.take_all()]
        self.ready.clear()
        for job in jobs:
            job.give_back()
        return jobs

    async def interrupt_running(self, why: str, unwind_s: float = 1.0) -> None:
        """Interrupt every attempt still undecided, and give cancelled async handlers up to
        ``unwind_s`` to unwind."""
        late = self.running()
        for job in late:
            self.interrupt(job, why)
        tasks = [j.task for j in late if j.task is not None and not j.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=unwind_s)

    # -- what the runner reads ------------------------------------------------------------

    def running(self) -> list[Held]:
        """Started jobs whose outcome is not decided yet."""
        return [j for j in self.live if j.phase is RUNNING]

    def idle(self) -> bool:
        """Nothing ready or undecided (an abandoned handler, below, does not count)."""
        return (
            not self.ready and not self.batches and all(j.phase is not RUNNING for j in self.live)
        )

    @property
    def abandoned(self) -> int:
        """Handlers still running after their attempt was decided (a sync handler past its
        timeout or the grace period: a thread cannot be killed). Each keeps its slot."""
        return sum(1 for j in self.live if j.phase is not RUNNING)

    def close(self) -> None:
        self._watchdog.close()
        self.batches.close()
