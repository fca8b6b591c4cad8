"""What a handler sees of its job: :class:`JobContext`.

The context is safe to use from the handler's own thread (sync handlers) or from the event
loop (async handlers). ``cancelled`` is set when the attempt should stop: its lease was lost,
its timeout passed, the job was cancelled (``Queue.cancel``: the heartbeat's answer says so;
``cancel_reason == "cancelled"``, ``cancel_message`` is the caller's reason), or the worker is
shutting down past its grace period. A handler that
checks it (or calls :meth:`JobContext.heartbeat`) stops early; one that does not simply has
its result discarded.

Durable steps (:meth:`JobContext.step`, :meth:`JobContext.astep`) and :meth:`JobContext.sleep`
let a job run again without redoing what it has done (docs/steps.md; :mod:`.steps` states the
guarantees).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar, overload

from ..calls.control import encode_progress
from ..calls.logs import encode_line
from ..errors import EmqError, InvalidOption, LeaseLost
from ..model.checks import check_int
from .steps import Steps, StepStore

if TYPE_CHECKING:
    from ..calls.flows import Child

_MAKE = threading.Lock()  # orders a lazy ``cancelled`` against a concurrent cancel()
MAX_SLEEP_MS = 366 * 86_400_000  # the longest ctx.sleep: 366 days
P = ParamSpec("P")
T = TypeVar("T")


class Cancelled(EmqError):
    """Raised by :meth:`JobContext.heartbeat` when the attempt was cancelled (timeout,
    ``Queue.cancel`` or shutdown); a handler may let it propagate."""


class Sleeping(Exception):
    """Raised by :meth:`JobContext.sleep`: the worker gives the job back to the schedule for
    ``ms`` (server clock) without counting an attempt, and runs it again then, its recorded
    steps returned instead of run (docs/steps.md). A handler must let it propagate: one that
    swallows it (``except Exception: pass``) goes on as if it had not slept, and the job
    completes when the handler returns."""

    def __init__(self, ms: int) -> None:
        super().__init__(f"sleeping {ms} ms")
        self.ms = ms


class JobContext:
    """One attempt of one job: its id, attempt number, token, and hooks back to the worker.

    ``attempts`` counts this attempt (1 on the first run). ``stalled`` is how many times the
    job's lease has lapsed before. ``token`` is the lease token that fences finishing calls.
    ``lane`` is the job's lane (None for the default lane). ``last_progress`` is the last
    value given to :meth:`progress` (None before the first).
    """

    __slots__ = (
        "_beat",
        "_event",
        "_lines",
        "_loop",
        "_lost",
        "_read_children",
        "_report",
        "_steps",
        "_store",
        "_why",
        "attempts",
        "cancel_message",
        "id",
        "lane",
        "last_progress",
        "name",
        "queue",
        "sleeping",
        "stalled",
        "token",
    )

    def __init__(
        self,
        *,
        queue: str,
        id: str,
        name: str,
        token: int,
        attempts: int,
        stalled: int,
        beat: Callable[[], None],
        lane: str | None = None,
        report: Callable[[str], None] | None = None,
        read_children: Callable[[], Coroutine[Any, Any, list[Child]]] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        lines: Callable[[str], None] | None = None,
        steps: StepStore | None = None,
    ) -> None:
        self.queue = queue
        self.lane = lane
        self.id = id
        self.name = name
        self.token = token
        self.attempts = attempts
        self.stalled = stalled
        self.last_progress: Any = None
        self._report = report  # the worker's progress flusher (None: kept locally only)
        self._lines = lines  # the worker's log flusher (None: ctx.log keeps nothing)
        self._read_children = read_children  # Queue.children of this job, on the worker's loop
        self._loop = loop
        self._store = steps  # where ctx.step records and reads (None: no steps)
        self._steps: Steps | None = None  # made on the first step
        self.sleeping: int | None = None  # the ms of a ctx.sleep asked for (None: none)
        self._beat = beat
        self._why = ""
        self.cancel_message = ""  # Queue.cancel's reason, once cancel_reason is "cancelled"
        self._lost = False
        # made on first use: most async handlers never look, and an Event costs a Condition
        self._event: threading.Event | None = None

    @property
    def cancelled(self) -> threading.Event:
        """Set when the attempt should stop (a ``threading.Event``, usable from threads and
        the loop); :attr:`cancel_reason` says why."""
        event = self._event
        if event is None:
            with _MAKE:
                event = self._event
                if event is None:
                    event = self._event = threading.Event()
                    if self._why:
                        event.set()
        return event

    @property
    def cancel_reason(self) -> str:
        """Why ``cancelled`` is set: ``lease_lost``, ``timeout``, ``shutdown`` or ``cancelled``
        (the job was cancelled: :attr:`cancel_message` holds the reason given) ("" if not)."""
        return self._why

    def cancel(self, why: str, message: str = "") -> None:
        """Set by the worker; handlers do not call this. ``message``: the reason a
        ``Queue.cancel`` gave (``why == "cancelled"``), set before ``cancelled`` is."""
        with _MAKE:
            if not self._why:
                self._why = why
                self.cancel_message = message
            if why == "lease_lost":
                self._lost = True
            event = self._event
        if event is not None:
            event.set()

    def progress(self, value: Any) -> None:
        """Report the job's progress: ``value`` (JSON, at most 64 KiB encoded) becomes the
        job's ``progress`` (``Queue.job(id).progress``) with a ``progress`` event. Checked at
        once (:class:`~emq.errors.InvalidPayload` if it is not JSON); never blocks on the
        server: the worker sends at most one value per job per
        ``WorkerOptions.progress_interval_ms`` (the latest wins) and the last one before the
        job's outcome, fenced by this attempt's lease token. Safe from the handler's thread
        and from the event loop; cheap enough for a tight loop."""
        text = encode_progress(value)
        self.last_progress = value
        report = self._report
        if report is not None:
            report(text)

    def log(self, line: Any) -> None:
        """Add ``line`` to the job's log (``Queue.job_logs(id)``, ``emq job QUEUE ID --logs``),
        kept with the job after it ends for the queue's ``log_ttl_ms``. ``str(line)`` is
        stored (cut to 8 KiB with a ``[truncated from N bytes]`` marker); never raises for
        what it is given and never blocks on the server: the worker sends the lines of its
        jobs in batches (at most one call per ``progress_interval_ms``, and the last lines
        before the job's outcome), fenced by this attempt's lease token. A job keeps its
        newest 1,000 lines. Safe from the handler's thread and from the event loop."""
        text = encode_line(line)
        lines = self._lines
        if lines is not None:
            lines(text)

    def heartbeat(self, progress: Any = None) -> None:
        """Report ``progress`` (if not None: :meth:`progress`) and ask the worker's heartbeat
        to renew this lease now, without waiting for its next beat. Never blocks on the server.

        Raises :class:`~emq.errors.LeaseLost` once the server has refused this lease (the
        job may already run elsewhere; stop and let the result be discarded), or
        :class:`Cancelled` once the attempt timed out, the job was cancelled, or the worker is
        shutting down.
        """
        if progress is not None:
            self.progress(progress)
        if self._lost:
            raise LeaseLost(f"the lease on {self.id} (token {self.token}) was lost")
        if self._why:
            raise Cancelled(f"attempt {self.attempts} of {self.id} was cancelled: {self._why}")
        self._beat()

    def children(self) -> list[Child]:
        """This job's children, if it is a flow's parent (docs/flows.md): each one's ``id``,
        ``status`` and ``result``, in one read from the worker's connection. For a sync
        handler (it waits for the worker's event loop); an async handler awaits
        :meth:`achildren` instead."""
        read, loop = self._read_children, self._loop
        if read is None or loop is None:
            raise EmqError("this context has no queue to read children from")
        if _running() is loop:
            raise EmqError("an async handler reads its children with: await ctx.achildren()")
        return asyncio.run_coroutine_threadsafe(read(), loop).result()

    async def achildren(self) -> list[Child]:
        """:meth:`children` for an async handler."""
        if self._read_children is None:
            raise EmqError("this context has no queue to read children from")
        return await self._read_children()

    def step(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` as the durable step ``name`` of this job and return
        its value. In an async handler (called on the worker's event loop) it returns an
        awaitable instead, the same as :meth:`astep`: ``await ctx.step(...)`` (``astep`` is the
        form mypy types for a plain ``fn``; a step not awaited never runs). On a later run of
        the job (a retry, a recovery, after :meth:`sleep`) a recorded step does not run: its
        recorded value is returned. Guarantees (docs/steps.md, :mod:`emq.worker.steps`): a
        recorded step never runs again for this job; the value is recorded in one script
        call fenced by this attempt's lease token (:class:`~emq.errors.LeaseLost` if it is
        no longer held: nothing recorded); a step that raises is not recorded and its
        exception propagates. The value returned is the JSON round trip of ``fn``'s value
        (:class:`~emq.errors.InvalidPayload`, nothing recorded, if it is not JSON or is over
        the queue's ``max_payload_bytes``). ``name``: 1-200 characters, no control
        character, used once per run (:class:`~emq.errors.InvalidOption` at once if not)."""
        if self._loop is not None and _running() is self._loop:  # an async handler's await
            return self.astep(name, fn, *args, **kwargs)  # type: ignore[return-value]
        return self._book(on_loop=False).run(name, fn, args, kwargs)  # type: ignore[no-any-return]

    @overload
    async def astep(
        self, name: str, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...

    @overload
    async def astep(
        self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...

    async def astep(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """:meth:`step` for an async handler: ``fn`` may be a coroutine function (awaited)
        or a plain one (run on the worker's event loop: keep it short)."""
        return await self._book(on_loop=True).arun(name, fn, args, kwargs)

    def sleep(self, ms: int) -> NoReturn:
        """End this run now and run the job again after ``ms`` (1 ms .. 366 days, on the
        server clock), without counting an attempt and without holding a worker meanwhile:
        raises :class:`Sleeping`, which the worker turns into a give-back to the schedule
        (``delay.lua``). The next run starts the handler from the top, its recorded steps
        returned instead of run (docs/steps.md). The same call in an async handler (no
        ``await`` needed; ``await ctx.sleep(ms)`` raises the same way). A handler must let
        :class:`Sleeping` propagate."""
        check_int("ms", ms, 1, MAX_SLEEP_MS, "ms")
        self.sleeping = ms
        raise Sleeping(ms)

    def _book(self, *, on_loop: bool) -> Steps:
        """This attempt's steps (made on first use); refuses a step after a swallowed
        :meth:`sleep` (re-raised: the run must end) and a step called the wrong way."""
        if self.sleeping is not None:
            raise Sleeping(self.sleeping)
        store, loop = self._store, self._loop
        if store is None or loop is None:
            raise EmqError("this context has no queue to record steps in")
        if not on_loop and _running() is loop:
            raise InvalidOption("an async handler runs its steps with: await ctx.astep(...)")
        steps = self._steps
        if steps is None:
            with _MAKE:
                steps = self._steps
                if steps is None:
                    steps = self._steps = Steps(store, loop, self.id, self.token, (Sleeping,))
        return steps

    def __repr__(self) -> str:
        return f"JobContext({self.queue}/{self.id} {self.name} attempt={self.attempts})"


def _running() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
