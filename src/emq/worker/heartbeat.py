"""The lease heartbeat: a dedicated thread with its own sync connection.

Why a thread and not a task on the event loop: an async handler that blocks the loop, or a
flood of callbacks, would delay a loop task; the thread does not depend on the loop at all.
What still binds it is the GIL: the interpreter hands the GIL to a waiting thread every
``sys.getswitchinterval()`` (5 ms) while Python code runs, so a pure-Python busy handler
delays a beat by milliseconds; but C code that holds the GIL without releasing it (a long
``re`` match, ``sum(range(10**9))``, many C extensions) stops every thread of the process until
it returns. The bound, measured and documented in ``docs/worker.md``: a beat is late by at
most the longest GIL hold in the process plus a few switch intervals, and a lease lapses only
if that exceeds ``lease_ms - heartbeat_ms``. Run GIL-holding code in another process.

Each beat extends every held lease of a queue in one ``extend`` call (chunks of 1,000). A
lease the server refuses (``lost``, or ``gone``: its row was removed) is reported once through
``on_lost`` and no longer renewed, unless its ack is already on its way (then the ack's answer
rules). A lease whose job was cancelled (``Queue.cancel``: extend answers ``cancelled`` and
still extends it) is reported once through ``on_cancel`` with the reason read from the row,
and renewed on until its ack lands; a worker cut off from the server learns it once a beat
goes through again (or its lease lapses and the sweep ends the job, cancelled).

At maxmemory: ``extend`` is one of the scripts the server still runs (``lua/extend.lua``,
``-- Flags: allow-oom``; it then appends no event and adds nothing), so a live worker's
leases outlast an out-of-memory episode of any length, while its claims and acks are
refused and re-sent (docs/guarantees.md, "At maxmemory").

Threads: the set of leases renewed (:attr:`Heartbeat.held`) is this object's own, changed
only under its lock; a lease's phase (:mod:`.phase`) is the event loop's, and the thread only
reads it: past :data:`~.phase.UNDECIDED`, an outcome is on its way and its answer rules.

The thread cannot die silently: a server error (unreachable, any refusal) is logged once per
episode and the beat retried with backoff; any other exception is handed to
``on_crash`` (the worker then stops claiming and its run raises) before the thread ends.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable

from ..errors import UnsafeServer
from ..model.records import Answer
from ..queue._sync.queue import Queue
from .connect import SERVER_ERRORS, Outage
from .phase import READY, UNDECIDED, Phased

CHUNK = 1_000


class Lease(Phased):
    """A lease this worker holds on job ``id`` of ``queue``, fenced by ``token``, and the
    :class:`~.phase.Phase` of that job (``READY`` when made). Equal only to itself: one id
    can be held twice (a lease lost, and the job claimed again)."""

    __slots__ = ("id", "queue", "token")

    def __init__(self, queue: str, id: str, token: int) -> None:
        self.queue = queue
        self.id = id
        self.token = token
        self.phase = READY

    def __repr__(self) -> str:
        return f"Lease({self.queue}/{self.id} token={self.token} {self.phase})"


class Heartbeat:
    """Renews held leases every ``interval_s`` from its own thread."""

    def __init__(
        self,
        queues: dict[str, Queue],
        *,
        lease_ms: int,
        interval_s: float,
        on_lost: Callable[[Lease], None],
        on_crash: Callable[[BaseException], None],
        outage: Outage,
        log: logging.Logger,
        on_cancel: Callable[[Lease, str], None] | None = None,
    ) -> None:
        self._queues = queues
        self._lease_ms = lease_ms
        self._interval = interval_s
        self._on_lost = on_lost
        self._on_crash = on_crash
        self._on_cancel = on_cancel
        self._told: set[Lease] = set()  # leases on_cancel was called for (until dropped)
        self._outage = outage
        self._log = log
        self._leases: set[Lease] = set()  # by identity: one id can be held twice
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="emq-heartbeat", daemon=True)
        self.beats = 0
        self.max_late_s = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop beating (leases still held will lapse) and join the thread."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def held(self) -> Collection[Lease]:
        """The leases renewed now: added by :meth:`add_many`, gone once dropped or refused.
        Read-only for others; a membership test needs no lock (one set lookup is atomic
        under the GIL), and is how the loop learns of a refusal before ``on_lost`` runs."""
        return self._leases

    def add_many(self, leases: Iterable[Lease]) -> None:
        with self._lock:
            self._leases.update(leases)

    def drop(self, lease: Lease) -> None:
        with self._lock:
            self._leases.discard(lease)
            self._told.discard(lease)

    def drop_many(self, leases: Collection[Lease]) -> None:
        with self._lock:
            self._leases.difference_update(leases)
            if self._told:
                self._told.difference_update(leases)

    def beat_now(self) -> None:
        """Ask for a beat as soon as the thread can run (never blocks)."""
        self._wake.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._check()
            self._loop()
        except BaseException as exc:  # a bug: never end silently
            self._on_crash(exc)

    def _check(self) -> None:
        """Pass each queue's server check (:mod:`emq.server.durability`) at start, as the worker's
        other connections did: checked first in the middle of a failover, this connection
        would have every extend refused while the promoted primary has too few replicas for
        ``durability="replica"`` (``ReplicasMissing``), and the leases would lapse. A server
        away, refusing or unsafe now is checked again at the first beat, as before."""
        for queue in self._queues.values():
            with contextlib.suppress(*SERVER_ERRORS, UnsafeServer):
                queue.check_server()

    def _loop(self) -> None:
        due = time.monotonic() + self._interval
        while not self._stop.is_set():
            woken = self._wake.wait(max(0.0, due - time.monotonic()))
            if self._stop.is_set():
                return
            now = time.monotonic()
            if not woken:
                self.max_late_s = max(self.max_late_s, now - due)
            self._wake.clear()
            try:
                self.beat()
            except SERVER_ERRORS as exc:
                # while the server is away or refusing, try again sooner than a full period
                due = now + min(self._interval, max(0.05, self._outage.failed(exc, "heartbeat")))
                continue
            self._outage.ok("heartbeat")
            due = now + self._interval

    def beat(self) -> None:
        """Extend every held lease once; a server error is raised to the caller."""
        with self._lock:
            snapshot = list(self._leases)
        by_queue: dict[str, list[Lease]] = {}
        for lease in snapshot:
            by_queue.setdefault(lease.queue, []).append(lease)
        for name, leases in by_queue.items():
            for start in range(0, len(leases), CHUNK):
                chunk = leases[start : start + CHUNK]
                deadlines = self._queues[name].extend_many(
                    [(x.id, x.token) for x in chunk], self._lease_ms
                )
                for lease, deadline in zip(chunk, deadlines, strict=True):
                    if deadline in (Answer.LOST, Answer.GONE):
                        self._refused(lease)
                    elif deadline == Answer.CANCELLED:
                        self._cancelled(self._queues[name], lease)
        self.beats += 1

    def _cancelled(self, q: Queue, lease: Lease) -> None:
        """Tell ``on_cancel`` once per lease, with the reason on the row (one read, only for
        a cancelled job; a server error is raised and the next beat tries again)."""
        if self._on_cancel is None or lease in self._told or lease.phase not in UNDECIDED:
            return  # an outcome is on its way: fail.lua (or the too-late complete) rules
        reason = q.client.hget(q.core.keys.job(lease.id), "cancel")
        with self._lock:
            if lease not in self._leases or lease.phase not in UNDECIDED:
                return  # dropped, or decided meanwhile
            self._told.add(lease)
        self._on_cancel(lease, str(reason or ""))  # decode_responses: a str already

    def _refused(self, lease: Lease) -> None:
        with self._lock:
            if lease not in self._leases or lease.phase not in UNDECIDED:
                return  # dropped, or finished meanwhile: the ack's own reply is authoritative
            self._leases.discard(lease)
            self._told.discard(lease)
        self._on_lost(lease)
