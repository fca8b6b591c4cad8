"""The raw limits of the same server: what EVALSHA of a trivial script (``return 1``) costs
when nothing of a queue is in the way.

- ``redis-benchmark`` (or ``valkey-benchmark``): 50 clients, without and with pipelining;
- redis-py (with hiredis), sync and asyncio, one call at a time (also the round trip's p50 and
  p99) and pipelined 1,000 calls per round trip;
- the server's CPU per trivial EVALSHA, pipelined 50 deep from one sync client (a worker's
  claim batch): the floor a job's lifecycle is compared with.
"""

from __future__ import annotations

import asyncio
import csv
import io
import subprocess
import time
from typing import Any

import redis
import redis.asyncio

from .server import Server, server_cpu_s
from .stats import percentile

SCRIPT = "return 1"
PIPE = 1000
TRIVIAL_DEPTH = 50


def redis_benchmark(server: Server, pipeline: int, n: int) -> dict[str, Any]:
    tool = server.benchmark_tool()
    if tool is None:
        return {"error": "no redis-benchmark or valkey-benchmark on this machine"}
    sha = server.client().script_load(SCRIPT)
    cmd = [str(tool), "-h", "127.0.0.1", "-p", str(server.port), "-n", str(n), "-c", "50"]
    cmd += ["-P", str(pipeline), "-q", "--csv", "EVALSHA", sha, "0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    rows = [r for r in csv.reader(io.StringIO(done.stdout)) if r and r[0].startswith("EVALSHA")]
    if done.returncode != 0 or not rows:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-200:]}"}
    return {"rate": float(rows[0][1]), "clients": 50, "pipeline": pipeline, "n": n}


def redis_py_sync(server: Server, n: int) -> dict[str, Any]:
    c = redis.Redis(host="127.0.0.1", port=server.port)
    sha = c.script_load(SCRIPT)
    per_call: list[float] = []
    t0 = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        c.evalsha(sha, 0)
        per_call.append(time.perf_counter() - t)
    one = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(0, n * 10, PIPE):
        p = c.pipeline(transaction=False)
        for _ in range(PIPE):
            p.evalsha(sha, 0)
        p.execute()
    piped = n * 10 / (time.perf_counter() - t0)
    cpu0 = server_cpu_s(c)
    for _ in range(0, n * 10, TRIVIAL_DEPTH):
        p = c.pipeline(transaction=False)
        for _ in range(TRIVIAL_DEPTH):
            p.evalsha(sha, 0)
        p.execute()
    trivial_us = (server_cpu_s(c) - cpu0) / (n * 10) * 1e6
    c.close()
    per_call.sort()
    return {
        "one_by_one_rate": one,
        "pipelined_rate": piped,
        "trivial_server_us": trivial_us,
        "rtt_p50_ms": percentile(per_call, 50) * 1000,
        "rtt_p99_ms": percentile(per_call, 99) * 1000,
    }


async def _redis_py_async(server: Server, n: int) -> dict[str, Any]:
    c = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
    sha = await c.script_load(SCRIPT)
    t0 = time.perf_counter()
    for _ in range(n):
        await c.evalsha(sha, 0)
    one = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(0, n * 10, PIPE):
        async with c.pipeline(transaction=False) as p:
            for _ in range(PIPE):
                p.evalsha(sha, 0)
            await p.execute()
    piped = n * 10 / (time.perf_counter() - t0)
    await c.aclose()
    return {"one_by_one_rate": one, "pipelined_rate": piped}


def redis_py_async(server: Server, n: int) -> dict[str, Any]:
    return asyncio.run(_redis_py_async(server, n))
