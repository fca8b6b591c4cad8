"""Run one action of one peer inside that peer's virtual environment.

    python benchmarks/peers/runner.py PEER ACTION --url URL [--n N] [--conc C]
                                                 [--rate R] [--seconds S]

Standard library plus the peer itself. Each ``peers/<peer>_peer.py`` module provides:

- ``NAME``, ``DISTS`` (distributions whose versions are reported), ``MODEL`` (the
  concurrency model used, as the peer documents it), ``BULK`` (which API the bulk figure uses),
  ``APPEND`` (True when handlers run in short-lived forked children; see probe.py),
  ``CONCURRENCY`` (handlers at once in one worker process);
- ``Client(url)`` with ``setup()``, ``send(t)`` (enqueue one no-op job carrying the float
  ``t``), ``send_many(n)`` (enqueue ``n`` jobs the bulk way) and ``close()``, each either sync
  or ``async``;
- ``work(url, concurrency)``: run one worker process until killed; its handler calls
  ``probe.hit(t)`` first.

Actions print one JSON object on the last line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import os
import sys
import time
from importlib import metadata
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


async def _call(fn: Any, *args: Any) -> Any:
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _timed(client: Any, action: str, n: int) -> dict[str, Any]:
    await _call(client.setup)
    t0 = time.perf_counter()
    if action == "enqueue-one":
        send = client.send
        if inspect.iscoroutinefunction(send):
            for _ in range(n):
                await send(0.0)
        else:
            for _ in range(n):
                send(0.0)
    else:
        await _call(client.send_many, n)
    seconds = time.perf_counter() - t0
    await _call(client.close)
    return {"n": n, "seconds": seconds, "rate": n / seconds if seconds else 0.0}


async def _produce(client: Any, rate: float, seconds: float) -> dict[str, Any]:
    """Open-loop producer: job i is sent at start + i / rate, stamped just before its send."""
    await _call(client.setup)
    total = int(rate * seconds)
    is_async = inspect.iscoroutinefunction(client.send)
    start = time.monotonic()
    late_max = 0.0
    for i in range(total):
        due = start + i / rate
        wait = due - time.monotonic()
        if wait > 0:
            if is_async:
                await asyncio.sleep(wait)
            else:
                time.sleep(wait)
        now = time.monotonic()
        late_max = max(late_max, now - due)
        if is_async:
            await client.send(now)
        else:
            client.send(now)
    elapsed = time.monotonic() - start
    await _call(client.close)
    return {"sent": total, "seconds": elapsed, "late_max_ms": late_max * 1000}


async def _warm(client: Any) -> dict[str, Any]:
    await _call(client.setup)
    await _call(client.send, -1.0)
    await _call(client.close)
    return {"sent": 1}


def _versions(dists: list[str]) -> dict[str, str]:
    out = {}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "missing"
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("peer")
    parser.add_argument("action")
    parser.add_argument("--url", required=True)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--conc", type=int, default=0)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--mode", default="")
    args = parser.parse_args()
    if args.mode:
        os.environ["BENCH_EMQ_MODE"] = args.mode
    mod = importlib.import_module(f"{args.peer}_peer")
    if args.action == "info":
        info = {
            "name": mod.NAME,
            "versions": _versions(list(mod.DISTS)),
            "model": mod.MODEL,
            "bulk": mod.BULK,
            "concurrency": mod.CONCURRENCY,
        }
        print(json.dumps(info))
        return
    if args.action == "work":
        mod.work(args.url, args.conc or mod.CONCURRENCY)
        return
    client = mod.Client(args.url)
    if args.action in ("enqueue-one", "enqueue-bulk"):
        out = asyncio.run(_timed(client, args.action, args.n))
    elif args.action == "prefill":
        out = asyncio.run(_timed(client, "enqueue-bulk", args.n))
    elif args.action == "warm":
        out = asyncio.run(_warm(client))
    elif args.action == "produce":
        out = asyncio.run(_produce(client, args.rate, args.seconds))
    else:
        raise SystemExit(f"unknown action {args.action}")
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
