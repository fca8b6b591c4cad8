"""One attempt of one job: run the handler, bound it in time, and decide what to tell the
server. No server I/O happens here; the outcome is queued for a batched acknowledgement.

Rules (each one tested):

- the handler returned: ``complete``;
- it raised :class:`~emq.worker.Permanent`: ``fail`` with no retry (straight to ``dead``);
- it raised anything else, or ran past its timeout: ``fail`` with a retry while the handler's
  ``max_attempts`` allows it (the row's own ``max_attempts`` is enforced by ``fail.lua``);
- its lease was lost meanwhile: ``discard``; its result is never sent (G4);
- the worker is shutting down past its grace period: ``fail`` with a retry (the attempt ran,
  so it counts).

A sync handler runs in a thread that cannot be killed: on timeout or shutdown it is told to
stop (``ctx.cancelled``) and its result is ignored, but its thread stays busy until it returns,
and ``on_done`` fires only then, so ``concurrency`` always bounds the threads in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Literal

from ..config import Backoff
from .context import JobContext
from .options import HandlerSpec, Permanent

ERROR_TAIL = 2_000


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: Literal["complete", "fail", "discard"]
    error: str = ""
    retry: bool = True
    backoff: Backoff | None = None
    why: str = ""  # "ok", "error", "permanent", "timeout", "shutdown", "lease_lost", "no_handler"


def describe(exc: BaseException) -> str:
    """The error stored in ``last_error``: the exception line first, then the traceback tail."""
    head = "".join(traceback.format_exception_only(exc)).strip()
    tail = "".join(traceback.format_exception(exc)).strip()
    if len(tail) > ERROR_TAIL:
        tail = "..." + tail[-ERROR_TAIL:]
    return f"{head}\n{tail}" if tail != head else head


def failed(
    spec: HandlerSpec | None,
    ctx: JobContext,
    error: str,
    why: str,
    *,
    retry: bool = True,
    default_max: int | None = None,
    default_backoff: Backoff | None = None,
) -> Outcome:
    limit = (spec.max_attempts if spec else None) or default_max
    if limit is not None and ctx.attempts >= limit:
        retry = False
    backoff = (spec.backoff if spec else None) or default_backoff
    return Outcome("fail", error, retry, backoff, why)


async def run_attempt(
    spec: HandlerSpec,
    payload: Any,
    ctx: JobContext,
    *,
    executor: Executor,
    timeout_s: float | None,
    interrupt: asyncio.Future[str],
    on_done: Callable[[], None],
    default_max: int | None,
    default_backoff: Backoff | None,
) -> Outcome:
    """Run one attempt; ``interrupt`` resolves to ``"lease_lost"`` or ``"shutdown"``."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any]
    try:
        if spec.is_async:
            fut = asyncio.ensure_future(spec.acall(payload, ctx))
            fut.add_done_callback(lambda _f: on_done())
        else:
            work = executor.submit(spec.call, payload, ctx)
            # the slot is freed when the thread returns, not when the attempt is given up
            work.add_done_callback(lambda _w: _call_soon(loop, on_done))
            fut = asyncio.wrap_future(work, loop=loop)
    except Exception as exc:  # an async handler that is not a coroutine function raised
        on_done()
        return _from_exception(spec, ctx, exc, default_max, default_backoff)

    def fail(error: str, why: str, retry: bool = True) -> Outcome:
        return failed(
            spec,
            ctx,
            error,
            why,
            retry=retry,
            default_max=default_max,
            default_backoff=default_backoff,
        )

    try:
        done, _ = await asyncio.wait(
            {fut, interrupt}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    except asyncio.CancelledError:
        ctx.cancel("shutdown")
        fut.cancel()
        raise
    if ctx.lost.is_set() or (interrupt in done and interrupt.result() == "lease_lost"):
        ctx.cancel("lease_lost")
        fut.cancel()
        _consume(fut)
        return Outcome("discard", why="lease_lost")
    if fut in done:
        if fut.cancelled():
            return fail("cancelled: the handler was cancelled", "error")
        error = fut.exception()
        if error is None:
            return Outcome("complete", why="ok")
        return _from_exception(spec, ctx, error, default_max, default_backoff)
    if interrupt in done:
        ctx.cancel("shutdown")
        fut.cancel()
        _consume(fut)
        return fail("interrupted: the worker shut down before the handler finished", "shutdown")
    ctx.cancel("timeout")
    fut.cancel()
    _consume(fut)
    return fail(f"timeout: the attempt ran past {timeout_s:g} s", "timeout")


def _from_exception(
    spec: HandlerSpec,
    ctx: JobContext,
    exc: BaseException,
    default_max: int | None,
    default_backoff: Backoff | None,
) -> Outcome:
    if isinstance(exc, Permanent):
        return failed(spec, ctx, describe(exc), "permanent", retry=False)
    return failed(
        spec, ctx, describe(exc), "error", default_max=default_max, default_backoff=default_backoff
    )


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to free
        loop.call_soon_threadsafe(fn)


def _consume(fut: asyncio.Future[Any]) -> None:
    """Retrieve a discarded future's exception later, so asyncio does not log it."""
    fut.add_done_callback(lambda f: None if f.cancelled() else f.exception())
