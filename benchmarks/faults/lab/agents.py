"""The agents of one episode: ``agent.py SYSTEM ACTION`` processes in the system's own venv.

:class:`Agent` is one process (its output in a log file); :class:`Crew` is the workers, which a
supervisor restarts when one exits on its own (as systemd or Kubernetes would), so a worker
that crashes on a connection error comes back, and whatever it held in memory is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AGENT = Path(__file__).resolve().parents[1] / "agent.py"


@dataclass
class Where:
    """What every agent of an episode shares."""

    python: str
    system: str
    ledger: str
    run: str
    logs: Path
    env: dict[str, str] = field(default_factory=dict)


class Agent:
    def __init__(self, where: Where, action: str, url: str, tag: str, **opts: Any) -> None:
        args = [where.python, str(AGENT), where.system, action, "--url", url,
                "--ledger", where.ledger, "--run", where.run]  # fmt: skip
        for k, v in opts.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        where.logs.mkdir(parents=True, exist_ok=True)
        self.tag, self.log = tag, where.logs / f"{tag}.log"
        env = {**os.environ, **where.env, "PYTHONUNBUFFERED": "1", "FAULTS_AGENT": tag}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)  # fmt: skip

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)  # the group: a Node peer's or a pool's children too

    def kill(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def tail(self, n: int = 400) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def once(where: Where, action: str, url: str, timeout: float, **opts: Any) -> dict[str, Any]:
    """Run a short action (``info``, ``inspect``) and parse its last JSON line."""
    a = Agent(where, action, url, f"{action}-{time.monotonic_ns()}", **opts)
    if a.wait(timeout) is None:
        a.kill()
        raise RuntimeError(f"{where.system} {action} did not answer in {timeout:.0f} s")
    for line in reversed(a.log.read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            out: dict[str, Any] = json.loads(line)
            return out
    raise RuntimeError(f"{where.system} {action} failed: {a.tail()}")


class Crew:
    """``n`` workers (``urls[i]`` is worker i's server address), restarted when one exits."""

    def __init__(self, where: Where, urls: list[str], concurrency: int, job_ms: int) -> None:
        self.where, self.urls = where, urls
        self.opts = {"concurrency": concurrency, "job_ms": job_ms}
        self.started: list[tuple[int, str]] = []  # (slot, agent tag) of every worker started
        self.workers = [self._start(i) for i in range(len(urls))]
        self.kills = 0
        self.restarts = 0  # exits the supervisor saw (crashes), not the kills
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped: set[int] = set()
        self._thread = threading.Thread(target=self._supervise, daemon=True)
        self._thread.start()

    def _start(self, i: int) -> Agent:
        tag = f"work{i}-{time.monotonic_ns()}"
        self.started.append((i, tag))
        return Agent(self.where, "work", self.urls[i], tag, **self.opts)

    def tags(self, i: int) -> list[str]:
        """The agent tags of every worker started in slot ``i`` so far, oldest first."""
        return [tag for slot, tag in self.started if slot == i]

    def _supervise(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                for i, w in enumerate(self.workers):
                    if not w.alive():
                        self.restarts += 1
                        self.workers[i] = self._start(i)

    def sigkill(self, i: int) -> str:
        """SIGKILL worker ``i`` and start a new one in its place at once; the killed one's tag."""
        with self._lock:
            killed = self.workers[i]
            killed.kill()
            self.kills += 1
            self.workers[i] = self._start(i)
        return killed.tag

    def freeze(self, i: int) -> None:
        self.workers[i].signal(signal.SIGSTOP)

    def thaw(self, i: int) -> None:
        self.workers[i].signal(signal.SIGCONT)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for w in self.workers:
            w.kill()
