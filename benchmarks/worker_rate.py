"""The emq Worker's processing rate in one process, next to the bare claim/complete loop.

    .venv/bin/python benchmarks/worker_rate.py [--jobs 100000] [--conc 50] [--prefetch N]
                                               [--rounds 1] [--only worker|loop] [--profile F]

Starts a private server (``emq.embedded.standalone.EmbeddedServer`` in a temp dir, ``appendonly no``), and
for each round: bulk-enqueues ``--jobs`` no-op jobs with ``Queue.enqueue_many``, drains them
with one ``Worker`` (burst mode, async no-op handler, concurrency ``--conc``), enqueues the
same backlog again and drains it with a bare ``AsyncQueue`` loop (claim up to ``--conc`` jobs
in one call, await each handler, ``complete_many`` the batch, park on the wake list when
empty: no heartbeat, timeout or retry). Each drain runs in a child process of its own (one
worker process, as the targets count it), so neither side inherits the other's heap.

A rate is jobs/s between the 10th and 90th percentile of handler starts, so start-up and the
tail do not count. Rounds alternate the two sides on the same server; the ratio of each round
is the figure to compare, since absolute rates on a shared machine drift.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.server import server_cpu_s

QUEUE = "rate"


def rate(starts: list[float]) -> float:
    """Jobs/s between the 10th and 90th percentile of handler starts."""
    s = sorted(starts)
    lo, hi = int(len(s) * 0.1), int(len(s) * 0.9)
    span = s[hi] - s[lo]
    return (hi - lo) / span if span > 0 else 0.0


async def _worker(url: str, conc: int, prefetch: int | None) -> list[float]:
    from emq import Worker, WorkerOptions

    starts: list[float] = []
    mark = starts.append
    now = time.perf_counter

    async def noop(payload: Any) -> None:
        mark(now())

    opts = WorkerOptions(concurrency=conc, burst=True)
    if prefetch is not None:
        opts = WorkerOptions(concurrency=conc, prefetch=prefetch, burst=True)
    w = Worker(QUEUE, {"noop": noop}, url=url, options=opts)
    await w.run()
    assert w.stats.completed == len(starts), (w.stats.completed, len(starts))
    return starts


async def _loop(url: str, conc: int) -> list[float]:
    from emq import AsyncQueue

    starts: list[float] = []
    mark = starts.append
    now = time.perf_counter

    async def noop(payload: Any) -> None:
        mark(now())

    q = AsyncQueue.from_url(url, QUEUE)
    wake = q.core.keys.wake
    while True:
        jobs = await q.claim(conc, 30_000)
        if not jobs:
            if await q.client.blpop([wake], timeout=0.2) is None:
                break
            continue
        for job in jobs:
            await noop(job.payload)
        await q.complete_many([(job.id, job.token) for job in jobs])
    await q.close()
    return starts


def child(side: str, url: str, conc: int, prefetch: int | None, profile: str | None) -> None:
    """Drain the backlog with one side; print {"n", "rate", "cpu_us"} as JSON on stdout
    (``cpu_us``: this process's CPU time per job, imports left out)."""
    import emq.worker  # noqa: F401 - imported before the CPU clock starts

    cpu0 = time.process_time()
    coro = _worker(url, conc, prefetch) if side == "worker" else _loop(url, conc)
    if profile:
        import cProfile

        prof = cProfile.Profile()
        starts = prof.runcall(asyncio.run, coro)
        prof.dump_stats(profile)
    else:
        starts = asyncio.run(coro)
    cpu = time.process_time() - cpu0
    print(json.dumps({"n": len(starts), "rate": rate(starts), "cpu_us": cpu / len(starts) * 1e6}))


def run_side(side: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    from emq import Queue

    with Queue.from_url(url, QUEUE) as q:
        q.obliterate(force=True)
        t0 = time.perf_counter()
        for start in range(0, args.jobs, 10_000):
            q.enqueue_many([("noop", None)] * min(10_000, args.jobs - start))
        enq = time.perf_counter() - t0
        q.client.delete(q.core.keys.wake)
        q.client.config_resetstat()
        cpu0 = server_cpu_s(q.client)
    cmd = [sys.executable, __file__, "--child", side, "--url", url, "--conc", str(args.conc)]
    if args.prefetch is not None:
        cmd += ["--prefetch", str(args.prefetch)]
    if args.profile and side == "worker":
        cmd += ["--profile", args.profile]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise SystemExit(f"{side} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if got["n"] != args.jobs:
        raise SystemExit(f"{side}: {got['n']} handler starts for {args.jobs} jobs")
    with Queue.from_url(url, QUEUE) as q:
        got["server_us"] = (server_cpu_s(q.client) - cpu0) / args.jobs * 1e6
        calls = q.client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
        got["jobs_per_call"] = args.jobs / max(1, int(calls))
    got.update(side=side, wall_s=round(wall, 2), enqueue_s=round(enq, 2))
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--conc", type=int, default=50)
    p.add_argument("--prefetch", type=int, default=None, help="WorkerOptions.prefetch")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--only", choices=["worker", "loop"], default=None)
    p.add_argument("--profile", default=None, help="cProfile the worker child into this file")
    p.add_argument("--child", choices=["worker", "loop"], help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.url, args.conc, args.prefetch, args.profile)
        return

    import redis

    from emq.embedded.standalone import EmbeddedServer

    sides = [args.only] if args.only else ["worker", "loop"]
    with tempfile.TemporaryDirectory(prefix="emq-rate-") as tmp:
        server = EmbeddedServer(Path(tmp))
        url = server.start()
        try:
            redis.Redis.from_url(url).config_set("appendonly", "no")
            rates: dict[str, list[float]] = {s: [] for s in sides}
            for r in range(args.rounds):
                for side in sides:
                    got = run_side(side, url, args)
                    rates[side].append(got["rate"])
                    print(
                        f"round {r + 1} {side:6} {got['rate']:9,.0f} jobs/s  "
                        f"client {got['cpu_us']:4.1f} us CPU/job, server "
                        f"{got['server_us']:4.1f}, {got['jobs_per_call']:4.1f} jobs/script call "
                        f"(wall {got['wall_s']} s for {got['n']:,} jobs)",
                        flush=True,
                    )
        finally:
            server.stop()
    for side, xs in rates.items():
        print(f"{side:6} median {statistics.median(xs):9,.0f} jobs/s over {len(xs)} round(s)")
    if len(sides) == 2:
        ratios = [w / lp for w, lp in zip(rates["worker"], rates["loop"], strict=True) if lp]
        print(f"worker/loop ratio: median {statistics.median(ratios):.2f} ({ratios})")


if __name__ == "__main__":
    main()
