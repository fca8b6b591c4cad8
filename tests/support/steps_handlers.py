"""A handler of durable steps for worker child processes (``emq worker
tests.support.steps_handlers:handlers``), for tests/worker/test_steps_procs.py.

``steps`` runs the steps A, B and C; each records its run on the server, in the list
``emqtest:{<queue>}:steps``, as ``<step>:<pid>``, so a test counts how many times each step's
side effect ran and in which process. Its first run (``ctx.stalled == 0``) stops at the named
pause point ``after-A`` (recorded as ``paused:<pid>``) until the test pushes onto
``emqtest:{<queue>}:gate`` or kills the process there.
"""

from __future__ import annotations

import os
from typing import Any

import redis

from emq.worker import JobContext

_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["EMQ_URL"], decode_responses=True)
    return _client


def steps_key(queue: str) -> str:
    return f"emqtest:{{{queue}}}:steps"


def gate_key(queue: str) -> str:
    return f"emqtest:{{{queue}}}:gate"


def _effect(queue: str, what: str) -> str:
    _redis().rpush(steps_key(queue), f"{what}:{os.getpid()}")
    return what


def steps(payload: Any, ctx: JobContext) -> list[str]:
    done = [ctx.step("A", _effect, ctx.queue, "A")]
    if ctx.stalled == 0:  # the pause point after-A, on the first run only
        _effect(ctx.queue, "paused")
        _redis().blpop([gate_key(ctx.queue)], timeout=300)
    done.append(ctx.step("B", _effect, ctx.queue, "B"))
    done.append(ctx.step("C", _effect, ctx.queue, "C"))
    return done


handlers = {"steps": steps}
