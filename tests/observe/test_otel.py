"""OpenTelemetry (emq.observe.otel): a producer span per enqueue call whose traceparent is
stored with
the job, and a consumer span per attempt linked to it, exported to the SDK's in-memory
exporter across a real worker run; nothing stored, and opentelemetry never imported, when
tracing is not set up."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

from emq import Backoff, JobSpec, Queue, Worker, WorkerOptions
from emq.observe.otel import active

from ..support.helpers import until

FIXED = Backoff(kind="fixed", base_ms=0, jitter=0.0)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """A global SDK tracer provider exporting to memory, for this test only (the API sets a
    global provider once per process: the previous state is put back afterwards)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    saved = trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace.set_tracer_provider(provider)
    assert active()
    try:
        yield exporter
    finally:
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved
        provider.shutdown()
    assert not active()


def traceparent(span: ReadableSpan) -> str:
    c = span.context
    assert c is not None
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def of_kind(exporter: InMemorySpanExporter, kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind == kind]


@pytest.mark.timeout(60)
async def test_each_attempt_links_to_its_producer_span(
    spans: InMemorySpanExporter, url: str, queue: Queue, qname: str
) -> None:
    tracer = trace.get_tracer("test")
    ok = queue.enqueue("ok", {"n": 1})
    boom = queue.enqueue("boom", None, max_attempts=2)
    many = queue.enqueue_many([("sync", i) for i in range(3)])
    producers = of_kind(spans, SpanKind.PRODUCER)
    assert [s.name for s in producers] == [f"send {qname}"] * 3
    p_ok, p_boom, p_many = producers
    assert dict(p_ok.attributes or {}) == {
        "messaging.system": "emq",
        "messaging.destination.name": qname,
        "messaging.operation": "publish",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.message.id": ok,
    }
    assert (p_many.attributes or {})["messaging.batch.message_count"] == 3
    row = queue.job(ok)
    assert row is not None and row.fields["trace"] == traceparent(p_ok)
    assert {queue.job(i).fields["trace"] for i in many} == {traceparent(p_many)}  # type: ignore[union-attr]

    async def ok_handler(payload: Any) -> None:
        with tracer.start_as_current_span("inside-async"):
            pass

    def sync_handler(payload: Any) -> None:
        with tracer.start_as_current_span("inside-sync"):
            pass

    def boom_handler(payload: Any) -> None:
        raise RuntimeError("always\nsecond line")

    handlers = {"ok": ok_handler, "boom": boom_handler, "sync": sync_handler}
    w = Worker(qname, handlers, url=url, options=WorkerOptions(backoff=FIXED))
    task = asyncio.create_task(w.run())
    await until(lambda: queue.counts()["completed"] == 4 and queue.counts()["dead"] == 1, 20,
                "the jobs done")  # fmt: skip
    w.stop()
    await asyncio.wait_for(task, 30)

    consumers = of_kind(spans, SpanKind.CONSUMER)
    by_job: dict[str, list[ReadableSpan]] = {}
    for s in consumers:
        by_job.setdefault(str((s.attributes or {})["messaging.message.id"]), []).append(s)
    assert set(by_job) == {ok, boom, *many}
    for job_id, producer in [(ok, p_ok), (boom, p_boom)] + [(i, p_many) for i in many]:
        for s in by_job[job_id]:
            assert s.name == f"process {qname}" and s.parent is None  # a new trace, linked
            assert [(ln.context.trace_id, ln.context.span_id) for ln in s.links] == [
                (producer.context.trace_id, producer.context.span_id)  # type: ignore[union-attr]
            ]
            a = s.attributes or {}
            assert (a["messaging.system"], a["messaging.destination.name"]) == ("emq", qname)
            assert (a["messaging.operation"], a["emq.lane"]) == ("process", "default")
    (c_ok,) = by_job[ok]
    assert (c_ok.attributes or {})["emq.outcome"] == "completed"
    assert (c_ok.attributes or {})["emq.attempt"] == 1
    tries = sorted(by_job[boom], key=lambda s: (s.attributes or {})["emq.attempt"])
    assert [(s.attributes or {})["emq.attempt"] for s in tries] == [1, 2]
    assert {(s.attributes or {})["emq.outcome"] for s in tries} == {"failed"}
    assert {s.status.status_code for s in tries} == {StatusCode.ERROR}
    assert tries[0].status.description == "RuntimeError: always"
    # spans a handler makes are children of its attempt's span (async and sync handlers)
    inner = {s.name: s for s in spans.get_finished_spans() if s.name.startswith("inside")}
    assert inner["inside-async"].parent.span_id == c_ok.context.span_id  # type: ignore[union-attr]
    sync_spans = {s.context.span_id for i in many for s in by_job[i]}  # type: ignore[union-attr]
    assert inner["inside-sync"].parent.span_id in sync_spans  # type: ignore[union-attr]


def test_a_flow_stores_one_producer_context_in_every_queue(
    spans: InMemorySpanExporter, queue: Queue, qname: str
) -> None:
    other = qname + ".b"
    ids = queue.enqueue_flow(JobSpec("parent"), [JobSpec("a"), JobSpec("b", queue=other)])
    (producer,) = of_kind(spans, SpanKind.PRODUCER)
    assert (producer.attributes or {})["messaging.batch.message_count"] == 3
    child = Queue(queue.client, other).job(ids.children[1].id)  # shares the fixture's client
    root = queue.job(ids.id)
    assert root is not None and child is not None
    assert root.fields["trace"] == child.fields["trace"] == traceparent(producer)


def test_nothing_is_stored_when_tracing_is_not_set_up(queue: Queue) -> None:
    assert not active()
    job_id = queue.enqueue("x")
    row = queue.job(job_id)
    assert row is not None and "trace" not in row.fields
    (claimed,) = queue.claim(1, 10_000)
    assert claimed.trace is None


def test_import_emq_and_a_worker_run_never_import_opentelemetry(url: str, qname: str) -> None:
    # redis-py may import parts of opentelemetry by itself when it is installed (its own
    # observability): emq must add none, and `import emq` alone must load none
    probe = f"""
import sys, asyncio
import emq
otel = lambda: sorted(m for m in sys.modules if m.startswith("opentelemetry"))
assert otel() == [], otel()
import redis, redis.asyncio
before = otel()
q = emq.Queue.from_url({url!r}, {qname!r})
q.enqueue("x", 1)
w = emq.Worker({qname!r}, {{"x": lambda p: None}}, url={url!r},
               options=emq.WorkerOptions(burst=True))
asyncio.run(w.run())
assert q.counts()["completed"] == 1
print(sorted(set(otel()) - set(before)))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
