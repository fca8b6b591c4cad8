"""Handlers in their own process: ``isolation="process"`` (docs/worker.md, Handlers in their
own process).

A handler registered with ``isolation="process"`` runs in a child process from a pool of its
own (:class:`ChildPool`, at most the worker's ``concurrency`` children). The worker's side of
the attempt is an ordinary sync handler in a pool thread (:class:`ChildCall`): it hands the
payload to an idle child, and waits for the answer while watching the attempt's
``ctx.cancelled``. So the lease is renewed by the worker's heartbeat while the child runs,
exactly as for a thread, and every outcome rule of :mod:`.outcome` applies unchanged.

Guarantees:

- **A child is a fresh interpreter** that imports only emq and the handler's module
  (:mod:`.child`): the script the worker runs from is never run again in a child. A handler
  defined in that script (``__main__``) is refused at registration, with what to change.
- **No child outlives its worker**, however the worker ends: each child watches a lifeline
  pipe that only the worker holds open (:mod:`.child`), and the worker kills every child,
  idle or busy, when its run ends.
- **Timeout and a lost lease kill.** When the attempt is stopped for ``timeout`` or
  ``lease_lost`` the child is sent ``SIGKILL`` at once; the thread returns, so the slot is
  free again (a thread running past its timeout keeps its slot; a child does not).
- **Cancel and shutdown ask first.** For ``cancelled`` and ``shutdown`` the child gets
  ``SIGTERM``, which raises :class:`~.child.Stopped` inside the handler (its ``finally``
  blocks run); a child still alive ``WorkerOptions.cancel_grace_ms`` later is killed.
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

import contextlib
import inspect
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, Pipe
from typing import Any

from ..errors import InvalidOption
from .child import HandlerRef, Stopped

__all__ = ["ChildCall", "ChildDied", "ChildPool", "HandlerRef", "Stopped", "isolated", "ref_of"]

POLL_S = 0.05  # how often a waiting thread looks at the attempt's cancel flag
KILL_NOW = frozenset({"timeout", "lease_lost"})
GRACE_S = 5.0
BOOT = (
    "import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
    "from emq.worker.child import main; main(sys.argv[2:])"
)


class ChildDied(Exception):
    """The handler's process died before it answered (killed, crashed, or exited)."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised in the child, as the child formatted it."""

    def __str__(self) -> str:
        return str(self.args[0])


class _Child:
    """One child process: a connection to send it jobs on, and the lifeline it watches."""

    __slots__ = ("conn", "jobs", "lifeline", "process")

    def __init__(self, max_memory_mb: int) -> None:
        mine, theirs = Pipe(duplex=True)
        read_end, self.lifeline = os.pipe()  # both ends are not inherited by other children
        fds = (theirs.fileno(), read_end)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", BOOT, json.dumps(sys.path), *map(str, fds),
                 str(max_memory_mb)],
                pass_fds=fds, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except BaseException:
            mine.close()
            os.close(self.lifeline)
            raise
        finally:
            theirs.close()
            os.close(read_end)
        self.conn: Connection = mine
        self.jobs = 0

    def alive(self) -> bool:
        return self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)

    def end(self) -> None:
        """Kill it and reap it; safe to call twice."""
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        self.conn.close()
        with contextlib.suppress(OSError):
            os.close(self.lifeline)

    def died(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(1)
        code = self.process.returncode
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            hint = " (the OOM killer?)" if -code == signal.SIGKILL else ""
            return f"the handler's process died: killed by {name}{hint}"
        return f"the handler's process died: exit code {code}"


class ChildPool:
    """The children of one handler: idle ones reused, busy ones known, all killed by
    :meth:`close`."""

    def __init__(self, max_memory_mb: int = 0, max_jobs_per_child: int = 0) -> None:
        self.max_memory_mb = max_memory_mb
        self.max_jobs_per_child = max_jobs_per_child
        self.grace_s = GRACE_S
        self._idle: list[_Child] = []
        self._busy: set[_Child] = set()
        self._lock = threading.Lock()
        self.started = 0  # children started, for tests and stats

    def take(self) -> _Child:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.alive():
                    self._busy.add(child)
                    return child
                child.end()
            self.started += 1
        child = _Child(self.max_memory_mb)
        with self._lock:
            self._busy.add(child)
        return child

    def give_back(self, child: _Child) -> None:
        child.jobs += 1
        with self._lock:
            self._busy.discard(child)
            if not self.max_jobs_per_child or child.jobs < self.max_jobs_per_child:
                self._idle.append(child)
                return
        child.end()

    def drop(self, child: _Child) -> None:
        """Kill a child that will not be given back (it died, or its attempt was stopped)."""
        with self._lock:
            self._busy.discard(child)
        child.end()

    def pids(self) -> list[int]:
        """The process ids of every child alive now, idle or busy."""
        with self._lock:
            return [c.process.pid for c in (*self._idle, *self._busy) if c.alive()]

    def close(self) -> None:
        """Kill every child, idle and busy (a busy one's thread then fails its attempt)."""
        with self._lock:
            every = [*self._idle, *self._busy]
            self._idle, self._busy = [], set()
        for child in every:
            child.end()


class ChildCall:
    """What a pool thread calls for an isolated handler: ``(payload, ctx) -> value``."""

    def __init__(self, target: Any, is_async: bool, pool: ChildPool) -> None:
        self.target, self.is_async, self.pool = target, is_async, pool

    def __call__(self, payload: Any, ctx: Any) -> Any:
        child = self.pool.take()
        try:
            child.conn.send((self.target, payload, self.is_async))
            ok, value = self._wait(child, ctx)
        except BaseException:
            self.pool.drop(child)
            raise
        self.pool.give_back(child)
        if ok:
            return value
        exc, text = value
        if exc is None:
            raise ChildDied(text.strip().splitlines()[-1] if text.strip() else "no answer")
        raise exc from RemoteTraceback(text)

    def _wait(self, child: _Child, ctx: Any) -> tuple[bool, Any]:
        """The child's answer; a stop of the attempt signals it (and kills it in time)."""
        stopping_since: float | None = None
        while True:
            try:
                if child.conn.poll(POLL_S):
                    answer: tuple[bool, Any] = child.conn.recv()
                    return answer
            except (EOFError, OSError):
                raise ChildDied(child.died()) from None
            if not child.alive():
                raise ChildDied(child.died())
            why = ctx.cancel_reason if ctx is not None else ""
            if why in KILL_NOW:
                raise ChildDied(f"the handler's process was killed: {why}")
            if why and stopping_since is None:
                child.signal(signal.SIGTERM)
                stopping_since = time.monotonic()
            elif (
                stopping_since is not None and time.monotonic() - stopping_since > self.pool.grace_s
            ):
                raise ChildDied(f"the handler's process was killed: {why} (past its grace)")


def ref_of(name: str, fn: Callable[..., Any]) -> Any:
    """What a child is sent for ``fn``: a :class:`HandlerRef` for a function (resolved in
    the child, so a decorator may bind the name later), else ``fn`` itself, which must pickle.
    Refused: what a new interpreter cannot import (a lambda, a closure, ``__main__``)."""
    where = getattr(fn, "__module__", None) if inspect.isfunction(fn) else type(fn).__module__
    if where == "__main__":
        raise InvalidOption(
            f"handler {name!r}: isolation='process' runs it in a new process, which imports "
            "it from its module, and it is defined in the script you started (__main__): "
            "move it into a module of its own and import it from there"
        )
    if inspect.isfunction(fn):
        qualname = fn.__qualname__
        if "<" in qualname or where is None:
            raise InvalidOption(
                f"handler {name!r}: isolation='process' needs a function the child can import "
                f"(a module-level def, not a lambda or a closure): {qualname}"
            )
        return HandlerRef(where, qualname)
    try:
        pickle.dumps(fn)
    except Exception as exc:
        raise InvalidOption(
            f"handler {name!r}: isolation='process' needs a function the child can import "
            f"(a module-level def, not a lambda or a closure): {exc}"
        ) from None
    return fn


def isolated(
    name: str, fn: Callable[..., Any], takes_ctx: bool, is_async: bool, pool: ChildPool
) -> ChildCall:
    """The call of handler ``name`` in a child process, checked at registration. ``fn`` is
    the handler itself, or an object that pickles and carries its reference (a task's)."""
    if takes_ctx:
        raise InvalidOption(
            f"handler {name!r}: isolation='process' runs the handler in another process, "
            "where there is no ctx: take the payload only"
        )
    if inspect.isgeneratorfunction(fn):
        raise InvalidOption(f"handler {name!r}: a generator cannot be a handler")
    return ChildCall(ref_of(name, fn), is_async, pool)
