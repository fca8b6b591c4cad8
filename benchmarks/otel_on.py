"""Turns OpenTelemetry tracing on in a benchmark's process: ``ABI_IMPORTS=otel_on`` for
``ab_instructions.py``'s children, ``python -c "import otel_on, runpy; ..."`` otherwise.

An SDK tracer provider with no span processor: every span is made, sampled and ended, then
dropped, so a run measures what emq adds when tracing is on (the spans, the stored context,
the link) without an exporter's own cost, which depends on the exporter.
"""

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

trace.set_tracer_provider(TracerProvider())
