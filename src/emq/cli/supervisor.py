"""``emq worker --processes N``: N worker processes under one supervisor.

Each child is a plain ``emq worker`` process with the supervisor's arguments minus
``--processes`` (the server URL, resolved once by the supervisor, goes in ``EMQ_URL``, off
the process list). The supervisor runs no handler and holds no lease; what it guarantees:

- **A child that exits unexpectedly is restarted**: a crash, a signal (SIGKILL, the OOM
  killer) or any nonzero exit. The delay doubles from ``RESTART_MIN_S`` up to
  ``RESTART_MAX_S`` per slot, and is reset once a child has run ``RESTART_RESET_S``. Every
  exit is logged (``child_exited``: pid, exit code or signal, how long it ran, the delay
  before its restart). The jobs a dead child held are recovered by the sweep, as for any
  worker that dies (``docs/guarantees.md``).
- **A child that exits 0 on its own is not restarted** (a ``--burst`` run that found nothing
  left, or a child stopped by hand); once every child has, the supervisor exits 0.
- **SIGTERM or SIGINT stops every child gracefully**: it is passed on to every child as
  SIGTERM (a worker treats both alike), so each drains as a single worker does; a second
  signal is passed on again, so each stops at once. The supervisor waits for every child,
  then exits 0 if every child stopped cleanly, 130 after a second signal, else 2
  (docs/cli.md, Exit codes).
- **No child outlives it unnoticed**: children run in their own process group (a Ctrl-C at
  the terminal reaches the supervisor alone, which passes it on once), and on Linux each
  child gets SIGTERM from the kernel if the supervisor itself dies (SIGKILL included).

The loop never spins: it sleeps in ``select`` on a wake-up pipe that every SIGCHLD, SIGTERM
and SIGINT writes to, for at most ``POLL_S`` (the next restart, or a safety net).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

from ..worker.log import event
from .exits import DONE, ERROR, INTERRUPTED

MAX_PROCESSES = 256
RESTART_MIN_S = 0.5
RESTART_MAX_S = 30.0
RESTART_RESET_S = 60.0
POLL_S = 1.0
CLI = "from emq.cli.main import main; main()"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
PR_SET_PDEATHSIG = 1


def child_command(args: Sequence[str]) -> list[str]:
    """The argv of one child: this interpreter running the ``emq`` command with ``args``."""
    return [sys.executable, "-c", CLI, *args]


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` (Linux): the kernel sends the child SIGTERM when the supervisor dies;
    a child forked just after the supervisor died stops at once. None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


@dataclass
class Slot:
    """One of the N places a child runs in; its restart delay is its own."""

    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restarts: int = 0
    delay_s: float = RESTART_MIN_S
    due: float | None = None  # when to (re)start it; None: running, or retired
    done: bool = False  # exited 0 on its own: not restarted


def describe(code: int) -> dict[str, object]:
    """``code`` (a Popen returncode) as log fields: ``code`` or ``signal``."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return {"code": None, "signal": signal.Signals(-code).name}
        return {"code": None, "signal": -code}
    return {"code": code, "signal": None}


class Supervisor:
    """Runs ``processes`` children of ``argv`` (with ``env``) until they are done or a
    signal stops them; :meth:`run` returns the exit code."""

    def __init__(
        self,
        argv: Sequence[str],
        processes: int,
        env: Mapping[str, str],
        log: logging.Logger | None = None,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.log = log or logging.getLogger("emq.supervisor")
        self.slots = [Slot(i, due=0.0) for i in range(processes)]
        self.signals: list[int] = []  # received, not yet passed on
        self.stops = 0  # stop signals passed on so far
        self.failed = False  # a child ended badly after the stop began

    # -- the loop ---------------------------------------------------------------------

    def run(self) -> int:
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        old_fd = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        handlers = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        handlers[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, lambda *_: None)
        event(self.log, "info", f"supervising {len(self.slots)} worker processes",
              "supervising", processes=len(self.slots), argv=self.argv)  # fmt: skip
        try:
            while self._turn():
                select.select([rfd], [], [], self._timeout())
                with contextlib.suppress(BlockingIOError):
                    while os.read(rfd, 512):
                        pass
        finally:
            for sig, old in handlers.items():
                signal.signal(sig, old)
            signal.set_wakeup_fd(old_fd)
            os.close(rfd)
            os.close(wfd)
        code = INTERRUPTED if self.stops > 1 else (ERROR if self.failed else DONE)
        event(self.log, "info", "supervisor stopped", "supervisor_stopped", code=code,
              restarts=sum(s.restarts for s in self.slots))  # fmt: skip
        return code

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)

    def _turn(self) -> bool:
        """Pass on signals, reap children, start the due ones; False once it is over."""
        while self.signals:
            self._stop(self.signals.pop(0))
        now = time.monotonic()
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is not None:
                self._exited(slot, slot.proc.returncode, now)
        if self.stops:
            return any(s.proc is not None for s in self.slots)
        for slot in self.slots:
            if slot.due is not None and slot.due <= now:
                self._start(slot)
        return not all(s.done for s in self.slots)

    def _timeout(self) -> float:
        dues = [s.due for s in self.slots if s.due is not None and not self.stops]
        if not dues:
            return POLL_S
        return min(POLL_S, max(0.0, min(dues) - time.monotonic()))

    # -- children ---------------------------------------------------------------------

    def _start(self, slot: Slot) -> None:
        try:
            slot.proc = subprocess.Popen(
                child_command(self.argv), env=self.env, stdin=subprocess.DEVNULL,
                process_group=0, preexec_fn=_die_with_parent(os.getpid()),
            )  # fmt: skip
        except OSError as exc:  # out of processes or memory: try again after the delay
            slot.due = time.monotonic() + self._next_delay(slot, 0.0)
            event(self.log, "error", f"could not start a worker process: {exc}",
                  "child_failed", slot=slot.index, error=str(exc))  # fmt: skip
            return
        slot.started, slot.due = time.monotonic(), None
        event(self.log, "info", f"worker process {slot.proc.pid} started", "child_started",
              child=slot.proc.pid, slot=slot.index, restarts=slot.restarts)  # fmt: skip

    def _exited(self, slot: Slot, code: int, now: float) -> None:
        assert slot.proc is not None
        pid, ran = slot.proc.pid, now - slot.started
        slot.proc = None
        fields = {"child": pid, "slot": slot.index, **describe(code), "ran_ms": round(ran * 1000)}
        if self.stops:  # stopping: SIGTERM before the child's handlers were up counts as clean
            clean = code in (0, -signal.SIGTERM) or (code == INTERRUPTED and self.stops > 1)
            self.failed |= not clean
            level = "info" if clean else "warning"
            event(self.log, level, f"worker process {pid} exited", "child_exited",
                  **fields, restart_in_ms=None)  # fmt: skip
            return
        if code == 0:
            slot.done = True
            event(self.log, "info", f"worker process {pid} finished (exit 0); not restarted",
                  "child_exited", **fields, restart_in_ms=None)  # fmt: skip
            return
        delay = self._next_delay(slot, ran)
        slot.due = now + delay
        slot.restarts += 1
        event(self.log, "warning", f"worker process {pid} exited unexpectedly; restarting",
              "child_exited", **fields, restart_in_ms=round(delay * 1000))  # fmt: skip

    @staticmethod
    def _next_delay(slot: Slot, ran: float) -> float:
        """The slot's restart delay, then doubled for next time (reset after a good run)."""
        if ran >= RESTART_RESET_S:
            slot.delay_s = RESTART_MIN_S
        delay = slot.delay_s
        slot.delay_s = min(RESTART_MAX_S, delay * 2)
        return delay

    def _stop(self, signum: int) -> None:
        """Pass a stop signal on to every child as SIGTERM: the first drains, the second
        stops at once. Restarts not yet due are dropped."""
        self.stops += 1
        name = signal.Signals(signum).name
        live = [s.proc for s in self.slots if s.proc is not None]
        for slot in self.slots:
            slot.due = None
        if self.stops == 1:
            event(self.log, "info", "stopping every worker process gracefully",
                  "supervisor_stopping", signal=name, children=[p.pid for p in live])  # fmt: skip
        else:
            event(self.log, "warning", "second signal: every worker process stops now",
                  "supervisor_forced", signal=name, children=[p.pid for p in live])  # fmt: skip
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
