"""Lanes and limits next to the plain path: bulk enqueue, and one Worker process's rate.

    .venv/bin/python benchmarks/lanes_rate.py [--jobs 40000] [--lanes 1000] [--rounds 3]
                                              [--conc 50] [--split 10000]

One private server (``emq.embedded.standalone.EmbeddedServer`` in a temp dir, ``appendonly no``) and three
sides, each on a queue of its own:

- ``plain``: ``Queue.enqueue_many`` of ``("noop", None)`` pairs, no lanes, no limits;
- ``lanes``: ``JobSpec("noop", lane=f"t{i % lanes}")``, so ``--lanes`` busy lanes, no limits;
- ``limits``: the same lanes with every kind of limit set, active but not binding:
  ``set_limits(concurrency=10_000, lane_concurrency=10, lane_rate=(100_000, 1_000))``.

Each round, for each side (the order rotates from round to round): enqueue ``--jobs`` jobs
with ``Queue.enqueue_many``, 10,000 per call, timed from building the list to the last reply
(jobs/s); then drain them with one ``Worker`` (burst mode, async no-op handler, concurrency
``--conc``) in a child process, exactly as ``worker_rate.py`` does (its ``child`` runs there):
jobs/s between the 10th and 90th percentile of handler starts. Around both, the server's CPU
(``INFO cpu``, user + sys) per job, and around the drain ``INFO commandstats``. The figures to
compare are the ratios within a round (median over the rounds), since absolute rates on a
shared machine drift.

``--split N``: afterwards, N jobs per side drained by a bare ``claim(--conc)`` +
``complete_many`` loop with ``INFO commandstats`` read around every call, so each script's
own server time per job is known (nothing else talks to the server meanwhile).

Writes ``benchmarks/results/lanes-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import worker_rate

BENCH = Path(__file__).resolve().parent
SIDES = ("plain", "lanes", "limits")
LIMITS: dict[str, Any] = dict(concurrency=10_000, lane_concurrency=10, lane_rate=(100_000, 1_000))
FIGURES: tuple[str, ...] = ("rate", "cpu_us", "server_us", "script_us", "jobs_per_call")
FIGURES += ("enqueue_rate", "enqueue_server_us")
CALL = 10_000  # jobs per enqueue_many call, as worker_rate.py sends them


def queue_name(side: str) -> str:
    return f"lanes-bench-{side}"


def batch(side: str, start: int, n: int, lanes: int) -> list[Any]:
    from emq import JobSpec

    if side == "plain":
        return [("noop", None)] * n
    return [JobSpec("noop", None, lane=f"t{i % lanes}") for i in range(start, start + n)]


def commandstats(client: Any) -> dict[str, tuple[int, float]]:
    """cmdstat_<name> -> (calls, usec); commands that scripts call are counted too."""
    stats = client.info("commandstats")
    return {
        k.removeprefix("cmdstat_"): (int(v["calls"]), float(v["usec"])) for k, v in stats.items()
    }


def fill(q: Any, side: str, args: argparse.Namespace) -> tuple[float, float]:
    """Empty the side's queue, set its limits, enqueue the backlog: (jobs/s, server us/job)."""
    q.obliterate(force=True)
    if side == "limits":
        q.set_limits(**LIMITS)
    cpu0 = worker_rate._server_cpu(q.client)
    t0 = time.perf_counter()
    for start in range(0, args.jobs, CALL):
        q.enqueue_many(batch(side, start, min(CALL, args.jobs - start), args.lanes))
    took = time.perf_counter() - t0
    cpu = worker_rate._server_cpu(q.client) - cpu0
    return args.jobs / took, cpu / args.jobs * 1e6


def run_side(side: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    from emq import Queue

    with Queue.from_url(url, queue_name(side)) as q:
        enq_rate, enq_server_us = fill(q, side, args)
        q.client.delete(q.core.keys.wake)
        q.client.config_resetstat()
        cpu0 = worker_rate._server_cpu(q.client)
    cmd = [sys.executable, __file__, "--child", queue_name(side), "--url", url]
    cmd += ["--conc", str(args.conc)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise SystemExit(f"{side} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if got["n"] != args.jobs:
        raise SystemExit(f"{side}: {got['n']} handler starts for {args.jobs} jobs")
    with Queue.from_url(url, queue_name(side)) as q:
        server_us = (worker_rate._server_cpu(q.client) - cpu0) / args.jobs * 1e6
        stats = commandstats(q.client)
        left = q.client.zcard(q.core.keys.active)
        q.obliterate(force=True)
    if left:
        raise SystemExit(f"{side}: {left} jobs still leased after the drain")
    evalsha = stats.get("evalsha", (0, 0.0))
    got.update(
        side=side,
        enqueue_rate=enq_rate,
        enqueue_server_us=enq_server_us,
        server_us=server_us,
        jobs_per_call=args.jobs / max(1, evalsha[0]),
        script_us=evalsha[1] / args.jobs,
        wall_s=round(wall, 2),
        commandstats={k: [c, round(u)] for k, (c, u) in stats.items()},
    )
    return got


def split(url: str, side: str, args: argparse.Namespace) -> dict[str, float]:
    """Server time per job of claim.lua and complete.lua alone, from a bare loop."""
    from emq import Queue

    jobs = args.split
    costs = {"claim": 0.0, "complete": 0.0}
    calls = {"claim": 0, "complete": 0}
    with Queue.from_url(url, queue_name(side)) as q:
        fill(q, side, argparse.Namespace(jobs=jobs, lanes=args.lanes))
        done = 0
        while done < jobs:
            before = commandstats(q.client)["evalsha"][1]
            claimed = q.claim(args.conc, 60_000)
            mid = commandstats(q.client)["evalsha"][1]
            if not claimed:
                raise SystemExit(f"{side}: claim found nothing with {jobs - done} jobs left")
            q.complete_many([(job.id, job.token) for job in claimed])
            after = commandstats(q.client)["evalsha"][1]
            costs["claim"] += mid - before
            costs["complete"] += after - mid
            calls["claim"] += 1
            calls["complete"] += 1
            done += len(claimed)
        q.obliterate(force=True)
    return {
        "claim_us": costs["claim"] / jobs,
        "complete_us": costs["complete"] / jobs,
        "jobs_per_claim": jobs / calls["claim"],
    }


CLIENTS_ONLY = ("evalsha", "info", "blpop", "ping", "hello", "config", "script", "client")


def inside(row: dict[str, Any], jobs: int) -> list[tuple[str, float, float]]:
    """The commands the scripts called in a drain, most server time first: (name, calls/job,
    us/job)."""
    rows = [(k, c / jobs, u / jobs) for k, (c, u) in row["commandstats"].items()]
    rows = [r for r in rows if r[0].split("|")[0] not in CLIENTS_ONLY]
    return sorted(rows, key=lambda r: -r[2])


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    by = {s: [r for r in rows if r["side"] == s] for s in SIDES}
    med = {s: {k: statistics.median(r[k] for r in rs) for k in FIGURES} for s, rs in by.items()}
    ratios: dict[str, dict[str, Any]] = {}
    for s in ("lanes", "limits"):
        ratios[s] = {}
        for key in ("rate", "enqueue_rate"):
            per_round = [r[key] / p[key] for r, p in zip(by[s], by["plain"], strict=True)]
            ratios[s][key] = statistics.median(per_round)
            ratios[s][key + "_rounds"] = per_round
    print(f"\nmedian of {args.rounds} round(s), {args.jobs:,} jobs, {args.lanes:,} lanes")
    print(
        "side    | enqueue jobs/s (x plain) | server us/job | processing jobs/s (x plain) "
        "| server us/job | client us/job | jobs/claim+ack call"
    )
    for s in SIDES:
        m = med[s]
        er = f"({ratios[s]['enqueue_rate']:.2f}x)" if s in ratios else "(1.00x)"
        pr = f"({ratios[s]['rate']:.2f}x)" if s in ratios else "(1.00x)"
        print(
            f"{s:7} | {m['enqueue_rate']:8,.0f} {er:15} | {m['enqueue_server_us']:13.1f} | "
            f"{m['rate']:8,.0f} {pr:18} | {m['server_us']:13.1f} | {m['cpu_us']:13.1f} | "
            f"{m['jobs_per_call']:6.1f}"
        )
    for s in ("lanes", "limits"):
        enq, proc = (
            " ".join(f"{x:.2f}" for x in ratios[s][k + "_rounds"]) for k in ("enqueue_rate", "rate")
        )
        print(f"{s} / plain, each round: enqueue {enq}; processing {proc}")
    return {"medians": med, "ratios": ratios}


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=40_000)
    p.add_argument("--lanes", type=int, default=1_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--conc", type=int, default=50)
    p.add_argument("--split", type=int, default=10_000, help="jobs per side, 0 to skip")
    p.add_argument("--no-lane-rate", action="store_true", help="limits side: no lane_rate")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.no_lane_rate:  # the limits side with concurrency limits only
        LIMITS.pop("lane_rate")
    if args.child:  # one drain, by worker_rate.py's own code, on this side's queue
        worker_rate.QUEUE = args.child
        worker_rate.child("worker", args.url, args.conc, None, None)
        return

    import redis

    import emq
    from emq.embedded.standalone import EmbeddedServer

    started = time.strftime("%Y-%m-%d-%H%M%S")
    load0 = os.getloadavg()
    rows: list[dict[str, Any]] = []
    costs: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="emq-lanes-") as tmp:
        server = EmbeddedServer(Path(tmp))
        url = server.start()
        try:
            client = redis.Redis.from_url(url, decode_responses=True)
            client.config_set("appendonly", "no")
            info = client.info("server")
            version = f"valkey {info.get('valkey_version') or info['redis_version']}"
            for r in range(args.rounds):
                for side in SIDES[r % 3 :] + SIDES[: r % 3]:
                    got = run_side(side, url, args)
                    got["round"] = r + 1
                    rows.append(got)
                    print(
                        f"round {r + 1} {side:6} enqueue {got['enqueue_rate']:8,.0f} jobs/s "
                        f"(server {got['enqueue_server_us']:4.1f} us/job)  processing "
                        f"{got['rate']:8,.0f} jobs/s (server {got['server_us']:4.1f} us/job, "
                        f"scripts {got['script_us']:4.1f}, client {got['cpu_us']:4.1f}, "
                        f"{got['jobs_per_call']:4.1f} jobs/script call, wall {got['wall_s']} s)",
                        flush=True,
                    )
            if args.split:
                for side in SIDES:
                    costs[side] = split(url, side, args)
        finally:
            server.stop()
    summary = report(rows, args)
    if costs:
        print(
            f"\nscript server time per job, bare claim({args.conc}) + complete_many loop, "
            f"{args.split:,} jobs"
        )
        for side, c in costs.items():
            print(
                f"{side:7} claim {c['claim_us']:5.2f} us  complete {c['complete_us']:5.2f} us  "
                f"({c['jobs_per_claim']:.1f} jobs per claim)"
            )
    last = {r["side"]: r for r in rows if r["round"] == args.rounds}
    print(
        "\ncommands inside the scripts, last round's drains (calls/job, us/job); 'lua' is the "
        "scripts' time outside them"
    )
    for side in SIDES:
        rows_in = inside(last[side], args.jobs)
        lua = last[side]["script_us"] - sum(u for _, _, u in rows_in)
        top = ", ".join(f"{k} {c:.2f}/{u:.2f}" for k, c, u in rows_in[:12])
        print(f"{side:7} lua {lua:.2f}, {top}")
    result = {
        "command": " ".join([".venv/bin/python", "benchmarks/lanes_rate.py", *sys.argv[1:]]),
        "started": started,
        "server": version,
        "emq": str(Path(emq.__file__).parent),
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_start": load0,
            "load_end": os.getloadavg(),
        },
        "args": {k: getattr(args, k) for k in ("jobs", "lanes", "rounds", "conc", "split")},
        "limits": {k: list(v) if isinstance(v, tuple) else v for k, v in LIMITS.items()},
        "runs": rows,
        **summary,
        "script_costs": costs,
    }
    out = BENCH / "results" / f"lanes-{started}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {out.relative_to(BENCH.parent)}")


if __name__ == "__main__":
    main()
