"""The :class:`Worker`: the public face of the runtime.

What runs where: the event loop claims, dispatches and acknowledges (:mod:`.runner`); async
handlers run on it; sync handlers run in a pool of ``concurrency`` threads; leases are renewed
by a dedicated heartbeat thread on its own connection (:mod:`.heartbeat`, which states the
bound a GIL-holding handler puts on it); the maintenance beat promotes and sweeps
(:mod:`.maintenance`); a stop drains (:mod:`.shutdown`). A run's first read waits for a
server that is not up yet (:mod:`.startup`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, Unpack, overload

from ..calls.call import check_job_name
from ..errors import EmqError, InvalidOption
from ..model.config import Backoff, QueueOptions
from ..model.keys import QueueKeys
from ..queue._async.queue import AsyncQueue
from ..queue._sync.queue import Queue
from ..server.durability import check_queues
from ..server.urls import check_url
from . import child
from .connections import ClientFactory
from .options import Handler, HandlerSpec, TaskOptions, WorkerOptions, WorkerStats
from .runner import Runner
from .startup import first_read
from .tasks import BaseTask, BatchTaskDecorator, TaskDecorator, Tasks

F = TypeVar("F", bound=Handler)
QueueLike = str | Queue | AsyncQueue


class Worker:
    """Runs handlers for the jobs of one or more queues.

    ``queues``: a queue name (with ``url``), a :class:`~emq.Queue` or :class:`~emq.AsyncQueue`
    (the worker opens its own connections to the same server), or a list of them (all on one
    server). ``handlers``: job name -> ``handler(payload, ctx)`` or ``handler(payload)``,
    sync or ``async def``; more can be added with :meth:`handler` or :meth:`register`.
    ``tasks``: a :class:`~emq.Tasks` (or several) whose tasks it runs (:meth:`include`).
    ``concurrency``, ``lease_ms`` and ``metrics_port`` (serve this worker's Prometheus
    histograms there while it runs: docs/observability.md) override the same fields of
    ``options``.
    ``queue_options`` apply to the queues given by name (durability, ``allow_eviction``, event
    cap); a :class:`~emq.Queue` given instead brings its own. Either way the settings stored
    with a queue (docs/control.md, Queue settings) win over them.

    Guarantees: a job runs at least once, and only the attempt that holds its lease can
    acknowledge it; a job whose worker dies or outlives its lease is recovered by the sweep
    and runs again (``docs/guarantees.md`` says exactly when). A graceful stop gives back the
    jobs it claimed but did not start without spending an attempt.
    """

    def __init__(
        self,
        queues: QueueLike | Iterable[QueueLike],
        handlers: Mapping[str, Handler] | None = None,
        *,
        url: str | None = None,
        options: WorkerOptions | None = None,
        concurrency: int | None = None,
        lease_ms: int | None = None,
        logger: logging.Logger | None = None,
        queue_options: QueueOptions | None = None,
        metrics_port: int | None = None,
        tasks: Tasks | Iterable[Tasks] | None = None,
    ) -> None:
        items = [queues] if isinstance(queues, str | Queue | AsyncQueue) else list(queues)
        if not items:
            raise InvalidOption("a worker needs at least one queue")
        for item in items:
            if isinstance(item, str):
                QueueKeys.of(item)  # InvalidName now, not at run()
            elif not isinstance(item, Queue | AsyncQueue):
                raise InvalidOption(f"a worker's queues are names or Queue objects, got {item!r}")
        self._targets: list[QueueLike] = items
        self.url = check_url(url) if url is not None else None
        self.options = options or WorkerOptions()
        self.queue_options = queue_options  # None: each queue's stored settings
        self.configure(concurrency=concurrency, lease_ms=lease_ms, metrics_port=metrics_port)
        self.handlers: dict[str, HandlerSpec] = {}
        for name, fn in (handlers or {}).items():
            self.register(name, fn)
        self._tasks: dict[str, Tasks] = {}  # @worker.task's, by queue
        for group in [tasks] if isinstance(tasks, Tasks) else list(tasks or ()):
            self.include(group)
        self.log = logger or logging.getLogger("emq.worker")
        self.stats = WorkerStats()
        self.forced = False
        self._runner: Runner | None = None
        self._lock = threading.Lock()
        self._running = False
        self._stop_asked = False  # stop() before run() had its runner: honoured at start
        self._starting: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def configure(self, **changes: Any) -> None:
        """Replace fields of :attr:`options` (``None`` values are ignored); validated."""
        given = {k: v for k, v in changes.items() if v is not None}
        if given:
            self.options = dataclasses.replace(self.options, **given)

    def register(
        self,
        name: str,
        fn: Handler,
        *,
        max_attempts: int | None = None,
        timeout_ms: int | None = None,
        backoff: Backoff | None = None,
        result_ttl_ms: int | None = None,
        isolation: str = "thread",
        max_memory_mb: int | None = None,
        max_jobs_per_child: int | None = None,
        batch_size: int | None = None,
        batch_wait_ms: int | None = None,
    ) -> None:
        """Register ``fn`` for jobs named ``name``, with an optional retry policy of its own:
        ``max_attempts`` (the job's own, set at enqueue, also applies: the smaller wins),
        ``timeout_ms`` (hard limit of one attempt), ``backoff`` (delay before a retry), and
        ``result_ttl_ms``: keep its return value (JSON) that long, readable with
        ``Queue.result`` (None: the queue's ``result_ttl_ms``; 0: not kept).
        ``isolation="process"`` runs it in a child process that a timeout kills, capped at
        ``max_memory_mb`` and replaced after ``max_jobs_per_child`` jobs (:mod:`.children`).
        ``batch_size`` makes it a batch handler: ``fn`` takes a list of up to that many
        payloads, waiting at most ``batch_wait_ms`` (default 0) after the first of them was
        claimed for more to fill the batch; each job keeps its own lease, attempts and
        outcome (docs/batches.md)."""
        check_job_name(name)
        self.handlers[name] = HandlerSpec.of(
            name, fn, max_attempts=max_attempts, timeout_ms=timeout_ms, backoff=backoff,
            result_ttl_ms=result_ttl_ms, isolation=isolation, max_memory_mb=max_memory_mb,
            max_jobs_per_child=max_jobs_per_child, batch_size=batch_size,
            batch_wait_ms=batch_wait_ms,
        )  # fmt: skip

    def handler(
        self,
        name: str | None = None,
        *,
        max_attempts: int | None = None,
        timeout_ms: int | None = None,
        backoff: Backoff | None = None,
        result_ttl_ms: int | None = None,
        isolation: str = "thread",
        max_memory_mb: int | None = None,
        max_jobs_per_child: int | None = None,
        batch_size: int | None = None,
        batch_wait_ms: int | None = None,
    ) -> Callable[[F], F]:
        """Decorator: ``@worker.handler("send")``; the name defaults to the function's."""

        def deco(fn: F) -> F:
            self.register(
                name or fn.__name__, fn, max_attempts=max_attempts, timeout_ms=timeout_ms,
                backoff=backoff, result_ttl_ms=result_ttl_ms, isolation=isolation,
                max_memory_mb=max_memory_mb, max_jobs_per_child=max_jobs_per_child,
                batch_size=batch_size, batch_wait_ms=batch_wait_ms,
            )  # fmt: skip
            return fn

        return deco

    def include(self, tasks: Tasks) -> None:
        """Run the tasks of ``tasks`` (docs/tasks.md), those made later too; its queue must be
        one of this worker's. A job name that already has another handler is refused."""
        tasks.serve(self.queue_names, self._add_task)

    @overload
    def task(
        self, name: str | None = None, *, queue: str | None = None,
        batch_size: None = None, **options: Unpack[TaskOptions],
    ) -> TaskDecorator: ...  # fmt: skip

    @overload
    def task(
        self, name: str | None = None, *, queue: str | None = None,
        batch_size: int, **options: Unpack[TaskOptions],
    ) -> BatchTaskDecorator: ...  # fmt: skip

    def task(
        self, name: str | None = None, *, queue: str | None = None,
        batch_size: int | None = None, **options: Unpack[TaskOptions],
    ) -> Any:  # fmt: skip
        """Decorator: ``@worker.task()`` makes the function a task of ``queue`` (default: this
        worker's first) that this worker runs: as :meth:`Tasks.task <emq.Tasks.task>`, with
        its keywords, its enqueues sent through the worker's queue object or URL
        (docs/tasks.md)."""
        queue = queue or self.queue_names[0]
        own = self._tasks.get(queue)
        if own is None:
            own = self._tasks[queue] = Tasks(queue, url=self.url, options=self.queue_options)
            for t in self._targets:
                if not isinstance(t, str) and t.name == queue:
                    own.bind(t)
            self.include(own)
        return own.task(name, batch_size=batch_size, **options)

    def _add_task(self, task: BaseTask[Any, Any]) -> None:
        held = self.handlers.get(task.name)
        if held is not None and getattr(held.fn, "fn", held.fn) is not task.handler:
            raise InvalidOption(f"job name {task.name!r} already has a handler on this worker")
        self.register(task.name, task.handler, **task.policy)

    @property
    def queue_names(self) -> list[str]:
        return [t if isinstance(t, str) else t.name for t in self._targets]

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """``(host, port)`` of this worker's metrics endpoint while it runs (the port bound,
        when ``metrics_port`` is 0), else None."""
        run = self._runner
        if run is None or run.observe is None or run.observe.metrics is None:
            return None
        return run.observe.metrics.host, run.observe.metrics.port

    @property
    def needs_url(self) -> bool:
        """True when the worker was given queue names (not queue objects)."""
        return isinstance(self._targets[0], str)

    def stop(self) -> None:
        """Ask for a graceful stop; safe from any thread, at any moment: a stop asked
        before :meth:`run` has started ends that run as soon as it starts."""
        with self._lock:
            runner = self._runner
            if runner is None:
                self._stop_asked = True
                if self._starting is not None:  # waiting for the server: that wait ends
                    loop, stop = self._starting
                    with contextlib.suppress(RuntimeError):  # its loop has closed
                        loop.call_soon_threadsafe(stop.set)
                return
        runner.request_stop()

    def run_sync(self, *, handle_signals: bool = True) -> None:
        """Run in a new event loop until stopped (or, in burst mode, until idle)."""
        asyncio.run(self.run(handle_signals=handle_signals))

    async def run(self, *, handle_signals: bool = False) -> None:
        """Run until :meth:`stop`, SIGTERM/SIGINT (with ``handle_signals``), or, in burst
        mode, until nothing is claimable and nothing is held. A second signal stops at once:
        held leases are left to lapse and the sweep recovers those jobs (``forced`` is set).

        A server that is not up yet when the run starts is waited for like any outage (a burst
        run raises :class:`~emq.errors.ServerUnreachable` at once instead); a refused login
        raises :class:`~emq.errors.AuthenticationFailed` at once. No component dies silently:
        server errors are retried with backoff (logged once per episode); any other failure
        of the claim loop, heartbeat, maintenance or acks stops the worker and raises
        :class:`~emq.errors.WorkerFailed`. A second concurrent run of one worker is refused
        (:class:`~emq.errors.EmqError`).
        """
        if child.IN_CHILD:
            raise EmqError(
                "a worker cannot start inside a handler's child process (isolation='process'): "
                "the handler's module starts one when it is imported; put that under "
                '`if __name__ == "__main__":`'
            )
        with self._lock:
            if self._running:
                raise EmqError("this worker is already running; make another Worker to run twice")
            self._running = True
        try:
            await self._run(handle_signals)
        finally:
            with self._lock:
                self._running, self._runner, self._stop_asked = False, None, False
            for spec in self.handlers.values():  # isolation="process": its idle children
                if spec.children is not None:
                    spec.children.close()

    async def _run(self, handle_signals: bool) -> None:
        factory, stop = self._factory(), asyncio.Event()
        main_thread = threading.current_thread() is threading.main_thread()
        with self._lock:
            self._starting = (asyncio.get_running_loop(), stop)
            if self._stop_asked:
                stop.set()
        try:  # a partitioned queue is served as its partitions
            signals = handle_signals and main_thread
            started = await first_read(
                factory, self._queue_options(), self.options, stop, self.log, signals=signals
            )
        finally:
            with self._lock:
                self._starting = None
        if started is None:
            return  # stopped while it waited for the server: nothing was claimed
        queues, conns = started
        for spec in self.handlers.values():  # a stopped child is killed after the cancel grace
            if spec.children is not None:
                spec.children.grace_s = self.options.cancel_grace_ms / 1000
        try:  # a metrics port in use, say: the connections are closed, not left to leak
            run = Runner(conns, queues, self.handlers, self.options, self.stats, self.log)
        except BaseException:
            await conns.close()
            raise
        with self._lock:
            self._runner = run
            if self._stop_asked:
                run.stop.set()
        try:
            await check_queues(run.client, queues)  # UnsafeServer before anything is claimed
        except BaseException:
            await run.close()
            raise
        try:
            await run.run(self.queue_names, handle_signals and main_thread)
        finally:
            self.forced = run.forced

    def _factory(self) -> ClientFactory:
        first = self._targets[0]
        if isinstance(first, str):
            if self.url is None:
                raise InvalidOption("a worker given queue names needs url= (or Queue objects)")
            return ClientFactory(url=self.url)
        return ClientFactory(like=first.client)

    def _queue_options(self) -> dict[str, QueueOptions | None]:
        """What each queue was opened with (None: nothing), so the stored settings of the
        queue decide the rest (docs/control.md, Queue settings)."""
        out: dict[str, QueueOptions | None] = {}
        for t in self._targets:
            out[t if isinstance(t, str) else t.name] = (
                self.queue_options if isinstance(t, str) else t._asked
            )
        return out
