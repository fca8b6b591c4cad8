"""Peers that run on Node.js: where their code lives, and their pinned install.

Each Node peer is a directory under ``benchmarks/peers/`` with a ``package.json`` that pins
exact versions, the ``package-lock.json`` that fixes the whole tree, and ``peer.mjs``, which
takes the same actions as ``peers/runner.py``. ``npm ci`` installs the lock's tree into the
directory's ``node_modules`` (gitignored) when it is missing or the lock changed since (a stamp
file holds the lock's hash). Without ``node`` or ``npm`` on the PATH the peer is skipped with
that reason in the results; the run goes on without it.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from .venvs import BENCH

NODE_PEERS: dict[str, Path] = {"bullmq-node": BENCH / "peers" / "bullmq_node"}
SKIPPED = "skipped: "


def node_binary() -> str | None:
    return shutil.which("node")


def script(peer: str) -> Path:
    return NODE_PEERS[peer] / "peer.mjs"


def _lock_hash(directory: Path) -> str:
    return hashlib.sha256((directory / "package-lock.json").read_bytes()).hexdigest()


def _install(peer: str, log: Path) -> str | None:
    """Run ``npm ci`` for ``peer`` unless its node_modules matches the lock; None or why not."""
    directory = NODE_PEERS[peer]
    if node_binary() is None:
        return f"{SKIPPED}node is not on the PATH (install Node.js >= 18 to measure {peer})"
    npm = shutil.which("npm")
    if npm is None:
        return f"{SKIPPED}npm is not on the PATH (it installs {peer}'s pinned packages)"
    stamp = directory / "node_modules" / ".bench-lock-sha256"
    wanted = _lock_hash(directory)
    if stamp.exists() and stamp.read_text() == wanted:
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"]
    with log.open("w") as out:
        out.write("$ " + " ".join(cmd) + f"  (in {directory})\n")
        out.flush()
        rc = subprocess.run(cmd, cwd=directory, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = log.read_text().strip().splitlines()[-3:]
        return f"exit {rc} from npm ci: " + " | ".join(tail)
    stamp.write_text(wanted)
    return None


def ensure_node_peers(peers: list[str]) -> dict[str, str]:
    """Install each Node peer's pinned packages; return peer -> error (or skip reason)."""
    logs = BENCH / "results" / "logs"
    out: dict[str, str] = {}
    for peer in peers:
        if peer in NODE_PEERS:
            err = _install(peer, logs / f"npm-{peer}.log")
            if err is not None:
                out[peer] = err
    return out
