"""Batched acknowledgements: outcomes queued by the loop and sent as one call per outcome
member (:mod:`.outcome`: ``complete``, ``fail``, ...) and queue.

There is no fixed gathering delay. The flusher sends what is queued on the loop's next turn,
so the handlers that finished together share a call; while a send is in flight new outcomes
queue up and go together in the next one (chunks of 1,000), so under load a batch grows with
the round trip and acknowledging adds no round trip per job. A finished handler's slot is
free at once: its ack waits here, and the heartbeat keeps renewing its lease until the ack
has landed. The ack is still fenced: the server applies it only if the lease is still held.

Server errors: an ack that fails for any server error (unreachable, out of memory, a refusal)
is re-sent with backoff until it lands, logged once per episode; its lease is renewed
meanwhile. Any other exception (a bug) ends :meth:`run` with it, and the worker stops.

The steady state: a claim takes the plain completions of its queue still waiting here
(:meth:`AckBuffer.take`) and sends them with it in one step (``complete_claim``,
:meth:`AckBuffer.with_claim`); the flusher lets a few loop turns pass before it takes a
batch, so a claim that the same finished handlers made room for goes first. That call is sent
once: on a server error (a lost reply, OOM, NOPERM, READONLY, a script flushed again and
again) its completions come back here, marked as perhaps applied, and go the usual way; the
error is logged once per episode (:class:`.Outage`, component ``complete_claim``) and acks go
apart from claims until its backoff has passed. Any other error ends the claim loop, and the
worker stops loudly.

A lost reply: when the connection drops while an ack is in flight, it is re-sent once the
server is back. If the first send had in fact been applied, the re-send is refused as a lost
lease. The worker does not guess: it reads the row. For ``complete``, a missing row means the
job was completed (by this attempt, or by a later run if the lease lapsed meanwhile: either
way it is completed once, G4), counted as an ``uncertain_ack``; so does a row kept completed
(results, ``keep_completed``) that carries this attempt's token. For ``fail``, the row still
carrying this attempt's token in ``schedule`` or ``dead`` means the fail was applied. Each
member says what its row shows (:meth:`~.outcome.Complete.applied`). Anything else is a real
``lease_lost``: the result is discarded and the job runs again elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from ..model.records import Answer, Claims
from ..queue._async.queue import AsyncQueue
from .connect import SERVER_ERRORS, Outage, retry
from .hooks import Hooks
from .log import event
from .outcome import Ack, Complete

__all__ = ["Ack", "AckBuffer"]

CHUNK = 1_000
# loop turns the flusher lets pass before it takes a batch: a slot freed together with an
# ack wakes the claim loop (room -> its wait -> the loop) within two, so it takes them first
YIELD_TURNS = 3
JOINED = "complete_claim"  # the component a failed joined call is logged under (Outage)
T = TypeVar("T")


def keeps_completions(q: AsyncQueue) -> bool:
    """Whether ``q``'s settings (stored with the queue, so they may change while a worker
    runs) keep results or completed jobs: then its acks carry results."""
    options = q.core.options
    return bool(options.result_ttl_ms or options.keep_completed)


REFUSED = (Answer.LOST, Answer.GONE)

Report = Callable[[Ack, str], None]
"""Called once per ack with the server's answer: "completed", "scheduled", "dead", "lost"."""


class AckBuffer:
    """``report`` is called once per ack with the server's answer; ``landed`` (optional) once
    with each batch after its answers, when :attr:`outstanding` has gone down; the
    ``before_ack`` hooks of ``hooks`` (optional) are awaited with a batch's leases before it
    is sent (the progress flusher sends their last progress)."""

    def __init__(
        self,
        outage: Outage,
        log: logging.Logger,
        report: Report,
        landed: Callable[[list[Ack]], None] | None = None,
        hooks: Hooks | None = None,
        keeps_results: bool = True,
    ) -> None:
        self._keeps = keeps_results  # False: no handler keeps results (plain acks, unless
        # the queue's own settings keep results or completed jobs)
        self._outage = outage
        self._log = log
        self._report = report
        self._landed = landed
        self._hooks = hooks
        self._items: list[Ack] = []
        self._event = asyncio.Event()
        self._closing = False
        self.uncertain = 0
        self.outstanding = 0  # queued or in flight
        self.joined = 0  # completions sent with a claim
        self.joins = True  # completions may go with a claim (WorkerOptions.ack_with_claim)
        self._maybe: set[Ack] = set()  # sent with a claim whose reply was lost: perhaps applied
        self._join_after = 0.0  # monotonic time before which no ack goes with a claim (backoff)

    def put(self, ack: Ack) -> None:
        self._items.append(ack)
        self.outstanding += 1
        self._event.set()

    def close(self) -> None:
        """Flush what is queued, then let :meth:`run` return."""
        self._closing = True
        self._event.set()

    def take(self, q: AsyncQueue) -> list[Ack]:
        """The plain completions of ``q`` waiting here, taken out to go with a claim (at most
        a chunk; none when ``q`` keeps results or completed jobs, or has a durability level);
        still outstanding."""
        if not (self.joins and self._items) or self._keeps or keeps_completions(q):
            return []
        if self._join_after and time.monotonic() < self._join_after:
            return []  # the last joined call failed: apart until its backoff has passed
        if q.core.options.durability != "none":  # its acks wait for a confirmation: apart
            return []
        mine: list[Ack] = []
        rest: list[Ack] = []
        for ack in self._items:
            if len(mine) < CHUNK and ack.queue is q and type(ack.outcome) is Complete:
                mine.append(ack)
            else:
                rest.append(ack)
        self._items = rest
        return mine

    async def with_claim(
        self, q: AsyncQueue, count: int, lease_ms: int, request: str, worker: str
    ) -> Claims | None:
        """Send the completions of ``q`` waiting here (:meth:`take`) and a claim of ``count``
        in one step, once: the jobs claimed, the answers reported as a flush reports them.
        None when there were none, or on a server error: then the acks come back here,
        perhaps applied (a refusal of their re-send is settled from the row), and the
        caller sends the claim alone with the same ``request``, which returns the jobs of a
        first send that landed."""
        acks = self.take(q)
        if not acks:
            return None
        await self._before(acks)
        pairs = [(a.lease.id, a.lease.token) for a in acks]
        try:
            answers, jobs = await q.complete_and_claim(
                pairs, count, lease_ms, request=request, worker=worker
            )
        except SERVER_ERRORS as exc:  # logged once per episode; joined again after a backoff
            self._join_after = time.monotonic() + self._outage.failed(exc, JOINED)
            self._maybe.update(acks)
            self._items[:0] = acks
            self._event.set()
            return None
        self._join_after = 0.0
        self._outage.ok(JOINED)
        await self._answer(acks, answers, retried=False)
        self.joined += len(acks)
        self.outstanding -= len(acks)
        if self._landed is not None:
            self._landed(acks)
        return jobs

    async def run(self) -> None:
        while True:
            await self._event.wait()
            for _ in range(YIELD_TURNS):  # a claim these acks made room for takes them first
                await asyncio.sleep(0)
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
        """Send ``batch``: one call per queue and outcome member (chunks of 1,000)."""
        groups: dict[tuple[AsyncQueue, type], list[Ack]] = {}
        for ack in batch:
            key = (ack.queue, type(ack.outcome))
            group = groups.get(key)
            if group is None:
                groups[key] = [ack]
            else:
                group.append(ack)
        for acks in groups.values():
            for start in range(0, len(acks), CHUNK):
                await self._send(acks[start : start + CHUNK])

    async def _retry(self, where: str, send: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """Re-send until it lands (an ack is never dropped for a server error)."""
        result, retried = await retry(self._outage, where, send)
        return cast(T, result), retried  # no stop, no deadline: it returns only on success

    async def _send(self, acks: list[Ack]) -> None:
        """The acks of one queue and one member, in the member's own call."""
        q, member = acks[0].queue, acks[0].outcome
        await self._before(acks)
        keeps = self._keeps or keeps_completions(q)  # the queue's stored settings may change
        call = member.call(q, cast(Any, acks), keeps)  # one member: see flush
        answers, retried = await self._retry(member.where, call)
        await self._answer(acks, answers, retried)

    async def _before(self, acks: list[Ack]) -> None:
        """The ``before_ack`` hooks, awaited with the leases of ``acks`` before they are sent
        (the progress and log flushers send their last values)."""
        before = self._hooks.before_ack if self._hooks is not None else ()
        if before:
            leases = [a.lease for a in acks]
            for hook in before:
                await hook(leases)

    async def _answer(self, acks: list[Ack], answers: list[Answer], retried: bool) -> None:
        """Report each ack's answer; a refusal of a call that was re-sent (``retried``), or
        of an ack an earlier call perhaps applied (a claim's, whose reply was lost), is
        settled from the row."""
        for ack, answer in zip(acks, answers, strict=True):
            if answer in REFUSED:
                maybe = retried or ack in self._maybe
                answer = await self._settle(ack) if maybe else Answer.LOST
            self._maybe.discard(ack)
            self._report(ack, answer)

    async def _settle(self, ack: Ack) -> Answer:
        """A re-sent ack was refused: find out from the row whether the first send landed."""
        q, lease = ack.queue, ack.lease
        row: Any
        row, _ = await self._retry(
            "settle",
            lambda: q.client.hmget(q.core.keys.job(lease.id), ["token", "state", "cancelled"]),
        )
        token, state, cancelled = row
        answer = ack.outcome.applied(token, state, cancelled, str(lease.token))
        if answer is None:
            return Answer.LOST
        self.uncertain += 1
        event(self._log, "warning", "an acknowledgement's reply was lost; the row shows it "
              "was applied", "uncertain_ack", queue=q.name, job=lease.id, kind=ack.outcome.kind,
              settled=answer)  # fmt: skip
        return answer
