"""The pinned environments: benchmarks/.venv for the harness and emq, one venv per peer.

The peers cannot share one environment (arq needs redis-py < 6, bullmq >= 6.2), so each gets
``benchmarks/.venv/peers/<peer>``. A venv is rebuilt only when its pins change (a stamp file
holds them). Every redis-py peer gets hiredis, as emq has, so no one loses on reply parsing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
REPO = BENCH.parent
VENV = BENCH / ".venv"
PEER_VENVS = VENV / "peers"

HARNESS_PINS = [
    "matplotlib==3.11.2",
    "pyinstrument==5.1.3",
    "py-spy==0.4.3",
    "redis==8.1.0",
    "hiredis==3.5.0",
]

PEER_PINS: dict[str, list[str]] = {
    "arq": ["arq==0.28.0", "redis==5.3.1", "hiredis==3.5.0"],
    "saq": ["saq[redis]==0.26.4", "redis==7.4.1", "hiredis==3.5.0", "typing_extensions==4.16.0"],
    "rq": ["rq==3.0.0", "redis==8.1.0", "hiredis==3.5.0"],
    "bullmq": ["bullmq==3.4.4", "redis==8.1.0", "hiredis==3.5.0"],
    "dramatiq": ["dramatiq[redis]==2.2.1", "redis==8.1.0", "hiredis==3.5.0"],
    "streaq": ["streaq==7.2.0", "coredis==6.9.0", "anyio==4.16.0"],
    "taskiq": ["taskiq==0.13.0", "taskiq-redis==1.2.4", "redis==8.1.0", "hiredis==3.5.0"],
    "celery": ["celery[redis]==5.7.0", "kombu==5.7.0", "redis==8.1.0", "hiredis==3.5.0"],
    "huey": ["huey==3.5.4", "redis==8.1.0", "hiredis==3.5.0"],
}
PEERS = list(PEER_PINS)


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def _stamp(venv: Path) -> Path:
    return venv / "bench-pins.txt"


def _build(venv: Path, pins: list[str], log: Path) -> str | None:
    """Create ``venv`` with ``pins`` unless its stamp already matches; None or the error."""
    wanted = "\n".join(pins) + "\n"
    stamp = _stamp(venv)
    if stamp.exists() and stamp.read_text() == wanted and python_of(venv).exists():
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(python_of(venv)), "-m", "pip", "install", "--disable-pip-version-check", *pins],
        ]
        for cmd in steps:
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
            if rc != 0:
                tail = log.read_text().strip().splitlines()[-3:]
                return f"exit {rc} from {cmd[2] if cmd[1] == '-m' else cmd[0]}: " + " | ".join(tail)
    stamp.write_text(wanted)
    return None


def ensure_harness() -> None:
    """Create benchmarks/.venv (emq editable plus HARNESS_PINS) and re-exec inside it."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    pins = ["-e", str(REPO), *HARNESS_PINS]
    print(f"[bench] preparing {VENV} ...", flush=True)
    err = _build(VENV, pins, BENCH / "results" / "logs" / "venv-harness.log")
    if err is not None:
        raise SystemExit(f"[bench] could not build the harness venv: {err}")
    py = str(python_of(VENV))
    os.execv(py, [py, *sys.argv])


def ensure_peers(peers: list[str]) -> dict[str, str]:
    """Build each peer's venv (3 at a time); return peer -> error for those that failed."""
    logs = BENCH / "results" / "logs"

    def one(peer: str) -> tuple[str, str | None]:
        return peer, _build(PEER_VENVS / peer, PEER_PINS[peer], logs / f"venv-{peer}.log")

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(one, [p for p in peers if p in PEER_PINS]))
    return {peer: err for peer, err in results if err is not None}


def peer_python(peer: str) -> Path:
    return python_of(VENV) if peer == "emq" else python_of(PEER_VENVS / peer)
