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
import time

from .connect import OUTAGE_ERRORS
from .runner import Held, Runner


async def drain(run: Runner, flusher: asyncio.Task[None]) -> None:
    deadline = time.monotonic() + run.options.grace_ms / 1000
    await give_back(run, deadline)
    running = [j.task for j in run.jobs if j.task is not None and not j.task.done()]
    if running:
        run.event(
            "info",
            "waiting for running jobs",
            "draining",
            running=len(running),
            grace_ms=run.options.grace_ms,
        )
        await asyncio.wait(running, timeout=max(0.0, deadline - time.monotonic()))
    late = [j for j in run.jobs if j.task is not None and not j.task.done()]
    for job in late:
        if not job.interrupt.done():
            job.interrupt.set_result("shutdown")
    if late:
        await asyncio.wait([j.task for j in late if j.task], timeout=1.0)
    run.acks.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(flusher), max(1.0, deadline - time.monotonic()))


async def give_back(run: Runner, deadline: float) -> None:
    """Return unstarted jobs to ``pending`` (one ``delay`` call per queue)."""
    by_queue: dict[str, list[Held]] = {}
    while run.ready:
        job = run.ready.popleft()
        by_queue.setdefault(job.queue.name, []).append(job)
    for jobs in by_queue.values():
        q = jobs[0].queue
        items = [(j.lease.id, j.lease.token, 0) for j in jobs]
        for j in jobs:
            j.lease.finishing = True
        answers: list[str] | None = None
        while answers is None and time.monotonic() < deadline:
            try:
                answers = await q.delay_many(items)
            except OUTAGE_ERRORS as exc:
                await asyncio.sleep(run.outage.failed(exc, "give_back"))
        run.outage.ok()
        got = answers or ["lost"] * len(jobs)
        for job, answer in zip(jobs, got, strict=True):
            run.hb.drop(job.lease)
            if answer == "lost":
                run.count_lost(job.lease, "delay")
            else:
                run.stats.given_back += 1
            job.acked = True
            run.release(job)
        n = sum(1 for a in got if a != "lost")
        run.event("info", "gave back unstarted jobs", "given_back", queue=q.name, count=n)
