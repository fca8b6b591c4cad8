"""Handlers in their own process: ``isolation="process"`` (docs/worker.md, Handlers in their
own process).

A handler registered with ``isolation="process"`` runs in a child process from a pool of its
own (:class:`ChildPool`, at most the worker's ``concurrency`` children). The worker's side of
the attempt is an ordinary sync handler in a pool thread (:class:`ChildCall`): it hands the
payload to an idle child, and waits for the answer while watching the attempt's
``ctx.cancelled``. So the lease is renewed by the worker's heartbeat while the child runs,
exactly as for a thread, and every outcome rule of :mod:`.outcome` applies unchanged.

Guarantees:

- **Timeout and a lost lease kill.** When the attempt is stopped for ``timeout`` or
  ``lease_lost`` the child is sent ``SIGKILL`` at once; the thread returns, so the slot is
  free again (a thread running past its timeout keeps its slot; a child does not).
- **Cancel and shutdown ask first.** For ``cancelled`` and ``shutdown`` the child gets
  ``SIGTERM``, which raises :class:`Stopped` inside the handler (its ``finally`` blocks
  run); a child still alive ``WorkerOptions.cancel_grace_ms`` later is killed.
- **A dead child fails its attempt with the cause** ("the handler's process died: killed by
  SIGKILL (the OOM killer?)", a segfault's SIGSEGV, an exit code), and the next job gets a
  new child. ``max_memory_mb`` caps the child's address space (``RLIMIT_AS``), so a handler
  that eats memory raises ``MemoryError`` and fails its attempt; the worker is not touched.
- ``max_jobs_per_child`` (0: never) recycles a child after that many jobs.

The handler must be importable by reference (a module-level function, or a callable object
that pickles), takes the payload only (no ``ctx``: it lives in the worker's process), and
returns a JSON value; an async handler runs in the child's own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import multiprocessing
import os
import pickle
import signal
import threading
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from ..errors import InvalidOption

POLL_S = 0.05  # how often a waiting thread looks at the attempt's cancel flag
KILL_NOW = frozenset({"timeout", "lease_lost"})
GRACE_S = 5.0


class Stopped(Exception):
    """Raised inside an isolated handler when its worker asks it to stop (``SIGTERM``: a
    cancel, or the worker's shutdown); the child is killed if it has not ended in time."""


class ChildDied(Exception):
    """The handler's process died before it answered (killed, crashed, or exited)."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised in the child, as the child formatted it."""

    def __str__(self) -> str:
        return str(self.args[0])


def _context() -> multiprocessing.context.BaseContext:
    # forkserver: a clean process (the worker has threads: fork would copy their locks)
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _stop(signum: int, frame: Any) -> None:
    raise Stopped("the worker asked the handler to stop")


def _child_main(conn: Connection, max_memory_mb: int) -> None:
    """The child's loop: run each (fn, payload) it is sent, answer ``(ok, value)``."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C stops the worker, which stops us
    if max_memory_mb:
        import resource

        limit = max_memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            fn, payload, is_async = conn.recv()
        except (EOFError, OSError):
            return
        try:
            value = asyncio.run(fn(payload)) if is_async else fn(payload)
            answer: tuple[bool, Any] = (True, value)
        except BaseException as exc:  # every error, Stopped too, is the attempt's outcome
            text = "".join(traceback.format_exception(exc))
            try:
                pickle.dumps(exc)
                answer = (False, (exc, text))
            except Exception:
                answer = (False, (None, text))
        try:
            conn.send(answer)
        except Exception as exc:  # an unpicklable return value
            conn.send((False, (None, f"TypeError: the handler's return value: {exc}")))


class _Child:
    __slots__ = ("conn", "jobs", "process")

    def __init__(self, ctx: multiprocessing.context.BaseContext, max_memory_mb: int) -> None:
        parent, child = ctx.Pipe()
        self.process = ctx.Process(  # type: ignore[attr-defined]
            target=_child_main, args=(child, max_memory_mb), daemon=True, name="emq-handler"
        )
        self.process.start()
        child.close()
        self.conn = parent
        self.jobs = 0

    def signal(self, signum: int) -> None:
        pid = self.process.pid
        if pid is not None and self.process.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def end(self) -> None:
        self.signal(signal.SIGKILL)
        self.process.join(5)
        self.conn.close()

    def died(self) -> str:
        self.process.join(1)
        code = self.process.exitcode
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            hint = " (the OOM killer?)" if -code == signal.SIGKILL else ""
            return f"the handler's process died: killed by {name}{hint}"
        return f"the handler's process died: exit code {code}"


class ChildPool:
    """Idle children of one handler, started on demand and reused."""

    def __init__(self, max_memory_mb: int = 0, max_jobs_per_child: int = 0) -> None:
        self.max_memory_mb = max_memory_mb
        self.max_jobs_per_child = max_jobs_per_child
        self.grace_s = GRACE_S
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self._ctx = _context()
        self.started = 0  # children started, for tests and stats

    def take(self) -> _Child:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.process.is_alive():
                    return child
                child.end()
            self.started += 1
        return _Child(self._ctx, self.max_memory_mb)

    def give_back(self, child: _Child) -> None:
        child.jobs += 1
        if self.max_jobs_per_child and child.jobs >= self.max_jobs_per_child:
            child.end()
            return
        with self._lock:
            self._idle.append(child)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            child.end()


class ChildCall:
    """What a pool thread calls for an isolated handler: ``(payload, ctx) -> value``."""

    def __init__(self, fn: Callable[..., Any], is_async: bool, pool: ChildPool) -> None:
        self.fn, self.is_async, self.pool = fn, is_async, pool

    def __call__(self, payload: Any, ctx: Any) -> Any:
        child = self.pool.take()
        try:
            child.conn.send((self.fn, payload, self.is_async))
            stopping_since: float | None = None
            while not child.conn.poll(POLL_S):
                if not child.process.is_alive():
                    raise ChildDied(child.died())
                why = ctx.cancel_reason if ctx is not None else ""
                if why in KILL_NOW:
                    child.end()
                    raise ChildDied(f"the handler's process was killed: {why}")
                if why and stopping_since is None:
                    child.signal(signal.SIGTERM)
                    stopping_since = _now()
                elif stopping_since is not None and _now() - stopping_since > self.pool.grace_s:
                    child.end()
                    raise ChildDied(f"the handler's process was killed: {why} (past its grace)")
            try:
                ok, value = child.conn.recv()
            except (EOFError, OSError):
                raise ChildDied(child.died()) from None
        except BaseException:
            child.end()
            raise
        self.pool.give_back(child)
        if ok:
            return value
        exc, text = value
        if exc is None:
            raise ChildDied(text.strip().splitlines()[-1] if text.strip() else "no answer")
        raise exc from RemoteTraceback(text)


def _now() -> float:
    import time

    return time.monotonic()


def isolated(
    name: str, fn: Callable[..., Any], takes_ctx: bool, is_async: bool, pool: ChildPool
) -> ChildCall:
    """The call of handler ``name`` in a child process, checked at registration."""
    if takes_ctx:
        raise InvalidOption(
            f"handler {name!r}: isolation='process' runs the handler in another process, "
            "where there is no ctx: take the payload only"
        )
    try:
        pickle.dumps(fn)
    except Exception as exc:
        raise InvalidOption(
            f"handler {name!r}: isolation='process' needs a function the child can import "
            f"(a module-level def, not a lambda or a closure): {exc}"
        ) from None
    if inspect.isgeneratorfunction(fn):
        raise InvalidOption(f"handler {name!r}: a generator cannot be a handler")
    return ChildCall(fn, is_async, pool)
