"""Prometheus text for the queues on a server: :func:`render_queue_metrics`.

Every scrape reads the server afresh (no state is kept between scrapes), one ``MULTI`` per
:data:`CHUNK` queues, so each chunk's figures are of one instant. Per queue (label ``queue``):

- ``emq_jobs{location}`` (gauge): jobs in each location, ``pending`` counting every lane and
  the packed waiting jobs (layout 3);
- ``emq_jobs_<counter>_total`` (counters): the queue's lifetime counters, as ``counts()``
  reads them (``completed``, ``failed`` attempts, ``dead``, ``recovered``), and the
  ``cancelled`` and ``missing`` counters of the same HASH; they reset only when the queue is
  obliterated;
- ``emq_oldest_waiting_age_seconds`` (gauge): how long ago the oldest of the first
  :data:`OLDEST_SCAN` jobs to be claimed was enqueued (its id's server-clock time against the
  server's ``TIME``); 0 when nothing waits;
- ``emq_queue_paused`` (gauge): 1 while the queue is paused.

The worker's own histograms (handler duration, wait time) are served by each worker on its
``metrics_port`` (:mod:`emq.worker.metrics`). docs/observability.md lists every name.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from ..model.ids import minted_at_ms
from ..model.keys import QueueKeys
from ..model.states import Location
from ..queue._sync.queue import Queue
from ..server.clients import close_client, is_cluster_client, sync_client
from ..server.discovery import queue_names

CHUNK = 100  # queues per MULTI
OLDEST_SCAN = 50  # waiting ids looked at for the oldest (the first in claim order)
COUNTERS = ("completed", "failed", "dead", "recovered", "cancelled", "missing")
COUNTER_HELP = {
    "completed": "Jobs completed",
    "failed": "Attempts that failed (retried or dead)",
    "dead": "Jobs dead-lettered (attempts spent, stalled too often, permanent failures)",
    "recovered": "Expired leases the sweep recovered to pending",
    "cancelled": "Jobs a cancel ended",
    "missing": "Ids met without their row (evicted or deleted by hand), dropped",
}
TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class QueueSample:
    """One queue's figures at one instant."""

    queue: str
    sizes: dict[str, int]
    counters: dict[str, int]
    oldest_age_s: float
    paused: bool


def read_queues(client: redis.Redis, names: Sequence[str], now_ms: int) -> list[QueueSample]:
    """The figures of ``names`` (validated), :data:`CHUNK` queues per ``MULTI``; a queue in
    lane mode reads its lanes (a script) for ``pending`` and its oldest waiting job, and a
    queue with packed jobs reads its first waiting ids in claim order after the ``MULTI``
    (``Queue.jobs``' merge)."""
    out: list[QueueSample] = []
    width = len(Location) + 4
    step = 1 if is_cluster_client(client) else CHUNK  # a MULTI holds one slot on a cluster
    for start in range(0, len(names), step):
        chunk = [QueueKeys.of(n) for n in names[start : start + step]]
        with client.pipeline(transaction=True) as p:
            for k in chunk:
                for loc in Location:
                    p.zcard(k.location(loc.value))
                p.hmget(k.metrics, list(COUNTERS))
                p.hmget(k.meta, ["lanes", "paused"])
                p.zrange(k.pending, 0, OLDEST_SCAN - 1)
                p.hlen(k.packed)
            replies: list[Any] = p.execute()
        for i, k in enumerate(chunk):
            part = replies[i * width : (i + 1) * width]
            sizes = {
                loc.value: int(n) for loc, n in zip(Location, part[: len(Location)], strict=True)
            }
            metrics, (lanes, paused), ids, packed = part[len(Location) :]
            sizes["pending"] += int(packed)
            if lanes == "1" or packed:
                q = Queue(client, k.queue)
                if lanes == "1":
                    sizes["pending"] = q.counts()["pending"]
                ids = q._pending_ids(0, OLDEST_SCAN, None)
            oldest = min((minted_at_ms(j) for j in ids), default=None)
            age = max(0.0, (now_ms - oldest) / 1000) if oldest is not None else 0.0
            counters = {c: int(v or 0) for c, v in zip(COUNTERS, metrics, strict=True)}
            out.append(QueueSample(k.queue, sizes, counters, age, paused == "1"))
    return out


class QueueCollector(Collector):
    """The metric families of some samples (one scrape's)."""

    def __init__(self, samples: Sequence[QueueSample]) -> None:
        self.samples = samples

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("emq_jobs", "Jobs in each location of a queue",
                                 labels=["queue", "location"])  # fmt: skip
        counters = {
            c: CounterMetricFamily(f"emq_jobs_{c}", COUNTER_HELP[c], labels=["queue"])
            for c in COUNTERS
        }
        age = GaugeMetricFamily(
            "emq_oldest_waiting_age_seconds",
            "Age of the oldest job waiting to be claimed (0: none waits)",
            labels=["queue"],
        )
        paused = GaugeMetricFamily("emq_queue_paused", "1 while the queue is paused",
                                   labels=["queue"])  # fmt: skip
        for s in self.samples:
            for loc, n in s.sizes.items():
                jobs.add_metric([s.queue, loc], n)
            for c, n in s.counters.items():
                counters[c].add_metric([s.queue], n)
            age.add_metric([s.queue], s.oldest_age_s)
            paused.add_metric([s.queue], 1 if s.paused else 0)
        yield jobs
        yield from counters.values()
        yield age
        yield paused


def sample(client: redis.Redis, queues: Sequence[str] | None = None) -> list[QueueSample]:
    """Every known queue's figures (or those of ``queues``), read now."""
    names = list(queues) if queues is not None else queue_names(client)
    seconds, micros = client.time()
    return read_queues(client, names, int(seconds) * 1000 + int(micros) // 1000)


def render(samples: Sequence[QueueSample]) -> tuple[bytes, str]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(samples))
    return generate_latest(registry), CONTENT_TYPE_LATEST


def render_queue_metrics(url: str, queues: list[str] | None = None) -> tuple[bytes, str]:
    """``(body, content type)`` of the Prometheus text exposition of ``queues`` (None: every
        known queue, :func:`emq.server.discovery.queue_names`) on the server at ``url``.
    Blocking: run it
        in a thread from async code. A server error is raised (the caller answers 5xx)."""
    client = sync_client(
        url,
        decode_responses=True,
        socket_connect_timeout=TIMEOUT_S,
        socket_timeout=TIMEOUT_S,
    )
    try:
        return render(sample(client, queues))
    finally:
        close_client(client)
