"""Run one action of one system's fault adapter, inside that system's own environment.

    python benchmarks/faults/agent.py SYSTEM ACTION --url URL --ledger URL --run RUN
        [--first N] [--count N] [--rate R] [--concurrency C] [--job-ms MS]
        [--every-s S] [--seconds S] [--width W]

Standard library plus the system itself (the run's orchestrator, ``run.py``, starts it with
the peer's venv python: ``benchmarks/harness/venvs.peer_python``). ``SYSTEM`` names a module
``systems/<system>.py`` (``-`` in a name becomes ``_``); the adapter contract is in
``systems/README.md``. Actions:

- ``info``: one JSON line: name, versions of its ``DISTS``, ``SETTINGS``, ``PROMISE``,
  ``RECOVERY_S``, ``SCENARIOS`` (scenario -> None, or why the system cannot run it), and the
  optional ``CRON_EVERY_S`` (default None) and ``SCHEDULERS`` / ``SCHEDULERS_DOC`` (default
  None: ``"one"`` where the system's docs allow only one scheduler process, and the quote);
- ``produce``: ``adapter.produce(url, ledger, first, count, rate)``, then one JSON line;
- ``work``: ``adapter.work(url, ledger, concurrency, job_ms)`` until killed;
- ``inspect``: one JSON line: ``{"inflight": adapter.inflight(url), "waiting":
  adapter.waiting(url), "stale": adapter.stale(url)}`` (None where the system does not show
  it; ``stale`` is optional);
- ``cron``: ``adapter.cron(url, ledger, every_s, seconds)`` (a scheduler and a worker in this
  process, firing a job every ``every_s`` until ``seconds`` passed or killed);
- ``fanin``: ``adapter.fanin(url, ledger, first, count, width)``: ``count`` fan-ins of
  ``width`` children each, the callback of group ``g`` recording ``ledger.callback(g)``.

An adapter's function may be sync or ``async def``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import os
import sys
from importlib import metadata
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from ledger import Ledger  # noqa: E402


def _run(fn: Any, *args: Any) -> Any:
    result = fn(*args)
    if inspect.isawaitable(result):
        return asyncio.run(_await(result))
    return result


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _versions(dists: list[str]) -> dict[str, str]:
    out = {}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "missing"
    return out


def adapter(system: str) -> Any:
    return importlib.import_module(f"systems.{system.replace('-', '_')}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("system")
    p.add_argument("action")
    p.add_argument("--url", default="")
    p.add_argument("--ledger", default="")
    p.add_argument("--run", default="")
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--job-ms", type=int, default=50)
    p.add_argument("--every-s", type=float, default=1.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--width", type=int, default=5)
    a = p.parse_args()
    mod = adapter(a.system)
    if a.action == "info":
        print(json.dumps({
            "name": mod.NAME, "versions": _versions(list(mod.DISTS)), "settings": mod.SETTINGS,
            "promise": mod.PROMISE, "recovery_s": mod.RECOVERY_S, "scenarios": mod.SCENARIOS,
            "cron_every_s": getattr(mod, "CRON_EVERY_S", None),
            "schedulers": getattr(mod, "SCHEDULERS", None),
            "schedulers_doc": getattr(mod, "SCHEDULERS_DOC", None),
        }))
        return
    ledger = Ledger(a.ledger, a.run)
    if a.action == "produce":
        _run(mod.produce, a.url, ledger, a.first, a.count, a.rate)
        print(json.dumps({"produced": a.count}))
    elif a.action == "work":
        _run(mod.work, a.url, ledger, a.concurrency, a.job_ms)
    elif a.action == "inspect":
        stale = getattr(mod, "stale", None)
        print(json.dumps({"inflight": _run(mod.inflight, a.url),
                          "waiting": _run(mod.waiting, a.url),
                          "stale": None if stale is None else _run(stale, a.url)}))
    elif a.action == "cron":
        _run(mod.cron, a.url, ledger, a.every_s, a.seconds)
    elif a.action == "fanin":
        _run(mod.fanin, a.url, ledger, a.first, a.count, a.width)
        print(json.dumps({"groups": a.count}))
    else:
        raise SystemExit(f"unknown action {a.action!r}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
