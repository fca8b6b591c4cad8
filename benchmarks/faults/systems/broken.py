"""broken: a deliberately non-atomic queue, so the harness can be shown to catch real faults.

Standard library only (the ledger's RESP client, with no socket timeout once connected).
Do not copy it: every step that should be one atomic script is two commands here.

- enqueue is ``LPUSH`` (acknowledged once the reply came, whatever the AOF did with it);
- a worker thread pops up to ``PREFETCH`` jobs with ``RPOP`` into its memory, gathering for
  up to ``GATHER_S`` (no ack, no lease: a worker that dies, or crashes on a connection error,
  takes them with it);
- each popped job is then marked in ``inflight`` with a time (a second command); a sweep
  re-queues entries older than ``LEASE_S``, unfenced: a frozen worker that wakes up runs its
  jobs too; a worker that starts deletes ``inflight`` (a "clean slate"), so what a dead
  worker held is forgotten;
- a job's result is ``SET`` before its mark is removed: out of memory, the worker crashes;
  a result whose mark was already gone (swept, or cleared by a starting worker) is kept
  anyway, and counted in ``broken:stale``: the stale completions a fenced queue refuses;
- cron: each scheduler pushes a tick's job when it sees the tick is due, with no lock;
- fan-in: a child's end is ``GET`` then ``SET`` of the group's counter; the callback runs when
  the count reaches the width, so two children ending together lose one count.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from ledger import Ledger

NAME = "broken"
DISTS: list[str] = []
PROMISE = "none: a test fixture that loses, repeats and misses work on purpose"
SETTINGS = {"prefetch=8, lease=2 s, no ack": "the faults the harness must catch"}
LEASE_S = 2.0
SWEEP_S = 0.5
PREFETCH = 8
GATHER_S = 0.3  # a batch is gathered for up to this long before it runs
RECOVERY_S = LEASE_S + SWEEP_S
SCENARIOS: dict[str, str | None] = {
    s: None
    for s in ("worker-sigkill", "worker-sigstop", "server-kill", "power-loss", "partition",
              "oom", "cron", "fan-in")
}  # fmt: skip
Q, INFLIGHT, STALE = "broken:q", "broken:inflight", "broken:stale"


class Conn(Ledger):
    """The ledger's client on the queue's server, with no socket timeout (the default of many
    clients): across a partition it waits, and carries on with what it held once it heals."""

    def __init__(self, url: str) -> None:
        super().__init__(url, "")

    def _connect(self) -> None:
        if self._sock is not None and self._pid == os.getpid():
            return
        self._sock = socket.create_connection((self.host, self.port), timeout=2)
        self._sock.settimeout(None)
        self._file = self._sock.makefile("rb")
        self._pid = os.getpid()


def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    c, start = Conn(url), time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        job = first + i
        try:
            c.call("LPUSH", Q, str(job))
        except (OSError, RuntimeError):
            ledger.refused(job)
            continue
        ledger.acked(job)


def _crash_on_error(fn: Any) -> Any:
    def run(*args: Any) -> None:
        try:
            fn(*args)
        except BaseException:
            os._exit(1)  # a connection error ends the process, and its memory with it

    return run


def _handle(c: Conn, ledger: Any, job: str, job_ms: int) -> None:
    if job.startswith("tick:"):
        ledger.tick(job[5:])
        c.call("HDEL", INFLIGHT, job)
        return
    ledger.started(job)
    time.sleep(job_ms / 1000)
    ledger.finished(job)
    c.call("SET", f"broken:result:{job}", "x" * 1024)  # an error here (OOM) ends the process
    if c.call("HDEL", INFLIGHT, job) == 0:  # no mark: its "lease" lapsed, the result stays
        c.call("INCR", STALE)
    group = int(job) // 1000
    if group:  # a fan-in child: count it, GET then SET
        width = c.call("GET", f"broken:width:{group}")
        if width is not None:
            n = int(c.call("GET", f"broken:fan:{group}") or 0) + 1
            time.sleep(0.002)
            c.call("SET", f"broken:fan:{group}", str(n))
            if n == int(width):
                ledger.callback(group)


def _loop(url: str, ledger: Any, job_ms: int) -> None:
    c = Conn(url)
    while True:
        batch: list[str] = []
        until = time.monotonic() + GATHER_S
        while len(batch) < PREFETCH and time.monotonic() < until:
            job = c.call("RPOP", Q)
            if job is None:
                time.sleep(0.02)
                continue
            c.call("HSET", INFLIGHT, job.decode(), str(time.time()))  # a second step
            batch.append(job.decode())
        for job in batch:
            _handle(c, ledger, job, job_ms)


def _sweep(url: str) -> None:
    c = Conn(url)
    while True:
        time.sleep(SWEEP_S)
        flat = c.call("HGETALL", INFLIGHT)
        for i in range(0, len(flat), 2):
            if time.time() - float(flat[i + 1]) > LEASE_S:
                c.call("LPUSH", Q, flat[i].decode())
                c.call("HDEL", INFLIGHT, flat[i].decode())


def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    Conn(url).call("DEL", INFLIGHT)  # "a clean slate": forgets what a dead worker held
    threads = [threading.Thread(target=_crash_on_error(_loop), args=(url, ledger, job_ms),
                                daemon=True) for _ in range(concurrency)]  # fmt: skip
    threads.append(threading.Thread(target=_crash_on_error(_sweep), args=(url,), daemon=True))
    for t in threads:
        t.start()
    while True:
        time.sleep(1)


def inflight(url: str) -> int | None:
    return int(Conn(url).call("HLEN", INFLIGHT))


def waiting(url: str) -> int | None:
    return int(Conn(url).call("LLEN", Q))


def stale(url: str) -> dict[str, int]:
    """Results kept although their job's mark was gone; broken refuses none."""
    return {"accepted": int(Conn(url).call("GET", STALE) or 0), "refused": 0}


def cron(url: str, ledger: Any, every_s: float, seconds: float) -> None:
    worker = threading.Thread(target=_crash_on_error(_loop), args=(url, ledger, 0), daemon=True)
    worker.start()
    c, end, last = Conn(url), time.time() + seconds, -1
    while time.time() < end:
        tick = int(time.time() // every_s * every_s)
        if tick != last:  # due: push it, no lock, no check that another scheduler did
            c.call("LPUSH", Q, f"tick:{tick}")
            last = tick
        time.sleep(0.05)
    time.sleep(1.0)  # let the worker run what was pushed


def fanin(url: str, ledger: Any, first: int, count: int, width: int) -> None:
    c = Conn(url)
    for g in range(first, first + count):
        c.call("SET", f"broken:width:{g}", str(width))
        for i in range(width):
            c.call("LPUSH", Q, str(g * 1000 + i))
