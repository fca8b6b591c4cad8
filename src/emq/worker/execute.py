"""Running attempts: the slots, one task per async job, the timeout watchdog, and what to
tell the server. No server I/O happens here; outcomes are queued for a batched ack.

Rules (each one tested):

What each way an attempt can end is sent as: :mod:`.outcome` (each rule there is tested).

An attempt's outcome is decided once (``settled``), by whichever comes first: the handler
returning, the watchdog (timeout), a refused lease, or the shutdown. A slot is held while the
handler runs and freed the moment it returns, before its ack lands; the lease stays held and
heartbeated until then. A sync handler runs in a thread that cannot be killed: on timeout or
shutdown it is told to stop (``ctx.cancelled``) and its result is ignored, but its slot stays
taken until the thread returns, so ``concurrency`` always bounds the threads in use.

Cost per async job: one task (the handler awaited inside it), no future, timer or
``threading.Event`` of its own. Timeouts are one watchdog: the deadlines in one deque per
distinct limit (they only grow there) and a single timer armed for the earliest.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any

from ..calls.results import encode_result
from ..errors import InvalidPayload
from ..model.config import Backoff
from ..model.lanes import DEFAULT_LANE, RateLimited
from ..model.records import Claimed
from ..queue._async.queue import AsyncQueue
from .context import JobContext
from .heartbeat import Lease
from .options import HandlerSpec, Permanent
from .outcome import COMPLETE, DISCARD, ChildComplete, Complete, Discard, Fail, Hold, describe
from .outcome import failed as make_fail

if TYPE_CHECKING:
    from .outcome import Outcome
else:
    from .outcome import of_kind as Outcome  # the constructor by kind string (tests/control)


def failed(
    spec: HandlerSpec | None,
    ctx: JobContext,
    error: str,
    why: str,
    *,
    retry: bool = True,
    default_max: int | None = None,
    default_backoff: Backoff | None = None,
) -> Fail:
    limit = (spec.max_attempts if spec else None) or default_max
    backoff = (spec.backoff if spec else None) or default_backoff
    return make_fail(ctx.attempts, limit, backoff, error, why, retry=retry)


class Held(Lease):
    """A job this worker holds a lease on, from claim until its ack (or give-back) lands.
    It is its own heartbeat :class:`Lease` (renewed until then). Its :class:`JobContext` is
    made on first use: a handler that takes only the payload never needs one."""

    __slots__ = (
        "_beat",
        "_ctx",
        "_report",
        "claimed",
        "context",
        "deadline",
        "q",
        "returned",
        "settled",
        "span",
        "spec",
        "started",
        "started_at",
        "task",
    )

    def __init__(
        self,
        q: AsyncQueue,
        name: str,
        claimed: Claimed,
        beat: Callable[[], None],
        report: Callable[[Lease, str], None] | None = None,
    ) -> None:
        self.queue = name
        self.id = claimed.id
        self.token = claimed.token
        self.finishing = False
        self.dropped = False
        self.q = q
        self.claimed = claimed
        self._beat = beat
        self._report = report  # ctx.progress's sink: the worker's progress flusher
        self._ctx: JobContext | None = None
        self.spec: HandlerSpec | None = None
        self.task: asyncio.Task[None] | None = None
        self.deadline = 0.0  # loop time past which the attempt times out (if it has a limit)
        self.started = False  # its handler was started (a slot taken)
        self.returned = False  # its handler returned (the slot is free again)
        self.settled = False  # its outcome is decided (queued for the server, or discarded)
        # set only by an observer (.observe: metrics or tracing): the handler's start (loop
        # time), its consumer span, and the context the handler runs in (the span current)
        self.started_at = 0.0
        self.span: Any = None
        self.context: contextvars.Context | None = None

    @property
    def ctx(self) -> JobContext:
        ctx = self._ctx
        if ctx is None:
            c = self.claimed
            ctx = self._ctx = JobContext(
                queue=self.queue,
                id=c.id,
                name=c.name,
                token=c.token,
                attempts=c.attempts,
                stalled=c.stalled,
                beat=self._beat,
                lane=c.lane,
                report=None if self._report is None else functools.partial(self._report, self),
                read_children=functools.partial(self.q.children, c.id),
                loop=asyncio.get_running_loop(),
            )
        return ctx


Settle = Callable[[Held, "Outcome"], None]


class Slots:
    """Starts ready jobs while fewer than ``concurrency`` handlers run; decides outcomes.

    ``settle(job, outcome)`` is called exactly once per started job; ``freed()`` each time a
    handler returns (its slot is free)."""

    def __init__(
        self,
        handlers: dict[str, HandlerSpec],
        *,
        concurrency: int,
        timeout_ms: int | None,
        default_max: int | None,
        default_backoff: Backoff | None,
        executor: Executor,
        settle: Settle,
        freed: Callable[[], None],
        keeps_results: bool = True,
    ) -> None:
        self.handlers = handlers
        # False when no queue and no handler keeps results: a return value is then ignored
        # without a call per job (the plain path)
        self.keeps_results = keeps_results
        self.concurrency = concurrency
        self.timeout_ms = timeout_ms
        self.default_max = default_max
        self.default_backoff = default_backoff
        self.executor = executor
        self._settle = settle
        self._freed = freed
        self.loop = asyncio.get_running_loop()
        self.busy = 0  # handlers running (slots taken)
        self.live: set[Held] = set()  # started, and not both returned and settled
        self._due: dict[int, deque[Held]] = {}  # limit (ms) -> jobs in deadline order
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    @property
    def abandoned(self) -> int:
        """Handlers still running after their attempt was decided (a sync handler past its
        timeout or the grace period: a thread cannot be killed). Each keeps its slot."""
        return sum(1 for j in self.live if j.settled and not j.returned)

    def fail(self, job: Held, error: str, why: str, *, retry: bool = True) -> Fail:
        return failed(
            job.spec,
            job.ctx,
            error,
            why,
            retry=retry,
            default_max=self.default_max,
            default_backoff=self.default_backoff,
        )

    def completed(self, job: Held, value: Any) -> Complete | ChildComplete | Fail:
        """The handler returned ``value``: ``COMPLETE``, or, when its handler or its queue
        keeps results, a complete carrying the value's JSON text (a flow's child's always
        carries it, for its parent: :class:`ChildComplete`). A value that is not JSON
        fails the attempt with no retry (the handler ran; its result cannot be kept)."""
        spec, options = job.spec, job.q.core.options
        ttl = options.result_ttl_ms
        if spec is not None and spec.result_ttl_ms is not None:
            ttl = spec.result_ttl_ms
        if not ttl and job.claimed.parent is None:
            return COMPLETE
        try:
            text = encode_result(value, options.max_payload_bytes)
        except InvalidPayload as exc:
            return self.fail(job, str(exc), "bad_result", retry=False)
        if not ttl:  # a flow's child: its result is kept for its parent only
            return ChildComplete(text)
        return Complete(text, ttl)

    def from_exception(self, job: Held, exc: BaseException) -> Fail | Hold:
        if isinstance(exc, RateLimited):
            lane = "*" if exc.whole_queue else exc.lane or job.claimed.lane or DEFAULT_LANE
            return Hold(str(exc), exc.retry_in_ms, lane)
        if isinstance(exc, Permanent):
            return self.fail(job, describe(exc), "permanent", retry=False)
        return self.fail(job, describe(exc), "error")

    # -- starting -------------------------------------------------------------------------

    def start_ready(self, ready: deque[Held], on_start: Callable[[Held], None] | None) -> None:
        """Start jobs from ``ready`` while a slot is free (``on_start`` sees each first)."""
        handlers, loop, live, limit = self.handlers, self.loop, self.live, self.concurrency
        now = loop.time()
        while ready and self.busy < limit:
            job = ready.popleft()
            if on_start is not None:
                on_start(job)
            spec = job.spec = handlers.get(job.claimed.name)
            job.started = True
            if spec is None or not spec.is_async:
                self._start_other(job, spec, now)
                continue
            self.busy += 1
            live.add(job)
            timeout = spec.timeout_ms or self.timeout_ms
            if timeout:
                self._arm(job, now, timeout)
            coro = self._run_async(job, spec.fn, spec.takes_ctx)
            if job.context is None:
                job.task = loop.create_task(coro)
            else:  # traced: the handler runs with its consumer span current
                job.task = loop.create_task(coro, context=job.context)

    def _start_other(self, job: Held, spec: HandlerSpec | None, now: float) -> None:
        """A job with no handler (fails at once, takes no slot) or a sync one (a thread)."""
        if spec is None:
            job.returned = True
            error = f"no handler registered for {job.claimed.name!r}"
            self.decide(job, self.fail(job, error, "no_handler"))
            return
        self.busy += 1
        self.live.add(job)
        timeout = spec.timeout_ms or self.timeout_ms
        if timeout:
            self._arm(job, now, timeout)
        try:
            call, payload = spec.call, job.claimed.payload
            if job.context is None:
                work = self.executor.submit(call, payload, job.ctx)
            else:  # traced: the handler runs with its consumer span current
                work = self.executor.submit(job.context.run, call, payload, job.ctx)
        except RuntimeError as exc:  # the pool was shut down: the worker is closing
            self._returned(job)
            self.decide(job, self.fail(job, describe(exc), "shutdown"))
            return
        work.add_done_callback(lambda w: _call_soon(self.loop, self._thread_done, job, w))

    async def _run_async(self, job: Held, fn: Callable[..., Any], with_ctx: bool) -> None:
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
            if not job.settled:  # the common case, inlined: returned, settled, slot freed
                job.returned = job.settled = True
                self.busy -= 1
                self.live.discard(job)
                done: Outcome = DISCARD if job.dropped else COMPLETE
                if (self.keeps_results or job.claimed.parent is not None) and done is COMPLETE:
                    done = self.completed(job, value)
                self._settle(job, done)
                self._freed()
                return
            outcome = self.completed(job, value)
        self._returned(job)
        if not job.settled:
            if outcome is None:  # cancelled by something other than the worker
                outcome = self.fail(job, "cancelled: the handler was cancelled", "error")
            self.decide(job, outcome)

    def _thread_done(self, job: Held, work: Future[Any]) -> None:
        self._returned(job)
        if job.settled:
            return
        if work.cancelled():
            self.decide(job, self.fail(job, "cancelled: the worker closed", "shutdown"))
            return
        exc = work.exception()
        self.decide(job, self.completed(job, work.result()) if exc is None else
                    self.from_exception(job, exc))  # fmt: skip

    def _returned(self, job: Held) -> None:
        job.returned = True
        self.busy -= 1
        if job.settled:
            self.live.discard(job)
        self._freed()

    # -- deciding -------------------------------------------------------------------------

    def decide(self, job: Held, outcome: Outcome) -> None:
        """Settle ``job`` once; a lease refused meanwhile turns any outcome into a discard."""
        if job.settled:
            return
        job.settled = True
        if job.returned:
            self.live.discard(job)
        if job.dropped and not isinstance(outcome, Discard):
            outcome = DISCARD
        self._settle(job, outcome)

    def interrupt(self, job: Held, why: str) -> None:
        """Stop an attempt: ``timeout``, ``shutdown`` or ``lease_lost``. Its outcome is
        decided now; an async handler is cancelled, a sync one told (``ctx.cancelled``)."""
        if job.settled:
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
        if job.task is not None and not job.task.done():
            job.task.cancel()

    # -- the timeout watchdog -------------------------------------------------------------

    def _arm(self, job: Held, now: float, timeout_ms: int) -> None:
        """One deque per distinct limit: deadlines in it only grow, so the earliest is at
        its front. Entries of settled jobs are skipped, and dropped when a deque grows past
        twice the live jobs (amortised O(1) per job)."""
        at = job.deadline = now + timeout_ms / 1000
        due = self._due.get(timeout_ms)
        if due is None:
            due = self._due[timeout_ms] = deque()
        due.append(job)
        if len(due) > 2 * len(self.live) + 64:
            self._due[timeout_ms] = deque(j for j in due if not j.settled)
        if self._timer is None or at < self._timer_at:
            self._schedule(at)

    def _schedule(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self.loop.call_at(at, self._expire)

    def _expire(self) -> None:
        self._timer = None
        now, fronts = self.loop.time(), []
        for due in self._due.values():
            while due and (due[0].settled or due[0].deadline <= now):
                job = due.popleft()
                if not job.settled:
                    self.interrupt(job, "timeout")
            if due:
                fronts.append(due[0].deadline)
        if fronts:
            self._schedule(min(fronts))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to free
        loop.call_soon_threadsafe(fn, *args)
