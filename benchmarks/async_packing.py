"""A bulk enqueue through the asyncio client, with redis-py's Python packer and with hiredis's.

    .venv/bin/python benchmarks/async_packing.py [--jobs 50000] [--rounds 6] [--redis]

Starts a private server (the embedded Valkey, or with ``--redis`` the ``redis-server`` on the
PATH; persistence off) and, in each round, runs ``AsyncQueue.enqueue_many`` of ``--jobs`` no-op
jobs twice on a flushed server: once with the asyncio connections packing commands in Python
(redis-py's default) and once with :func:`emq.server.clients.packed_in_c` (what emq's asyncio clients
do), the order alternating between rounds. Printed per side, medians over the rounds: the rate,
this process's CPU per job (``time.process_time``) and the server's (``INFO cpu``).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from harness.server import server_cpu_s

import emq.server.clients
from emq import AsyncQueue
from emq.embedded.standalone import EmbeddedServer


async def one(url: str, client: redis.Redis, name: str, jobs: int) -> tuple[float, float, float]:
    client.flushall()
    q = AsyncQueue.from_url(url, name)
    try:
        await q.new_ids(1)  # the id node lease, outside the measured step
        batch: list[tuple[str, Any]] = [("noop", None)] * jobs
        t0, s0, c0 = time.perf_counter(), server_cpu_s(client), time.process_time()
        await q.enqueue_many(batch)
        t1, s1, c1 = time.perf_counter(), server_cpu_s(client), time.process_time()
    finally:
        await q.close()
    return jobs / (t1 - t0), (c1 - c0) * 1e6 / jobs, (s1 - s0) * 1e6 / jobs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--redis", action="store_true", help="redis-server from the PATH")
    args = p.parse_args()
    binary = shutil.which("redis-server") if args.redis else None
    if args.redis and binary is None:
        raise SystemExit("--redis: no redis-server on the PATH")
    workdir = Path(tempfile.mkdtemp(prefix="emq-packing-"))
    server = EmbeddedServer(workdir, binary=binary)
    url = server.start()
    packed_in_c = emq.server.clients.packed_in_c
    results: dict[str, list[tuple[float, float, float]]] = {"python": [], "hiredis": []}
    try:
        client = redis.Redis.from_url(url)
        client.config_set("appendonly", "no")
        for i in range(args.rounds):
            for side in ("python", "hiredis") if i % 2 == 0 else ("hiredis", "python"):
                emq.server.clients.packed_in_c = packed_in_c if side == "hiredis" else lambda pool: None
                results[side].append(asyncio.run(one(url, client, f"pack{i}{side}", args.jobs)))
        client.close()
    finally:
        emq.server.clients.packed_in_c = packed_in_c
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{args.jobs:,} jobs per enqueue_many, {args.rounds} rounds, medians")
    print("| packer | jobs/s | client CPU, us per job | server CPU, us per job |")
    print("|---|---:|---:|---:|")
    for side, rows in results.items():
        rate, client_us, server_us = (statistics.median(r[i] for r in rows) for i in range(3))
        print(f"| {side} | {rate:,.0f} | {client_us:.1f} | {server_us:.1f} |")


if __name__ == "__main__":
    main()
