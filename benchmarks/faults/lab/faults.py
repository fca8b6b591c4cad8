"""The faults, injected while the producer runs; each returns what it did (times from start).

Times are drawn from ``rng`` (seeded by ``--seed``, the system and the scenario), so a run
can be repeated with the same kill moments. A fault that hits workers names them in
``faulted``: the agent tags of every worker it killed, froze or cut off (the ledger records
the agent of every run, so a job that ran twice can be told apart: a rerun of a run the
fault hit, or a rerun with no fault to explain it).

A fault that hits one worker waits, from its drawn moment, until that worker has a handler
body in flight (its own side-effect log: the ledger's ``busy`` count for its agent, written
by every system's handler alike), for at most ``BUSY_WAIT_S``, and records how many bodies
were in flight when it struck: a slow system is not let off because the fault happened to
fall between two of its jobs. A fault that hits the server (kill, power loss, out of memory)
records the bodies in flight on every live worker at the moment it struck (``in_flight``).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

from .agents import Crew
from .proxy import Proxy
from .servers import AofSizes, Valkey

BUSY_WAIT_S = 10.0


@dataclass
class Target:
    server: Valkey
    crew: Crew
    proxy: Proxy | None
    sizes: AofSizes | None  # power loss without the shim: the AOF's sizes over time
    ledger: Any  # this run's ledger.Ledger: the workers' in-flight counts


def when_busy(ledger: Any, agent: str, bound_s: float = BUSY_WAIT_S) -> int:
    """Wait until ``agent`` has a handler body in flight (at most ``bound_s``); how many."""
    end = time.monotonic() + bound_s
    while True:
        n = ledger.busy(agent)
        if n > 0 or time.monotonic() >= end:
            return n
        time.sleep(0.005)


def all_busy(ledger: Any, crew: Crew) -> int:
    """Handler bodies in flight now on the crew's live workers (not on ones killed before)."""
    return sum(ledger.busy(w.tag) for w in crew.workers)


def _at(t0: float, t: float) -> None:
    wait = t0 + t - time.monotonic()
    if wait > 0:
        time.sleep(wait)


def kill_workers(crew: Crew, rng: random.Random, kills: int, within_s: float,
                 ledger: Any) -> dict[str, Any]:  # fmt: skip
    """SIGKILL a random worker ``kills`` times at random moments in ``within_s``, each once it
    has work in flight; each is replaced at once by a new worker."""
    t0 = time.monotonic()
    moments = sorted(rng.uniform(0.1, within_s) for _ in range(kills))
    done = []
    for t in moments:
        _at(t0, t)
        i = rng.randrange(len(crew.workers))
        busy = when_busy(ledger, crew.workers[i].tag)
        at = time.monotonic() - t0
        tag = crew.sigkill(i)
        done.append({"at_s": round(at, 2), "worker": i, "agent": tag, "in_flight": busy})
    return {"kills": done, "faulted": [k["agent"] for k in done],
            "in_flight": sum(k["in_flight"] for k in done)}  # fmt: skip


def inject(scenario: str, tg: Target, rng: random.Random, episode_s: float, sizes: Any,
           recovery_s: float) -> dict[str, Any]:  # fmt: skip
    t0 = time.monotonic()
    if scenario == "worker-sigkill":
        return kill_workers(tg.crew, rng, sizes.kills, episode_s * 0.9, tg.ledger)
    if scenario == "worker-sigstop":
        at, hold = episode_s * rng.uniform(0.15, 0.35), recovery_s + 2.0
        _at(t0, at)
        frozen = tg.crew.workers[0].tag
        busy = when_busy(tg.ledger, frozen)
        at = time.monotonic() - t0
        tg.crew.freeze(0)
        time.sleep(hold)
        tg.crew.thaw(0)
        return {"sigstop_at_s": round(at, 2), "stopped_s": hold, "worker": 0,
                "faulted": [frozen], "in_flight": busy}  # fmt: skip
    if scenario in ("server-kill", "power-loss"):
        at = episode_s * rng.uniform(0.3, 0.6)
        _at(t0, at)
        busy = all_busy(tg.ledger, tg.crew)
        tg.server.kill9()
        cut = tg.sizes.truncate(1.0) if tg.sizes is not None else None
        time.sleep(1.0)
        tg.server.start()
        return {"kill9_at_s": round(at, 2), "down_s": 1.0, "aof_bytes_cut": cut,
                "in_flight": busy}  # fmt: skip
    if scenario == "partition":
        assert tg.proxy is not None
        at = episode_s * rng.uniform(0.15, 0.35)
        _at(t0, at)
        before = len(tg.crew.tags(0)) - 1  # the worker behind the proxy when it was cut
        busy = when_busy(tg.ledger, tg.crew.workers[0].tag)
        at = time.monotonic() - t0
        tg.proxy.cut()
        time.sleep(sizes.cut_s)
        tg.proxy.heal()
        cut_off = tg.crew.tags(0)[before:]  # and any that replaced it during the cut
        return {"cut_at_s": round(at, 2), "cut_s": sizes.cut_s, "worker": 0,
                "faulted": cut_off, "in_flight": busy}  # fmt: skip
    if scenario == "oom":
        at = episode_s * rng.uniform(0.2, 0.4)
        _at(t0, at)
        c = tg.server.client()
        used = int(c.info("memory")["used_memory"])
        busy = all_busy(tg.ledger, tg.crew)
        c.config_set("maxmemory", str(used))
        time.sleep(sizes.oom_s)
        c.config_set("maxmemory", "0")
        c.close()
        return {"oom_at_s": round(at, 2), "oom_s": sizes.oom_s, "maxmemory": used,
                "in_flight": busy}  # fmt: skip
    raise ValueError(f"no fault named {scenario!r}")
