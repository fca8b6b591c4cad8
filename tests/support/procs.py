"""Worker processes a test starts with ``emq worker MODULE:ATTR`` and kills at its end, and
the bounded wait its checks poll with (the deadline bounds a hang, never a speed)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TESTS = Path(__file__).parents[1]  # tests/
CLI = "from emq.cli.main import main; main()"
HANG = 60.0


class WorkerProcs:
    """The worker processes of one test, on ``url``, logging into ``tmp``."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url, self.tmp = url, tmp
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, target: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        """``emq worker target *args`` with ``EMQ_URL`` and ``env`` set, the repository on
        ``PYTHONPATH`` (``target`` may name a module of ``tests.support``)."""
        environ = dict(os.environ, EMQ_URL=self.url, **env)
        environ["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent), environ.get("PYTHONPATH", "")])
        with (self.tmp / f"w{len(self.started)}.log").open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", CLI, "worker", target, *args],
                env=environ, stdout=out, stderr=out, cwd=self.tmp,
            )  # fmt: skip
        self.started.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(HANG)


def wait_for(cond: Callable[[], Any], what: str, timeout: float = HANG) -> Any:
    """Poll ``cond`` until it is truthy (its value is returned), at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := cond():
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def append_line(path: Path, line: str) -> None:
    """Append ``line`` to ``path`` in one write (``O_APPEND``: the lines of two processes never
    mix): how a handler in a worker process records a side effect for its test, on any
    server, a cluster included."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def read_lines(path: Path) -> list[str]:
    """The lines :func:`append_line` wrote to ``path`` (none yet: empty)."""
    return path.read_text().splitlines() if path.exists() else []


def wait_for_file(path: Path, timeout: float = 300.0) -> None:
    """A named pause point in a worker process: wait until the test creates ``path``."""
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
