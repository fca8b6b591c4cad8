"""What grouping and bulk-moving dead letters cost (emq.queue._sync.deadletters).

    .venv/bin/python benchmarks/dead_letters.py [--dead 100000]

Starts a private embedded Valkey, makes ``--dead`` jobs dead with three errors in turn, then
times :func:`emq.queue._sync.deadletters.groups` over all of them (what the dashboard's dead-letter page
does on each load), a filtered bulk redrive of one group and a filtered purge of another (each
including its snapshot scan). Prints one line each; timings are wall time on this machine.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from emq import Queue
from emq.calls.deadletters import DeadFilter
from emq.embedded.standalone import EmbeddedServer, valkey_binary
from emq.queue._sync import deadletters as dl

ERRORS = ("smtp refused", "disk full", "timeout after 30 s")


def make_dead(q: Queue, n: int) -> None:
    for start in range(0, n, 10_000):
        q.enqueue_many([("mail", {"i": i}) for i in range(start, min(n, start + 10_000))])
    done = 0
    for _ in range(n // 1000 + 2):  # bounded: 1,000 claims a call
        claimed = q.claim(1000, lease_ms=600_000)
        if not claimed:
            break
        items = [(c.id, c.token, f"{ERRORS[(done + k) % 3]}\n  at line 9", False, None)
                 for k, c in enumerate(claimed)]  # fmt: skip
        q.fail_many(items)
        done += len(claimed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dead", type=int, default=100_000)
    args = parser.parse_args()
    srv = EmbeddedServer(Path(tempfile.mkdtemp()), binary=valkey_binary())
    srv.start()
    try:
        q = Queue.from_url(srv.url(), "dead-bench")
        make_dead(q, args.dead)
        print(f"load average {os.getloadavg()[0]:.1f}, {args.dead:,} dead jobs")
        t = time.perf_counter()
        groups = dl.groups(q)
        took = time.perf_counter() - t
        print(f"groups: {[(g.error, g.count) for g in groups]} in {took:.2f} s")
        for name, run in (("redrive", dl.redrive), ("purge", dl.purge)):
            f = DeadFilter(error=ERRORS[1] if name == "redrive" else ERRORS[2])
            t = time.perf_counter()
            r = run(q, f)
            took = time.perf_counter() - t
            rate = r.moved / took
            print(f"{name}: {r.moved:,} of {r.matched:,} in {took:.2f} s, {rate:,.0f} jobs/s")
        q.close()
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
