"""One episode: a system under one fault, on its own private server, counted from the ledger.

Every episode is bounded in time: the producer's run (``jobs / rate`` seconds, counted from
its first acknowledged enqueue), the fault inside it, then a settle of at most
``settle_cap_s + RECOVERY_S`` seconds, ended early once every acknowledged job finished or
nothing finished for ``RECOVERY_S + margin_s`` seconds.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from . import count, faults
from .agents import Agent, Crew, Where, once
from .names import DURABLE, FSYNCS, NONE, SCENARIOS, seed_of
from .proxy import Proxy
from .servers import AofSizes, Valkey, scratch, shim

__all__ = ["DURABLE", "FSYNCS", "FULL", "NONE", "QUICK", "SCENARIOS", "Episode", "Sizes", "run"]


@dataclass(frozen=True)
class Sizes:
    jobs: int = 2_000
    rate: float = 200.0
    workers: int = 3
    concurrency: int = 4
    job_ms: int = 20
    kills: int = 8
    cut_s: float = 10.0
    oom_s: float = 4.0
    cron_s: float = 180.0
    every_s: float = 1.0
    groups: int = 100
    width: int = 5
    fanin_job_ms: int = 100
    margin_s: float = 5.0
    settle_cap_s: float = 120.0
    warmup_s: float = 3.0  # workers start before the producer and the fault


FULL = Sizes()
QUICK = replace(FULL, jobs=300, rate=100.0, workers=2, kills=3, cut_s=5.0, oom_s=2.0,
                cron_s=12.0, groups=20, fanin_job_ms=60, margin_s=3.0, settle_cap_s=40.0,
                warmup_s=1.5)  # fmt: skip


@dataclass
class Episode:
    """What one episode needs: the system, its info (``agent.py info``), sizes, seed, places."""

    python: str
    system: str
    info: dict[str, Any]
    sizes: Sizes
    seed: int
    ledger: Any  # ledger.Ledger on the ledger server
    workdir: Path

    def where(self, run: str, scenario: str, fsync: str = NONE) -> Where:
        """Where an agent runs; under a durable scenario its environment names the server's
        ``appendfsync`` (``FAULTS_APPENDFSYNC``), so an adapter whose client can confirm
        durability picks what that setting allows (systems/README.md)."""
        env = {"FAULTS_DURABLE": "1", "FAULTS_APPENDFSYNC": fsync} if scenario in DURABLE else {}
        logs = self.workdir / "logs" / self.system / scenario / fsync
        return Where(self.python, self.system, self.ledger_url, run, logs, env)

    @property
    def ledger_url(self) -> str:
        return f"redis://{self.ledger.host}:{self.ledger.port}/0"

    @property
    def recovery_s(self) -> float:
        return float(self.info.get("recovery_s") or 0)


def run(ep: Episode, scenario: str, fsync: str | None = None, repeat: int = 0) -> dict[str, Any]:
    """Run one cell once: ``scenario`` on a server under ``fsync`` (a durable scenario's
    ``appendfsync``, the same for every system; default ``everysec``; NONE otherwise), as the
    cell's run ``repeat`` with its own seed (:func:`names.seed_of`). The row: settings, seed,
    duration, counts (or why it did not run)."""
    fsync = (fsync or FSYNCS[0]) if scenario in DURABLE else NONE
    seed = seed_of(ep.seed, repeat)
    why = (ep.info.get("scenarios") or {}).get(scenario, "the adapter does not name it")
    row: dict[str, Any] = {"system": ep.system, "scenario": scenario, "fsync": fsync,
                           "run": repeat, "seed": seed}  # fmt: skip
    if why is not None:
        return row | {"status": f"not run: {why}"}
    run_id = f"{ep.system}:{scenario}:{fsync}:{seed}:{time.time_ns()}"
    t0 = time.monotonic()
    try:
        body = {"cron": _cron, "fan-in": _fanin}.get(scenario, _jobs)
        row |= body(ep, scenario, run_id, fsync, seed)
        row["status"] = "ok"
    except Exception as exc:  # a row that says what broke; the run goes on
        row |= {"status": "run failed", "error": f"{type(exc).__name__}: {exc}"[:600]}
    row["duration_s"] = round(time.monotonic() - t0, 1)
    return row


def _server(ep: Episode, scenario: str, fsync: str) -> tuple[Valkey, str]:
    """The server under fault: the cell's setting, whatever the system (no adapter picks it)."""
    durable = scenario in DURABLE
    preload = shim(ep.workdir) if scenario == "power-loss" else None
    server = Valkey(scratch("emq-faults-server-"), aof=durable, fsync=fsync, preload=preload)
    server.start()
    how = "no persistence"
    if durable:
        how = f"appendonly yes, appendfsync {fsync}"
    if scenario == "power-loss":
        how += (", power-cut shim (unfsynced AOF writes lost)" if preload
                else ", AOF cut back to its size 1 s before the kill")  # fmt: skip
    return server, how


def _jobs(ep: Episode, scenario: str, run_id: str, fsync: str, seed: int) -> dict[str, Any]:
    # the same moments under either server setting: the cells differ by the setting alone
    s, rng = ep.sizes, random.Random(f"{seed}:{ep.system}:{scenario}")
    server, how = _server(ep, scenario, fsync)
    where = ep.where(run_id, scenario, fsync)
    proxy = Proxy(server.port) if scenario == "partition" else None
    urls = [proxy.url if proxy is not None and i == 0 else server.url for i in range(s.workers)]
    crew = Crew(where, urls, s.concurrency, s.job_ms)
    sizes = AofSizes(server) if scenario == "power-loss" and not server.preload else None
    try:
        time.sleep(s.warmup_s)
        producer = Agent(where, "produce", server.url, "produce", first=0, count=s.jobs,
                         rate=s.rate)  # fmt: skip
        episode_s = s.jobs / s.rate
        started_s = _first_ack(ep, run_id, producer)
        with _ledger(ep, run_id) as lg:
            target = faults.Target(server, crew, proxy, sizes, lg)
            fault = faults.inject(scenario, target, rng, episode_s, s, ep.recovery_s)
        fault["producer_first_ack_s"] = started_s
        if producer.wait(episode_s * 3 + 60) is None:
            producer.kill()
            fault["producer"] = "killed: did not finish"
        settle = _settle(ep, lambda: _done_jobs(ep, run_id))
        inspect = _drained(ep, where, server.url)
        crew_info = {"kills": crew.kills, "crash_restarts": crew.restarts}
    finally:
        crew.stop()
        if proxy is not None:
            proxy.close()
        server.stop()
    with _ledger(ep, run_id) as lg:
        counts = count.jobs(lg, inspect, set(fault.get("faulted", ())))
    return {"server": how, "fault": fault, "settle_s": settle, **crew_info, **counts,
            "sizes": asdict(s)}  # fmt: skip


def _first_ack(ep: Episode, run_id: str, producer: Agent, bound_s: float = 60.0) -> float:
    """Wait (at most ``bound_s``) for the producer's first acknowledged enqueue, so the fault's
    moment counts from when jobs flow: on a busy machine the producer's start-up alone can
    outlast a short episode's fault window. The seconds it took."""
    t0 = time.monotonic()
    with _ledger(ep, run_id) as lg:
        while time.monotonic() - t0 < bound_s and producer.alive():
            if lg.call("SCARD", lg.key("acked")):
                break
            time.sleep(0.05)
    return round(time.monotonic() - t0, 2)


@contextlib.contextmanager
def _ledger(ep: Episode, run_id: str) -> Iterator[Any]:
    lg = type(ep.ledger)(ep.ledger_url, run_id)
    try:
        yield lg
    finally:
        lg.close()


def _done_jobs(ep: Episode, run_id: str) -> tuple[int, bool]:
    with _ledger(ep, run_id) as lg:
        acked = lg.members("acked")
        finished = lg.counts("finished")
    done = sum(1 for j in acked if finished.get(j, 0) > 0)
    return sum(finished.values()), done == len(acked)


def _settle(ep: Episode, probe: Callable[[], tuple[int, bool]]) -> float:
    """Wait until ``probe`` says all done, or it made no progress for RECOVERY_S + margin."""
    t0 = last = time.monotonic()
    quiet = ep.recovery_s + ep.sizes.margin_s
    cap = t0 + ep.sizes.settle_cap_s + ep.recovery_s
    seen = -1
    while time.monotonic() < cap:
        progress, all_done = probe()
        if all_done:
            break
        if progress != seen:
            seen, last = progress, time.monotonic()
        elif time.monotonic() - last > quiet:
            break
        time.sleep(0.3)
    return round(time.monotonic() - t0, 1)


def _drained(ep: Episode, where: Where, url: str) -> dict[str, Any]:
    """The system's own counts once nothing is in flight or waiting (acks still on their way
    land, a lapsed lease is recovered), or after RECOVERY_S + margin."""
    end = time.monotonic() + ep.recovery_s + ep.sizes.margin_s
    while True:
        seen = once(where, "inspect", url, 60)
        if not (seen.get("inflight") or seen.get("waiting")) or time.monotonic() > end:
            return seen
        time.sleep(0.5)


def _cron(ep: Episode, scenario: str, run_id: str, fsync: str, seed: int) -> dict[str, Any]:
    s = ep.sizes
    server, how = _server(ep, scenario, fsync)
    where = ep.where(run_id, scenario)
    every = float(ep.info.get("cron_every_s") or s.every_s)
    # a minute-only cron still fires at least twice
    seconds = max(s.cron_s, 2 * every + 5) if every > s.cron_s / 2 else s.cron_s
    try:
        firers = [Agent(where, "cron", server.url, f"cron{i}", every_s=every,
                        seconds=seconds) for i in range(2)]  # fmt: skip
        for a in firers:
            if a.wait(seconds + 60) is None:
                a.kill()
    finally:
        server.stop()
    with _ledger(ep, run_id) as lg:
        counts = count.cron(lg, every)
    return {"server": how, "fault": {"schedulers": 2, "seconds": seconds, "every_s": every},
            **counts, "sizes": asdict(s)}  # fmt: skip


def _fanin(ep: Episode, scenario: str, run_id: str, fsync: str, seed: int) -> dict[str, Any]:
    s, rng = ep.sizes, random.Random(f"{seed}:{ep.system}:{scenario}")
    server, how = _server(ep, scenario, fsync)
    where = ep.where(run_id, scenario)
    crew = Crew(where, [server.url] * s.workers, s.concurrency, s.fanin_job_ms)
    slots = s.workers * s.concurrency
    busy_s = s.groups * s.width * s.fanin_job_ms / 1000 / slots + 1.0
    try:
        time.sleep(s.warmup_s)
        maker = Agent(where, "fanin", server.url, "fanin", first=1, count=s.groups, width=s.width)
        with _ledger(ep, run_id) as lg:
            fault = faults.kill_workers(crew, rng, s.kills, busy_s, lg)
        if maker.wait(60) is None:
            maker.kill()
            fault["fanin"] = "killed: did not finish"

        def probe() -> tuple[int, bool]:
            with _ledger(ep, run_id) as lg:
                c = count.fanin(lg, 1, s.groups, s.width)
            return c["callbacks"] * 1000 + s.groups * s.width - c["children_unfinished"], (
                c["callbacks"] == s.groups and c["children_unfinished"] == 0)

        settle = _settle(ep, probe)
        crew_info = {"kills": crew.kills, "crash_restarts": crew.restarts}
    finally:
        crew.stop()
        server.stop()
    with _ledger(ep, run_id) as lg:
        counts = count.fanin(lg, 1, s.groups, s.width, set(fault.get("faulted", ())))
    return {"server": how, "fault": fault, "settle_s": settle, **crew_info, **counts,
            "sizes": asdict(s)}  # fmt: skip


def cleanup(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
