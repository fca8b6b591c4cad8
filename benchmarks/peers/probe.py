"""What every benchmark handler calls first: ``hit(sent)``.

Standard library only: it runs inside each peer's own virtual environment. A hit records two
floats, the handler's start and the time the producer stamped into the job (``0.0`` for jobs
without a stamp, ``-1.0`` for warm-up jobs), both on ``time.monotonic()``, which is one clock
for every process on the machine. Records go to ``$BENCH_PROBE_DIR/<pid>.rec``:

- memory mode (default): appended to a list (a single atomic step under the GIL) and flushed
  by a daemon thread every 20 ms, so a handler pays no system call;
- append mode (``BENCH_PROBE_APPEND=1``): one ``write`` per hit, for peers that run each job in
  a short-lived forked child (rq's work horse) that never lives to see a flush.

The harness reads the files while the workers run; it never needs the workers to exit cleanly.
"""

from __future__ import annotations

import os
import struct
import threading
import time

RECORD = struct.Struct("dd")
FLUSH_S = 0.02


class Probe:
    def __init__(self) -> None:
        self.pid = -1
        self.fd = -1
        self.records: list[tuple[float, float]] = []
        self.written = 0
        self.append = os.environ.get("BENCH_PROBE_APPEND") == "1"
        self.lock = threading.Lock()

    def _open(self) -> None:
        with self.lock:
            if self.pid == os.getpid():
                return
            directory = os.environ.get("BENCH_PROBE_DIR")
            if not directory:
                raise RuntimeError("BENCH_PROBE_DIR is not set")
            path = os.path.join(directory, f"{os.getpid()}.rec")
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self.records, self.written = [], 0
            self.pid = os.getpid()
            if not self.append:
                threading.Thread(target=self._flush_forever, daemon=True).start()

    def hit(self, sent: float) -> None:
        now = time.monotonic()
        if self.pid != os.getpid():
            self._open()
        if self.append:
            os.write(self.fd, RECORD.pack(now, sent))
        else:
            self.records.append((now, sent))

    def _flush_forever(self) -> None:
        while True:
            time.sleep(FLUSH_S)
            self.flush()

    def flush(self) -> None:
        end = len(self.records)
        if end > self.written:
            chunk = self.records[self.written : end]
            os.write(self.fd, b"".join(RECORD.pack(a, b) for a, b in chunk))
            self.written = end


PROBE = Probe()


def hit(sent: float = 0.0) -> None:
    PROBE.hit(sent)


def read_records(directory: str) -> list[tuple[float, float]]:
    """Every complete record written so far under ``directory``, in no particular order."""
    out: list[tuple[float, float]] = []
    for name in os.listdir(directory):
        if not name.endswith(".rec"):
            continue
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        usable = len(data) - len(data) % RECORD.size
        out.extend(RECORD.iter_unpack(data[:usable]))
    return out
