"""``emq demo``: workers crash, freeze and die on a poison job, and nothing is lost.

A guided run on the embedded server (or ``--url``), in about 15 s, with no flags: enqueue a
few hundred jobs, run three worker processes (``emq worker``), SIGKILL one mid-job, SIGSTOP
another past its lease and resume it, and feed them a poison job that kills whichever worker
runs it. A live table shows jobs moving pending -> active -> completed, the stalls the sweep
recovers (once each), the poison job dead-lettered after ``max_stalled`` stalls, and the
frozen worker's stale lease refused. The summary checks that every job was completed or
dead-lettered, and that only the poison job was; the command exits 1 if anything was lost.

One disruption at a time, so that only the poison job stalls twice: a stall sends a job back
to the head of ``pending``, where the next worker to claim takes it, so a job that stalled
once is likely held by whichever worker the next disruption hits, and its second stall
dead-letters it (``max_stalled`` 2). So the freeze waits until the jobs the kill stalled have
ended, and the poison job comes once every other job has: the two workers it kills hold
nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..errors import JobNotFound, LeaseLost
from ..model.states import Location
from ..queue._sync.queue import Queue
from ..server.urls import redact_url
from .common import console, embedded_home, emit_json, line, resolve_url, say, url_option
from .exits import DONE, NO

JOBS = 300
WORKERS = 3
CONCURRENCY = 3
LEASE_MS = 1500
STALLED_MS = 500
MAX_STALLED = 2
KILL_AT, STOP_AT, CONT_AT = 1.5, 3.5, 7.0  # the poison comes once the other jobs ended
TIME_LIMIT = 50.0
CONT_GRACE_S = 20.0  # at most this long past CONT_AT, waiting for a sweep of its leases


def resize(payload: dict[str, Any]) -> None:
    """A demo job: pretend to resize an image for ``ms`` milliseconds."""
    time.sleep(payload["ms"] / 1000)


def poison(payload: Any) -> None:
    """The poison job: kills the worker process that runs it, every time."""
    os.kill(os.getpid(), signal.SIGKILL)


HANDLERS = {"resize": resize, "poison": poison}


@dataclass
class Slot:
    label: str
    proc: subprocess.Popen[bytes]
    log: Path
    state: str = "running"
    read: int = 0
    started: bool = False  # its log says it is up (claiming), not still importing
    lease_lost: list[dict[str, Any]] = field(default_factory=list)


class Fleet:
    """Worker processes, respawned when one dies (as a supervisor would), and the story
    their structured logs tell."""

    def __init__(self, url: str, queue: str, tmp: Path) -> None:
        self.url, self.queue, self.tmp = url, queue, tmp
        self.slots: list[Slot] = []
        self.story: list[str] = []
        self.t0 = time.monotonic()
        self.recovered: list[str] = []
        self.dead: list[str] = []
        self.exits: list[int] = []

    def now(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        line = f"{self.now():5.1f}s  {text}"
        self.story.append(line)
        if not console.is_terminal:
            say(line)

    def spawn(self) -> Slot:
        label = f"w{len(self.slots) + 1}"
        log = self.tmp / f"{label}.log"
        args = [sys.executable, "-c", "from emq.cli.main import main; main()", "worker",
                "emq.cli.demo:HANDLERS", "-q", self.queue,
                "--concurrency", str(CONCURRENCY), "--lease-ms", str(LEASE_MS),
                "--stalled-interval-ms", str(STALLED_MS),
                "--max-stalled", str(MAX_STALLED)]  # fmt: skip
        env = {**os.environ, "EMQ_URL": self.url}  # not --url: any local user can read argv
        with log.open("wb") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=env)
        slot = Slot(label, proc, log)
        self.slots.append(slot)
        return slot

    def alive(self) -> list[Slot]:
        return [s for s in self.slots if s.state in ("running", "stopped", "resumed")]

    def wait_started(self, limit_s: float = 60.0) -> None:
        """Wait until every live worker logged that it is up (a busy machine may take
        seconds to import): one SIGTERM'd while it imports would die of it, not stop."""
        deadline = time.monotonic() + limit_s
        while not all(s.started for s in self.alive()) and time.monotonic() < deadline:
            for slot in self.slots:
                self._read(slot)
            time.sleep(0.05)

    def supervise(self) -> None:
        for slot in self.alive():
            if slot.proc.poll() is not None:
                slot.state = "killed"
                self.say(f"{slot.label} died (the poison job killed it); its leases will lapse")
                new = self.spawn()
                self.say(f"supervisor started {new.label} in its place")
        for slot in self.slots:
            self._read(slot)

    def _read(self, slot: Slot) -> None:
        try:
            with slot.log.open("rb") as f:
                f.seek(slot.read)
                chunk = f.read()
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1
        slot.read += end
        for raw in chunk[:end].splitlines():
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            event, job = rec.get("event"), rec.get("job")
            if event == "started":
                slot.started = True
            elif event == "recovered":
                self.recovered.append(job)
                self.say(f"{slot.label}'s sweep found {job}'s lease expired: back to pending")
            elif event == "stalled_dead":
                self.dead.append(job)
                self.say(f"{slot.label}'s sweep dead-lettered {job}: stalled {MAX_STALLED} times")
            elif event == "lease_lost":
                slot.lease_lost.append(rec)
                token, via = rec.get("token"), rec.get("via")
                self.say(f"server refused {slot.label}'s stale lease on {job} "
                         f"(token {token}, via {via}): result discarded")  # fmt: skip

    def stop_all(self) -> None:
        for slot in self.alive():
            slot.proc.send_signal(signal.SIGTERM)
        for slot in self.alive():
            try:
                self.exits.append(slot.proc.wait(20))
                slot.state = "exited"
            except subprocess.TimeoutExpired:
                slot.proc.kill()
                self.exits.append(-9)
        for slot in self.slots:
            self._read(slot)


def _view(fleet: Fleet, counts: dict[str, int], total: int) -> Group:
    cols = ["pending", "active", "schedule", "dead", "completed", "recovered"]
    jobs = Table(title=f"queue: {total} jobs", expand=False)
    for c in cols:
        jobs.add_column(c, justify="right")
    jobs.add_row(*(str(counts.get(c, 0)) for c in cols))
    workers = Table(title="workers")
    for c in ("worker", "pid", "state", "stale leases refused"):
        workers.add_column(c)
    colour = {"running": "green", "stopped": "yellow", "resumed": "cyan", "killed": "red"}
    for s in fleet.slots:
        state = Text(s.state, style=colour.get(s.state, "white"))
        workers.add_row(s.label, str(s.proc.pid), state, str(len(s.lease_lost)))
    story = Table(title="what happened", show_header=False, box=None)
    story.add_column()
    for said in fleet.story[-12:]:
        story.add_row(Text(said))
    return Group(jobs, workers, story)


def run_demo(url: str, name: str = "demo") -> dict[str, Any]:
    """Run the story; returns the summary (``ok`` is True when every check passed)."""
    q = Queue.from_url(url, name)
    q.obliterate(force=True)
    console.rule(line(("emq demo", "bold"), ": workers crash, freeze and die; no job is lost"))
    say(f"server {redact_url(url)}, queue ", (name, "bold"), f", lease {LEASE_MS} ms, "
        f"sweep every {STALLED_MS} ms, max_stalled {MAX_STALLED}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="emq-demo-") as tmp:
        fleet = Fleet(url, name, Path(tmp))
        q.enqueue_many([("resize", {"image": i, "ms": 100 + (i * 37) % 200}) for i in range(JOBS)])
        fleet.say(f"enqueued {JOBS} resize jobs")
        for _ in range(WORKERS):
            fleet.spawn()
        fleet.wait_started()  # the story's clock starts once they are up, however busy the
        fleet.t0 = time.monotonic()
        fleet.say(f"started {WORKERS} workers ({CONCURRENCY} jobs at a time each)")  # machine
        poison_id, total, killed, frozen = "", JOBS, None, None
        watch = Stalls(q)
        stopped_at = resumed_at = 0.0
        counts = q.counts()
        with Live(_view(fleet, counts, total), console=console, refresh_per_second=8,
                  auto_refresh=console.is_terminal) as live:  # fmt: skip
            while True:
                t = fleet.now()
                if killed is None and t >= KILL_AT:
                    killed = fleet.alive()[0]
                    killed.proc.kill()
                    killed.state = "killed"
                    fleet.say(f"SIGKILL {killed.label} mid-job: its leases will lapse")
                    fleet.say(f"supervisor started {fleet.spawn().label} in its place")
                watch.read()
                ended = counts["completed"] + counts["dead"] == JOBS  # every resize job
                if not poison_id and resumed_at and ended:
                    poison_id = q.enqueue("poison", None, priority=-1)
                    total += 1
                    fleet.say(f"enqueued poison job {poison_id}: it kills any worker")
                up = [s for s in fleet.alive() if s.state == "running" and s.started]
                if (frozen is None and t >= STOP_AT and up and (watch.jobs or t >= CONT_AT)
                        and watch.settled()):  # once the kill's stalled jobs ended  # fmt: skip
                    frozen, stopped_at = up[0], t
                    os.kill(frozen.proc.pid, signal.SIGSTOP)
                    frozen.state = "stopped"
                    fleet.say(f"SIGSTOP {frozen.label}: frozen past its {LEASE_MS} ms lease")
                wake_at = stopped_at + CONT_AT - STOP_AT  # frozen well past its lease
                if (frozen is not None and frozen.state == "stopped" and t >= wake_at
                        and (not _lapsed(q) or t >= wake_at + CONT_GRACE_S)):  # fmt: skip
                    resumed_at = t
                    os.kill(frozen.proc.pid, signal.SIGCONT)
                    frozen.state = "resumed"
                    fleet.say(f"SIGCONT {frozen.label}: it wakes up and tries to finish")
                fleet.supervise()
                counts = q.counts()
                live.update(_view(fleet, counts, total))
                settled = counts["completed"] + counts["dead"] == total and poison_id
                if (settled and resumed_at and t >= resumed_at + 1.0) or t > TIME_LIMIT:
                    break
                time.sleep(0.1)
            fleet.wait_started()  # the poison's last victim's replacement too
            fleet.say("SIGTERM to every worker: graceful stop")
            fleet.stop_all()
            counts = q.counts()
            live.update(_view(fleet, counts, total))
        summary = _summary(q, fleet, counts, total, poison_id, frozen)
    q.close()
    return summary


class Stalls:
    """The jobs that stalled so far, read from the queue's event stream (the server's word:
    a worker's log can miss a report), and whether every one of them has ended."""

    def __init__(self, q: Queue) -> None:
        self.q, self.after, self.jobs = q, "0-0", set[str]()

    def read(self) -> None:
        for e in self.q.events(self.after):
            self.after = e.id
            if e.event == "stalled" and e.job is not None:
                self.jobs.add(e.job)

    def settled(self) -> bool:
        """No job that stalled is still live (its row is gone once it completed), and no
        expired lease waits for a sweep: the next disruption hits only fresh jobs."""
        if _lapsed(self.q):
            return False
        ended = {j for j in self.jobs if (row := self.q.job(j)) is None or row.state == "dead"}
        return ended == self.jobs


def _lapsed(q: Queue) -> int:
    """Leases past their deadline (server clock) that no sweep has recovered yet. The frozen
    worker wakes only once the live ones swept its leases, so that what it meets on waking
    (its stale lease refused) does not depend on how busy the machine is."""
    seconds, micros = q.client.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    return int(q.client.zcount(q.core.keys.active, "-inf", now_ms))


def _recovered_once(q: Queue, recovered: int) -> bool:
    """The server's recovery count agrees with its own ``stalled`` events, one per recovery,
    and each job's stalls are numbered 1, 2, ... with none counted twice. A worker's log can
    miss a report it was about to write when it is SIGKILLed (the poison job, the demo's own
    kill) just after its sweep ran, so the workers' reports may fall short of the server's."""
    stalls: dict[str, list[int]] = {}
    for e in q.events():
        if e.event == "stalled" and e.job is not None:
            stalls.setdefault(e.job, []).append(int(e.fields.get("stalled", 0)))
    numbered = all(sorted(n) == list(range(1, len(n) + 1)) for n in stalls.values())
    return numbered and sum(len(n) for n in stalls.values()) == recovered


def _summary(q: Queue, fleet: Fleet, counts: dict[str, int], total: int, poison_id: str,
             frozen: Slot | None) -> dict[str, Any]:  # fmt: skip
    places: dict[str, int] = {}
    for loc in Location:
        for job_id in q.client.zrange(q.core.keys.location(loc.value), 0, -1):
            places[str(job_id)] = places.get(str(job_id), 0) + 1
    for job_id in q.client.hkeys(q.core.keys.packed):  # waiting without a row: pending too
        places[str(job_id)] = places.get(str(job_id), 0) + 1
    row = q.job(poison_id) if poison_id else None
    stale = frozen.lease_lost[0] if frozen is not None and frozen.lease_lost else None
    refused = False
    if stale is not None:
        try:
            q.complete(stale["job"], int(stale["token"]))
        except (LeaseLost, JobNotFound):  # the lease was recovered, or the job since completed
            refused = True
    checks = {
        f"nothing lost: completed {counts['completed']} + dead {counts['dead']} == "
        f"enqueued {total}": counts["completed"] + counts["dead"] == total
        and counts["pending"] + counts["active"] + counts["schedule"] == 0,
        "no job in two places": all(n == 1 for n in places.values()),
        f"each expired lease recovered once ({counts['recovered']} recoveries, "
        f"{len(fleet.recovered)} reported by sweeps)": _recovered_once(q, counts["recovered"])
        and 1 <= len(fleet.recovered) <= counts["recovered"],
        f"poison job dead after exactly {MAX_STALLED} stalls, last_error=stalled": row is not None
        and (row.state, row.stalled, row.last_error) == ("dead", MAX_STALLED, "stalled"),
        "the frozen worker's stale lease was refused, and so is a completion with its token": stale
        is not None
        and refused,
        "every worker left stopped cleanly on SIGTERM (exit 0)": all(c == 0 for c in fleet.exits),
        "only the poison job was dead-lettered": [j.id for j in q.jobs("dead", 0, 1000)]
        == [poison_id],
    }
    console.print()
    console.rule("summary")
    for label, good in checks.items():
        say(("ok  ", "green") if good else ("FAIL", "red"), " ", label)
    others = [j for j in q.jobs("dead", 0, 1000) if j.id != poison_id]
    if others:
        say(
            f"note {len(others)} other job(s) dead-lettered with last_error="
            f"{others[0].last_error}: each was held by two of the workers that were killed or "
            f"frozen, so it stalled {MAX_STALLED} times (max_stalled). They are in dead, not "
            "lost: `emq dead demo redrive` puts them back."
        )
    return {
        "ok": all(checks.values()),
        "checks": [{"check": label, "ok": good} for label, good in checks.items()],
        "counts": counts,
        "other_dead": [j.id for j in others],
    }


@click.command()
@url_option
@click.option("--json", "as_json", is_flag=True, help="Print only a final JSON summary.")
def demo(url: str | None, as_json: bool) -> None:
    """Crash, freeze and poison workers on the embedded server (or --url); lose nothing.

    Exits 0 when nothing was lost, 1 otherwise. The embedded server is left running (the
    queue `demo` stays there to look at); `emq server stop` stops it."""
    home = embedded_home(url)
    resolved = resolve_url(url)
    console.quiet = as_json
    try:
        summary = run_demo(resolved)
    finally:
        console.quiet = False
    server = {"url": redact_url(resolved), "embedded": home is not None, "left_running": True}
    if as_json:
        emit_json(summary | {"server": server})
    elif home is not None:
        say(
            f"the embedded server is still running at {redact_url(resolved)} (data in {home}), "
            "with the demo queue to look at (`emq stats demo`); stop it: `emq server stop`"
        )
    sys.exit(DONE if summary["ok"] else NO)


def register(group: click.Group) -> None:
    group.add_command(demo)
