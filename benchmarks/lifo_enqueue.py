"""Enqueue with ``lifo=True`` next to plain FIFO enqueue, side by side in one run.

    .venv/bin/python benchmarks/lifo_enqueue.py [--jobs 50000] [--rounds 5] [--url URL]

One server (a private embedded Valkey unless ``--url``), three sides on queues of their own,
the order rotating from round to round:

- ``fifo``: ``enqueue_many`` of ``("noop", None)`` pairs (the plain path);
- ``lifo``: ``JobSpec("noop", lifo=True)``: every job lifo (one HINCRBY of the queue's
  ``lifo_seq`` per call, a formatted score per job);
- ``single``: ``enqueue("noop", lifo=True)`` one at a time, 1/10 of ``--jobs``, next to the
  same number of plain ``enqueue`` calls (``single_fifo``): the per-call cost.

Each side is timed from building the list to the last reply (jobs/s), with the server's CPU
(``INFO cpu``, user + sys) per job around it; the queue is obliterated between rounds. The
figures to compare are the ratios lifo / fifo within a round (median over rounds).
Prints a JSON summary and writes ``benchmarks/results/lifo-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.private import url_or_private
from harness.server import server_cpu_s

from emq import JobSpec, Queue


def side(q: Queue, kind: str, n: int) -> dict[str, float]:
    cpu, start = server_cpu_s(q.client), time.perf_counter()
    if kind == "fifo":
        q.enqueue_many([("noop", None)] * n)
    elif kind == "lifo":
        q.enqueue_many([JobSpec("noop", lifo=True) for _ in range(n)])
    else:
        lifo = kind == "single"
        for _ in range(n):
            q.enqueue("noop", lifo=lifo)
    wall = time.perf_counter() - start
    used = server_cpu_s(q.client) - cpu
    q.obliterate(force=True)
    return {"jobs_per_s": n / wall, "server_us_per_job": used / n * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--url", default=None)
    args = ap.parse_args()
    kinds = ["fifo", "lifo", "single_fifo", "single"]
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    with url_or_private(args.url) as url:
        queues = {k: Queue.from_url(url, f"bench-lifo-{k}") for k in kinds}
        for q in queues.values():
            q.obliterate(force=True)
        side(queues["fifo"], "fifo", 2_000)  # warm: scripts loaded, id lease taken
        for r in range(args.rounds):
            order = kinds[r % 2 :] + kinds[: r % 2]
            for kind in order:
                n = args.jobs if kind in ("fifo", "lifo") else args.jobs // 10
                runs[kind].append(side(queues[kind], kind, n))
        for q in queues.values():
            q.close()
    out: dict[str, Any] = {"jobs": args.jobs, "rounds": args.rounds, "runs": runs}
    med = {
        k: {f: statistics.median(x[f] for x in v) for f in ("jobs_per_s", "server_us_per_job")}
        for k, v in runs.items()
    }
    out["median"] = med
    out["ratio_lifo_over_fifo"] = {
        "bulk_jobs_per_s": statistics.median(
            a["jobs_per_s"] / b["jobs_per_s"]
            for a, b in zip(runs["lifo"], runs["fifo"], strict=True)
        ),
        "single_jobs_per_s": statistics.median(
            a["jobs_per_s"] / b["jobs_per_s"]
            for a, b in zip(runs["single"], runs["single_fifo"], strict=True)
        ),
    }
    print(json.dumps({k: out[k] for k in ("median", "ratio_lifo_over_fifo")}, indent=2))
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    (results / f"lifo-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
