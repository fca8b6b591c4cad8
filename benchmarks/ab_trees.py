"""Two versions of emq side by side in one run: does a change slow the plain path down?

    .venv/bin/python benchmarks/ab_trees.py --base REV [--jobs 40000] [--rounds 5]
                                            [--conc 50] [--extra results,keep]

``--base`` is a git revision; it is checked out (``git worktree add``) in a temp dir and its
``src`` put first on ``PYTHONPATH`` of the children that measure it, while the other side runs
this working tree's ``src``. One private server (``emq.embedded.standalone.EmbeddedServer``,
``appendonly no``) serves every side, each on a queue of its own.

Each round, for each side (the order rotates from round to round), in a child process of
its own: ``Queue.enqueue_many`` of ``--jobs`` ``("noop", None)`` jobs, 10,000 per call (jobs/s
from the first call to the last reply), then one ``Worker`` (burst mode, async handler that
returns ``1``, concurrency ``--conc``) drains them (jobs/s between the 10th and 90th
percentile of handler starts, as ``worker_rate.py`` counts). Around the drain, the worker
process's own CPU per job and the server's (``INFO cpu``, user + sys): on a shared machine the
CPU times vary much less than the rates.

Sides: ``base``, ``new``, and with ``--extra`` the new tree with results kept
(``results``: ``QueueOptions(result_ttl_ms=60_000)``) or completed jobs retained (``keep``:
``keep_completed=(60_000, 1_000)``). The figures to compare are the ratios to ``base`` within
a round (median over rounds), since absolute rates on a shared machine drift.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.server import server_cpu_s

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OPTIONS: dict[str, dict[str, Any]] = {
    "base": {},
    "new": {},
    "results": {"result_ttl_ms": 60_000},
    "keep": {"keep_completed": (60_000, 1_000)},
}


def rate(starts: list[float]) -> float:
    s = sorted(starts)
    lo, hi = int(len(s) * 0.1), int(len(s) * 0.9)
    span = s[hi] - s[lo]
    return (hi - lo) / span if span > 0 else 0.0


async def drain(url: str, queue: str, conc: int, options: dict[str, Any]) -> list[float]:
    from emq import QueueOptions, Worker, WorkerOptions

    starts: list[float] = []
    mark, now = starts.append, time.perf_counter

    async def noop(payload: Any) -> int:
        mark(now())
        return 1

    opts = WorkerOptions(concurrency=conc, burst=True)
    kwargs: dict[str, Any] = {"options": opts}
    if options:
        kwargs["queue_options"] = QueueOptions(**options)
    w = Worker(queue, {"noop": noop}, url=url, **kwargs)
    await w.run()
    assert w.stats.completed == len(starts), (w.stats.completed, len(starts))
    return starts


def child(side: str, url: str, jobs: int, conc: int) -> None:
    """Enqueue, then drain, on queue ``ab-<side>``; print the figures as JSON."""
    import redis

    import emq
    import emq.worker  # imported before anything is timed
    from emq import Queue

    queue = f"ab-{side}"
    with Queue.from_url(url, queue) as q:
        q.obliterate(force=True)
        t0 = time.perf_counter()
        for start in range(0, jobs, 10_000):
            q.enqueue_many([("noop", None)] * min(10_000, jobs - start))
        enqueue_rate = jobs / (time.perf_counter() - t0)
        q.client.delete(q.core.keys.wake)
    client = redis.Redis.from_url(url)
    cpu0, mine0 = server_cpu_s(client), time.process_time()
    starts = asyncio.run(drain(url, queue, conc, OPTIONS[side]))
    worker_us = (time.process_time() - mine0) / jobs * 1e6
    server_us = (server_cpu_s(client) - cpu0) / jobs * 1e6
    with Queue.from_url(url, queue) as q:
        q.obliterate(force=True)
    out = {"enqueue": enqueue_rate, "rate": rate(starts), "server_us": server_us}
    out["worker_us"] = worker_us
    out["emq"] = emq.__file__
    print(json.dumps(out))


def run_child(side: str, src: Path, url: str, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, __file__, "--child", side, "--url", url]
    cmd += ["--jobs", str(args.jobs), "--conc", str(args.conc)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=src.parent)
    if out.returncode:
        raise SystemExit(f"{side} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if not str(got.pop("emq")).startswith(str(src)):  # the side measured the wrong tree
        raise SystemExit(f"{side} imported emq from outside {src}")
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", help="git revision to compare against")
    p.add_argument("--jobs", type=int, default=40_000)
    p.add_argument("--conc", type=int, default=50)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--extra", default="", help="comma-separated: results, keep")
    p.add_argument("--child", choices=sorted(OPTIONS), help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.url, args.jobs, args.conc)
        return
    if not args.base:
        p.error("--base REV is required")
    extra = [x for x in args.extra.split(",") if x]
    if unknown := set(extra) - {"results", "keep"}:
        p.error(f"unknown --extra {sorted(unknown)}")

    import redis

    from emq.embedded.standalone import EmbeddedServer

    sides = ["base", "new", *extra]
    with tempfile.TemporaryDirectory(prefix="emq-ab-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base),
                        args.base], check=True)  # fmt: skip
        server = EmbeddedServer(Path(tmp) / "server")
        url = server.start()
        figures: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
        try:
            redis.Redis.from_url(url).config_set("appendonly", "no")
            for r in range(args.rounds):
                order = sides[r % len(sides) :] + sides[: r % len(sides)]
                for side in order:
                    src = base / "src" if side == "base" else ROOT / "src"
                    got = run_child(side, src, url, args)
                    figures[side].append(got)
                    print(f"round {r + 1} {side:8} enqueue {got['enqueue']:9,.0f}/s  "
                          f"processing {got['rate']:9,.0f}/s  CPU/job: worker "
                          f"{got['worker_us']:5.1f} us, server {got['server_us']:5.1f} us",
                          flush=True)  # fmt: skip
        finally:
            server.stop()
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)])
    print(f"\n{args.jobs:,} jobs, {args.rounds} rounds; ratio to base within each round, median:")
    for side in sides[1:]:
        for what in ("enqueue", "rate", "worker_us", "server_us"):
            ratios = [
                s[what] / b[what] for s, b in zip(figures[side], figures["base"], strict=True)
            ]
            med = statistics.median(ratios)
            print(f"  {side:8} {what:9} {med:.3f}  ({', '.join(f'{x:.3f}' for x in ratios)})")


if __name__ == "__main__":
    main()
