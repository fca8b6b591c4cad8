"""Batch handlers: many jobs of one name, one handler call (docs/batches.md).

A handler registered with ``batch_size=N`` takes a list of up to N payloads. Batching is the
worker's business alone: producers enqueue single jobs, every job is claimed, leased,
renewed, retried, dead-lettered and acknowledged on its own (G1-G6 hold per job), and the
server's limits and rate limits count each job, since each one is claimed.

- **Filling** (:class:`Batches`): a claimed job of a batch handler waits, ``READY`` (held and
  renewed like any claimed job), until its name's batch holds N jobs or ``batch_wait_ms`` has
  passed since the first of them was claimed. Jobs of one name are batched in the order their
  claims returned them, which is the queue's claim order (enqueue order within a lane).
- **Running** (:class:`BatchRuns`): a due batch takes one slot of ``concurrency``; every job
  of it goes ``RUNNING`` together, each with its own timeout. The handler's return completes
  every job still running; a raise fails each with the same error (each counts one attempt);
  a :class:`BatchResult` settles them one by one. A job decided meanwhile (its timeout, a
  cancel's grace period, a lost lease) keeps that outcome; the batch's task is cancelled only
  once no job of it is still running.
- **Stopping:** a stop gives back the jobs still filling a batch, unspent, as it does any
  job claimed and not started. A worker killed mid-batch leaves every job of it leased, so
  the sweep recovers each once (G2) and counts one stall for each (G3).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor as Pool
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import InvalidOption
from ..model.records import UnreadablePayload
from .context import Cancelled, JobContext
from .held import Held
from .log import in_job
from .options import HandlerSpec
from .outcome import describe
from .phase import RUNNING
from .watchdog import call_soon_from_thread

if TYPE_CHECKING:
    from .hooks import Hooks
    from .outcome import Outcome


class Slots(Protocol):
    """What a batch's run uses of its executor (:class:`~.execute.Executor` is one): its
    slots, pool, watchdog and the outcomes of attempts."""

    busy: int
    finished: int
    live: set[Held]
    loop: asyncio.AbstractEventLoop
    pool: Pool
    hooks: Hooks
    room: asyncio.Event
    timeout_ms: int | None

    def arm(self, job: Held, now: float, timeout_ms: int, /) -> None: ...

    def crash(self, part: str, bug: BaseException, /) -> None: ...

    def fail(self, job: Held, error: str, why: str, /, *, retry: bool = True) -> Outcome: ...

    def completed(self, job: Held, value: Any, /) -> Outcome: ...

    def from_exception(self, job: Held, exc: BaseException, /) -> Outcome: ...

    def decide(self, job: Held, outcome: Outcome) -> None: ...

    def start_ready(self) -> None: ...


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What a batch handler returns to settle its jobs one by one, in one return.

    Jobs are named by their index in the list of payloads the handler got. ``retry``: each
    named job fails this attempt with its error (a string or an exception) and is retried by
    its policy, dead-lettered once its attempts are spent. ``fail``: each named job fails
    with no retry: dead now (as :class:`~emq.Permanent` does). Every other job completes,
    with ``results[i]`` as its result when ``results`` is given (one value per job).
    """

    results: Sequence[Any] | None = None
    retry: Mapping[int, str | BaseException] = field(default_factory=dict)
    fail: Mapping[int, str | BaseException] = field(default_factory=dict)

    def check(self, size: int) -> None:
        """Refuse a result that does not fit a batch of ``size`` jobs (a bug in the handler:
        the whole batch then fails as if it had raised this)."""
        if self.results is not None and len(self.results) != size:
            raise InvalidOption(
                f"BatchResult.results has {len(self.results)} values for a batch of {size} jobs"
            )
        for label, named in (("retry", self.retry), ("fail", self.fail)):
            for i in named:
                if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < size:
                    raise InvalidOption(
                        f"BatchResult.{label} names job {i!r}; a batch of {size} jobs has "
                        f"indexes 0..{size - 1}"
                    )
        both = set(self.retry) & set(self.fail)
        if both:
            raise InvalidOption(f"BatchResult names jobs {sorted(both)} in both retry and fail")


class BatchContext:
    """What a batch handler sees of its batch: ``jobs``, the :class:`~emq.JobContext` of
    each job in the order of the payloads (its id, attempt, ``cancelled``, ``progress``,
    ``log``). A job of the batch cancelled by ``Queue.cancel`` sees its own ``cancelled``
    set; the handler may skip it (whatever it returns for it, that job ends cancelled)."""

    __slots__ = ("jobs",)

    def __init__(self, jobs: Sequence[JobContext]) -> None:
        self.jobs = tuple(jobs)

    @property
    def ids(self) -> list[str]:
        return [j.id for j in self.jobs]

    @property
    def stopping(self) -> bool:
        """True once every job of the batch was told to stop (its timeout, the shutdown, a
        lost lease or a cancel): nothing the handler does now is kept."""
        return bool(self.cancel_reason)

    @property
    def cancel_reason(self) -> str:
        """Why the whole batch should stop (the first job's reason), once every job of it
        was told to; "" while one still runs (a child process is stopped only then)."""
        reasons = [j.cancel_reason for j in self.jobs]
        return reasons[0] if all(reasons) else ""

    def heartbeat(self) -> None:
        """Renew every lease of the batch now (one beat renews them all). Raises
        :class:`~emq.worker.context.Cancelled` once every job of the batch was told to stop."""
        for job in self.jobs:
            if not job.cancel_reason:
                job.heartbeat()
                return
        raise Cancelled(f"every job of the batch ({len(self.jobs)}) was told to stop")

    def __repr__(self) -> str:
        return f"BatchContext({len(self.jobs)} jobs of {self.jobs[0].name if self.jobs else '-'})"


class Batches:
    """Claimed jobs of batch handlers waiting for their batch to fill, by job name. A
    name's batch is due once it holds ``batch_size`` jobs or its first job has waited
    ``batch_wait_ms``; ``wake`` is called (on the loop) when a wait runs out, and an error of
    it goes to ``crash`` (the run stops loudly, never a timer's silent log line)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        wake: Callable[[], None],
        crash: Callable[[str, BaseException], None],
    ) -> None:
        self._loop = loop
        self._wake = wake
        self._crash = crash
        self._waiting: dict[str, list[tuple[Held, float]]] = {}  # name -> (job, claimed at)
        self._specs: dict[str, HandlerSpec] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._due: dict[str, None] = {}  # names whose batch is due, in the order they became so
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def due(self) -> bool:
        return bool(self._due)

    def add(self, job: Held, spec: HandlerSpec) -> None:
        name = spec.name
        waiting = self._waiting.setdefault(name, [])
        waiting.append((job, self._loop.time()))
        self._specs[name] = spec
        self._count += 1
        if len(waiting) == 1 or len(waiting) >= (spec.batch_size or 1):
            self._arm(name)

    def _arm(self, name: str) -> None:
        """Due now if full or its first job's wait is over, else a timer for that moment."""
        spec, waiting = self._specs[name], self._waiting[name]
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()
        at = waiting[0][1] + spec.batch_wait_ms / 1000
        if len(waiting) >= (spec.batch_size or 1) or at <= self._loop.time():
            self._due[name] = None
        else:
            self._timers[name] = self._loop.call_at(at, self._expire, name)

    def _expire(self, name: str) -> None:
        self._timers.pop(name, None)
        if self._waiting.get(name):
            self._due[name] = None
            try:
                self._wake()
            except Exception as bug:
                self._crash("batches", bug)

    def take(self) -> tuple[list[Held], HandlerSpec]:
        """The first due batch (call only while :attr:`due`): up to ``batch_size`` jobs, in
        claim order; what is left of that name waits on, from its own first claim."""
        name = next(iter(self._due))
        del self._due[name]
        spec, waiting = self._specs[name], self._waiting[name]
        size = spec.batch_size or 1
        batch, rest = waiting[:size], waiting[size:]
        self._count -= len(batch)
        if rest:
            self._waiting[name] = rest
            self._arm(name)
        else:
            del self._waiting[name]
        return [job for job, _ in batch], spec

    def discard(self, job: Held) -> bool:
        """Take ``job`` out (a cancel before it started, a lost lease): True if it was here."""
        name = job.claimed.name  # a batch handler's name is its jobs' name
        waiting = self._waiting.get(name, [])
        for i, (held, _) in enumerate(waiting):
            if held is job:
                del waiting[i]
                self._count -= 1
                if waiting:
                    self._arm(name)
                else:
                    self._forget(name)
                return True
        return False

    def take_all(self) -> list[Held]:
        """Every waiting job (a stop gives them back)."""
        jobs = [job for waiting in self._waiting.values() for job, _ in waiting]
        for name in list(self._waiting):
            self._forget(name)
        self._count = 0
        return jobs

    def _forget(self, name: str) -> None:
        self._waiting.pop(name, None)
        self._due.pop(name, None)
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


class BatchRuns:
    """The run of a due batch, for its :class:`~.execute.Executor` (whose slots, pool,
    watchdog and outcomes it uses): start, the handler's call, and each job's outcome."""

    def __init__(self, executor: Slots) -> None:
        self.x = executor

    def start(self, jobs: list[Held], spec: HandlerSpec) -> None:
        """Every job of the batch RUNNING (a job whose stored payload is not JSON fails on
        its own, no retry), one slot taken, each job's timeout armed, the handler called."""
        x = self.x
        members: list[Held] = []
        for job in jobs:
            job.start()
            job.spec = spec
            for hook in x.hooks.on_start:
                hook(job)
            if isinstance(job.claimed.payload, UnreadablePayload):
                error = f"the stored payload is not JSON ({job.claimed.payload.why})"
                x.decide(job, x.fail(job, error, "bad_payload", retry=False))
                continue
            members.append(job)
        if not members:
            return
        batch = tuple(members)
        x.busy += 1
        x.room.set()  # its jobs now hold one slot, not one each: the claimer may take more
        now, timeout = x.loop.time(), spec.timeout_ms or x.timeout_ms
        for job in batch:
            job.batch = batch
            x.live.add(job)
            if timeout:
                x.arm(job, now, timeout)
        ctx = BatchContext([j.ctx for j in batch]) if spec.takes_ctx else None
        payloads = [j.claimed.payload for j in batch]
        if spec.is_async:
            task = x.loop.create_task(self._run_async(batch, spec, payloads, ctx))
            for job in batch:
                job.task = task
            return
        try:
            work = x.pool.submit(in_job, batch[0], spec.call, payloads, ctx)
        except RuntimeError as exc:  # the pool was shut down: the worker is closing
            self._returned(batch)
            self._settle(batch, None, exc, why="shutdown")
            return
        loop, done = x.loop, self._thread_done
        work.add_done_callback(lambda w: call_soon_from_thread(loop, done, batch, w))

    async def _run_async(
        self, batch: tuple[Held, ...], spec: HandlerSpec, payloads: list[Any], ctx: Any
    ) -> None:
        try:
            try:
                value = await (spec.fn(payloads, ctx) if spec.takes_ctx else spec.fn(payloads))
            except asyncio.CancelledError:
                self._returned(batch)
                error = asyncio.CancelledError("cancelled: the handler was cancelled")
                self._settle(batch, None, error, why="error")
                return
            except Exception as exc:
                self._returned(batch)
                self._settle(batch, None, exc)
                return
            self._returned(batch)
            self._settle(batch, value, None)
        except Exception as bug:  # an error of the story itself stops the run
            self.x.crash("executor", bug)

    def _thread_done(self, batch: tuple[Held, ...], work: Future[Any]) -> None:
        try:
            self._returned(batch)
            if work.cancelled():
                error = RuntimeError("cancelled: the worker closed")
                self._settle(batch, None, error, why="shutdown")
                return
            exc = work.exception()
            self._settle(batch, work.result() if exc is None else None, exc)
        except Exception as bug:
            self.x.crash("executor", bug)

    def _returned(self, batch: tuple[Held, ...]) -> None:
        """The handler returned: its slot is free (the acks may still be on their way)."""
        x = self.x
        x.busy -= 1
        for job in batch:
            x.live.discard(job)
        x.finished += len(batch)
        x.start_ready()
        x.room.set()

    def _settle(
        self, batch: tuple[Held, ...], value: Any, exc: BaseException | None, why: str = ""
    ) -> None:
        """Each job still RUNNING gets its outcome from the handler's return or raise."""
        if exc is None and isinstance(value, BatchResult):
            try:
                value.check(len(batch))
            except InvalidOption as bad:
                exc = bad
        for i, job in enumerate(batch):
            if job.phase is RUNNING:
                self.x.decide(job, self._outcome(job, i, value, exc, why))

    def _outcome(
        self, job: Held, i: int, value: Any, exc: BaseException | None, why: str
    ) -> Outcome:
        x = self.x
        if exc is not None:
            if why:
                return x.fail(job, str(exc) or describe(exc), why)
            return x.from_exception(job, exc)
        if isinstance(value, BatchResult):
            if i in value.retry:
                return x.fail(job, _error(value.retry[i]), "error")
            if i in value.fail:
                return x.fail(job, _error(value.fail[i]), "permanent", retry=False)
            value = None if value.results is None else value.results[i]
        elif isinstance(value, list | tuple) and len(value) == len(job.batch or ()):
            value = value[i]
        return x.completed(job, value)


def _error(given: str | BaseException) -> str:
    return describe(given) if isinstance(given, BaseException) else str(given)
