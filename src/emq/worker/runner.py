"""One run of a worker: its connections, its held jobs, the claim loop and the dispatch.

A :class:`Runner` lives for one :meth:`emq.worker.Worker.run` and owns its whole lifecycle
(:meth:`Runner.run`): start the heartbeat, the maintenance beat and the ack flusher, claim
until stopped, drain (:meth:`Runner.drain`, from the steps of :mod:`.shutdown`), tear down,
and raise :class:`~emq.errors.WorkerFailed` if a component failed. The hot path is two script
calls per batch, whatever its size: one ``claim`` for up to the free slots and one
``complete`` for the handlers that finished together. A slot frees when its handler returns
(:mod:`.execute`); its ack follows in a batch (:mod:`.acks`) while its lease stays held. For
short handlers the runner claims ahead, so the next claim is on its way while the jobs it
holds run (:meth:`Runner._tune`). With nothing to claim, the runner parks
on the queues' wake lists (``BLPOP`` on a connection of its own) that enqueue, promote, sweep,
delay, redrive and resume push to, so an idle fleet does not poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..errors import WorkerFailed
from ..model.config import QueueOptions
from ..model.records import Answer, Claimed
from ..queue._async.queue import AsyncQueue
from ..queue._sync.queue import Queue
from ..server.clients import aclose_client, close_client
from .acks import Ack, AckBuffer
from .cancels import Cancels
from .connect import ClientFactory, Outage, first, park, retry
from .execute import Slots
from .heartbeat import Heartbeat, Lease
from .held import Held
from .log import Report, event
from .maintenance import Maintenance
from .observe import Observer
from .options import HandlerSpec, WorkerOptions, WorkerStats
from .outcome import ChildComplete, Discard, Outcome
from .phase import READY, RUNNING
from .presence import Presence
from .progress import Progress
from .shutdown import flush_acks, give_back, wait_until

T = TypeVar("T")
SIGNALS = (signal.SIGTERM, signal.SIGINT)
DEBUG = logging.DEBUG
AHEAD_FACTOR = 2  # the claim-ahead holds at most this many times ``concurrency``
TUNE_MAX_RTT_S = 1.0  # a claim slower than this (an outage, a re-send) does not tune it


class Runner:
    def __init__(
        self,
        factory: ClientFactory,
        queues: dict[str, QueueOptions],
        handlers: dict[str, HandlerSpec],
        options: WorkerOptions,
        stats: WorkerStats,
        log: logging.Logger,
    ) -> None:
        o = self.options = options
        self.handlers = handlers
        self.stats = stats
        self.log = log
        self.client = factory.asyncio(socket_timeout=10.0)
        self.blocking = factory.asyncio(socket_timeout=o.poll_ms / 1000 + 10.0)
        self.sync = factory.sync(socket_timeout=max(1.0, o.beat_ms / 1000))
        self.queues: Sequence[AsyncQueue] = [
            AsyncQueue(self.client, n, options=opt) for n, opt in queues.items()
        ]
        self.loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        self.crashed: tuple[str, BaseException] | None = None  # the first component to fail
        self.outage = Outage(log, factory.shown_url)
        self.hb = Heartbeat(
            {n: Queue(self.sync, n, options=opt) for n, opt in queues.items()},
            lease_ms=o.lease_ms,
            interval_s=o.beat_ms / 1000,
            on_lost=functools.partial(self._soon, self._lease_lost),
            on_crash=functools.partial(self._soon, self.crash, "heartbeat"),
            outage=self.outage,
            log=log,
            on_cancel=lambda lease, why: self._soon(self.cancels.requested, lease, why),
        )
        self.report = Report(log, stats)
        self.observe = Observer.of(o, handlers)  # None: no metrics endpoint, no tracing
        port = self.observe.port if self.observe is not None else 0
        self.presence = Presence(self.client, list(queues), o.concurrency,
                                 lambda: self.slots.busy, log, factory.shown_url, port)  # fmt: skip
        self.beat = Maintenance(self.queues, o, self.outage, self.report, self.presence)
        self._outbox_written = False
        by_name = {q.name: q for q in self.queues}
        self.progress = Progress(by_name, o.progress_interval_ms, self.outage)
        keeps = any(h.result_ttl_ms for h in handlers.values()) or any(
            q.core.options.result_ttl_ms or q.core.options.keep_completed for q in self.queues
        )  # does anything keep results or completed jobs? If not, acks stay plain
        self.acks = AckBuffer(self.outage, log, self._acked, self._landed,
                              self.progress.flush_jobs, keeps_results=keeps)  # fmt: skip
        self.executor = ThreadPoolExecutor(o.concurrency, thread_name_prefix="emq-handler")
        self.slots = Slots(
            handlers,
            concurrency=o.concurrency,
            timeout_ms=o.timeout_ms,
            default_max=o.max_attempts,
            default_backoff=o.backoff,
            executor=self.executor,
            settle=self._settle,
            freed=self._freed,
            renewed=self.hb.held,
            keeps_results=keeps,
        )
        self.ready: deque[Held] = deque()  # claimed, not started
        self.cancels = Cancels(slots=self.slots, ready=self.ready, settle=self._settle,
                               grace_ms=o.cancel_grace_ms, stats=stats, log=log)  # fmt: skip
        self.room = asyncio.Event()  # set when a slot frees or an ack batch lands
        # acks queued or in flight beyond which the claimer waits (their leases are held)
        self.max_unacked = 1_000 + o.concurrency + o.prefetch
        # claim-ahead for short handlers, tuned by _tune: 0 up to max_ahead
        self.ahead = 0
        self.finished = 0  # handlers returned
        self._last_reply = 0.0  # loop time of the last claim reply
        self._retry_in = 0  # ms until a limit of the last claim lifts (0: wait for a wake-up)
        self._blocked = False  # the last claim was held back by a concurrency limit
        self.max_ahead = AHEAD_FACTOR * o.concurrency
        self._stuck_since: float | None = None  # burst: since abandoned threads fill the slots
        self._rr = 0
        self.forced = False  # a second signal stopped the run at once
        self.debug = log.isEnabledFor(DEBUG)  # per-job records are written only at debug

    async def run(self, names: list[str], handle_signals: bool) -> None:
        """The whole run: start -> claim loop -> drain -> teardown, then raise
        :class:`~emq.errors.WorkerFailed` if a component failed. With ``handle_signals``
        (main thread only), SIGTERM/SIGINT stop gracefully and a second one at once."""
        main = asyncio.current_task()
        signals = False
        if handle_signals and main is not None:
            signals = True
            for sig in SIGNALS:
                self.loop.add_signal_handler(sig, self._on_signal, sig, main)
        self.hb.start()
        beat = asyncio.create_task(self.beat.run(self.stop), name="emq-beat")
        flusher = asyncio.create_task(self.acks.run(), name="emq-acks")
        sender = asyncio.create_task(self.progress.run(), name="emq-progress")
        self.watch("maintenance", beat)
        self.watch("acks", flusher)
        self.watch("progress", sender)
        o = self.options
        self.event("info", "worker started", "started", queues=names, concurrency=o.concurrency,
                   lease_ms=o.lease_ms, handlers=sorted(self.handlers))  # fmt: skip
        try:
            for part, step in (("claim", self.claim_loop), ("drain", lambda: self.drain(flusher))):
                try:
                    await step()
                except Exception as exc:  # a bug: stop, hand back what can be, then raise
                    self.crash(part, exc)
        except asyncio.CancelledError:
            if not self.forced:
                raise
        finally:
            self.stop.set()
            self.hb.stop()
            for task in (beat, flusher, sender, *(j.task for j in self.live if j.task)):
                task.cancel()
            await asyncio.gather(beat, flusher, sender, return_exceptions=True)
            await self.presence.leave()
            await self.close()
            if signals:
                for sig in SIGNALS:
                    self.loop.remove_signal_handler(sig)
            self.event("info", "worker stopped", "stopped", forced=self.forced,
                       **self.stats.as_dict())  # fmt: skip
        if self.crashed is not None:
            component, cause = self.crashed
            message = f"the worker's {component} failed: {type(cause).__name__}: {cause}"
            raise WorkerFailed(message) from cause

    def request_stop(self) -> None:
        """A graceful stop; safe from any thread."""
        with contextlib.suppress(RuntimeError):  # the loop has closed: the run is over
            self.loop.call_soon_threadsafe(self.stop.set)

    def _on_signal(self, sig: signal.Signals, main: asyncio.Task[Any]) -> None:
        if self.stop.is_set():
            self.forced = True
            self.event("warning", "second signal: stopping now", "forced", signal=sig.name)
            main.cancel()
        else:
            self.event("info", "stopping gracefully", "stopping", signal=sig.name)
            self.stop.set()

    async def close(self) -> None:
        self.stop.set()
        self.room.set()
        self.hb.stop()
        self.slots.close()
        self.cancels.close()
        self.executor.shutdown(wait=False, cancel_futures=True)
        await aclose_client(self.client)
        await aclose_client(self.blocking)
        close_client(self.sync)
        if self.observe is not None:
            self.observe.close()
        self.stats.outages = self.outage.count
        self.stats.abandoned = self.slots.abandoned
        self.stats.uncertain_acks = self.acks.uncertain
        self.stats.heartbeats = self.hb.beats
        self.stats.heartbeat_max_late_ms = round(self.hb.max_late_s * 1000, 1)

    def crash(self, component: str, exc: BaseException) -> None:
        """A component cannot go on (an error that is not a server error): stop claiming and
        make the run raise :class:`~emq.errors.WorkerFailed`. Never silent."""
        if self.crashed is None:
            self.crashed = (component, exc)
            self.event("error", f"{component} failed: {type(exc).__name__}: {exc}; the worker "
                       "stops", "crashed", component=component, error=repr(exc)[:500])  # fmt: skip
        self.stop.set()
        self.room.set()

    def _soon(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop, from the heartbeat thread."""
        with contextlib.suppress(RuntimeError):  # the loop is closing
            self.loop.call_soon_threadsafe(fn, *args)

    def watch(self, component: str, task: asyncio.Task[Any]) -> None:
        """Crash the run if ``task`` ends with an exception (not by cancellation)."""

        def done(t: asyncio.Task[Any]) -> None:
            if not t.cancelled() and t.exception() is not None:
                self.crash(component, t.exception())  # type: ignore[arg-type]

        task.add_done_callback(done)

    @property
    def live(self) -> set[Held]:
        """Started jobs whose handler runs (its outcome decided or not)."""
        return self.slots.live

    def idle(self) -> bool:
        """Nothing ready, undecided or waiting for its ack (a handler still running after its
        attempt was decided, such as a sync handler past its timeout, does not count)."""
        if self.ready or self.acks.outstanding:
            return False
        return all(j.phase is not RUNNING for j in self.slots.live)

    async def drain(self, flusher: asyncio.Task[None]) -> None:
        """A graceful stop (docs/worker.md#shutdown), once claiming has stopped: give back
        what has not started, wait up to ``grace_ms`` for the running handlers, interrupt
        the rest, then flush every ack."""
        grace_ms = self.options.grace_ms
        deadline = time.monotonic() + grace_ms / 1000
        unstarted = list(self.ready)
        self.ready.clear()
        for job in unstarted:
            job.give_back()
        await give_back(unstarted, self.outage, self.hb.drop, self.report, deadline)
        if running := self._running():
            self.event("info", "waiting for running jobs", "draining", running=len(running),
                       grace_ms=grace_ms)  # fmt: skip
            await wait_until(lambda: not self._running(), self.room, deadline)
        late = self._running()
        for job in late:
            self.slots.interrupt(job, "shutdown")
        tasks = [j.task for j in late if j.task is not None and not j.task.done()]
        if tasks:  # let cancelled async handlers unwind
            await asyncio.wait(tasks, timeout=1.0)
        await flush_acks(self.acks.close, flusher, deadline)

    def _running(self) -> list[Held]:
        """Started jobs whose outcome is not decided yet."""
        return [j for j in self.live if j.phase is RUNNING]

    # -- claiming -------------------------------------------------------------------------

    def free(self) -> int:
        """Jobs to claim now: free slots plus prefetch (the larger of ``prefetch`` and the
        claim-ahead), less what is claimed and not started; none while too many acks are
        still waiting to land."""
        o = self.options
        if self.acks.outstanding >= self.max_unacked:
            return 0
        return o.concurrency + max(o.prefetch, self.ahead) - self.slots.busy - len(self.ready)

    def _tune(self, consumed: int) -> None:
        """Set the claim-ahead after a claim reply from ``consumed``, the handlers that
        returned while the claim was on its way (or the whole batch, if every slot had run
        dry within a few round trips of the last reply): about twice that many, smoothed,
        so the next claim lands before the jobs ready to start run out. Short handlers
        raise it until the claims overlap the handlers (up to ``max_ahead``); long ones
        keep it near 0, so a job does not wait in one worker while another is idle."""
        self.ahead = min(self.max_ahead, (self.ahead + 2 * consumed) // 2)

    async def claim_loop(self) -> None:
        """Claim while there is room; park when the queues are empty; return on stop (or,
        in burst mode, once nothing is claimable, held, or waiting for its ack)."""
        while not self.stop.is_set():
            room = self.free()
            if room <= 0:
                if self._burst_done(stuck=True):
                    return
                self.room.clear()
                if self.free() <= 0:
                    # in a stuck burst run, look again once the grace period may be over
                    tick = [asyncio.sleep(0.1)] if self._stuck_since is not None else []
                    await first(self.stop, self.room.wait(), *tick)
                continue
            self._stuck_since = None
            got = await self._claim(room)
            if got is None or got >= room:
                continue
            # a queue held back by a limit is not empty (maybe by this worker's own acks still
            # on their way): a burst run waits for the wake-up
            if got == 0 and not (self._retry_in or self._blocked) and self._burst_done(stuck=False):
                return
            await self._park()

    def _burst_done(self, *, stuck: bool) -> bool:
        """In burst mode: True (logged) once the queues gave nothing and nothing is left to
        decide, or once every slot has been held for ``grace_ms`` by handlers that outlived
        their decided attempt (sync handlers past their timeout: a thread cannot be killed)."""
        if not self.options.burst or not self.idle():
            self._stuck_since = None
            return False
        abandoned = self.slots.abandoned
        if stuck:
            if not abandoned:
                return False
            # every slot is held by a handler that outlived its attempt: wait for them up to
            # the grace period (a slow one returns and the run goes on), then give up on them
            now = self.loop.time()
            if self._stuck_since is None:
                self._stuck_since = now
            if now - self._stuck_since < self.options.grace_ms / 1000:
                return False
        if abandoned:
            self.event("warning", "burst run done; handler threads still run past their "
                       "decided attempt", "idle", abandoned=abandoned)  # fmt: skip
        else:
            self.event("info", "queue empty: burst run done", "idle")
        return True

    async def _claim(self, room: int) -> int | None:
        total, n = 0, len(self.queues)
        self._retry_in, self._blocked = 0, False
        for i in range(n):
            q = self.queues[(self._rr + i) % n]
            want = min(room - total, 1000)
            if want <= 0:
                break
            # one request id for every re-send: a claim whose reply was lost returns its jobs
            request = uuid.uuid4().hex
            claim = functools.partial(q.claim, want, self.options.lease_ms, request=request)
            before, sent = self.finished, self.loop.time()
            # every slot ran dry before this claim went, soon after the last reply landed
            drained = before > 0 and not self.slots.busy and not self.ready
            jobs, _ = await retry(self.outage, "claim", claim, stop=self.stop)
            if jobs is None:
                return None
            self.stats.claim_calls += 1
            landed = self.loop.time()
            if landed - sent < TUNE_MAX_RTT_S:  # not across an outage's backoff
                consumed = self.finished - before
                if drained and len(jobs) == want and sent - self._last_reply <= 4 * (landed - sent):
                    consumed = max(consumed, want)  # the whole batch could have run meanwhile
                self._tune(consumed)
            self._last_reply = landed
            if jobs.missing:
                self.report.missing(q.name, jobs.missing, "pending or schedule")
            if jobs.retry_in_ms and len(jobs) < want:  # limited: nothing before then
                self._retry_in = min(self._retry_in or jobs.retry_in_ms, jobs.retry_in_ms)
            self._blocked = self._blocked or jobs.blocked
            if jobs:
                self._accept(q, jobs)
            total += len(jobs)
        self._rr += 1
        return total

    def _accept(self, q: AsyncQueue, claimed: list[Claimed]) -> None:
        name, beat, report = q.name, self.hb.beat_now, self.progress.put
        jobs = [Held(q, name, c, beat, report) for c in claimed]
        if self.observe is not None:
            self.observe.claimed(name, claimed)
        self.hb.add_many(jobs)
        self.ready.extend(jobs)
        self.stats.claimed += len(jobs)
        self.start_ready()

    async def _park(self) -> None:
        """Wait on the wake lists until a token arrives, ``poll_ms`` passes (or the time the
        last claim said a limit lifts), the worker stops, or (burst) a held job is released."""
        keys = [q.core.keys.wake for q in self.queues]
        wait_ms = min(self.options.poll_ms, self._retry_in or self.options.poll_ms)
        self.room.clear()
        extra = [self.room.wait()] if self.options.burst else []
        await park(self.blocking, keys, wait_ms, self.outage, self.stop, *extra)

    # -- running --------------------------------------------------------------------------

    def start_ready(self) -> None:
        if self.stop.is_set():
            return  # unstarted jobs are given back by the drain
        hook: Callable[[Held], None] | None = (
            self._log_start if self.log.isEnabledFor(DEBUG) else None
        )
        if self.observe is not None:
            hook = self.observe.on_start(hook)
        self.slots.start_ready(self.ready, hook)

    def _log_start(self, job: Held) -> None:
        c = job.claimed
        self.event("debug", "job started", "run", queue=job.queue, job=c.id, name=c.name)

    def _freed(self) -> None:
        """A handler returned: its slot is free (its ack may still be on its way)."""
        self.finished += 1
        if self.ready:
            self.start_ready()
        self.room.set()

    def _settle(self, job: Held, outcome: Outcome) -> None:
        self.room.set()  # the drain waits for outcomes
        if type(outcome) is ChildComplete and "@" in (job.claimed.parent or ""):
            self._outbox_written = True  # its parent is in another queue: deliver soon
        if self.cancels.jobs:  # a cancelled job ends dead, cancelled (.cancels)
            outcome = self.cancels.outcome(job, outcome)
        if self.observe is not None:
            self.observe.settled(job, outcome)
        if isinstance(outcome, Discard):
            return  # the lease was refused: already dropped from the heartbeat
        if outcome.why == "timeout":
            self.stats.timeouts += 1
        self.acks.put(Ack(job.q, job, outcome))

    def _landed(self, batch: list[Ack]) -> None:
        self.hb.drop_many([a.lease for a in batch])
        self.room.set()
        if self._outbox_written:
            self._outbox_written = False
            self.beat.poke()

    def _acked(self, ack: Ack, answer: str) -> None:
        ack.lease.acked()  # DECIDED -> ACKED
        if answer is Answer.COMPLETED and not self.debug:  # the hot path: count only
            self.stats.completed += 1
            return
        o = ack.outcome
        self.report.acked(ack.lease, o.kind, o.why, o.error, answer)

    def count_lost(self, lease: Lease, via: str) -> None:
        self.report.lost(lease, via)

    def _lease_lost(self, lease: Lease) -> None:
        """The heartbeat was refused: cancel the attempt, never send its result."""
        self.count_lost(lease, "extend")
        if not isinstance(lease, Held):
            return
        lease.ctx.cancel("lease_lost")
        if lease.phase is RUNNING:
            self.slots.interrupt(lease, "lease_lost")
        elif lease.phase is READY:  # claimed but not started: just forget it
            self.ready.remove(lease)
            lease.drop_unstarted()
            self.room.set()

    def event(self, level: str, msg: str, name: str, /, **fields: Any) -> None:
        """One structured log record (:func:`.log.event`)."""
        event(self.log, level, msg, name, **fields)
