"""Handlers for worker child processes (``emq worker tests.support.worker_handlers:handlers``).

Not a test module of its own (it defines no tests); it lives under the ``test_worker*`` name
so it sits beside the tests that spawn it. Every handler records its runs on the server, in
the list ``emqtest:{<queue>}:runs``, as ``start:<id>:<pid>`` and ``done:<id>:<pid>``, so a
test can count how many times a job ran and in which process.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import redis

from emq.worker import JobContext

_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["EMQ_URL"], decode_responses=True)
    return _client


def runs_key(queue: str) -> str:
    return f"emqtest:{{{queue}}}:runs"


def gate_key(queue: str) -> str:
    return f"emqtest:{{{queue}}}:gate"


def open_gate(client: redis.Redis, queue: str, n: int) -> None:
    """Let ``n`` handlers waiting in :func:`gated` through."""
    client.rpush(gate_key(queue), *["open"] * n)


def _record(ctx: JobContext, what: str) -> None:
    _redis().rpush(runs_key(ctx.queue), f"{what}:{ctx.id}:{os.getpid()}")


def work(payload: dict[str, Any], ctx: JobContext) -> None:
    """Sleep ``ms`` (in a worker thread), recording start and done."""
    _record(ctx, "start")
    time.sleep(payload.get("ms", 0) / 1000)
    _record(ctx, "done")


def gated(payload: Any, ctx: JobContext) -> None:
    """Wait (in a worker thread) until the test opens the gate, recording start and done: a
    job that is surely still running when the test acts, however slow the machine."""
    _record(ctx, "start")
    _redis().blpop([gate_key(ctx.queue)], timeout=300)
    _record(ctx, "done")


async def fast(payload: dict[str, Any], ctx: JobContext) -> None:
    """Wait ``ms`` on the loop (for throughput runs): no thread, no server call."""
    await asyncio.sleep(payload.get("ms", 0) / 1000)


def poison(payload: Any, ctx: JobContext) -> None:
    """Kill the worker process that runs it, every time."""
    _record(ctx, "start")
    os.kill(os.getpid(), signal.SIGKILL)


handlers = {"work": work, "gated": gated, "fast": fast, "poison": poison}
