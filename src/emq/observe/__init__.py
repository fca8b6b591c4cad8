"""What an operator sees of a fleet: Prometheus metrics of the queues, OpenTelemetry spans
(the optional ``emq[otel]``) and the worker registry (docs/observability.md)."""
