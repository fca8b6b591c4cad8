"""Batched acknowledgements: outcomes queued by the loop and sent as one ``complete`` and one
``fail`` call per queue.

There is no fixed gathering delay. The flusher sends what is queued on the loop's next turn,
so the handlers that finished together share a call; while a send is in flight new outcomes
queue up and go together in the next one (chunks of 1,000), so under load a batch grows with
the round trip and acknowledging adds no round trip per job. A finished handler's slot is
free at once: its ack waits here, and the heartbeat keeps renewing its lease until the ack
has landed. The ack is still fenced: the server applies it only if the lease is still held.

Server errors: an ack that fails for any server error (unreachable, out of memory, a refusal)
is re-sent with backoff until it lands, logged once per episode; its lease is renewed
meanwhile. Any other exception (a bug) ends :meth:`run` with it, and the worker stops.

A lost reply: when the connection drops while an ack is in flight, it is re-sent once the
server is back. If the first send had in fact been applied, the re-send is refused as a lost
lease. The worker does not guess: it reads the row. For ``complete``, a missing row means the
job was completed (by this attempt, or by a later run if the lease lapsed meanwhile: either
way it is completed once, G4), counted as an ``uncertain_ack``; so does a row kept completed
(results, ``keep_completed``) that carries this attempt's token. For ``fail``, the row still
carrying this attempt's token in ``schedule`` or ``dead`` means the fail was applied. Anything
else is a real ``lease_lost``: the result is discarded and the job runs again elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from ..model.records import Answer
from ..queue._async.queue import AsyncQueue
from .connect import Outage, retry
from .execute import Outcome
from .heartbeat import Lease
from .log import event

CHUNK = 1_000
T = TypeVar("T")


@dataclass(eq=False, slots=True)
class Ack:
    queue: AsyncQueue
    lease: Lease
    outcome: Outcome


Report = Callable[[Ack, str], None]
"""Called once per ack with the server's answer: "completed", "scheduled", "dead", "lost"."""


DONE = ("complete", "child")  # the outcome kinds that complete a job


class AckBuffer:
    """``report`` is called once per ack with the server's answer; ``landed`` (optional) once
    with each batch after its answers, when :attr:`outstanding` has gone down; ``before``
    (optional) is awaited with a batch's leases before it is sent (the progress flusher sends
    their last progress)."""

    def __init__(
        self,
        outage: Outage,
        log: logging.Logger,
        report: Report,
        landed: Callable[[list[Ack]], None] | None = None,
        before: Callable[[Iterable[Lease]], Awaitable[None]] | None = None,
        keeps_results: bool = True,
    ) -> None:
        self._keeps = keeps_results  # False: no queue or handler keeps results (plain acks)
        self._outage = outage
        self._log = log
        self._report = report
        self._landed = landed
        self._before = before
        self._items: list[Ack] = []
        self._event = asyncio.Event()
        self._closing = False
        self.uncertain = 0
        self.outstanding = 0  # queued or in flight

    def put(self, ack: Ack) -> None:
        ack.lease.finishing = True
        self._items.append(ack)
        self.outstanding += 1
        self._event.set()

    def close(self) -> None:
        """Flush what is queued, then let :meth:`run` return."""
        self._closing = True
        self._event.set()

    async def run(self) -> None:
        while True:
            await self._event.wait()
            self._event.clear()
            batch, self._items = self._items, []
            if batch:
                try:
                    await self.flush(batch)
                finally:
                    self.outstanding -= len(batch)
                if self._landed is not None:
                    self._landed(batch)
            if self._closing and not self._items:
                return

    async def flush(self, batch: list[Ack]) -> None:
        groups: dict[tuple[AsyncQueue, str], list[Ack]] = {}
        for ack in batch:
            key = (ack.queue, ack.outcome.kind)
            group = groups.get(key)
            if group is None:
                groups[key] = [ack]
            else:
                group.append(ack)
        for (_, kind), acks in groups.items():
            for start in range(0, len(acks), CHUNK):
                await self._send(kind, acks[start : start + CHUNK])

    async def _retry(self, where: str, send: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """Re-send until it lands (an ack is never dropped for a server error)."""
        result, retried = await retry(self._outage, where, send)
        return cast(T, result), retried  # no stop, no deadline: it returns only on success

    async def _send(self, kind: str, acks: list[Ack]) -> None:
        q = acks[0].queue
        answers: list[Answer]
        if self._before is not None:
            await self._before(a.lease for a in acks)
        if kind == "complete":
            answers, retried = await self._retry("complete", _completion(q, acks, self._keeps))
        elif kind == "child":  # a flow's child: its result is kept for its parent
            kids = [(a.lease.id, a.lease.token, a.outcome.result, 0) for a in acks]
            answers, retried = await self._retry("complete", lambda: q.complete_results(kids))
        elif kind == "hold":  # RateLimited: back to pending, no attempt spent, the lane held
            holds = [
                (a.lease.id, a.lease.token, 0, a.outcome.hold_ms, a.outcome.hold) for a in acks
            ]
            answers, retried = await self._retry("hold", lambda: q.delay_many(holds))
        else:
            items = [
                (a.lease.id, a.lease.token, a.outcome.error, a.outcome.retry, a.outcome.backoff)
                for a in acks
            ]
            answers, retried = await self._retry("fail", lambda: q.fail_many(items))
        for ack, answer in zip(acks, answers, strict=True):
            if answer in (Answer.LOST, Answer.GONE):
                answer = await self._settle(kind, ack) if retried else Answer.LOST
            self._report(ack, answer)

    async def _settle(self, kind: str, ack: Ack) -> Answer:
        """A re-sent ack was refused: find out from the row whether the first send landed."""
        q, lease = ack.queue, ack.lease
        row: Any
        row, _ = await self._retry(
            "settle",
            lambda: q.client.hmget(q.core.keys.job(lease.id), ["token", "state", "cancelled"]),
        )
        token, state, cancelled = row
        if cancelled is not None and token == str(lease.token) and kind not in DONE:
            answer = Answer.CANCELLED  # a fail or hold of a cancelled job: dead, cancelled
        elif kind in DONE and (
            token is None or (state == "completed" and token == str(lease.token))
        ):  # deleted, or kept completed by this attempt (results, keep_completed)
            answer = Answer.COMPLETED
        elif kind == "fail" and token == str(lease.token) and state in ("scheduled", "dead"):
            answer = Answer.SCHEDULED if state == "scheduled" else Answer.DEAD
        elif kind == "hold" and token == str(lease.token) and state == "pending":
            answer = Answer.PENDING
        else:
            return Answer.LOST
        self.uncertain += 1
        event(self._log, "warning", "an acknowledgement's reply was lost; the row shows it "
              "was applied", "uncertain_ack", queue=q.name, job=lease.id, kind=kind,
              settled=answer)  # fmt: skip
        return answer


def _completion(
    q: AsyncQueue, acks: list[Ack], keeps: bool
) -> Callable[[], Awaitable[list[Answer]]]:
    """The complete call of a batch: plain (pairs only) unless the queue keeps results or
    completed jobs or an outcome carries a result to keep; then each job keeps what its own
    outcome says (a handler's ``result_ttl_ms=0`` keeps no result on a queue that does).
    ``keeps`` False: nothing in this worker keeps anything, so no outcome is looked at."""
    options = q.core.options
    if keeps and (
        options.keep_completed
        or options.result_ttl_ms
        or any(a.outcome.result_ttl_ms for a in acks)
    ):
        kept = [
            (a.lease.id, a.lease.token, a.outcome.result, a.outcome.result_ttl_ms) for a in acks
        ]
        return lambda: q.complete_results(kept)
    pairs = [(a.lease.id, a.lease.token) for a in acks]
    return lambda: q.complete_many(pairs)
