"""What a run tells its metrics (:mod:`.metrics`) and traces (:mod:`emq.observe.otel`) about each
attempt: the :class:`Observer` hook (:mod:`.hooks`). The runner adds one only when the worker
exports metrics (``metrics_port``) or OpenTelemetry is active at the run's start; otherwise
the story's hook lists do not hold it and the hot path is unchanged.

Per claimed job: its wait (first attempt only). Per started attempt: the start time and, with
tracing, the consumer span and the context the handler runs in (``Held.context``: the span is
current there, so the handler's own spans are its children). Per decided attempt: the duration
and outcome (its ``label``: ``completed``, ``failed``, ``timeout``, ``rate_limited``,
``cancelled``, ``lease_lost``, ``shutdown`` or ``no_handler``), and the span's end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Container

from ..model.ids import minted_at_ms
from ..model.records import Claimed
from ..observe import otel
from .held import Held
from .hooks import Hook
from .metrics import WorkerMetrics
from .options import WorkerOptions
from .outcome import Outcome


class Observer(Hook):
    def __init__(self, metrics: WorkerMetrics | None, spans: otel.ConsumerSpans | None,
                 lease_ms: int) -> None:  # fmt: skip
        self.metrics = metrics
        self.spans = spans
        self.lease_ms = lease_ms
        self.loop = asyncio.get_running_loop()

    @classmethod
    def of(cls, options: WorkerOptions, handlers: Container[str]) -> Observer | None:
        """An observer for a run with these options, or None when there is nothing to do."""
        spans = otel.ConsumerSpans() if otel.active() else None
        metrics = None
        if options.metrics_port is not None:
            metrics = WorkerMetrics(options.metrics_host, options.metrics_port, handlers)
        if metrics is None and spans is None:
            return None
        return cls(metrics, spans, options.lease_ms)

    def on_claimed(self, queue: str, jobs: list[Claimed]) -> None:
        if self.metrics is None:
            return
        for c in jobs:
            if c.attempts == 1:  # the claim's server time is its deadline less the lease
                waited = (c.deadline_ms - self.lease_ms - minted_at_ms(c.id)) / 1000
                self.metrics.waited(queue, c.name, waited)

    def on_start(self, job: Held) -> None:
        job.started_at = self.loop.time()
        if self.spans is not None:
            c = job.claimed
            span, ctx = self.spans.start(job.queue, c.id, c.name, c.attempts, c.lane, c.trace)
            job.span, job.context = span, ctx

    def on_outcome(self, job: Held, outcome: Outcome) -> Outcome:
        if not job.started_at:
            return outcome
        label = outcome.label
        if self.metrics is not None:
            self.metrics.ran(job.queue, job.claimed.name, label, self.loop.time() - job.started_at)
        if job.span is not None and self.spans is not None:
            self.spans.end(job.span, label, outcome.error)
            job.span = None
        return outcome

    def close(self) -> None:
        if self.metrics is not None:
            with contextlib.suppress(Exception):
                self.metrics.close()

    @property
    def port(self) -> int:
        return self.metrics.port if self.metrics is not None else 0
