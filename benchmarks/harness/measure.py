"""The per-system measurements, each run in the system's own venv as child processes.

Enqueue rates come from the producer timing itself (setup excluded). Processing and latency
come from the handlers' probe records (see peers/probe.py): the harness reads them while the
workers run and kills the workers (their whole process group) once it has what it needs.

The server's CPU per job (``server_us_per_job``, ``INFO cpu`` user + sys of the server
process) is read around the bulk enqueue (the producer's connect and script loads included,
tiny against its thousands of jobs) and around a processing run, from the workers' start to
the moment the last job's handler started (their start-up and idle polls included: what a
fleet costs its server).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from .node import NODE_PEERS, node_binary, script
from .server import Server
from .stats import percentile
from .venvs import BENCH, peer_python

PEERS_DIR = BENCH / "peers"
sys.path.insert(0, str(PEERS_DIR))
from probe import read_records  # noqa: E402

LOGS = BENCH / "results" / "logs"


class RunError(Exception):
    pass


@dataclass
class Peer:
    name: str
    emq_mode: str = ""  # emq only: "worker" or "loop"
    append: bool = False

    def cmd(self, action: str, url: str, **opts: Any) -> list[str]:
        if self.name in NODE_PEERS:
            out = [node_binary() or "node", str(script(self.name)), action]
        else:
            out = [str(peer_python(self.name)), str(PEERS_DIR / "runner.py"), self.name, action]
        out += ["--url", url]
        for key, value in opts.items():
            out += [f"--{key}", str(value)]
        if self.emq_mode:
            out += ["--mode", self.emq_mode]
        return out

    def env(self, probe_dir: str = "") -> dict[str, str]:
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env["PYTHONUNBUFFERED"] = "1"
        if probe_dir:
            env["BENCH_PROBE_DIR"] = probe_dir
        if self.append:
            env["BENCH_PROBE_APPEND"] = "1"
        return env


def run_json(peer: Peer, action: str, url: str, timeout: float, **opts: Any) -> dict[str, Any]:
    """Run one action to completion and return the JSON object on its last stdout line."""
    cmd = peer.cmd(action, url, **opts)
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=peer.env(), check=False
        )
    except subprocess.TimeoutExpired:
        raise RunError(f"{action} timed out after {timeout:.0f} s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise RunError(f"{action} exited {done.returncode}: {tail}")
    return dict(json.loads(lines[-1]))


class Workers:
    """``count`` worker processes of one peer, each in its own process group."""

    def __init__(self, peer: Peer, url: str, count: int, tag: str) -> None:
        self.dir = tempfile.mkdtemp(prefix=f"bench-{peer.name}-")
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"{peer.name}-{tag}.log"
        self.log = self.log_path.open("w")
        self.procs = [
            subprocess.Popen(
                peer.cmd("work", url),
                env=peer.env(self.dir),
                stdout=self.log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            for _ in range(count)
        ]

    def records(self) -> list[tuple[float, float]]:
        return read_records(self.dir)

    def check_alive(self) -> None:
        for p in self.procs:
            if p.poll() is not None:
                self.log.flush()
                tail = " | ".join(self.log_path.read_text().strip().splitlines()[-3:])
                raise RunError(f"worker exited {p.returncode}: {tail}")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 3
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.05, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # the pool children too (celery, rq)
            p.wait()
        self.log.close()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)


def enqueue(peer: Peer, server: Server, bulk: bool, n: int) -> dict[str, Any]:
    """One enqueue run on a flushed server (the bulk runs also read memory, as a check)."""
    server.flush()
    time.sleep(0.05)
    before, keys_before = server.used_memory(), server.dbsize()
    action = "enqueue-bulk" if bulk else "enqueue-one"
    cpu0 = server.cpu_s() if bulk else 0.0
    out = run_json(peer, action, server.url, timeout=240, n=n)
    if bulk:
        out["server_us_per_job"] = (server.cpu_s() - cpu0) / n * 1e6
        time.sleep(0.05)
        out["memory_bytes_per_job"] = (server.used_memory() - before) / n
        out["keys_per_job"] = (server.dbsize() - keys_before) / n
    return out


def memory(peer: Peer, server: Server, n: int) -> dict[str, Any]:
    """``INFO memory`` used_memory before and after ``n`` waiting jobs (bulk API)."""
    out = enqueue(peer, server, True, n)
    return {k: out[k] for k in ("n", "memory_bytes_per_job", "keys_per_job", "rate")}


def _window_rate(starts: list[float]) -> float:
    """Jobs per second between the 10th and the 90th percentile handler start, so worker
    start-up skew and the drain's tail do not count."""
    starts.sort()
    lo, hi = len(starts) // 10, (len(starts) * 9) // 10
    if hi - lo < 10 or starts[hi] <= starts[lo]:
        raise RunError(f"too few jobs ran ({len(starts)}) to measure a rate")
    return (hi - lo) / (starts[hi] - starts[lo])


def processing(
    peer: Peer, server: Server, procs: int, n: int, deadline_s: float, tag: str
) -> dict[str, Any]:
    server.flush()
    run_json(peer, "prefill", server.url, timeout=240, n=n)
    cpu0 = server.cpu_s()
    workers = Workers(peer, server.url, procs, tag)
    try:
        t0 = time.monotonic()
        records = workers.records()
        while len(records) < n and time.monotonic() - t0 < deadline_s:
            time.sleep(0.05)
            workers.check_alive()
            records = workers.records()
        used = server.cpu_s() - cpu0
        time.sleep(0.05)
        records = workers.records()
    finally:
        workers.stop()
    out = {"n": n, "ran": len(records), "complete": len(records) >= n}
    out["rate"] = _window_rate([r[0] for r in records])
    if records:
        out["server_us_per_job"] = used / len(records) * 1e6
    return out


def latency(
    peer: Peer, server: Server, rate: float, seconds: float, tag: str, settle_s: float = 5.0
) -> dict[str, Any]:
    """Enqueue -> handler start at a fixed offered load, one worker process."""
    server.flush()
    workers = Workers(peer, server.url, 1, tag)
    try:
        run_json(peer, "warm", server.url, timeout=60)
        t0 = time.monotonic()
        while not workers.records():
            workers.check_alive()
            if time.monotonic() - t0 > 60:
                raise RunError("worker took no warm-up job within 60 s")
            time.sleep(0.02)
        produced = run_json(
            peer, "produce", server.url, timeout=seconds + 60, rate=rate, seconds=seconds
        )
        sent = int(produced["sent"])
        t1 = time.monotonic()
        stamped = [r for r in workers.records() if r[1] > 0]
        while len(stamped) < sent and time.monotonic() - t1 < settle_s:
            time.sleep(0.05)
            stamped = [r for r in workers.records() if r[1] > 0]
    finally:
        workers.stop()
    lat_ms = sorted((start - sent_at) * 1000 for start, sent_at in stamped)
    if not lat_ms:
        raise RunError("no stamped job ran")
    # Kept up: every job ran, at (close to) the offered rate from first send to last start.
    span = max(r[0] for r in stamped) - min(r[1] for r in stamped)
    handled = len(stamped) / span if span > 0 else 0.0
    return {
        "offered_rate": rate,
        "sent": sent,
        "ran": len(lat_ms),
        "handled_rate": handled,
        "saturated": len(lat_ms) < sent or handled < 0.9 * rate,
        "producer_late_max_ms": produced["late_max_ms"],
        "p50_ms": percentile(lat_ms, 50),
        "p99_ms": percentile(lat_ms, 99),
        "max_ms": lat_ms[-1],
    }
