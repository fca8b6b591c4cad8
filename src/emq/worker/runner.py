"""One run of a worker: its connections, its held jobs, the claim loop and the dispatch.

A :class:`Runner` lives for one :meth:`emq.worker.Worker.run` and owns its whole lifecycle
(:meth:`Runner.run`): start the heartbeat, the maintenance beat and the ack flusher, claim
until stopped, drain (:meth:`Runner.drain`, from the steps of :mod:`.shutdown`), tear down,
and raise :class:`~emq.errors.WorkerFailed` if a component failed. What happens to each job
it claims, from its start to its ack, is told in one place: :mod:`.execute`, with the
features that join that story as hooks (:mod:`.hooks`). The hot path is one script call per
batch, whatever its size: ``complete_claim``, the completions of the handlers that finished
together and a claim for the free slots (each alone when only one is due). A slot frees when
its handler returns; its ack follows (:mod:`.acks`) while its lease stays held. For short
handlers the runner claims ahead (:meth:`Runner._tune`): the next claim is on its way while
the jobs it holds run. Idle, the runner parks on the queues' wake lists (``BLPOP``, on its
own connection) that enqueue, promote, sweep, delay, redrive and resume push to.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..errors import WorkerFailed
from ..model.config import QueueOptions
from ..queue._async.queue import AsyncQueue
from ..queue._sync.queue import Queue
from ..server.clients import aclose_client, close_client
from .cancels import Cancels
from .connect import Outage, close_blocking, first, park, retry
from .connections import Connections
from .execute import Executor
from .heartbeat import Heartbeat
from .hooks import Hooks, LogStarts, Outbox
from .log import Report, event
from .maintenance import Maintenance
from .observe import Observer
from .options import HandlerSpec, WorkerOptions, WorkerStats
from .presence import Presence
from .progress import Progress
from .shutdown import deliver_outboxes, flush_acks, give_back, wait_until
from .watchdog import call_soon_from_thread

T = TypeVar("T")
SIGNALS = (signal.SIGTERM, signal.SIGINT)
AHEAD_FACTOR = 2  # the claim-ahead holds at most this many times ``concurrency``
TUNE_MAX_RTT_S = 1.0  # a claim slower than this (an outage, a re-send) does not tune it


class Runner:
    def __init__(
        self,
        conns: Connections,
        queues: dict[str, QueueOptions | None],
        handlers: dict[str, HandlerSpec],
        options: WorkerOptions,
        stats: WorkerStats,
        log: logging.Logger,
    ) -> None:
        o = self.options = options
        self.handlers = handlers
        self.stats = stats
        self.log = log
        self.client, self.blocking, self.sync = conns.client, conns.blocking, conns.sync
        self.queues: Sequence[AsyncQueue] = [
            AsyncQueue(self.client, n, options=opt) for n, opt in queues.items()
        ]
        self.loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        self.crashed: tuple[str, BaseException] | None = None  # the first component to fail
        self.server = conns.shown_url  # password redacted, for the log lines
        self.outage = Outage(log, self.server)
        soon = functools.partial(call_soon_from_thread, self.loop)  # from the heartbeat thread
        self.hb = Heartbeat(
            {n: Queue(self.sync, n, options=opt) for n, opt in queues.items()},
            lease_ms=o.lease_ms,
            interval_s=o.beat_ms / 1000,
            on_lost=lambda lease: soon(self.jobs.lease_lost, lease),
            on_crash=functools.partial(soon, self.crash, "heartbeat"),
            outage=self.outage,
            log=log,
            on_cancel=lambda lease, why: soon(self.cancels.requested, lease, why),
        )
        self.report = Report(log, stats)
        self.observe = Observer.of(o, handlers)  # None: no metrics endpoint, no tracing
        port = self.observe.port if self.observe is not None else 0
        self.presence = Presence(self.client, list(queues), o.concurrency,
                                 lambda: self.jobs, log, conns.shown_url, port)  # fmt: skip
        self.beat = Maintenance(self.queues, o, self.outage, self.report, self.presence)
        self.pool = ThreadPoolExecutor(o.concurrency, thread_name_prefix="emq-handler")
        self.room = asyncio.Event()  # set when a slot frees or an ack batch lands
        self._story(handlers)
        # acks queued or in flight beyond which the claimer waits (their leases are held)
        self.max_unacked = 1_000 + o.concurrency + o.prefetch
        # claim-ahead for short handlers, tuned by _tune: 0 up to max_ahead
        self.ahead = 0
        self._last_reply = 0.0  # loop time of the last claim reply
        self._retry_in = 0  # ms until a limit of the last claim lifts (0: wait for a wake-up)
        self._blocked = False  # the last claim was held back by a concurrency limit
        self.max_ahead = AHEAD_FACTOR * o.concurrency
        self._stuck_since: float | None = None  # burst: since abandoned threads fill the slots
        self._rr = 0
        self.forced = False  # a second signal stopped the run at once

    def _story(self, handlers: dict[str, HandlerSpec]) -> None:
        """The held jobs' story (:mod:`.execute`) and the features that join it, in the order
        every event calls them (:mod:`.hooks`): each only when enabled, or once it has work."""
        o, log, stats = self.options, self.log, self.stats
        keeps = any(h.result_ttl_ms for h in handlers.values()) or any(
            q.core.options.result_ttl_ms or q.core.options.keep_completed for q in self.queues
        )  # does anything keep results or completed jobs? If not, acks stay plain
        self.hooks = hooks = Hooks()
        if log.isEnabledFor(logging.DEBUG):
            hooks.add(LogStarts(log), joined=True)
        outbox = Outbox(hooks, self.beat.poke)
        hooks.add(outbox, joined=False)  # joins when a child of another queue's parent ends
        by_name = {q.name: q for q in self.queues}
        self.progress = Progress(by_name, o.progress_interval_ms, self.outage, hooks)
        self.jobs = Executor(handlers, o, pool=self.pool, heartbeat=self.hb, hooks=hooks,
                             outbox=outbox, outage=self.outage, report=self.report, stats=stats,
                             room=self.room, stop=self.stop, crash=self.crash,
                             progress=self.progress, keeps_results=keeps, log=log)  # fmt: skip
        self.acks = self.jobs.acks
        self.acks.joins = self.options.ack_with_claim
        self.cancels = Cancels(jobs=self.jobs, hooks=hooks, grace_ms=o.cancel_grace_ms,
                               stats=stats, log=log)  # fmt: skip
        hooks.add(self.cancels, joined=False)  # joins while a cancelled job is held
        if self.observe is not None:
            hooks.add(self.observe, joined=True)
        hooks.add(self.progress, joined=False)  # joins with the first progress reported

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
        self.event("info", f"worker started on {self.server}", "started", queues=names,
                   concurrency=o.concurrency, lease_ms=o.lease_ms,
                   handlers=sorted(self.handlers), server=self.server)  # fmt: skip
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
            for task in (beat, flusher, sender, *(j.task for j in self.jobs.live if j.task)):
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
        self.jobs.close()
        self.cancels.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
        await aclose_client(self.client)
        await close_blocking(self.blocking)
        close_client(self.sync)
        if self.observe is not None:
            self.observe.close()
        self.stats.outages = self.outage.count
        self.stats.abandoned = self.jobs.abandoned
        self.stats.uncertain_acks, self.stats.joined_acks = self.acks.uncertain, self.acks.joined
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

    def watch(self, component: str, task: asyncio.Task[Any]) -> None:
        """Crash the run if ``task`` ends with an exception (not by cancellation)."""

        def done(t: asyncio.Task[Any]) -> None:
            if not t.cancelled() and t.exception() is not None:
                self.crash(component, t.exception())  # type: ignore[arg-type]

        task.add_done_callback(done)

    def idle(self) -> bool:
        """Nothing ready, undecided or waiting for its ack (a handler still running after its
        attempt was decided, such as a sync handler past its timeout, does not count)."""
        return not self.acks.outstanding and self.jobs.idle()

    async def drain(self, flusher: asyncio.Task[None]) -> None:
        """A graceful stop (docs/worker.md#shutdown), once claiming has stopped: give back
        what has not started, wait up to ``grace_ms`` for the running handlers, interrupt
        the rest, flush every ack, then deliver what the outboxes hold (one try each, or
        through an outage until the grace period ends)."""
        grace_ms = self.options.grace_ms
        deadline = time.monotonic() + grace_ms / 1000
        await give_back(self.jobs.take_ready(), self.outage, self.hb.drop, self.report, deadline)
        if running := self.jobs.running():
            self.event("info", "waiting for running jobs", "draining", running=len(running),
                       grace_ms=grace_ms)  # fmt: skip
            await wait_until(lambda: not self.jobs.running(), self.room, deadline)
        await self.jobs.interrupt_running("shutdown")
        await flush_acks(self.acks.close, flusher, deadline)
        await deliver_outboxes(self.queues, self.outage, self.report, deadline, self.stop)

    # -- claiming -------------------------------------------------------------------------

    def free(self) -> int:
        """Jobs to claim now: free slots, prefetch (or the claim-ahead if larger) and the
        largest ``batch_size`` (a batch fills from one claim), less what is claimed and not
        started; none while too many acks are still waiting to land."""
        o, jobs = self.options, self.jobs
        if self.acks.outstanding >= self.max_unacked:
            return 0
        taken = jobs.busy + len(jobs.ready) + len(jobs.batches)
        return o.concurrency + max(o.prefetch, self.ahead) + jobs.batch_room - taken

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
                if self._burst_idle(stuck=True):  # its slots cannot take a job a parent became
                    await self._burst_end(again=False)
                    return
                self.room.clear()
                if self.free() <= 0:
                    # in a stuck burst run, look again once the grace period may be over
                    tick = [asyncio.sleep(0.1)] if self._stuck_since is not None else []
                    await first(self.stop, self.room.wait(), *tick)
                continue
            self._stuck_since = None
            landed = self._requeued()
            got = await self._claim(room)
            if got is None or got >= room:
                continue
            # a queue held back by a limit is not empty (maybe by this worker's own acks still
            # on their way): a burst run waits for the wake-up
            if got == 0 and not (self._retry_in or self._blocked) and self._burst_idle(stuck=False):
                if self._requeued() != landed:  # an ack that landed while the claim was out
                    continue  # put a job back (a retry, a parent made ready): claim again
                if await self._burst_end(again=True):
                    return
                continue  # a parent it told may be a job of these queues: claim again
            await self._park()

    async def _burst_end(self, *, again: bool) -> bool:
        """A burst run with nothing left to run: deliver its outboxes first (the parents in
        other queues of the children it completed hear of them before the run ends, however
        many: the beat that would have told them stops with the run), then True (logged:
        "burst run done"); with ``again``, False instead if that delivered something (a
        parent it told may be a job of its own queues)."""
        deadline = time.monotonic() + max(1.0, self.options.grace_ms / 1000)
        sent = await deliver_outboxes(self.queues, self.outage, self.report, deadline, self.stop)
        if sent and again:
            return False
        abandoned = self.jobs.abandoned
        if abandoned:
            self.event("warning", "burst run done; handler threads still run past their "
                       "decided attempt", "idle", abandoned=abandoned)  # fmt: skip
        else:
            self.event("info", "queue empty: burst run done", "idle")
        return True

    def _requeued(self) -> int:
        """Acks landed so far that may have made a job claimable again: retries, holds, and
        completions (a flow parent's last child)."""
        return self.stats.retried + self.stats.rate_limited + self.stats.completed

    def _burst_idle(self, *, stuck: bool) -> bool:
        """In burst mode: True once the queues gave nothing and nothing is left to decide, or
        once every slot has been held for ``grace_ms`` by handlers that outlived their
        decided attempt (sync handlers past their timeout: a thread cannot be killed)."""
        if not self.options.burst or not self.idle():
            self._stuck_since = None
            return False
        abandoned = self.jobs.abandoned
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
        return True

    async def _claim(self, room: int) -> int | None:
        total, n = 0, len(self.queues)
        self._retry_in, self._blocked = 0, False
        for i in range(n):
            q = self.queues[(self._rr + i) % n]
            if (want := min(room - total, 1000)) <= 0:
                break
            # one request id for every re-send: a claim whose reply was lost returns its jobs
            request, lease_ms, me = uuid.uuid4().hex, self.options.lease_ms, self.presence.id
            claim = functools.partial(q.claim, want, lease_ms, request=request, worker=me)
            before, sent = self.jobs.finished, self.loop.time()
            # every slot ran dry before this claim went, soon after the last reply landed
            drained = before > 0 and not self.jobs.busy and not self.jobs.ready
            jobs = await self.acks.with_claim(q, want, lease_ms, request, me)  # and the acks due
            if jobs is None:
                jobs, _ = await retry(self.outage, "claim", claim, stop=self.stop)
            if jobs is None:
                return None
            self.stats.claim_calls += 1
            landed = self.loop.time()
            if landed - sent < TUNE_MAX_RTT_S:  # not across an outage's backoff
                consumed = self.jobs.finished - before
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
                self.jobs.accept(q, jobs)
            total += len(jobs)
        self._rr += 1
        return total

    async def _park(self) -> None:
        """Wait on the wake lists until a token arrives, ``poll_ms`` passes (or the time the
        last claim said a limit lifts), the worker stops, or (burst) a held job is released."""
        keys = [q.core.keys.wake for q in self.queues]
        wait_ms = min(self.options.poll_ms, self._retry_in or self.options.poll_ms)
        self.room.clear()
        extra = [self.room.wait()] if self.options.burst else []
        await park(self.blocking, keys, wait_ms, self.outage, self.stop, *extra)

    def event(self, level: str, msg: str, name: str, /, **fields: Any) -> None:
        """One structured log record (:func:`.log.event`)."""
        event(self.log, level, msg, name, **fields)
