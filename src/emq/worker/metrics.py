"""A worker's own Prometheus endpoint (``WorkerOptions.metrics_port``): two histograms.

- ``emq_job_duration_seconds{queue, name, outcome}``: from a handler's start to its attempt's
  outcome (``completed``, ``failed``, ``timeout``, ``rate_limited``, ``cancelled``,
  ``lease_lost``, ``shutdown``, ``no_handler``);
- ``emq_job_wait_seconds{queue, name}``: from a job's enqueue to the claim of its first
  attempt, both on the server's clock (the id's time, and the claim's deadline less the lease),
  so the workers' and producers' clocks do not enter it.

``name`` is the job's name when this worker has a handler for it, else ``unregistered`` (so a
stray name cannot grow the label set). The endpoint is a daemon thread serving GET ``/metrics``
on ``metrics_host:metrics_port`` (loopback by default), started with the run and stopped at
its end; the histograms belong to the run. prometheus_client is imported only when
``metrics_port`` is set.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from ..errors import EmqError

DURATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0,
)  # fmt: skip
WAIT_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0,
)  # fmt: skip
UNREGISTERED = "unregistered"


class WorkerMetrics:
    """The histograms of one run and the HTTP endpoint that serves them."""

    def __init__(self, host: str, port: int, handlers: Container[str]) -> None:
        from prometheus_client import CollectorRegistry, Histogram, start_http_server

        self.registry = CollectorRegistry(auto_describe=True)
        self._handlers = handlers
        self.duration = Histogram(
            "emq_job_duration_seconds",
            "Handler run time of one attempt, by outcome",
            ["queue", "name", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.wait = Histogram(
            "emq_job_wait_seconds",
            "Time from enqueue to the claim of a job's first attempt (server clock)",
            ["queue", "name"],
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self._waits: dict[tuple[str, str], Any] = {}  # labels -> the histogram's child
        self._runs: dict[tuple[str, str, str], Any] = {}
        try:
            self._server, self._thread = start_http_server(port, host, registry=self.registry)
        except OSError as exc:  # a port in use, an address not of this machine
            raise EmqError(
                f"cannot serve the worker's metrics on {host}:{port}: {exc.strerror or exc}"
            ) from None
        self.port: int = self._server.server_port
        self.host = host

    def _name(self, name: str) -> str:
        return name if name in self._handlers else UNREGISTERED

    def waited(self, queue: str, name: str, seconds: float) -> None:
        labels = (queue, self._name(name))
        child = self._waits.get(labels)
        if child is None:
            child = self._waits[labels] = self.wait.labels(*labels)
        child.observe(max(0.0, seconds))

    def ran(self, queue: str, name: str, outcome: str, seconds: float) -> None:
        labels = (queue, self._name(name), outcome)
        child = self._runs.get(labels)
        if child is None:
            child = self._runs[labels] = self.duration.labels(*labels)
        child.observe(max(0.0, seconds))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
