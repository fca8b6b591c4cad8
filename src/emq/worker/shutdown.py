"""Graceful shutdown of one run.

On the first SIGTERM/SIGINT (or :meth:`Worker.stop`): stop claiming; give back every job
claimed but not started with ``delay 0`` (back to ``pending``, no attempt spent: ``delay``
takes back the attempt the claim counted); let running handlers finish for up to
``grace_ms``; interrupt the rest (their attempt fails with a retry, since it did run); flush
every acknowledgement; then return so the process exits 0. A second signal skips all this:
leases are left to lapse and the sweep recovers those jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from typing import TYPE_CHECKING

from ..model.records import Answer
from .connect import retry
from .execute import Held

if TYPE_CHECKING:
    from .runner import Runner


async def drain(run: Runner, flusher: asyncio.Task[None]) -> None:
    deadline = time.monotonic() + run.options.grace_ms / 1000
    await give_back(run, deadline)
    running = [j for j in run.live if not j.settled]
    if running:
        run.event(
            "info",
            "waiting for running jobs",
            "draining",
            running=len(running),
            grace_ms=run.options.grace_ms,
        )
        while any(not j.settled for j in run.live) and time.monotonic() < deadline:
            run.room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.room.wait(), max(0.0, deadline - time.monotonic()))
    late = [j for j in run.live if not j.settled]
    for job in late:
        run.slots.interrupt(job, "shutdown")
    tasks = [j.task for j in late if j.task is not None and not j.task.done()]
    if tasks:  # let cancelled async handlers unwind
        await asyncio.wait(tasks, timeout=1.0)
    run.acks.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(flusher), max(1.0, deadline - time.monotonic()))


async def give_back(run: Runner, deadline: float) -> None:
    """Return unstarted jobs to ``pending`` (one ``delay`` call per queue)."""
    by_queue: dict[str, list[Held]] = {}
    while run.ready:
        job = run.ready.popleft()
        by_queue.setdefault(job.queue, []).append(job)
    for jobs in by_queue.values():
        q = jobs[0].q
        items = [(j.id, j.token, 0) for j in jobs]
        for j in jobs:
            j.finishing = True
        send = functools.partial(q.delay_many, items)
        answers, _ = await retry(run.outage, "give_back", send, deadline=deadline)
        refused = (Answer.LOST, Answer.GONE)
        got = answers or [Answer.LOST] * len(jobs)
        for job, answer in zip(jobs, got, strict=True):
            run.hb.drop(job)
            if answer in refused:
                run.count_lost(job, "delay")
            elif answer == Answer.CANCELLED:  # a cancel was requested: dead, not given back
                run.stats.cancelled += 1
            else:
                run.stats.given_back += 1
        n = sum(1 for a in got if a not in refused)
        run.event("info", "gave back unstarted jobs", "given_back", queue=q.name, count=n)
