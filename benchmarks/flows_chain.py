"""How long a chain takes end to end when its links alternate between two queues.

Each hop across queues is two steps: the link's completion writes an outbox entry in its own
queue, and a maintenance beat delivers it to the next link's queue (docs/flows.md, Across
queues). The worker that acked the link brings its beat forward, so a hop costs
milliseconds, not a beat. This measures it next to the same chain in one queue, in one run,
on a private embedded Valkey, with one in-process worker serving both queues.

    .venv/bin/python benchmarks/flows_chain.py [--links 4] [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from emq import JobContext, JobSpec, Queue, Worker, WorkerOptions, chain
from emq.embedded.standalone import EmbeddedServer


async def run(url: str, links: int, rounds: int) -> dict[str, list[float]]:
    def step(payload: Any, ctx: JobContext) -> int:
        return len(ctx.children())

    w = Worker(["chain-a", "chain-b"], url=url, options=WorkerOptions(concurrency=4))
    w.register("step", step)
    task = asyncio.create_task(w.run(handle_signals=False))
    q = Queue.from_url(url, "chain-a")
    out: dict[str, list[float]] = {"one queue": [], "two queues": []}
    try:
        await asyncio.sleep(1.0)  # the worker is up and parked
        for r in range(rounds):
            for side in ("one queue", "two queues") if r % 2 else ("two queues", "one queue"):
                other = "chain-b" if side == "two queues" else None
                specs = [
                    JobSpec("step", i, queue=other if (links - i) % 2 == 0 else None)
                    for i in range(links)
                ]
                started = time.perf_counter()
                ids = q.enqueue_flow(chain(*specs))
                while q.job(ids.id) is not None:
                    await asyncio.sleep(0.0005)
                out[side].append((time.perf_counter() - started) * 1000)
    finally:
        w.stop()
        await task
        q.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--links", type=int, default=4)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="emq-chain-") as tmp:
        server = EmbeddedServer(Path(tmp))
        url = server.start()
        try:
            got = asyncio.run(run(url, args.links, args.rounds))
        finally:
            server.stop()
    hops = args.links - 1
    for side, times in got.items():
        mid, low, high = statistics.median(times), min(times), max(times)
        print(
            f"{side:10}  {args.links} links, median {mid:6.1f} ms "
            f"(min {low:.1f}, max {high:.1f}) over {args.rounds} rounds"
        )
    extra = statistics.median(got["two queues"]) - statistics.median(got["one queue"])
    print(f"each of the {hops} hops across queues adds {extra / hops:.1f} ms (median)")


if __name__ == "__main__":
    main()
