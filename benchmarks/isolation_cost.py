"""What ``isolation="process"`` costs per job, next to a thread, in one run.

    .venv/bin/python benchmarks/isolation_cost.py [--jobs 3000] [--concurrency 8] [--rounds 3]

On a private embedded server, each round enqueues ``--jobs`` no-op jobs and drains them with
one burst ``Worker`` whose sync handler runs in a pool thread, then again with the same
handler in child processes (``isolation="process"``). Each side drains ``--jobs`` and then
three times as many, each in a run of its own: the difference of the two times over the
difference of the jobs is the time per job, with the start-up (connecting, and for the
process side starting a child per slot) cancelled out. The two sides alternate their order
each round; printed: jobs/s of each side (median over the rounds) and the extra wall time per
job of a child (the payload and result through a pipe, two pickles, a thread's wake-up).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from emq import Queue, Worker, WorkerOptions
from emq.embedded.standalone import EmbeddedServer


def noop(payload: Any) -> None:
    return None


def timed(url: str, name: str, jobs: int, conc: int, isolation: str) -> float:
    # a child imports its handler from a module, never from the script that runs (__main__):
    # this file, imported by its name, is that module
    import isolation_cost

    with Queue.from_url(url, name) as q:
        w = Worker(q, options=WorkerOptions(burst=True, concurrency=conc))
        w.register("noop", isolation_cost.noop, isolation=isolation)
        for i in range(0, jobs, 1000):
            q.enqueue_many([("noop", j) for j in range(i, min(jobs, i + 1000))])
        start = time.perf_counter()
        w.run_sync(handle_signals=False)
        elapsed = time.perf_counter() - start
        assert q.counts()["completed"] == jobs
    return elapsed


def drain(url: str, name: str, jobs: int, conc: int, isolation: str) -> float:
    """Jobs per second, the start-up cancelled out."""
    one = timed(url, name + "-1", jobs, conc, isolation)
    three = timed(url, name + "-3", 3 * jobs, conc, isolation)
    return 2 * jobs / (three - one)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    rates: dict[str, list[float]] = {"thread": [], "process": []}
    with tempfile.TemporaryDirectory() as tmp:
        srv = EmbeddedServer(Path(tmp))
        srv.start()
        try:
            for r in range(a.rounds):
                sides = ("thread", "process") if r % 2 == 0 else ("process", "thread")
                for side in sides:
                    rates[side].append(drain(srv.url(), f"iso-{side}-{r}", a.jobs,
                                             a.concurrency, side))  # fmt: skip
        finally:
            srv.stop()
    thread, process = (statistics.median(rates[s]) for s in ("thread", "process"))
    print(f"jobs {a.jobs}, concurrency {a.concurrency}, rounds {a.rounds}")
    for side, rate in (("thread", thread), ("process", process)):
        rounds = ", ".join(f"{x:,.0f}" for x in rates[side])
        print(f"{side + ':':8} {rate:,.0f} jobs/s  (rounds: {rounds})")
    print(f"process / thread: {process / thread:.2f}x; extra per job: "
          f"{(1 / process - 1 / thread) * 1e6:,.0f} us of wall time")


if __name__ == "__main__":
    main()
