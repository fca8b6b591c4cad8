"""The steps of a graceful stop, each given only what it needs; :meth:`.runner.Runner.drain`
runs them in order.

On the first SIGTERM/SIGINT (or :meth:`Worker.stop`): stop claiming; give back every job
claimed but not started with ``delay 0`` (back to ``pending``, no attempt spent: ``delay``
takes back the attempt the claim counted); let running handlers finish for up to
``grace_ms``; interrupt the rest (their attempt fails with a retry, since it did run); flush
every acknowledgement; deliver what the queues' outboxes hold (a flow's children's ends for
parents in other queues: :func:`deliver_outboxes`, which a burst run also does before it says
it is done); then return so the process exits 0. A second signal skips all this: leases are
left to lapse and the sweep recovers those jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Sequence

from ..model.records import Answer
from ..queue._async.queue import AsyncQueue
from .connect import Outage, retry
from .heartbeat import Lease
from .held import Held
from .log import Report, event

REFUSED = (Answer.LOST, Answer.GONE)


async def give_back(
    jobs: list[Held], outage: Outage, drop: Callable[[Lease], None], report: Report,
    deadline: float,
) -> None:  # fmt: skip
    """Return ``jobs`` (``GIVING_BACK``) to ``pending``: one ``delay`` call per queue, re-sent
    through an outage until the monotonic ``deadline``; each job is then ``GIVEN_BACK`` and
    no longer renewed (``drop``). A refused one is a lost lease, a cancelled one is dead."""
    by_queue: dict[str, list[Held]] = {}
    for job in jobs:
        by_queue.setdefault(job.queue, []).append(job)
    stats = report.stats
    for group in by_queue.values():
        q = group[0].q
        send = functools.partial(q.delay_many, [(j.id, j.token, 0) for j in group])
        answers, _ = await retry(outage, "give_back", send, deadline=deadline)
        got = answers or [Answer.LOST] * len(group)
        for job, answer in zip(group, got, strict=True):
            job.given_back()
            drop(job)
            if answer in REFUSED:
                report.lost(job, "delay")
            elif answer == Answer.CANCELLED:  # a cancel was requested: dead, not given back
                stats.cancelled += 1
            else:
                stats.given_back += 1
        n = sum(1 for a in got if a not in REFUSED)
        event(report.log, "info", "gave back unstarted jobs", "given_back", queue=q.name, count=n)


async def wait_until(done: Callable[[], bool], changed: asyncio.Event, deadline: float) -> None:
    """Wait until ``done()`` or the monotonic ``deadline``, looking again each time
    ``changed`` is set."""
    while not done() and time.monotonic() < deadline:
        changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), max(0.0, deadline - time.monotonic()))


async def flush_acks(
    close: Callable[[], None], flusher: asyncio.Task[None], deadline: float
) -> None:
    """Let the ack flusher send what is queued and end (``close``), for at least 1 s and up to
    the monotonic ``deadline``."""
    close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(flusher), max(1.0, deadline - time.monotonic()))


async def deliver_outboxes(
    queues: Sequence[AsyncQueue], outage: Outage, report: Report, deadline: float,
    stop: asyncio.Event | None = None,
) -> int:  # fmt: skip
    """Deliver every entry of the queues' outboxes (docs/flows.md, Across queues: each
    child's end to its parent in another queue), each outbox until it is empty, re-sent
    through an outage until the monotonic ``deadline`` or ``stop``; returns the entries
    delivered. What is left then stays for the next worker's maintenance beat (logged)."""
    sent = 0
    for q in queues:
        while True:
            got, _ = await retry(outage, "outbox", q.deliver_outbox, stop=stop, deadline=deadline)
            if got is None:
                event(report.log, "warning", "outbox left for the next worker's beat",
                      "outbox_left", queue=q.name)  # fmt: skip
                break
            sent += got.entries
            if got.broken:
                event(report.log, "error", "unreadable outbox entries dropped", "outbox_broken",
                      queue=q.name, entries=list(got.broken[:10]))  # fmt: skip
            if not got.entries and not got.broken:
                break
    return sent
