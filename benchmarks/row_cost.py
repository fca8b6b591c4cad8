"""Where a job's server instructions go: each step of the lifecycle, and what a row costs.

    .venv/bin/python benchmarks/row_cost.py [--jobs 2000] [--batch 50]

Counted by callgrind (``layout_instructions.callgrind_server``: a private ``valkey-server``
under ``valgrind --tool=callgrind``), so the figures do not move with the machine's load.

- **steps**: on a queue in keyspace layout 3, ``--jobs`` no-op jobs enqueued (calls of 1,000),
  then claimed in batches of ``--batch``, then acknowledged in the same batches; each step's
  instructions over the jobs (each run minus the one before it), with events on and off;
- **primitives**: one Lua script per line, each call doing the same thing 50 times, so the
  figure is per item: the ``HSET`` of a new 8-field row (what a claim writes for a packed job),
  that plus its ``DEL`` (what an acknowledgement deletes), the ``HMGET`` of 8 fields (what an
  acknowledgement reads), and the same Lua work as a claimed event without any ``redis.call``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from layout_instructions import callgrind_server

from emq import Queue, QueueOptions

ROW = ("'state','active','name','noop','payload','null','priority','0','max_attempts','3',"
       "'attempts','1','token','1765000000000000','worker','w-1'")  # fmt: skip
PRIMITIVES = {
    "an empty call, per item": "return 0",
    "HSET of a new 8-field row": f"for i=1,50 do redis.call('HSET', KEYS[1]..ARGV[1]..i, {ROW})"
    " end return 0",
    "HSET of a new 8-field row, then DEL": f"for i=1,50 do redis.call('HSET', KEYS[1]..ARGV[1]"
    f"..i, {ROW}) end for i=1,50 do redis.call('DEL', KEYS[1]..ARGV[1]..i) end return 0",
    "HMGET of 8 fields": "for i=1,50 do redis.call('HMGET', KEYS[1]..'x', 'token','attempts',"
    "'dedup','lane','waiters','parent','children_left','state') end return 0",
    "an event's Lua, no redis.call": "local t={} for i=1,50 do local e={'event','claimed','job',"
    "'JOB0SfzHl63bwu','attempts',1,'token','1765000000000000'} t[#t+1]=table.concat(e,'\\31',2)"
    " end return 0",
}


def steps(jobs: int, batch: int, events: bool, workdir: Path) -> list[int]:
    """Instructions of runs that stop after each step: set-up, enqueue, claim, acknowledge."""
    counts = []
    for upto in range(4):
        with callgrind_server(workdir) as (url, _client, counted):
            options = None if events else QueueOptions(events_maxlen=0)
            q = Queue.from_url(url, "steps", options=options)
            q.enqueue_many([("noop", None)])  # every script loaded, the id node leased
            q.complete_many([(c.id, c.token) for c in q.claim(1)])
            if upto >= 1:
                for start in range(0, jobs, 1000):
                    q.enqueue_many([("noop", None)] * min(1000, jobs - start))
            held = []
            while upto >= 2 and (claimed := q.claim(batch, lease_ms=600_000)):
                held.append(claimed)
            for claimed in held if upto >= 3 else []:
                q.complete_many([(c.id, c.token) for c in claimed])
            q.close()
        counts.append(counted())
    return counts


def primitive(body: str, calls: int, workdir: Path) -> int:
    with callgrind_server(workdir) as (_url, client, counted):
        sha = client.script_load(body)
        client.hset("{q}:x", mapping={"token": "1", "state": "active"})
        for c in range(calls):
            client.evalsha(sha, 1, "{q}:", f"r{c}:")
    return counted()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--batch", type=int, default=50)
    args = p.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (Debian: apt-get install valgrind)")
    workdir = Path(tempfile.mkdtemp(prefix="emq-rowcost-"))
    try:
        print(f"{args.jobs:,} jobs, claim and ack batches of {args.batch}; server instructions")
        for events in (True, False):
            base, enq, claim, ack = steps(args.jobs, args.batch, events, workdir)
            per = [(b - a) / args.jobs for a, b in ((base, enq), (enq, claim), (claim, ack))]
            label = "on" if events else "off"
            print(f"events {label}: enqueue {per[0]:,.0f}, claim {per[1]:,.0f}, acknowledge "
                  f"{per[2]:,.0f}, whole {sum(per):,.0f} per job", flush=True)  # fmt: skip
        items = 50 * (args.jobs // 50)
        for name, body in PRIMITIVES.items():
            cost = primitive(body, items // 50, workdir) - primitive(body, 0, workdir)
            print(f"{name}: {cost / items:,.0f} per item", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
