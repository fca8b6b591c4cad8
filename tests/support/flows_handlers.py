"""Handlers for the flow fleet test's worker processes
(``emq worker tests.support.flows_handlers:handlers``). Not a test module.

``part`` returns its payload times two (a short sleep first, so kills land mid-run);
``combine`` (the parent) records each of its runs in ``emqtest:{<queue>}:parent`` as one JSON
line: how many children it saw completed and the sum of their results.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from emq.worker import JobContext

from .worker_handlers import _redis


def parent_key(queue: str) -> str:
    return f"emqtest:{{{queue}}}:parent"


def part(payload: int, ctx: JobContext) -> int:
    time.sleep(0.002)
    return payload * 2


async def combine(payload: Any, ctx: JobContext) -> int:
    kids = await ctx.achildren()
    done = [k for k in kids if k.status == "completed"]
    total = sum(k.result for k in done if isinstance(k.result, int))
    missing = sum(1 for k in done if k.result is None)
    record = {"completed": len(done), "total": total, "no_result": missing, "pid": os.getpid()}
    _redis().rpush(parent_key(ctx.queue), json.dumps(record))
    return total


def combine_sync(payload: Any, ctx: JobContext) -> int:
    kids = ctx.children()
    _redis().rpush(parent_key(ctx.queue), json.dumps({"completed": len(kids)}))
    return len(kids)


handlers = {"part": part, "combine": combine, "combine_sync": combine_sync}
