"""The project's tasks: one that returns, one that raises, one async, one that takes the
context, and one that records the order tasks ran in."""

from __future__ import annotations

import asyncio
from typing import Any

from django_tasks import TaskContext, task


class Refused(Exception):
    """A task's own error: its class path is this module's."""


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def refuse(why: str) -> None:
    raise Refused(why)


@task()
async def shout(text: str) -> str:
    await asyncio.sleep(0)
    return text.upper()


@task(takes_context=True)
def attempt(context: TaskContext, tag: str) -> dict[str, Any]:
    result = context.task_result
    return {"tag": tag, "id": result.id, "attempt": context.attempt, "status": result.status}
