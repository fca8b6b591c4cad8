"""What ``ctx.log`` costs a drain: N no-op jobs without a log line and with one per job.

    .venv/bin/python benchmarks/job_logs.py [--jobs 50000] [--conc 50] [--rounds 3]
                                            [--kind async|sync] [--lines 1]

Starts a private server (``emq.embedded.standalone.EmbeddedServer`` in a temp dir, ``appendonly
no``), and for each round: bulk-enqueues ``--jobs`` no-op jobs, drains them with one
``Worker`` (burst mode, concurrency ``--conc``, an ``async`` or ``sync`` handler) that calls
``ctx.log`` 0 times (side ``plain``), then the same backlog again with ``--lines`` calls per
job (side ``logs``). Each drain runs in a child process of its own. The sides alternate on
the same server; each round's ratio is the figure to compare (absolute rates drift on a
shared machine).

A rate is jobs/s between the 10th and 90th percentile of handler starts. Also shown: the
client's CPU per job, the server's CPU per job (``INFO cpu``), script calls per job
(``commandstats``: claims, acks and ``job_log`` calls), ``job_log`` calls, and the lines the
server stored (checked against the jobs: every line of every job is kept).
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

QUEUE = "logs-bench"


def rate(starts: list[float]) -> float:
    s = sorted(starts)
    lo, hi = int(len(s) * 0.1), int(len(s) * 0.9)
    span = s[hi] - s[lo]
    return (hi - lo) / span if span > 0 else 0.0


async def _drain(url: str, conc: int, kind: str, lines: int) -> tuple[list[float], int]:
    from emq import JobContext, Worker, WorkerOptions

    starts: list[float] = []
    mark, now = starts.append, time.perf_counter
    runner: list[Any] = []

    def work(payload: Any, ctx: JobContext) -> None:
        if not starts:
            runner.append(w._runner)  # its log flusher counts its calls
        mark(now())
        for i in range(lines):
            ctx.log(f"line {i} of a no-op job")

    async def awork(payload: Any, ctx: JobContext) -> None:
        work(payload, ctx)

    w = Worker(QUEUE, url=url, options=WorkerOptions(concurrency=conc, burst=True))
    w.register("noop", awork if kind == "async" else work)
    await w.run()
    assert w.stats.completed == len(starts), (w.stats.completed, len(starts))
    return starts, runner[0].progress.logs.calls


def child(url: str, conc: int, kind: str, lines: int) -> None:
    import emq.worker  # noqa: F401 - imported before the CPU clock starts

    cpu0 = time.process_time()
    starts, calls = asyncio.run(_drain(url, conc, kind, lines))
    cpu = time.process_time() - cpu0
    out = {"n": len(starts), "rate": rate(starts), "cpu_us": cpu / len(starts) * 1e6}
    print(json.dumps(out | {"log_calls": calls}))


def run_side(side: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    from emq import Queue

    lines = args.lines if side == "logs" else 0
    with Queue.from_url(url, QUEUE) as q:
        q.obliterate(force=True)
        for start in range(0, args.jobs, 10_000):
            q.enqueue_many([("noop", None)] * min(10_000, args.jobs - start))
        q.client.delete(q.core.keys.wake)
        q.client.config_resetstat()
        cpu0 = server_cpu_s(q.client)
    cmd = [sys.executable, __file__, "--child", "--url", url, "--conc", str(args.conc),
           "--kind", args.kind, "--lines", str(lines)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{side} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    with Queue.from_url(url, QUEUE) as q:
        got["server_us"] = (server_cpu_s(q.client) - cpu0) / args.jobs * 1e6
        stats = q.client.info("commandstats")
        calls = stats.get("cmdstat_evalsha", {}).get("calls", 0)
        got["calls_per_job"] = int(calls) / args.jobs
        index = q.client.zrange(q.core.keys.logs_index, 0, -1)
        stored = 0
        for start in range(0, len(index), 1_000):
            with q.client.pipeline(transaction=False) as p:
                for job_id in index[start : start + 1_000]:
                    p.llen(q.core.keys.logs(job_id))
                stored += sum(p.execute())
        got["stored"] = stored
    got["side"] = side
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--conc", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--kind", choices=["async", "sync"], default="async")
    p.add_argument("--lines", type=int, default=1, help="ctx.log calls per job (side logs)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.url, args.conc, args.kind, args.lines)
        return

    import redis

    from emq.embedded.standalone import EmbeddedServer

    sides = ["plain", "logs"]
    rates: dict[str, list[float]] = {s: [] for s in sides}
    with tempfile.TemporaryDirectory(prefix="emq-logs-") as tmp:
        server = EmbeddedServer(Path(tmp))
        url = server.start()
        try:
            redis.Redis.from_url(url).config_set("appendonly", "no")
            for r in range(args.rounds):
                for side in sides:
                    got = run_side(side, url, args)
                    rates[side].append(got["rate"])
                    want = args.jobs * (args.lines if side == "logs" else 0)
                    assert got["stored"] == want, (side, got["stored"], want)
                    print(
                        f"round {r + 1} {side:5} {got['rate']:9,.0f} jobs/s  client "
                        f"{got['cpu_us']:5.1f} us CPU/job, server {got['server_us']:5.1f} us/job, "
                        f"{got['calls_per_job']:.3f} script calls/job, "
                        f"{got['log_calls']} job_log calls, {got['stored']:,} lines stored",
                        flush=True,
                    )
        finally:
            server.stop()
    for side, xs in rates.items():
        print(f"{side:5} median {statistics.median(xs):9,.0f} jobs/s over {len(xs)} round(s)")
    ratios = [lg / pl for pl, lg in zip(rates["plain"], rates["logs"], strict=True) if pl]
    shown = [round(x, 3) for x in ratios]
    print(f"logs/plain ratio: median {statistics.median(ratios):.3f} ({shown})")


if __name__ == "__main__":
    main()
