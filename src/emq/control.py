"""``Control``: what ``Queue`` does to single jobs and schedules after they were
enqueued: repeating schedules, cancellation, results, and edits of waiting jobs.

Every change here is one script call (one indivisible step on the server), built by the
I/O-free builders of :mod:`emq.repeats`, :mod:`emq.cancel`, :mod:`emq.results` and
:mod:`emq.edits`; docs/control.md states the guarantees.

Generated from ``async_control.py`` by ``scripts/unasync.py``: edit that file, then run
the script.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import redis

from . import results, scripts
from .calls import Call, QueueCore
from .cancel import Cancel, cancel_call
from .errors import ResultTimeout
from .records import Answer
from .shell import expect


class Control:
    """Job control of one queue; mixed into ``Queue``, which provides the client and core."""

    client: redis.Redis
    core: QueueCore

    def _run(self, call: Call[Any]) -> Any:  # provided by Queue
        raise NotImplementedError

    # -- repeating jobs and cron (emq.repeats) ---------------------------------------------

    # -- cancellation (emq.cancel) ---------------------------------------------------------

    def cancel(self, job_id: str, reason: str = "") -> Cancel:
        """Cancel a job, in one step (docs/control.md, Cancellation). Waiting or scheduled:
        it never runs, it is dead now with ``Job.cancelled == reason`` (``Cancel.CANCELLED``).
        Leased: its worker learns on its next heartbeat, stops the handler and the job ends
        dead, cancelled (``Cancel.REQUESTED``; a handler that completes before its worker
        learned of it stays completed). Already dead or kept completed: unchanged
        (``Cancel.DEAD``, ``Cancel.COMPLETED``; ``Cancel.CANCELLED`` if it was cancelled).
        Raises JobNotFound when the job has no row; ``reason`` is at most 1,000 characters.
        A cancelled job is never retried or recovered; ``redrive`` runs it again."""
        return self._run(cancel_call(self.core, job_id, reason))

    # -- results and completed-job retention (emq.results) ---------------------------------

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

    def complete_results(
        self, items: Iterable[tuple[str, int, str | None, int]]
    ) -> list[Answer]:
        """Complete many held jobs in one step, each ``(id, token, result JSON text or None,
        result_ttl_ms)``, keeping the results (and, with ``keep_completed``, the rows): per
        job ``COMPLETED``, ``LOST`` or ``GONE``. The text is stored as given: encode it with
        :func:`emq.results.encode_result`."""
        return list(self._run(results.complete(self.core, items)))

    # -- edits of a waiting job, progress (emq.edits) ---------------------------------------
