"""A local primary with replicas under Sentinel, all embedded Valkey: for tests, and to try a
failover on one machine.

``EmbeddedSentinel(replicas=2).start()`` runs one primary, ``replicas`` replicas following it
and ``sentinels`` sentinels (3 by default, quorum 2) watching it, every process on loopback
with one shared password (the data nodes' ``requirepass`` and ``masterauth``, and the
sentinels' own). ``start`` returns only once every replica's link is up and every sentinel
knows the replicas and the other sentinels, so a failover can be agreed on. It returns the
``redis+sentinel://`` URL (:mod:`emq.server.sentinel`).

A sentinel calls the primary down after ``down_after_ms`` (2,000 ms) of silence: a sentinel
pings every second, and with 1,000 ms one of them now and then called a freshly promoted
primary down too (a second failover). With ``failover_timeout_ms`` 3,000 a replica is promoted
about 3 s after a primary's death. :meth:`EmbeddedSentinel.kill_primary` SIGKILLs the current
primary (or freezes it with SIGSTOP, :meth:`~EmbeddedSentinel.resume` thaws it), for fault
tests.

Layout under the data directory (default ``./.emq/sentinel``)::

    sentinel.json  {service, replicas, sentinels, nodes: [port...], watchers: [port...]}
    password       the one password (0600)
    node-<i>/      data node i (an EmbeddedServer); node 0 is the first primary
    sentinel-<j>/  sentinel j: sentinel.conf (0600, rewritten by the sentinel with what it
                   learns: the current primary, the replicas, the other sentinels), pid, log

A stopped set restarts with the same ports; the primary is then the one the sentinels last
named, and the other nodes start as its replicas.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..errors import ServerError
from .standalone import (
    DEFAULT_DIR,
    START_TIMEOUT_S,
    EmbeddedServer,
    _alive,
    _write_private,
    free_port,
    make_private,
)

READY_TIMEOUT_S = 30.0
QUORUM = 2


def _free_ports(n: int, taken: set[int]) -> list[int]:
    """``n`` distinct free loopback ports, none of ``taken``."""
    out: list[int] = []
    for _ in range(50 * n):
        port = free_port()
        if port not in taken and port not in out:
            out.append(port)
        if len(out) == n:
            return out
    raise ServerError(f"found only {len(out)} of {n} free ports on 127.0.0.1")


class EmbeddedSentinel:
    """One primary, ``replicas`` replicas and ``sentinels`` sentinels under ``data_dir``,
    watched as ``service``."""

    def __init__(
        self,
        data_dir: Path | str = DEFAULT_DIR / "sentinel",
        *,
        service: str = "emq",
        replicas: int = 2,
        sentinels: int = 3,
        down_after_ms: int = 2000,
        failover_timeout_ms: int = 3000,
        binary: Path | str | None = None,
    ) -> None:
        if not (1 <= replicas <= 8 and QUORUM <= sentinels <= 7):
            raise ServerError(
                f"a local sentinel set takes 1-8 replicas and {QUORUM}-7 sentinels, got "
                f"{replicas} and {sentinels}"
            )
        if not service.replace("-", "").replace("_", "").isalnum():
            raise ServerError(f"service name must be letters, digits, - and _, got {service!r}")
        self.data_dir = Path(data_dir).absolute()
        self.service, self.replicas, self.sentinels = service, replicas, sentinels
        self.down_after_ms, self.failover_timeout_ms = down_after_ms, failover_timeout_ms
        self._binary = binary
        self.shape_file = self.data_dir / "sentinel.json"
        self.password_file = self.data_dir / "password"

    # -- layout ---------------------------------------------------------------------------

    def _shape(self) -> dict[str, object] | None:
        try:
            data = json.loads(self.shape_file.read_text())
            return data if isinstance(data, dict) else None
        except (OSError, ValueError):
            return None

    def _ports(self) -> tuple[list[int], list[int]]:
        """The data nodes' and the sentinels' ports, chosen at first start."""
        shape = self._shape()
        if shape is None:
            raise ServerError(f"no sentinel set in {self.data_dir}: start it first")
        nodes, watchers = shape["nodes"], shape["watchers"]
        assert isinstance(nodes, list) and isinstance(watchers, list)
        return [int(p) for p in nodes], [int(p) for p in watchers]

    def _password(self) -> str:
        node = EmbeddedServer(self.data_dir)  # reads and checks <dir>/password
        return node._password() or node._new_password()

    def node(self, i: int, config: tuple[str, ...] = ()) -> EmbeddedServer:
        return EmbeddedServer(self.data_dir / f"node-{i}", binary=self._binary, config=config)

    def _watcher_dir(self, j: int) -> Path:
        return self.data_dir / f"sentinel-{j}"

    # -- start and stop -------------------------------------------------------------------

    def start(self) -> str:
        """Start (or reuse) the set; returns its ``redis+sentinel://`` URL, password included
        (keep it out of logs)."""
        make_private(self.data_dir)
        shape = self._shape()
        if shape is not None and (shape.get("replicas"), shape.get("sentinels")) != (
            self.replicas,
            self.sentinels,
        ):
            raise ServerError(
                f"{self.data_dir} holds a set of {shape.get('replicas')} replicas and "
                f"{shape.get('sentinels')} sentinels; stop it and remove the directory to make "
                "another shape"
            )
        if shape is not None and shape.get("service") != self.service:
            self.service = str(shape.get("service"))  # the name it was made with
        password = self._password()
        if shape is None:
            ports = _free_ports(1 + self.replicas + self.sentinels, set())
            shape = {
                "service": self.service,
                "replicas": self.replicas,
                "sentinels": self.sentinels,
                "nodes": ports[: 1 + self.replicas],
                "watchers": ports[1 + self.replicas :],
            }
            _write_private(self.shape_file, json.dumps(shape))
        nodes, watchers = self._ports()
        primary = self._last_primary(nodes, watchers)
        for i, port in enumerate(nodes):
            config: tuple[str, ...] = (f"masterauth {password}", "repl-diskless-sync-delay 0")
            if port != primary:
                config += (f"replicaof 127.0.0.1 {primary}",)
            node = self.node(i, config)
            make_private(node.data_dir)
            _write_private(node.password_file, password + "\n")
            node.port = port
            node.start()
        for j, port in enumerate(watchers):
            self._start_watcher(j, port, primary, password)
        self._wait_ready(nodes, watchers, password)
        return self.url()

    def _last_primary(self, nodes: list[int], watchers: list[int]) -> int:
        """The primary's port: the one a running sentinel names, else the one in a
        sentinel's config file (rewritten at each failover), else node 0's."""
        try:
            return self.primary_port()
        except ServerError:
            pass
        for j in range(len(watchers)):
            try:
                lines = (self._watcher_dir(j) / "sentinel.conf").read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                words = line.split()
                if words[:3] == ["sentinel", "monitor", self.service] and len(words) >= 5:
                    return int(words[4]) if int(words[4]) in nodes else nodes[0]
        return nodes[0]

    def _start_watcher(self, j: int, port: int, primary: int, password: str) -> None:
        where = self._watcher_dir(j)
        make_private(where)
        conf, pid_file = where / "sentinel.conf", where / "sentinel.pid"
        pid = _read_pid(pid_file)
        if pid and _alive(pid) and self._ask(port, password, "PING"):
            return
        if not conf.exists():
            s = self.service
            lines = [
                f"port {port}", "bind 127.0.0.1", "daemonize yes", f"dir {where}",
                f"pidfile {pid_file}", f"logfile {where / 'sentinel.log'}",
                f"requirepass {password}", f"sentinel sentinel-pass {password}",
                "sentinel resolve-hostnames no",
                f"sentinel monitor {s} 127.0.0.1 {primary} {QUORUM}",
                f"sentinel auth-pass {s} {password}",
                f"sentinel down-after-milliseconds {s} {self.down_after_ms}",
                f"sentinel failover-timeout {s} {self.failover_timeout_ms}",
                f"sentinel parallel-syncs {s} {self.replicas}",
            ]  # fmt: skip
            _write_private(conf, "".join(f"{line}\n" for line in lines))
        binary = self.node(0).binary
        try:  # the sentinel rewrites its config file: it must be a file, 0600 under umask 077
            subprocess.run([str(binary), str(conf), "--sentinel"], umask=0o077, check=True,
                           capture_output=True, timeout=START_TIMEOUT_S)  # fmt: skip
        except (OSError, subprocess.SubprocessError) as exc:
            raise ServerError(f"could not start sentinel {j}: {exc}; see {where}") from None

    def _wait_ready(self, nodes: list[int], watchers: list[int], password: str) -> None:
        others = len(watchers) - 1

        def ready() -> bool:
            for port in watchers:
                info = self._ask(port, password, "SENTINEL", "MASTER", self.service)
                if not isinstance(info, dict):  # redis-py reads the reply into a dict
                    return False
                if int(info.get("num-slaves", 0)) < len(nodes) - 1:
                    return False
                if int(info.get("num-other-sentinels", 0)) < others:
                    return False
                if "s_down" in str(info.get("flags", "")):
                    return False
            return all(
                self._ask(port, password, "ROLE") not in (None, [])
                and self._link_up(port, password)
                for port in nodes
            )

        self._until(ready, "every replica in sync and every sentinel knowing the others")

    def _link_up(self, port: int, password: str) -> bool:
        role = self._ask(port, password, "ROLE")
        if not isinstance(role, list) or not role:
            return False
        return role[0] == "master" or (len(role) >= 4 and role[3] == "connected")

    def stop(self) -> bool:
        """Stop every sentinel, then every data node (SIGTERM, SIGKILL after 10 s). False if
        none was running."""
        stopped = False
        for j in range(self.sentinels):
            pid_file = self._watcher_dir(j) / "sentinel.pid"
            pid = _read_pid(pid_file)
            if pid and _alive(pid):
                _end(pid)
                stopped = True
            pid_file.unlink(missing_ok=True)
        count = 1 + self.replicas
        shape = self._shape()
        if shape is not None and isinstance(shape.get("nodes"), list):
            count = len(shape["nodes"])  # type: ignore[arg-type]
        for i in range(count):
            stopped = self.node(i).stop() or stopped
        return stopped

    # -- reading the set ------------------------------------------------------------------

    def url(self) -> str:
        """The ``redis+sentinel://`` URL, password included (keep it out of logs)."""
        _, watchers = self._ports()
        pw = quote(self._password(), safe="")
        hosts = ",".join(f"127.0.0.1:{p}" for p in watchers)
        return f"redis+sentinel://:{pw}@{hosts}/{self.service}/0?sentinel_password={pw}"

    def primary_port(self) -> int:
        """The port of the primary the first answering sentinel names."""
        shape = self._shape()
        if shape is None:
            raise ServerError(f"no sentinel set in {self.data_dir}: start it first")
        _, watchers = self._ports()
        password = self._password()
        for port in watchers:
            addr = self._ask(port, password, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
            if isinstance(addr, list) and len(addr) == 2:
                return int(addr[1])
        raise ServerError(f"no sentinel of {self.data_dir} answers; is the set started?")

    def roles(self) -> dict[int, str]:
        """Each data node's port and its role now (``master``, ``slave`` or ``down``)."""
        nodes, _ = self._ports()
        password = self._password()
        out = {}
        for port in nodes:
            role = self._ask(port, password, "ROLE")
            out[port] = str(role[0]) if isinstance(role, list) and role else "down"
        return out

    def kill_primary(self, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to the current primary: SIGKILL (no shutdown, no AOF flush), or
        SIGSTOP to freeze it (then :meth:`resume`); returns its port."""
        port = self.primary_port()
        os.kill(self._pid(port), sig)
        return port

    def resume(self, port: int) -> None:
        """SIGCONT the node on ``port`` (frozen by ``kill_primary(signal.SIGSTOP)``): it comes
        back as the primary it was, until the sentinels make it a replica."""
        os.kill(self._pid(port), signal.SIGCONT)

    def _pid(self, port: int) -> int:
        nodes, _ = self._ports()
        pid = self.node(nodes.index(port))._state().get("pid")
        if not pid or not _alive(pid):
            raise ServerError(f"the node on port {port} is not running")
        return pid

    def _ask(self, port: int, password: str, *cmd: str) -> object:
        """One command to one process on ``port``; None if it does not answer."""
        client = redis.Redis(host="127.0.0.1", port=port, password=password,
                             socket_timeout=2, socket_connect_timeout=2,
                             retry=Retry(NoBackoff(), 0), decode_responses=True)  # fmt: skip
        try:
            reply: object = client.execute_command(*cmd)  # type: ignore[no-untyped-call]
            return reply
        except redis.RedisError:
            return None
        finally:
            client.close()

    def _until(self, cond: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if cond():
                return
            time.sleep(0.1)
        raise ServerError(
            f"the sentinel set in {self.data_dir} did not come up: waited "
            f"{READY_TIMEOUT_S:.0f} s for {what}; see node-*/server.log and sentinel-*/"
        )


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _end(pid: int) -> None:
    """SIGTERM ``pid``, SIGKILL it if it still runs after START_TIMEOUT_S."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + START_TIMEOUT_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
