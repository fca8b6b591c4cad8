"""CPU-bound sync handlers at ``emq worker --processes 1`` against ``--processes 2``.

A sync handler runs about 1 ms of pure Python (a loop of integer arithmetic, calibrated once
here and sent in each payload, so every process does the same work per job). One process
runs such handlers one at a time whatever its concurrency (they share its GIL); more
processes run them side by side, up to the machine's cores. Each round starts the
supervisor, waits until every child has logged ``started`` (so start-up is not timed),
enqueues the jobs in one call and times until the server counts them all completed; it
also reads the children's CPU time from ``/proc`` (Linux), so a busy machine shows as fewer
cores used. The sides alternate, in one run, on a private embedded Valkey.

    .venv/bin/python benchmarks/processes_cpu.py [--jobs 2000] [--rounds 3] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from emq import Queue
from emq.embedded.standalone import EmbeddedServer

HERE = Path(__file__).parent
CLI = "from emq.cli.main import main; main()"
HANG = 300.0


def spin(payload: dict[str, Any]) -> int:
    """The handler: ``n`` rounds of integer arithmetic, in pure Python."""
    x = 0
    for i in range(payload["n"]):
        x = (x * 31 + i) % 1_000_003
    return x


handlers = {"spin": spin}


def calibrate(ms: float = 1.0) -> int:
    """Rounds of :func:`spin` that take about ``ms`` of CPU here (the median of a few
    tries: on a shared machine the fastest try is far from the typical one)."""
    n = 200_000
    typical = statistics.median(_timed(n) for _ in range(11))
    return max(1, round(n * ms / 1000 / typical))


def _timed(n: int) -> float:
    """CPU seconds of ``spin(n)`` (not wall time: other processes do not stretch it)."""
    t = time.process_time()
    spin({"n": n})
    return time.process_time() - t


def started_children(log: Path) -> list[int]:
    """The pids of the children that have logged ``started``."""
    pids = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            if rec.get("event") == "started":
                pids.append(rec["pid"])
    return pids


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time the processes ``pids`` have used so far (Linux ``/proc``)."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def one_round(
    url: str, tmp: Path, processes: int, jobs: int, n: int, concurrency: int
) -> tuple[float, float]:
    """Jobs per second of one supervised run with ``processes`` children, and the cores
    they used meanwhile (their CPU seconds over the wall time: at most ``processes``)."""
    name = f"cpu-{processes}-{time.monotonic_ns()}"
    log = tmp / f"{name}.log"
    env = dict(os.environ, EMQ_URL=url)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", CLI, "worker", "processes_cpu:handlers", "-q", name,
             "-c", str(concurrency), "--processes", str(processes)],
            env=env, cwd=HERE, stdout=out, stderr=out,
        )  # fmt: skip
    q = Queue.from_url(url, name)
    try:
        deadline = time.monotonic() + HANG
        while len(pids := started_children(log)) < processes:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the workers did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        t, cpu = time.perf_counter(), cpu_seconds(pids)
        q.enqueue_many([("spin", {"n": n}) for _ in range(jobs)])
        while q.counts()["completed"] < jobs:
            if time.monotonic() > deadline:
                raise SystemExit(f"the jobs did not complete:\n{log.read_text()[-2000:]}")
            time.sleep(0.005)
        elapsed = time.perf_counter() - t
        cores = (cpu_seconds(pids) - cpu) / elapsed
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(HANG)
        q.obliterate(force=True)
        q.close()
    return jobs / elapsed, cores


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=4)
    args = p.parse_args()
    n = calibrate()
    print(f"handler: {n} rounds of arithmetic, {_timed(n) * 1000:.2f} ms of CPU; {args.jobs} "
          f"jobs per run, concurrency {args.concurrency}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    rates: dict[int, list[float]] = {1: [], 2: []}
    used: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="emq-procs-") as tmp:
        server = EmbeddedServer(Path(tmp) / "server")
        url = server.start()
        try:
            for r in range(args.rounds):
                for processes in (1, 2) if r % 2 == 0 else (2, 1):
                    rate, cores = one_round(
                        url, Path(tmp), processes, args.jobs, n, args.concurrency
                    )
                    rates[processes].append(rate)
                    used[processes].append(cores)
                    print(f"round {r + 1}: --processes {processes}: {rate:,.0f} jobs/s, "
                          f"the workers used {cores:.2f} cores")  # fmt: skip
        finally:
            server.stop()
    one, two = statistics.median(rates[1]), statistics.median(rates[2])
    for k, rate in ((1, one), (2, two)):
        cores = statistics.median(used[k])
        print(f"--processes {k}: {rate:,.0f} jobs/s, {cores:.2f} cores "
              f"(medians of {args.rounds})")  # fmt: skip
    pairs = [b / a for a, b in zip(rates[1], rates[2], strict=True)]
    print(f"ratio: {two / one:.2f}x; per round (the two sides ran back to back): "
          f"median {statistics.median(pairs):.2f}x, "
          f"{', '.join(f'{x:.2f}' for x in pairs)}")  # fmt: skip
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
