"""bullmq-node (BullMQ for Node): this module drives ``bullmq_node/agent.mjs`` with ``node``.

Standard library only: it runs under any Python with ``node`` on the PATH. BullMQ and ioredis
resolve from ``benchmarks/peers/bullmq_node`` (the speed benchmark's pinned tree: package.json
and package-lock.json there; ``npm ci`` installs it, done here on first use when missing).
The actions a run may kill (``produce``, ``work``, ``cron``, ``fanin``) exec Node in place of
this process, so a signal to it reaches the Node process itself; Node prints the same JSON
line agent.py would. ``inflight`` and ``waiting`` run one short ``inspect``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

NAME = "bullmq-node"
DISTS: list[str] = []  # Node packages: their versions are in VERSIONS
HERE = Path(__file__).resolve().parent
AGENT = HERE / "bullmq_node" / "agent.mjs"
PEER = HERE.parents[1] / "peers" / "bullmq_node"
LOCK_MS = 3_000  # as in agent.mjs
STALLED_MS = 1_000
PROMISE = (
    "at least once: a job whose worker stops renewing its lock is moved back to wait by the "
    "stalled checker, and may run twice (docs.bullmq.io/guide/jobs/stalled; "
    "guide/workers/stalled-jobs)"
)
SETTINGS = {
    f"lockDuration={LOCK_MS}": "the lock on an active job, renewed by its worker every "
    "lockDuration/2 (lockRenewTime's default); the default is 30 s, shortened so recovery "
    "fits in a bounded run",
    f"stalledInterval={STALLED_MS}": "every worker runs the stalled checker, at most once per "
    "interval across the queue (default 30 s, shortened with the lock)",
    "maxStalledCount=25": "the default 1 fails a job that stalls twice; raised so a job is "
    "recovered, not failed, within a run (guide/jobs/stalled: 'you can increase this number')",
    "attempts=25, backoff exponential 100 ms": "a handler failure is retried "
    "(guide/retrying-failing-jobs); without attempts a failed job is never retried",
    "removeOnComplete={count: 1000}, removeOnFail={count: 5000}": "the 'good practice' of "
    "guide/workers/auto-removal-of-jobs: finished jobs do not fill the server",
    "jobId=J<id>": "a custom id per job (guide/jobs/job-ids): a repeated add of the same id "
    "is ignored",
    "server: AOF on, maxmemory-policy noeviction": "what guide/going-to-production asks of "
    "the server (run.py: AOF under server-kill and power-loss, once with appendfsync "
    "everysec and once with always, as for every system; noeviction always)",
    "maxRetriesPerRequest=null (workers), enableOfflineQueue=false (producers)": "what BullMQ "
    "requires of a Worker's connection, and its 'failing fast when Redis is down' pattern for "
    "an add, which then raises instead of waiting for a reconnection",
}
RECOVERY_S = (LOCK_MS + STALLED_MS) / 1000
SCENARIOS: dict[str, str | None] = {
    s: None
    for s in ("worker-sigkill", "worker-sigstop", "server-kill", "power-loss", "partition",
              "oom", "cron", "fan-in")
}  # fmt: skip


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        raise SystemExit("bullmq-node: node is not on the PATH (install Node.js >= 18)")
    return node


def _ensure() -> None:
    """Install the pinned tree with ``npm ci`` when node_modules is missing (one at a time)."""
    if (PEER / "node_modules" / "bullmq" / "package.json").exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit(f"bullmq-node: no {PEER}/node_modules and npm is not on the PATH")
    with open(Path(tempfile.gettempdir()) / "emq-faults-bullmq-node-npm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (PEER / "node_modules" / "bullmq" / "package.json").exists():
            subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                           cwd=PEER, check=True, stdout=sys.stderr)  # fmt: skip


def _version(package: str) -> str:
    with contextlib.suppress(OSError, ValueError):
        return str(json.loads((PEER / "node_modules" / package / "package.json").read_text())
                   ["version"])  # fmt: skip
    return "missing"


def _node_version() -> str:
    node = shutil.which("node")
    if node is None:
        return "missing"
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip().lstrip("v") or "missing"


VERSIONS = {"bullmq": _version("bullmq"), "ioredis": _version("ioredis"),
            "node": _node_version()}  # fmt: skip


def _ledger_url(ledger: Any) -> str:
    auth = f":{quote(ledger.password, safe='')}@" if ledger.password else ""
    return f"redis://{auth}{ledger.host}:{ledger.port}"


def _exec(action: str, url: str, ledger: Any, **options: float) -> None:
    """Replace this process with ``node agent.mjs ACTION ...`` (a kill reaches Node)."""
    _ensure()
    node = _node()
    args = [node, str(AGENT), action, "--url", url, "--ledger", _ledger_url(ledger),
            "--run", ledger.run]  # fmt: skip
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(node, args)


def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    _exec("produce", url, ledger, first=first, count=count, rate=rate)


def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    _exec("work", url, ledger, concurrency=concurrency, job_ms=job_ms)


def cron(url: str, ledger: Any, every_s: float, seconds: float) -> None:
    _exec("cron", url, ledger, every_s=every_s, seconds=seconds)


def fanin(url: str, ledger: Any, first: int, count: int, width: int) -> None:
    _exec("fanin", url, ledger, first=first, count=count, width=width)


_INSPECTED: dict[str, dict[str, Any]] = {}


def _inspect(url: str) -> dict[str, Any]:
    """One ``inspect`` per URL and process: agent.py asks for inflight, waiting, stale."""
    if url not in _INSPECTED:
        _ensure()
        out = subprocess.run([_node(), str(AGENT), "inspect", "--url", url], check=True,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        _INSPECTED[url] = json.loads(out.stdout.strip().splitlines()[-1])
    return _INSPECTED[url]


def inflight(url: str) -> int | None:
    return int(_inspect(url)["inflight"])


def waiting(url: str) -> int | None:
    return int(_inspect(url)["waiting"])


def stale(url: str) -> dict[str, int | None]:
    """``accepted``: jobs with more than one ``completed`` event (a completion from a worker
    whose lock had lapsed; BullMQ refuses those with "Missing lock"); ``refused``: None,
    BullMQ records a refused completion nowhere but in the worker's error."""
    return dict(_inspect(url)["stale"])
