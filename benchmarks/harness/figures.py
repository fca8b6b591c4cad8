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
    Figure("server_us_per_job", "server CPU per job (bulk enqueue + 1-process drain)", "us",
           False, "trivial_server_us", "one trivial EVALSHA pipelined 50 deep, server CPU"),
]  # fmt: skip
REFERENCE = "bullmq-node"  # the targets' peer: the fastest queue of another ecosystem
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
        "trivial_server_us": med("redis_py_sync", "trivial_server_us"),
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
    """The speed round's targets, each with what was measured and whether it was met: emq
    against BullMQ for Node in the same run (a ratio above 1 is emq better), and against the
    raw limits of the same server."""
    systems = result["systems"]
    emq = systems.get("emq", {}).get("figures", {})
    peer = systems.get(REFERENCE, {}).get("figures", {})
    raw = result["raw"]["figures"]
    sweep = result.get("emq_only", {}).get("sweep", {})

    def better(key: str) -> float | None:
        return ratio(BY_KEY[key], emq.get(key), peer.get(key))

    def against(key: str) -> dict[str, Any] | None:
        return None if peer.get(key) is None else {"peer": REFERENCE, "value": peer[key]}

    def of(value: float | None, reference: float | None) -> float | None:
        return None if not value or not reference else value / reference

    def target(
        name: str,
        kind: str,
        v: float | None,
        met: Callable[[float], bool],
        ref: Any = None,
        ref_unit: str = "/s",
    ) -> dict[str, Any]:
        entry = {"target": name, "kind": kind, "measured": v, "met": None if v is None else met(v)}
        if ref is not None or kind == "ratio":
            entry["against"], entry["ref_unit"] = ref, ref_unit
        return entry

    cpu, trivial = emq.get("server_us_per_job"), raw.get("trivial_server_us")
    mem = peer.get("memory_bytes_per_job")
    return [
        target("server CPU per job: at most 1/5 of BullMQ for Node's", "ratio",
               better("server_us_per_job"), lambda v: v >= 5, against("server_us_per_job")),
        target("server CPU per job: at most 10x one trivial EVALSHA", "ratio",
               of(cpu, trivial), lambda v: v <= 10, trivial, " us"),
        target("memory per waiting job: at most 0.8x BullMQ for Node's", "ratio",
               of(emq.get("memory_bytes_per_job"), mem), lambda v: v <= 0.8,
               against("memory_bytes_per_job")),
        target("bulk enqueue: at least 4x BullMQ for Node", "ratio", better("enqueue_bulk"),
               lambda v: v >= 4, against("enqueue_bulk")),
        target("bulk enqueue: at least 0.5x redis-py pipelined EVALSHA", "ratio",
               of(emq.get("enqueue_bulk"), raw.get("redis_py_pipelined")), lambda v: v >= 0.5,
               raw.get("redis_py_pipelined")),
        target("processing, 1 process: at least 3x BullMQ for Node", "ratio", better("proc_1"),
               lambda v: v >= 3, against("proc_1")),
        target("one job at a time (asyncio): at least 0.7x redis-py's asyncio round trip",
               "ratio", of(emq.get("enqueue_one"), raw.get("redis_py_async_one")),
               lambda v: v >= 0.7, raw.get("redis_py_async_one")),
        target("one job at a time: ahead of BullMQ for Node", "ratio", better("enqueue_one"),
               lambda v: v > 1, against("enqueue_one")),
        target("sweep: >= 50,000 expired leases/s", "rate", sweep.get("rate"),
               lambda v: v >= 50_000),
        target("sweep: no single call over 10 ms", "ms", sweep.get("call_max_ms_worst"),
               lambda v: v <= 10),
    ]  # fmt: skip
