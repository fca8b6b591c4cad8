# Generated from emq/queue/_async/steps.py by scripts/unasync.py: edit that file instead.
"""``Steps``: a running job's durable steps (docs/steps.md), as ``Queue`` records
and reads them.

Recording is one script call (``step.lua``, built by :mod:`emq.calls.steps`) fenced by the
lease token: a step is recorded only by the attempt that holds the job's lease, and a name
once recorded is never replaced. Reading is one ``HGETALL`` of the job's row. A handler
uses ``ctx.step`` (or ``ctx.astep``), which does both for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import redis

from ...calls import steps
from ...calls.call import Call
from ...calls.jobs import QueueCore
from ...lua import scripts
from ...model.ids import check_id
from ...model.records import Answer, Step, steps_of
from ..shared import expect

T = TypeVar("T")


class Steps:
    """Durable steps of one queue; mixed into ``Queue``, which provides the client and
    core."""

    client: redis.Redis
    core: QueueCore

    def _run(self, call: Call[Any]) -> Any:  # provided by Queue
        raise NotImplementedError

    def _resend(self, send: Callable[[], T]) -> T:  # provided by Queue
        raise NotImplementedError

    def record_step(
        self, job_id: str, token: int, name: str, result: Any = None, *, took_ms: int = 0
    ) -> int:
        """Record a held job's finished step ``name`` with its ``result`` (JSON, at most the
        queue's ``max_payload_bytes``), fenced by the lease token; returns when (server ms).
        Raises InvalidPayload or InvalidOption (nothing sent), LeaseLost, JobNotFound, or
        WrongState (``name`` is recorded already with another result: nothing written; the
        same record again answers as the first did)."""
        text = steps.encode_step_result(result, self.core.options.max_payload_bytes)
        answer = self.send_step(job_id, token, name, text, took_ms, ok=True)
        expect(answer, job_id, "step")
        return int(cast(int, answer))

    def send_step(
        self, job_id: str, token: int, name: str, text: str, took_ms: int, *, ok: bool
    ) -> int | Answer:
        """One ``step.lua`` call: ``ok`` records ``text`` (JSON text, from
        :func:`emq.calls.steps.encode_step_result`) as the step's result; else appends a
        ``step_failed`` event with ``text`` as its error. When (server ms), or ``LOST`` /
        ``GONE`` (nothing written). A record is re-sent unchanged while the server is
        unreachable: a resend of a record that landed is answered as the first was."""
        call = steps.step_call(self.core, job_id, token, name, text, took_ms, ok=ok)
        if ok:
            return cast(int | Answer, self._resend(lambda: self._run(call)))
        return cast(int | Answer, self._run(call))

    def job_steps(self, job_id: str) -> tuple[Step, ...]:
        """The steps the job's row records, in recorded order (by time, then name), in one
        read; empty if it records none or has no row (``Queue.job(id).steps`` reads the same
        with the rest of the job)."""
        with scripts.translated():
            row = self.client.hgetall(self.core.keys.job(check_id(job_id)))
        return steps_of(cast(dict[str, str], row))
