"""What each figure is, how it compares, and the issue's targets, as data.

A ratio is always "times better than the reference": for rates ``value / reference``, for
latency and memory (lower is better) ``reference / value``. So a ratio above 1 means emq (or
whichever system) beats the reference, and 10 means ten times better.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .stats import median


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    raw: str | None  # key into the raw limits' figures, or None when no raw limit applies
    raw_label: str = ""


FIGURES = [
    Figure("enqueue_one", "enqueue, one by one", "jobs/s", True, "redis_py_one",
           "redis-py EVALSHA one at a time (faster of sync, asyncio)"),
    Figure("enqueue_bulk", "enqueue, bulk", "jobs/s", True, "redis_py_pipelined",
           "redis-py pipelined EVALSHA (faster of sync, asyncio)"),
    Figure("proc_1", "processing, 1 worker process", "jobs/s", True, "redis_py_pipelined",
           "redis-py pipelined EVALSHA (one client process)"),
    Figure("proc_2", "processing, 2 worker processes", "jobs/s", True, "bench_pipelined",
           "redis-benchmark EVALSHA, 50 clients, pipeline 16"),
    Figure("latency_p50_ms", "latency p50 at 1,000 jobs/s", "ms", False, "rtt_p50_ms",
           "redis-py sync EVALSHA round trip p50"),
    Figure("latency_p99_ms", "latency p99 at 1,000 jobs/s", "ms", False, "rtt_p99_ms",
           "redis-py sync EVALSHA round trip p99"),
    Figure("memory_bytes_per_job", "server memory per waiting job", "bytes", False, None),
]  # fmt: skip
BY_KEY = {f.key: f for f in FIGURES}


def ratio(fig: Figure, value: float | None, reference: float | None) -> float | None:
    if value is None or reference is None or value <= 0 or reference <= 0:
        return None
    return value / reference if fig.higher_is_better else reference / value


def per_job_row(system: dict[str, Any]) -> bool:
    """A system keeps a per-job row when enqueueing N jobs adds at least N keys."""
    keys = system.get("figures", {}).get("keys_per_job")
    return keys is not None and keys >= 0.99


def best_peers(systems: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """For each figure, the best value among the peers (every system but emq). Memory's
    reference is the smallest among the peers that keep a per-job row (the issue's target)."""
    out: dict[str, dict[str, Any]] = {}
    for fig in FIGURES:
        candidates = []
        for name, s in systems.items():
            if name.startswith("emq"):
                continue
            if fig.key == "memory_bytes_per_job" and not per_job_row(s):
                continue
            if fig.key.startswith("latency") and s.get("figures", {}).get("latency_saturated"):
                continue
            value = s.get("figures", {}).get(fig.key)
            if value is not None and value > 0:
                candidates.append((value, name))
        if candidates:
            value, name = max(candidates) if fig.higher_is_better else min(candidates)
            out[fig.key] = {"peer": name, "value": value}
    return out


def raw_figures(raw_runs: dict[str, list[dict[str, Any]]]) -> dict[str, float | None]:
    def med(kind: str, field: str) -> float | None:
        return median([r[field] for r in raw_runs.get(kind, []) if field in r])

    sync_one, async_one = (
        med("redis_py_sync", "one_by_one_rate"),
        med("redis_py_async", "one_by_one_rate"),
    )
    sync_pipe, async_pipe = (
        med("redis_py_sync", "pipelined_rate"),
        med("redis_py_async", "pipelined_rate"),
    )
    return {
        "bench": med("bench", "rate"),
        "bench_pipelined": med("bench_pipelined", "rate"),
        "redis_py_sync_one": sync_one,
        "redis_py_async_one": async_one,
        "redis_py_sync_pipelined": sync_pipe,
        "redis_py_async_pipelined": async_pipe,
        "redis_py_one": max(v for v in (sync_one, async_one, 0.0) if v is not None) or None,
        "redis_py_pipelined": max(v for v in (sync_pipe, async_pipe, 0.0) if v is not None) or None,
        "rtt_p50_ms": med("redis_py_sync", "rtt_p50_ms"),
        "rtt_p99_ms": med("redis_py_sync", "rtt_p99_ms"),
    }


def ratios(
    systems: dict[str, dict[str, Any]], best: dict[str, dict[str, Any]], raw: dict[str, Any]
) -> dict[str, dict[str, dict[str, float | None]]]:
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for name, s in systems.items():
        figs = s.get("figures", {})
        out[name] = {}
        for fig in FIGURES:
            value = figs.get(fig.key)
            ref = best.get(fig.key, {}).get("value")
            raw_value = raw.get(fig.raw) if fig.raw else None
            out[name][fig.key] = {
                "vs_best_peer": ratio(fig, value, ref),
                "vs_raw": ratio(fig, value, raw_value),
            }
    return out


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with what was measured and whether it was met."""
    emq = result["systems"].get("emq", {}).get("figures", {})
    r = result["ratios"].get("emq", {})
    raw = result["raw"]["figures"]
    sweep = result.get("emq_only", {}).get("sweep", {})
    best = result["best_peer"]

    def rt(key: str, which: str = "vs_best_peer") -> float | None:
        return r.get(key, {}).get(which)

    def target(
        name: str, kind: str, v: float | None, met: Callable[[float], bool], against: Any = None
    ) -> dict[str, Any]:
        entry = {"target": name, "kind": kind, "measured": v, "met": None if v is None else met(v)}
        if against is not None or kind == "ratio":
            entry["against"] = against
        return entry

    bulk_vs_raw = None
    if emq.get("enqueue_bulk") and raw.get("redis_py_pipelined"):
        bulk_vs_raw = emq["enqueue_bulk"] / raw["redis_py_pipelined"]
    return [
        target("processing, 1 process: >= 10x the fastest peer", "ratio", rt("proc_1"),
               lambda v: v >= 10, best.get("proc_1")),
        target("bulk enqueue: >= 5x the fastest peer's bulk", "ratio", rt("enqueue_bulk"),
               lambda v: v >= 5, best.get("enqueue_bulk")),
        target("bulk enqueue: >= 0.5x redis-py pipelined EVALSHA", "ratio", bulk_vs_raw,
               lambda v: v >= 0.5, raw.get("redis_py_pipelined")),
        target("latency p50 < 2 ms at 1,000 jobs/s", "ms", emq.get("latency_p50_ms"),
               lambda v: v < 2),
        target("latency p99 < 10 ms at 1,000 jobs/s", "ms", emq.get("latency_p99_ms"),
               lambda v: v < 10),
        target("sweep: >= 50,000 expired leases/s", "rate", sweep.get("rate"),
               lambda v: v >= 50_000),
        target("sweep: no single call over 10 ms", "ms", sweep.get("call_max_ms_worst"),
               lambda v: v <= 10),
        target("memory per waiting job <= smallest per-job-row peer", "ratio",
               rt("memory_bytes_per_job"), lambda v: v >= 1, best.get("memory_bytes_per_job")),
    ]  # fmt: skip
