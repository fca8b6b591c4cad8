"""What an open dashboard costs the workers: the Worker's rate with and without it.

    .venv/bin/python benchmarks/dashboard_load.py [--jobs 50000] [--tabs 10] [--queues 20]
                                                  [--rounds 3]

Starts a private server (``appendonly no``) holding ``--queues`` other queues with a few jobs
each, and for each round drains ``--jobs`` no-op jobs with one Worker (the drain of
``worker_rate.py``: a child process, burst mode, concurrency 50; jobs/s between the 10th and
90th percentile of handler starts), alternately with no dashboard and with ``emq dashboard``
running and ``--tabs`` overview pages' live streams (``GET /events``, every queue) open and
read. It also counts the commands the open dashboard sends the server while nothing else
runs (``total_commands_processed`` over 10 s). Rounds alternate so a machine's drift hits
both sides; the ratio of the medians is the figure.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import redis

from emq import Queue
from emq.embedded.standalone import EmbeddedServer, free_port

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from worker_rate import run_side  # noqa: E402

EMQ = Path(sys.executable).parent / "emq"
IDLE_S = 10.0


def _read(base: str, stop: threading.Event, seen: list[int]) -> None:
    with (
        contextlib.suppress(httpx.TransportError),  # the dashboard stopped
        httpx.Client(base_url=base, timeout=30) as c,
        c.stream("GET", "/events") as r,
    ):
        for line in r.iter_lines():
            if line.startswith("data:"):
                seen.append(1)
            if stop.is_set():
                return


@contextlib.contextmanager
def dashboard(url: str, tabs: int) -> Iterator[list[int]]:
    """``emq dashboard`` on a free port with ``tabs`` live streams open; yields the list of
    events received (one entry per event)."""
    port = free_port()
    cmd = [str(EMQ), "dashboard", "--url", url, "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(base + "/healthz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the dashboard did not start")
        time.sleep(0.1)
    httpx.get(base + "/", headers={"accept": "text/html"})  # an overview page, as a tab loads
    stop = threading.Event()
    seen: list[int] = []
    readers = [
        threading.Thread(target=_read, args=(base, stop, seen), daemon=True) for _ in range(tabs)
    ]
    for t in readers:
        t.start()
    try:
        yield seen
    finally:
        stop.set()
        proc.terminate()
        proc.wait(30)


def commands_per_s(client: redis.Redis) -> float:
    before = int(client.info("stats")["total_commands_processed"])
    time.sleep(IDLE_S)
    after = int(client.info("stats")["total_commands_processed"])
    return (after - before - 2) / IDLE_S  # less the two INFO calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--tabs", type=int, default=10)
    p.add_argument("--queues", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rate_args = argparse.Namespace(jobs=args.jobs, conc=50, prefetch=None, profile=None)
    rates: dict[str, list[float]] = {"closed": [], "open": []}
    with tempfile.TemporaryDirectory(prefix="emq-dash-") as tmp:
        server = EmbeddedServer(Path(tmp))
        url = server.start()
        try:
            client = redis.Redis.from_url(url)
            client.config_set("appendonly", "no")
            for i in range(args.queues):
                with Queue.from_url(url, f"other-{i:02d}") as q:
                    q.enqueue_many([("x", n) for n in range(10)])
            idle = commands_per_s(client)
            with dashboard(url, args.tabs) as seen:
                busy = commands_per_s(client)
                got = len(seen)
            print(
                f"server commands/s while idle: {idle:.1f} without a dashboard, {busy:.1f} with "
                f"one and {args.tabs} live tabs on {args.queues + 1} queues "
                f"({got} events received in {IDLE_S:.0f} s)",
                flush=True,
            )
            for r in range(args.rounds):
                for side in ("closed", "open"):
                    ctx = dashboard(url, args.tabs) if side == "open" else contextlib.nullcontext()
                    with ctx:
                        got_rate = run_side("worker", url, rate_args)["rate"]
                    rates[side].append(got_rate)
                    print(f"round {r + 1} dashboard {side:6} {got_rate:9,.0f} jobs/s", flush=True)
        finally:
            server.stop()
    closed, opened = statistics.median(rates["closed"]), statistics.median(rates["open"])
    print(
        f"median: {closed:,.0f} jobs/s without a dashboard, {opened:,.0f} with one open "
        f"({args.tabs} tabs): ratio {opened / closed:.3f}"
    )


if __name__ == "__main__":
    main()
