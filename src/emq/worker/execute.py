"""Running attempts: the slots, one task per async job, the timeout watchdog, and what to
tell the server. No server I/O happens here; outcomes are queued for a batched ack.

Rules (each one tested):

What each way an attempt can end is sent as: :mod:`.outcome` (each rule there is tested).

An attempt's outcome is decided once, by whichever comes first: the handler returning, the
watchdog (timeout), a refused lease, or the shutdown; the job then goes from ``RUNNING`` to
``DECIDED``, or to ``DROPPED`` when its lease was lost (:mod:`.phase`). A slot is held while
the handler runs and freed the moment it returns, before its ack lands; the lease stays held
and heartbeated until then. A sync handler runs in a thread that cannot be killed: on timeout
or shutdown it is told to stop (``ctx.cancelled``) and its result is ignored, but its slot
stays taken until the thread returns, so ``concurrency`` always bounds the threads in use.

Cost per async job: one task (the handler awaited inside it), no future, timer or
``threading.Event`` of its own. Timeouts are one watchdog (:mod:`.watchdog`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Container
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any

from ..calls.results import encode_result
from ..errors import InvalidPayload
from ..model.config import Backoff
from ..model.lanes import DEFAULT_LANE, RateLimited
from .context import JobContext
from .heartbeat import Lease
from .held import Held
from .options import HandlerSpec, Permanent
from .outcome import COMPLETE, DISCARD, ChildComplete, Complete, Fail, Hold, describe
from .outcome import failed as make_fail
from .phase import READY, RUNNING
from .watchdog import Watchdog

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
        renewed: Container[Lease],
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
        self.renewed = renewed  # the heartbeat's leases: one refused meanwhile is gone
        self.busy = 0  # handlers running (slots taken)
        self.live: set[Held] = set()  # jobs whose handler runs (its slot taken)
        self._watchdog = Watchdog(self.loop, self.live, self._timed_out)
        self._arm = self._watchdog.arm

    @property
    def abandoned(self) -> int:
        """Handlers still running after their attempt was decided (a sync handler past its
        timeout or the grace period: a thread cannot be killed). Each keeps its slot."""
        return sum(1 for j in self.live if j.phase is not RUNNING)

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
            job.start()
            if on_start is not None:
                on_start(job)
            spec = job.spec = handlers.get(job.claimed.name)
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
            if job.phase is RUNNING:  # the common case, inlined: returned, decided, slot freed
                self.busy -= 1
                self.live.discard(job)
                if self.keeps_results or job.claimed.parent is not None:
                    self.decide(job, self.completed(job, value))
                else:
                    self.decide(job, COMPLETE)
                self._freed()
                return
            outcome = None  # decided already (timeout, shutdown, cancel): the value is dropped
        self._returned(job)
        if job.phase is RUNNING:
            if outcome is None:  # cancelled by something other than the worker
                outcome = self.fail(job, "cancelled: the handler was cancelled", "error")
            self.decide(job, outcome)

    def _thread_done(self, job: Held, work: Future[Any]) -> None:
        self._returned(job)
        if job.phase is not RUNNING:
            return
        if work.cancelled():
            self.decide(job, self.fail(job, "cancelled: the worker closed", "shutdown"))
            return
        exc = work.exception()
        self.decide(job, self.completed(job, work.result()) if exc is None else
                    self.from_exception(job, exc))  # fmt: skip

    def _returned(self, job: Held) -> None:
        self.busy -= 1
        self.live.discard(job)
        self._freed()

    # -- deciding -------------------------------------------------------------------------

    def decide(self, job: Held, outcome: Outcome) -> None:
        """``job``'s outcome: RUNNING -> DECIDED (READY -> DECIDED: cancelled before it
        started), or -> DROPPED when its lease was refused meanwhile (any outcome is then a
        discard)."""
        if job.phase is READY:
            job.decide_unstarted()
        elif outcome is DISCARD or job not in self.renewed:
            outcome = DISCARD
            job.drop()
        else:
            job.decide()
        self._settle(job, outcome)

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
        if job.task is not None and not job.task.done():
            job.task.cancel()

    def _timed_out(self, job: Held) -> None:
        self.interrupt(job, "timeout")

    def close(self) -> None:
        self._watchdog.close()


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to free
        loop.call_soon_threadsafe(fn, *args)
