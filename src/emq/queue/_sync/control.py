# Generated from emq/queue/_async/control.py by scripts/unasync.py: edit that file instead.
"""``Control``: what ``Queue`` does to single jobs and schedules after they were
enqueued: repeating schedules, cancellation, results, and edits of waiting jobs.

Every change here is one script call (one indivisible step on the server), built by the
I/O-free builders of :mod:`emq.calls.repeats`, :mod:`emq.calls.control` and
:mod:`emq.calls.results`; docs/control.md states the guarantees.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

import redis

from ...calls import control as edits
from ...calls import flows, logs, results
from ...calls import flows as outbox
from ...calls import repeats as rep
from ...calls.call import Call
from ...calls.control import Cancel, cancel_call
from ...calls.jobs import QueueCore
from ...errors import EmqError, InvalidOption, JobNotFound, ResultTimeout
from ...lua import scripts
from ...model.checks import shown
from ...model.ids import check_id
from ...model.keys import KNOWN_QUEUES
from ...model.records import Answer, JobSpec
from ...observe import otel
from ...server import discovery, durability
from ..shared import BULK_FLOOR, ShellBase, expect

T = TypeVar("T")


class Control:
    """Job control of one queue; mixed into ``Queue``, which provides the client and core."""

    client: redis.Redis
    core: QueueCore
    _guard: durability.Guard
    _announced: set[str]

    def _run(self, call: Call[Any]) -> Any:  # provided by Queue
        raise NotImplementedError

    def _bulk_limit(self) -> int | None:  # provided by Queue
        raise NotImplementedError

    def new_ids(self, n: int) -> list[str]:  # provided by Queue
        raise NotImplementedError

    def _resend(self, send: Callable[[], T]) -> T:  # provided by Queue
        raise NotImplementedError

    def _announce(self, names: Iterable[str]) -> None:  # provided by Queue
        raise NotImplementedError

    # -- the known queues (emq.server.discovery) ---------------------------------------------

    def forget(self) -> bool:
        """Remove the queue's name from the known queues (``emq stats``, the dashboard,
        ``/metrics``) unless the queue still has keys (:func:`emq.server.discovery.has_keys`);
        True if it was forgotten. The keys are read again after the removal and the name is
        put back if an enqueue landed in between: a queue with keys is never left unlisted.
        ``obliterate`` does this by itself once the queue is gone."""
        name, keys = self.core.keys.queue, discovery.state_keys(self.core.keys.queue)
        if self.client.exists(*keys):
            return False
        self.client.srem(KNOWN_QUEUES, name)
        self._announced.discard(name)  # this object's next enqueue lists it again
        if self.client.exists(*keys):
            self.client.sadd(KNOWN_QUEUES, name)
            return False
        return True

    def _forget_gone(self) -> None:
        """:meth:`forget` after ``obliterate``, best effort: a user whose ACL lacks
        ``{emq}:queues`` (or a server gone meanwhile) leaves the name listed, with no keys."""
        with contextlib.suppress(redis.RedisError, OSError):
            self.forget()

    # -- flows (emq.calls.flows) -----------------------------------------------------------------

    def enqueue_flow(
        self, parent: JobSpec | flows.Flow, children: Sequence[JobSpec | flows.Flow] = ()
    ) -> flows.FlowIds:
        """Admit ``parent`` and its ``children`` (a child given as ``Flow(job, children)``
        has children of its own: a tree; ``enqueue_flow(chain(...))`` and
        ``enqueue_flow(group(...))`` take a whole ``Flow``). A job with children waits
        (``Location.WAITING``) and becomes pending in the step that finishes its last
        child; a child's ``on_failure`` says what its death does (docs/flows.md). A child
        with ``queue=`` is in that queue (else in its parent's): the tree is admitted in
        one indivisible step per queue, all or nothing each, parents' steps first; a step
        whose reply was lost is resent and admits nothing twice. Returns the ids in the
        shape of the tree. Bad input is refused before anything is written; an id that
        exists raises DuplicateConflict and its step writes nothing."""
        if isinstance(parent, flows.Flow) and not children:
            children = parent.children
            parent = parent.job
        if not isinstance(parent, JobSpec):
            raise InvalidOption(f"a flow's parent must be a JobSpec, got {shown(parent)}")
        nodes = flows.flow_plan(self.core, parent, children)
        given = flows.given_ids(nodes)
        if given and len({n.queue for n in nodes}) > 1:  # one step checks this by itself
            with scripts.translated():
                with self.client.pipeline(transaction=False) as p:
                    for (key, _), (packed_key, job_id) in zip(
                        given, flows.given_packed(nodes), strict=True
                    ):
                        p.hget(key, "parent")
                        p.exists(key)
                        p.hexists(packed_key, job_id)
                    got = p.execute()
            reads = zip(got[::3], got[1::3], got[2::3], strict=True)
            found = [(up or "") if row or pk else None for up, row, pk in reads]
            flows.judge_given(given, found, len(nodes))
        blank = [n for n in nodes if not n.group[0]]
        for node, minted in zip(blank, self.new_ids(len(blank)), strict=True):
            node.group[0] = minted
        with otel.enqueue_span(self.core.keys.queue, [n.group for n in nodes]) as trace:
            steps = flows.flow_steps(self.core, nodes, trace)
            if self._guard.durable("enqueue_flow"):  # each node that confirms a step, first:
                self._guard.check_all(self.client, [s.keys[0] for s in steps])
            for call in steps:  # one that cannot refuses the flow before anything is written
                self._resend(functools.partial(self._run, call))
        self._announce(n.queue for n in nodes)
        return flows.flow_ids(nodes)

    def deliver_outbox(self, limit: int = outbox.BATCH) -> outbox.Delivered:
        """Deliver up to ``limit`` of this queue's outbox entries (docs/flows.md, Across
        queues): each child's end to its parent in another queue, counted there only if it
        is new (a replay counts nothing), and each cancel a parent sent to a child in
        another queue; then delete them. A worker's maintenance beat calls this every beat;
        calling it by hand is always safe."""
        key = self.core.keys.outbox
        cursor, entries = 0, {}
        with scripts.translated():
            while True:  # a page of a sparse table may be empty before the scan is over
                cursor, found = self.client.hscan(key, cursor, count=limit)
                entries = cast(dict[str, str], found)
                if entries or not cursor:
                    break
        if not entries:
            return outbox.Delivered()
        todo = outbox.plan(entries)
        counted = 0
        for queue, groups in todo.done.items():
            counted += self._run(outbox.deliver_call(self.core, queue, groups))
        for queue, job_id, reason in todo.cancels:
            with contextlib.suppress(JobNotFound):
                self._run(outbox.cancel_in(self.core, queue, job_id, reason))
        with scripts.translated():
            self.client.hdel(key, *todo.fields, *todo.broken)
        return outbox.Delivered(len(todo.fields), counted, len(todo.cancels), tuple(todo.broken))

    # -- repeating jobs and cron (emq.calls.repeats) ---------------------------------------------

    def repeat(
        self,
        key: str,
        name: str,
        payload: Any = None,
        *,
        every_ms: int | None = None,
        cron: str | None = None,
        tz: str = "UTC",
        lane: str | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        start_at_ms: int | None = None,
        catch_up: str = "latest",
    ) -> rep.Repeat:
        """Register (or update) the repeating schedule ``key``: a job ``name(payload)`` at
        every tick, ``every_ms`` (ticks at ``start_at_ms + k * every_ms``, anchored at 0 when
        no start is given) or ``cron`` (five fields, in time zone ``tz``). Idempotent: the same
        spec again changes nothing, not even its next tick. ``catch_up``: after a downtime,
        ``"latest"`` fires only the latest missed tick, ``"all"`` every one (1,000 a call).
        Bad input is refused before anything is written. Returns the schedule as stored;
        docs/control.md says exactly when a tick fires."""
        spec = rep.repeat_spec(
            self.core, key, name, payload, every_ms=every_ms, cron=cron, tz=tz, lane=lane,
            priority=priority, max_attempts=max_attempts, start_at_ms=start_at_ms,
            catch_up=catch_up,
        )  # fmt: skip
        last_tick = 0
        for _ in range(5):  # a retry only when a tick fired between the read and the write
            with scripts.translated():
                seconds, micros = self.client.time()
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            outcome, at_ms = self._run(
                rep.set_repeat(self.core, spec, spec.first_tick(now_ms, last_tick))
            )
            if outcome >= 0:
                break
            last_tick = at_ms
        else:
            raise EmqError(f"schedule {key} kept firing while it was being updated; try again")
        (found,) = self._repeat_rows([key])
        if found is None:
            raise EmqError(f"schedule {key} was removed while it was being registered")
        return found

    def unrepeat(self, key: str) -> bool:
        """Remove the schedule ``key``: no tick of it fires after this returns (jobs it
        made stay). False if there was none."""
        return bool(self._run(rep.unrepeat(self.core, key)))

    def repeats(self) -> list[rep.Repeat]:
        """Every schedule of this queue, soonest next tick first."""
        with scripts.translated():
            keys = self.client.zrange(self.core.keys.repeats, 0, -1)
        return [r for r in self._repeat_rows(cast(list[str], keys)) if r is not None]

    def _repeat_rows(self, keys: list[str]) -> list[rep.Repeat | None]:
        if not keys:
            return []
        with scripts.translated():
            with self.client.pipeline(transaction=True) as p:
                for key in keys:
                    p.hgetall(self.core.keys.repeat(key))
                rows = p.execute()
        return [rep.decode_repeat(key, row) for key, row in zip(keys, rows, strict=True)]

    def fire_repeats(self, limit: int = rep.DUE_LIMIT, *, audit: bool = False) -> rep.Fired:
        """One round of firing: every due tick of up to ``limit`` due schedules becomes a
        job, in two round trips (one, a cheap read, when nothing is due). Any number of
        callers at once make one job per tick; a tick never fires before the server clock
        reaches it. A due schedule whose stored state cannot be fired (a hand edit, a
        partial restore: ``rep.fault``) is skipped, parked (docs/control.md) and named in
        ``Fired.broken``; it never refuses the round. ``audit``: also find the schedules
        whose row has no due score (no firer would ever see them), name them and give them
        their due score again. The worker's maintenance beat calls this (``audit`` once a
        minute); ``Fired.next_ms`` (with ``now_ms``) says when to call again."""
        read = self._run(rep.due_repeats(self.core, limit, audit))
        groups, why = rep.plan(read)
        if not groups:
            return rep.Fired([], read.now_ms, read.next_ms, {}, list(why), why)
        jobs: list[str] = []
        answers: dict[str, int] = {}
        fired = rep.Fired(jobs, read.now_ms, read.next_ms, answers)
        for i in range(0, len(groups), rep.FIRE_CHUNK):
            fired = self._run(rep.fire_repeats(self.core, groups[i : i + rep.FIRE_CHUNK]))
            jobs += fired.jobs
            why = fired.why | why  # the script's safety belt may name one the plan passed
            for answer, n in fired.answers.items():
                answers[answer] = answers.get(answer, 0) + n
        return rep.Fired(jobs, fired.now_ms, fired.next_ms, answers, list(why), why)

    def children(self, job_id: str) -> list[flows.Child]:
        """The children of the flow parent ``job_id``: each one's id, status ('' while
        unfinished; completed, dead, removed, cancelled) and result (None when none was
        kept), read in one round trip. Empty once the parent completed (its record goes
        with it) or when it has none. ``ctx.children()`` in the parent's handler reads the
        same."""
        key = self.core.keys.flow(check_id(job_id))
        with scripts.translated():
            with self.client.pipeline(transaction=False) as p:
                p.hgetall(key)
                p.hgetall(key + ":results")
                statuses, found = p.execute()
        return flows.decode_children(statuses, found)

    # -- cancellation (emq.calls.control) ---------------------------------------------------------

    def cancel(self, job_id: str, reason: str = "") -> Cancel:
        """Cancel a job, in one step (docs/control.md, Cancellation). Waiting or scheduled:
        it never runs, it is dead now with ``Job.cancelled == reason`` (``Cancel.CANCELLED``).
        Leased: its worker learns on its next heartbeat, stops the handler and the job ends
        dead, cancelled (``Cancel.REQUESTED``; a handler that completes before its worker
        learned of it stays completed). Already dead or kept completed: unchanged
        (``Cancel.DEAD``, ``Cancel.COMPLETED``; ``Cancel.CANCELLED`` if it was cancelled).
        Raises JobNotFound when the job has no row; ``reason`` is at most 1,000 characters.
        A cancelled job is never retried or recovered; ``redrive`` runs it again."""
        answer: Cancel = self._run(cancel_call(self.core, job_id, reason))
        return answer

    # -- results and completed-job retention (emq.calls.results) ---------------------------------

    def result(self, job_id: str, timeout_s: float | None = None) -> Any:
        """The kept return value of ``job_id``, waiting for the job to end if it has not
        (``timeout_s``: at most that long; None: as long as it takes), without polling.

        Raises :class:`~emq.errors.JobDead` (its ``error`` is the job's ``last_error``) if
        it ended dead, :class:`~emq.errors.JobCancelled` if it was cancelled,
        :class:`~emq.errors.ResultTimeout` if it is still live at the timeout, and
        :class:`~emq.errors.JobNotFound` for an unknown or removed id or a completed job
        whose result was not kept (or has expired)."""
        wait_s = results.check_timeout(timeout_s)
        reply = self._run(results.await_result(self.core, job_id, register=True))
        deadline = None if wait_s is None else time.monotonic() + wait_s
        done = self.core.keys.done(job_id)
        while reply[0] == results.WAITING:
            left = results.SLICE_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise ResultTimeout(f"job {job_id} is still {reply[1]} after {timeout_s} s")
            block_s = max(0.01, min(results.SLICE_S, left))
            with scripts.translated():
                told = self.client.blpop([done], timeout=block_s)
            if told is not None:
                reply = ["told", told[1]]
                break
            reply = self._run(results.await_result(self.core, job_id, register=False))
        return results.outcome(job_id, reply)

    def complete_with_result(
        self, job_id: str, token: int, result: Any = None, *, result_ttl_ms: int | None = None
    ) -> None:
        """Complete a held job keeping ``result`` (JSON) for ``result_ttl_ms`` (default: the
        queue's ``result_ttl_ms``; 0 keeps none); raises LeaseLost or JobNotFound, and
        InvalidPayload (nothing sent) for a result that is not JSON."""
        ttl = self.core.options.result_ttl_ms if result_ttl_ms is None else result_ttl_ms
        text = results.encode_result(result, self.core.options.max_payload_bytes)
        (answer,) = self.complete_results([(job_id, token, text, ttl)])
        expect(answer, job_id, "complete")

    def complete_results(self, items: Iterable[tuple[str, int, str | None, int]]) -> list[Answer]:
        """Complete many held jobs in one step, each ``(id, token, result JSON text or None,
        result_ttl_ms)``, keeping the results (and, with ``keep_completed``, the rows): per
        job ``COMPLETED``, ``LOST`` or ``GONE``. The text is stored as given: encode it with
        :func:`emq.calls.results.encode_result`."""
        return list(self._run(self.core.complete_keeping(items)))

    # -- edits of a waiting job, progress (emq.calls.control) -------------------------------

    def promote(self, job_id: str) -> bool:
        """Run a scheduled job now: it joins its lane's waiting set at its priority and wakes
        a worker. True if it moved, False if it was pending already. Raises NotWaiting
        (active, dead, completed) or JobNotFound; nothing is written then. All due jobs at
        once: :meth:`promote_due`."""
        return bool(self._run(edits.promote(self.core, job_id)))

    def reschedule(self, job_id: str, delay_ms: int) -> str:
        """Make a pending or scheduled job wait until server now + ``delay_ms`` (0: pending
        now; a pending job keeps its place); returns ``"pending"`` or ``"scheduled"``.
        Raises NotWaiting or JobNotFound; nothing is written then."""
        return str(self._run(edits.reschedule(self.core, job_id, delay_ms)))

    def set_priority(self, job_id: str, priority: int) -> str:
        """Change a pending or scheduled job's priority (lower runs first; a pending job is
        re-queued at once behind the jobs already waiting at that priority, or ahead of them
        if it is a lifo job); returns where it is. Raises NotWaiting or JobNotFound."""
        return str(self._run(edits.set_priority(self.core, job_id, priority)))

    def update_payload(self, job_id: str, payload: Any) -> str:
        """Replace a pending or scheduled job's payload (checked as an enqueue's); the next
        claim hands out the new one. Returns where the job is. Raises NotWaiting (an active
        job's worker holds the old payload) or JobNotFound; nothing is written then."""
        call = edits.update_payload(self.core, job_id, payload)
        size = len(str(call.args[3]).encode("utf-8"))
        if size > BULK_FLOOR:
            ShellBase._refuse_oversized(size, self._bulk_limit())
        return str(self._run(call))

    def set_progress(self, job_id: str, token: int, value: Any) -> int:
        """Store a held job's progress (JSON) now, fenced by its lease token; returns when
        (server ms). Raises LeaseLost or JobNotFound. A handler calls ``ctx.progress``
        instead: the worker throttles and batches these."""
        text = edits.encode_progress(value)
        (stored,) = self.set_progress_many([(job_id, token, text)])
        expect(stored, job_id, "progress")
        return int(cast(int, stored))

    def set_progress_many(self, items: Iterable[tuple[str, int, str]]) -> list[int | Answer]:
        """Store the progress of many held jobs in one step, each ``(id, token, JSON text``
        from :func:`emq.calls.control.encode_progress`): per job when (server ms), or ``LOST`` /
        ``GONE`` (nothing written for it)."""
        return list(self._run(edits.progress(self.core, items)))

    def append_logs(self, job_id: str, token: int, lines: Iterable[Any]) -> int:
        """Append ``lines`` (each ``str()``-ed, cut to 8 KiB) to a held job's log now, fenced
        by its lease token; returns when (server ms). Raises LeaseLost or JobNotFound. A
        handler calls ``ctx.log`` instead: the worker batches these (docs/control.md)."""
        items = [(job_id, token, logs.encode_line(line)) for line in lines]
        if not items:
            raise InvalidOption("append_logs needs at least one line")
        stored = self.append_logs_many(items)
        expect(stored[0], job_id, "log")
        return int(cast(int, stored[0]))

    def append_logs_many(self, items: Iterable[tuple[str, int, str]]) -> list[int | Answer]:
        """Append log lines of held jobs in one step, each ``(id, token, line`` from
        :func:`emq.calls.logs.encode_line`), oldest first: per line when (server ms), or
        ``LOST`` / ``GONE`` (not written)."""
        return list(self._run(logs.job_log(self.core, items)))
