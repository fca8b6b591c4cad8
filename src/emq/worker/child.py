"""The program a handler's child process runs (``isolation="process"``, :mod:`.children`).

The worker starts it as a fresh interpreter (``python -c`` with this module's :func:`main`),
never as a fork and never through :mod:`multiprocessing`, so a child imports only emq and the
modules its handlers live in: the script the worker was started from (``__main__``) is never
run again in a child, guarded or not.

Guarantees:

- **It never outlives its worker.** It holds the read end of a pipe (the *lifeline*) whose
  write end only the worker holds; however the worker ends (a clean exit, a second signal,
  ``SIGKILL``), the kernel closes that end, and a thread of the child that waits on the
  lifeline ends the child at once, even while a handler runs.
- **A handler is found by reference** (:class:`HandlerRef`: its module and qualified name),
  resolved in the child at its first job, so a decorator may bind the name after it
  registered the function, or bind it to a task object (a task's function is taken from it).
- ``SIGTERM`` raises :class:`Stopped` inside the running handler (its ``finally`` blocks run);
  ``SIGINT`` is ignored (a ``^C`` on the terminal stops the worker, which stops its children).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import pickle
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

TASK_FUNCTION = "__emq_function__"  # a task object's attribute that holds its function
IN_CHILD = False  # True in a handler's child: a Worker started there is refused (runtime.py)


class Stopped(Exception):
    """Raised inside an isolated handler when its worker asks it to stop (``SIGTERM``: a
    cancel, or the worker's shutdown); the child is killed if it has not ended in time."""


@dataclass(frozen=True, slots=True)
class HandlerRef:
    """A module-level callable by name: what a child imports instead of unpickling code."""

    module: str
    qualname: str

    def load(self) -> Any:
        """The callable this names; a task object (``@tasks.task``) gives its function."""
        target: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            target = getattr(target, part)
        return getattr(target, TASK_FUNCTION, target)

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}"


class Resolved:
    """A child's handlers, each loaded once by its reference."""

    def __init__(self) -> None:
        self._loaded: dict[HandlerRef, Any] = {}

    def get(self, target: Any) -> Any:
        if not isinstance(target, HandlerRef):
            return target
        fn = self._loaded.get(target)
        if fn is None:
            fn = self._loaded[target] = target.load()
        return fn


def _stop(signum: int, frame: Any) -> None:
    raise Stopped("the worker asked the handler to stop")


def _watch_lifeline(fd: int) -> None:
    """Block on the lifeline; its EOF means the worker is gone: end this process now."""
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        pass
    os._exit(70)


def _answer(fn: Any, payload: Any, is_async: bool) -> tuple[bool, Any]:
    try:
        value = asyncio.run(fn(payload)) if is_async else fn(payload)
        return True, value
    except BaseException as exc:  # every error, Stopped too, is the attempt's outcome
        text = "".join(traceback.format_exception(exc))
        try:
            pickle.dumps(exc)
            return False, (exc, text)
        except Exception:
            return False, (None, text)


def serve(conn: Connection, max_memory_mb: int) -> None:
    """The child's loop: run each ``(target, payload, is_async)`` it is sent, answer
    ``(ok, value)``; ends when the worker closes the connection."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if max_memory_mb:
        import resource

        limit = max_memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    handlers = Resolved()
    while True:
        try:
            target, payload, is_async = conn.recv()
        except (EOFError, OSError, Stopped):
            return
        try:
            fn = handlers.get(target)
        except BaseException as exc:
            answer: tuple[bool, Any] = (False, (None, f"cannot load the handler {target}: "
                                                      f"{type(exc).__name__}: {exc}"))  # fmt: skip
        else:
            answer = _answer(fn, payload, is_async)
        try:
            conn.send(answer)
        except Exception as exc:  # an unpicklable return value
            conn.send((False, (None, f"TypeError: the handler's return value: {exc}")))


def main(argv: list[str]) -> None:
    """``main([conn_fd, lifeline_fd, max_memory_mb])``, as :mod:`.children` starts it."""
    global IN_CHILD
    conn_fd, lifeline_fd, max_memory_mb = (int(a) for a in argv)
    IN_CHILD = True
    threading.Thread(target=_watch_lifeline, args=(lifeline_fd,), daemon=True).start()
    conn = Connection(conn_fd)
    try:
        serve(conn, max_memory_mb)
    finally:
        conn.close()
    sys.exit(0)
