"""One run of a worker: its connections, its held jobs, the claim loop and the dispatch.

A :class:`Runner` lives for one :meth:`emq.worker.Worker.run`. The hot path is two script
calls per batch, whatever its size: one ``claim`` for up to the free slots and one
``complete`` for the handlers that finished together. With nothing to claim, the runner parks
on the queues' wake lists (``BLPOP`` on a connection of its own) that enqueue, promote, sweep,
delay, redrive and resume push to, so an idle fleet does not poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..async_queue import AsyncQueue
from ..calls import Claimed
from ..config import QueueOptions
from ..queue import Queue
from .acks import Ack, AckBuffer
from .connect import OUTAGE_ERRORS, ClientFactory, Outage
from .context import JobContext
from .execute import Outcome, failed, run_attempt
from .heartbeat import Heartbeat, Lease
from .maintenance import Maintenance
from .options import HandlerSpec, WorkerOptions, WorkerStats

T = TypeVar("T")


@dataclass(eq=False)
class Held:
    """A job this worker holds a lease on, from claim until its ack (or give-back) lands and
    its handler has returned."""

    queue: AsyncQueue
    claimed: Claimed
    lease: Lease
    ctx: JobContext
    interrupt: asyncio.Future[str]
    running: bool = False
    acked: bool = False
    handler_done: bool = True
    task: asyncio.Task[None] | None = field(default=None, repr=False)


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
        self.outage = Outage(log)
        self.hb = Heartbeat(
            {n: Queue(self.sync, n, options=opt) for n, opt in queues.items()},
            lease_ms=o.lease_ms,
            interval_s=o.beat_ms / 1000,
            on_lost=self._lost_from_thread,
            outage=self.outage,
            log=log,
        )
        self.beat = Maintenance(self.queues, o, stats, self.outage, log)
        self.acks = AckBuffer(self.outage, log, self._acked)
        self.executor = ThreadPoolExecutor(o.concurrency, thread_name_prefix="emq-handler")
        self.jobs: set[Held] = set()
        self.by_lease: dict[Lease, Held] = {}  # an old attempt and a new one may share an id
        self.ready: deque[Held] = deque()
        self.running = 0
        self.room = asyncio.Event()
        self._rr = 0

    async def close(self) -> None:
        self.stop.set()
        self.hb.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)
        await self.client.aclose()
        await self.blocking.aclose()
        self.sync.close()
        self.stats.outages = self.outage.count
        self.stats.uncertain_acks = self.acks.uncertain
        self.stats.heartbeats = self.hb.beats
        self.stats.heartbeat_max_late_ms = round(self.hb.max_late_s * 1000, 1)

    # -- claiming -------------------------------------------------------------------------

    def free(self) -> int:
        return self.options.concurrency + self.options.prefetch - len(self.jobs)

    async def claim_loop(self) -> None:
        """Claim while there is room; park when the queues are empty; return on stop (or,
        in burst mode, once nothing is claimable and nothing is held)."""
        while not self.stop.is_set():
            room = self.free()
            if room <= 0:
                self.room.clear()
                await self.first(self.room.wait())
                continue
            got = await self._claim(room)
            if got is None or got >= room:
                continue
            if self.options.burst and got == 0 and not self.jobs:
                self.event("info", "queue empty: burst run done", "idle")
                return
            await self._park()

    async def _claim(self, room: int) -> int | None:
        total, n = 0, len(self.queues)
        for i in range(n):
            q = self.queues[(self._rr + i) % n]
            want = min(room - total, 1000)
            if want <= 0:
                break
            # one request id for every re-send: a claim whose reply was lost returns its jobs
            request = uuid.uuid4().hex
            claim = functools.partial(q.claim, want, self.options.lease_ms, request=request)
            jobs = await self.retry("claim", claim)
            if jobs is None:
                return None
            for c in jobs:
                self._accept(q, c)
            total += len(jobs)
        self._rr += 1
        return total

    def _accept(self, q: AsyncQueue, c: Claimed) -> None:
        lease = Lease(q.name, c.id, c.token)
        self.hb.add(lease)
        ctx = JobContext(
            queue=q.name,
            id=c.id,
            name=c.name,
            token=c.token,
            attempts=c.attempts,
            stalled=c.stalled,
            beat=self.hb.beat_now,
        )
        job = Held(q, c, lease, ctx, self.loop.create_future())
        self.jobs.add(job)
        self.by_lease[lease] = job
        self.ready.append(job)
        self.stats.claimed += 1
        self.start_ready()

    async def _park(self) -> None:
        """Wait on the wake lists until a token arrives, ``poll_ms`` passes, the worker
        stops, or (burst) a held job is released."""
        keys = [q.core.keys.wake for q in self.queues]
        pop = asyncio.ensure_future(self.blocking.blpop(keys, timeout=self.options.poll_ms / 1000))
        self.room.clear()
        extra = [self.room.wait()] if self.options.burst else []
        await self.first(pop, *extra)
        if not pop.done():
            pop.cancel()
            with contextlib.suppress(asyncio.CancelledError, *OUTAGE_ERRORS):
                await pop
            return
        exc = pop.exception()
        if isinstance(exc, OUTAGE_ERRORS):
            await self.first(asyncio.sleep(self.outage.failed(exc, "park")))
        elif exc is not None:
            raise exc

    async def first(self, *aws: Awaitable[Any]) -> None:
        """Wait for the first of ``aws`` or the stop event. Tasks made here from coroutines
        are cancelled after; futures passed in are left to the caller."""
        tasks = [asyncio.ensure_future(a) for a in aws]
        made = [t for t, a in zip(tasks, aws, strict=True) if t is not a]
        stop = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait([*tasks, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in made:
                t.cancel()
            stop.cancel()

    async def retry(self, where: str, send: Callable[[], Awaitable[T]]) -> T | None:
        """Send until it succeeds, backing off through outages; None once the worker stops."""
        while True:
            try:
                result = await send()
            except OUTAGE_ERRORS as exc:
                await self.first(asyncio.sleep(self.outage.failed(exc, where)))
                if self.stop.is_set():
                    return None
                continue
            self.outage.ok()
            return result

    # -- running --------------------------------------------------------------------------

    def start_ready(self) -> None:
        while self.ready and self.running < self.options.concurrency:
            if self.stop.is_set():
                return  # unstarted jobs are given back by the drain
            job = self.ready.popleft()
            job.running = True
            job.handler_done = False
            self.running += 1
            job.task = self.loop.create_task(self._execute(job), name=f"emq-{job.claimed.id}")

    async def _execute(self, job: Held) -> None:
        c, o = job.claimed, self.options
        spec = self.handlers.get(c.name)
        if spec is None:
            self._handler_done(job)
            error = f"no handler registered for {c.name!r}"
            self._finish(job, failed(None, job.ctx, error, "no_handler", default_backoff=o.backoff))
            return
        timeout = spec.timeout_ms or o.timeout_ms
        self.event("debug", "job started", "run", queue=job.queue.name, job=c.id, name=c.name)
        outcome = await run_attempt(
            spec,
            c.payload,
            job.ctx,
            executor=self.executor,
            timeout_s=timeout / 1000 if timeout else None,
            interrupt=job.interrupt,
            on_done=lambda: self._handler_done(job),
            default_max=o.max_attempts,
            default_backoff=o.backoff,
        )
        if outcome.why == "timeout":
            self.stats.timeouts += 1
        self._finish(job, outcome)

    def _handler_done(self, job: Held) -> None:
        if job.handler_done:
            return
        job.handler_done = True
        self.running -= 1
        self.release(job)
        self.start_ready()

    def _finish(self, job: Held, outcome: Outcome) -> None:
        if outcome.kind == "discard" or job.lease.dropped:
            job.acked = True
            self.release(job)
            return
        self.acks.put(Ack(job.queue, job.lease, outcome))

    def _acked(self, ack: Ack, answer: str) -> None:
        self.hb.drop(ack.lease)
        lease, why = ack.lease, ack.outcome.why
        fields = {"queue": ack.queue.name, "job": lease.id, "token": lease.token}
        if answer == "completed":
            self.stats.completed += 1
            self.event("debug", "job completed", "completed", **fields)
        elif answer == "lost":
            self.count_lost(lease, "complete" if ack.outcome.kind == "complete" else "fail")
        else:
            self.stats.dead += answer == "dead"
            self.stats.retried += answer != "dead"
            error = ack.outcome.error.splitlines()[0] if ack.outcome.error else ""
            level = "warning" if answer == "dead" else "info"
            self.event(level, f"job failed ({why}): {answer}", answer, **fields, error=error)
        job = self.by_lease.get(lease)
        if job is not None:
            job.acked = True
            self.release(job)

    def release(self, job: Held) -> None:
        """Forget a job once its ack landed and its handler returned; wake the claimer."""
        if job.acked and job.handler_done and job in self.jobs:
            self.jobs.discard(job)
            self.by_lease.pop(job.lease, None)
            self.room.set()

    def count_lost(self, lease: Lease, via: str) -> None:
        self.stats.lease_lost += 1
        self.stats.lost_ids = [*self.stats.lost_ids[-999:], lease.id]
        self.event(
            "warning",
            f"lease lost ({via} refused); result discarded",
            "lease_lost",
            queue=lease.queue,
            job=lease.id,
            token=lease.token,
            via=via,
        )

    def _lost_from_thread(self, lease: Lease) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closing
            self.loop.call_soon_threadsafe(self._lease_lost, lease)

    def _lease_lost(self, lease: Lease) -> None:
        """The heartbeat was refused: cancel the attempt, never send its result."""
        self.count_lost(lease, "extend")
        job = self.by_lease.get(lease)
        if job is None:
            return
        job.ctx.cancel("lease_lost")
        if not job.interrupt.done():
            job.interrupt.set_result("lease_lost")
        if not job.running:  # claimed but not started: just forget it
            with contextlib.suppress(ValueError):
                self.ready.remove(job)
            job.acked = True
            self.release(job)

    def event(self, level: str, msg: str, event: str, **fields: Any) -> None:
        """One structured log record: ``record.emq`` holds ``event`` and the fields."""
        lvl = logging.getLevelName(level.upper())
        if self.log.isEnabledFor(lvl):
            self.log.log(lvl, msg, extra={"emq": {"event": event, **fields}})
