"""The fault harness's ledger: what every job did, kept on a server that is never faulted.

Standard library only (a tiny RESP client over one socket): it runs inside every peer's own
virtual environment, whatever client library that peer uses. Every record is one command, so
a process SIGKILLed between two records leaves each of them whole. Keys, for one run ``R``:

- ``fl:R:acked``   SET   job ids whose enqueue the system acknowledged (returned without error)
- ``fl:R:refused`` SET   job ids whose enqueue raised (not counted as acknowledged)
- ``fl:R:started`` HASH  job id -> handler starts
- ``fl:R:finished`` HASH job id -> handler bodies that ran to their end
- ``fl:R:ticks``   HASH  a cron tick's scheduled key -> runs of that tick
- ``fl:R:callbacks`` HASH a fan-in's group id -> runs of its callback
- ``fl:R:runs``    HASH  ``"<job id> <agent>"`` -> bodies of that job that ended in that agent
- ``fl:R:callback_runs`` HASH ``"<group id> <agent>"`` -> callbacks of that group in that agent
- ``fl:R:busy``    HASH  agent -> handler bodies started and not yet ended in that agent (the
  harness times a worker fault from it, so the fault hits work in flight)

The agent is the worker process the harness started (``FAULTS_AGENT``, set by the harness and
inherited by a system's own child processes: a forked work horse, a pool, a Node process), so
a count can tell a run on a worker the fault hit from a run on a healthy one.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from urllib.parse import urlparse

AGENT = os.environ.get("FAULTS_AGENT") or "-"
BOTH = "redis.call('HINCRBY', KEYS[1], ARGV[1], 1) redis.call('HINCRBY', KEYS[2], ARGV[2], 1)"
END = BOTH + " redis.call('HINCRBY', KEYS[3], ARGV[3], -1)"  # and the agent's in-flight count


class Ledger:
    """Records and reads one run's ledger. Thread-safe; reconnects after a fork."""

    def __init__(self, url: str, run: str) -> None:
        parsed = urlparse(url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 6379
        self.password = parsed.password
        self.run = run
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._file = None
        self._pid = -1

    # -- records -------------------------------------------------------------------------

    def acked(self, job: int | str) -> None:
        self.call("SADD", self.key("acked"), str(job))

    def refused(self, job: int | str) -> None:
        self.call("SADD", self.key("refused"), str(job))

    def started(self, job: int | str) -> None:
        self.call("EVAL", BOTH, "2", self.key("started"), self.key("busy"), str(job), AGENT)

    def finished(self, job: int | str) -> None:
        ident = str(job)
        self.call("EVAL", END, "3", self.key("finished"), self.key("runs"), self.key("busy"),
                  ident, f"{ident} {AGENT}", AGENT)  # fmt: skip

    def tick(self, key: str) -> None:
        self.call("HINCRBY", self.key("ticks"), key, "1")

    def callback(self, group: int | str) -> None:
        self._both("callbacks", "callback_runs", str(group))

    def _both(self, counts: str, runs: str, ident: str) -> None:
        """Count a run and its agent in one command, so a kill cannot land between the two."""
        self.call("EVAL", BOTH, "2", self.key(counts), self.key(runs), ident, f"{ident} {AGENT}")

    # -- reads ---------------------------------------------------------------------------

    def members(self, what: str) -> set[str]:
        return {x.decode() for x in self.call("SMEMBERS", self.key(what))}

    def counts(self, what: str) -> dict[str, int]:
        flat = self.call("HGETALL", self.key(what))
        return {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat), 2)}

    def busy(self, agent: str) -> int:
        """Handler bodies started and not yet ended in ``agent``."""
        return int(self.call("HGET", self.key("busy"), agent) or 0)

    def agents(self, what: str = "runs") -> dict[str, set[str]]:
        """Job (or group) id -> the agents in which its body (callback) ran to its end."""
        out: dict[str, set[str]] = {}
        for field in self.counts(what):
            job, _, agent = field.partition(" ")
            out.setdefault(job, set()).add(agent)
        return out

    def key(self, what: str) -> str:
        return f"fl:{self.run}:{what}"

    def close(self) -> None:
        """Close the connection (the next call opens a new one)."""
        with self._lock:
            self._close()

    # -- the wire ------------------------------------------------------------------------

    def call(self, *args: str) -> object:
        with self._lock:
            for attempt in range(3):
                try:
                    self._connect()
                    return self._send(args)
                except OSError:
                    self._close()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def _connect(self) -> None:
        if self._sock is not None and self._pid == os.getpid():
            return
        self._sock = socket.create_connection((self.host, self.port), timeout=10)
        self._file = self._sock.makefile("rb")
        self._pid = os.getpid()
        if self.password:
            self._send(("AUTH", self.password))

    def _close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = self._file = None

    def _send(self, args: tuple[str, ...]) -> object:
        out = [f"*{len(args)}\r\n".encode()]
        for a in args:
            b = a.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        assert self._sock is not None
        self._sock.sendall(b"".join(out))
        return self._read()

    def _read(self) -> object:
        assert self._file is not None
        line = self._file.readline()
        if not line:
            raise ConnectionError("the ledger server closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self._file.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return [] if n < 0 else [self._read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")
