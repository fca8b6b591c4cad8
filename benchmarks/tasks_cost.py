"""What a typed enqueue (``send.enqueue(...)``, docs/tasks.md) costs next to ``Queue.enqueue``.

    .venv/bin/python benchmarks/tasks_cost.py [--jobs 20000] [--rounds 3]

On a private embedded server, each round enqueues ``--jobs`` jobs one call at a time through
one ``Queue``: ``q.enqueue("send", {"to": ..., "n": i})`` on one side, ``send.enqueue(to=...,
n=i)`` (the same payload, checked against ``send``'s signature first) on the other, each into
a fresh queue. The sides alternate their order each round; printed: enqueues/s of each side
(median over the rounds), the extra time per typed enqueue, this process's CPU time per
enqueue on each side (less moved by a busy machine than the wall time), and the check alone
(``--jobs`` calls with no server, median of the rounds).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from emq import Queue, Tasks
from emq.embedded.standalone import EmbeddedServer


def plain(q: Queue, jobs: int) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(jobs):
        q.enqueue("send", {"to": "a@b", "n": i})
    return time.perf_counter() - start, time.process_time() - cpu


def typed(q: Queue, jobs: int) -> tuple[float, float]:
    tasks = Tasks(q.name)
    tasks.bind(q)

    @tasks.task()
    def send(to: str, n: int = 0) -> None:
        pass

    start, cpu = time.perf_counter(), time.process_time()
    for i in range(jobs):
        send.enqueue(to="a@b", n=i)
    return time.perf_counter() - start, time.process_time() - cpu


def check_only(jobs: int) -> float:
    """The check alone: the arguments bound and turned into the payload, no I/O."""
    tasks = Tasks("bench-check")

    @tasks.task()
    def send(to: str, n: int = 0) -> None:
        pass

    payload = send.signature.payload
    start = time.perf_counter()
    for i in range(jobs):
        payload((), {"to": "a@b", "n": i})
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    times: dict[str, list[float]] = {"Queue.enqueue": [], "task.enqueue": [], "check": []}
    cpus: dict[str, list[float]] = {"Queue.enqueue": [], "task.enqueue": []}
    with tempfile.TemporaryDirectory() as tmp:
        srv = EmbeddedServer(Path(tmp))
        srv.start()
        try:
            for r in range(a.rounds):
                sides = [("Queue.enqueue", plain), ("task.enqueue", typed)]
                for side, run in sides if r % 2 == 0 else sides[::-1]:
                    with Queue.from_url(srv.url(), f"tasks-cost-{side[:4]}-{r}") as q:
                        q.enqueue("warm", None)  # the id lease and the script cache
                        wall, cpu = run(q, a.jobs)
                        times[side].append(wall)
                        cpus[side].append(cpu)
                        assert q.counts()["pending"] == a.jobs + 1
                times["check"].append(check_only(a.jobs))
        finally:
            srv.stop()
    med = {side: statistics.median(t) for side, t in times.items()}
    print(f"jobs {a.jobs}, rounds {a.rounds}, one call at a time, one Queue")
    for side in ("Queue.enqueue", "task.enqueue"):
        rounds = ", ".join(f"{a.jobs / t:,.0f}" for t in times[side])
        print(f"{side + ':':15} {a.jobs / med[side]:,.0f} enqueues/s  (rounds: {rounds})")
    extra = (med["task.enqueue"] - med["Queue.enqueue"]) / a.jobs * 1e6
    ratio = med["task.enqueue"] / med["Queue.enqueue"]
    print(f"typed / plain: {ratio:.3f}x the time; extra per enqueue: {extra:.1f} us")
    cpu = {side: statistics.median(t) / a.jobs * 1e6 for side, t in cpus.items()}
    print(
        f"client CPU per enqueue: plain {cpu['Queue.enqueue']:.1f} us, typed "
        f"{cpu['task.enqueue']:.1f} us (+{cpu['task.enqueue'] - cpu['Queue.enqueue']:.1f} us)"
    )
    print(f"the signature check alone: {med['check'] / a.jobs * 1e6:.2f} us per call")


if __name__ == "__main__":
    main()
