"""OpenTelemetry spans (the optional extra ``emq[otel]``; only ``opentelemetry-api`` is needed).

A **producer span** (kind PRODUCER, ``send <queue>``) wraps each enqueue call
(``enqueue``, ``enqueue_many``, ``enqueue_flow``); its context, as a W3C ``traceparent``, is
stored in each new job's row (field ``trace``, written by ``enqueue.lua`` and
``enqueue_flow.lua`` in the same step as the row) and returned by ``claim.lua``. The worker
makes a **consumer span** (kind CONSUMER, ``process <queue>``) per attempt, from the start of
the handler to the attempt's outcome, *linked* to the producer span (a new trace: the
messaging conventions' link, not a parent), and current while the handler runs, so spans the
handler makes are its children. Attributes follow the messaging conventions
(``messaging.system`` = ``emq``, ``messaging.destination.name`` = the queue,
``messaging.operation``, ``messaging.message.id``) plus ``emq.attempt``, ``emq.lane``,
``emq.job.name`` and, on the consumer span, ``emq.outcome``.

Cost when OpenTelemetry is not active (the package is absent, not imported, or no tracer
provider is set): :func:`active` is one dict lookup (and, once ``opentelemetry.trace`` is
imported, one call), nothing is stored (the script gets ``''``) and the worker makes no span.
Importing emq never imports opentelemetry: this module imports it only once it is active.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

SYSTEM = "emq"
_NOTHING: AbstractContextManager[str] = contextlib.nullcontext("")


def active() -> bool:
    """True when ``opentelemetry.trace`` is imported and a tracer provider is set. Never
    imports it: a program that configured tracing has imported it already."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _tracer() -> Any:
    from opentelemetry import trace

    from .. import __version__

    return trace.get_tracer("emq", __version__)


def traceparent(span: Any) -> str:
    """The W3C ``traceparent`` of ``span`` ('' if its context is not valid)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return ""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


@functools.lru_cache(maxsize=1024)  # the jobs of one enqueue call share their traceparent
def parse_traceparent(text: str) -> Any:
    """The remote ``SpanContext`` of a stored ``traceparent`` (as :func:`traceparent` writes
    it), or None if it is not one."""
    from opentelemetry.trace import SpanContext, TraceFlags

    m = _TRACEPARENT.fullmatch(text)
    if m is None:
        return None
    flags = TraceFlags(int(m[3], 16))
    ctx = SpanContext(int(m[1], 16), int(m[2], 16), is_remote=True, trace_flags=flags)
    return ctx if ctx.is_valid else None


def enqueue_span(queue: str, groups: Sequence[Sequence[Any]]) -> AbstractContextManager[str]:
    """A context manager around one enqueue call into ``queue`` of the jobs ``groups`` (each
    job's arguments, its id first; read only when active): it yields the
    ``traceparent`` to store with the jobs, ``''`` when OpenTelemetry is not active (then it
    does nothing else). The span records an exception that escapes it."""
    if not active():
        return _NOTHING
    return _producer(queue, [str(g[0]) for g in groups])


@contextlib.contextmanager
def _producer(queue: str, ids: list[str]) -> Iterator[str]:
    from opentelemetry.trace import SpanKind

    attrs: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation": "publish",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
    }
    if len(ids) == 1:
        attrs["messaging.message.id"] = ids[0]
    else:
        attrs["messaging.batch.message_count"] = len(ids)
    with _tracer().start_as_current_span(
        f"send {queue}", kind=SpanKind.PRODUCER, attributes=attrs
    ) as span:
        yield traceparent(span)


class ConsumerSpans:
    """A worker's consumer spans, one per attempt; make it only when :func:`active`."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import Link, SpanKind, Status, StatusCode

        self._tracer = _tracer()
        self._trace, self._context = trace, context
        self._link, self._kind = Link, SpanKind.CONSUMER
        self._status, self._error = Status, StatusCode.ERROR

    def start(
        self, queue: str, job_id: str, name: str, attempt: int, lane: str | None, parent: str | None
    ) -> tuple[Any, contextvars.Context]:
        """The attempt's span (started now, linked to ``parent``, its producer's stored
        traceparent) and a copy of the current context in which it is the current span: run
        the handler in it."""
        links = []
        if parent and (remote := parse_traceparent(parent)) is not None:
            links.append(self._link(remote))
        attrs = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": queue,
            "messaging.operation": "process",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.message.id": job_id,
            "emq.job.name": name,
            "emq.attempt": attempt,
            "emq.lane": lane or "default",
        }
        span = self._tracer.start_span(
            f"process {queue}",
            context=self._context.Context(),  # a new trace: linked to the producer, no parent
            kind=self._kind,
            links=links,
            attributes=attrs,
        )
        ctx = contextvars.copy_context()
        ctx.run(self._context.attach, self._trace.set_span_in_context(span))
        return span, ctx

    def end(self, span: Any, outcome: str, error: str = "") -> None:
        """End an attempt's span with its ``outcome`` (and ``error``'s first line as an
        error status, for an attempt that failed)."""
        span.set_attribute("emq.outcome", outcome)
        if error and outcome not in ("completed", "rate_limited"):
            span.set_status(self._status(self._error, error.splitlines()[0][:500]))
        span.end()
