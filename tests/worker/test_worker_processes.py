"""``emq worker --processes N``: one supervisor, N worker processes, as real processes.

The handlers (``tests.support.worker_handlers``) record every run on the server; the supervisor's
and the children's JSON log lines go to one file per test. Waits poll a condition with a
deadline that only bounds a hang, never a speed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import Queue

from ..support.helpers import log_records
from ..support.worker_handlers import open_gate, runs_key
from .test_worker_procs import CLI, HANG, wait_for

TESTS = Path(__file__).parents[1]  # tests/
FAST = ["--lease-ms", "1500", "--stalled-interval-ms", "300"]


class Supervised:
    """One ``emq worker --processes N`` run, its log, and a kill of everything at teardown."""

    def __init__(self, url: str, queue: str, tmp: Path) -> None:
        self.url, self.queue, self.log = url, queue, tmp / "supervisor.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ, EMQ_URL=self.url)
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent), env.get("PYTHONPATH", "")])
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CLI, "worker", "tests.support.worker_handlers:handlers",
                 "-q", self.queue, *args],
                env=env, stdout=out, stderr=out, cwd=self.log.parent,
            )  # fmt: skip
        return self.proc

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        return log_records(self.log, name)

    def children(self) -> list[int]:
        """Every child pid the supervisor logged as started, in order."""
        return [e["child"] for e in self.events("child_started")]

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(HANG)
        for pid in self.children():  # the children get SIGTERM from the kernel; be sure
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def sup(url: str, qname: str, tmp_path: Path) -> Iterator[Supervised]:
    s = Supervised(url, qname, tmp_path)
    yield s
    s.close()


def alive(pid: int) -> bool:
    """Running (a zombie, an exited child nobody has reaped yet, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def runs(client: redis.Redis, queue: str, what: str) -> Counter[str]:
    """How many times each job id was recorded as ``what`` (``start`` or ``done``)."""
    entries = client.lrange(runs_key(queue), 0, -1)
    return Counter(e.split(":")[1] for e in entries if e.startswith(f"{what}:"))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_burst_with_three_processes_runs_every_job_once_and_exits_0(
    sup: Supervised, queue: Queue, client: redis.Redis, qname: str
) -> None:
    ids = queue.enqueue_many([("work", {"ms": 20}) for _ in range(90)])
    proc = sup.start("--processes", "3", "--burst")
    assert proc.wait(HANG * 2) == 0, sup.log.read_text()[-3000:]
    assert runs(client, qname, "done") == Counter(dict.fromkeys(ids, 1))
    assert queue.counts()["completed"] == 90
    children = sup.children()
    assert len(set(children)) == 3
    # every child is a real worker: each logged its own start and stop, under its own pid
    assert {e["pid"] for e in sup.events("started")} == set(children)
    assert {e["pid"] for e in sup.events("stopped")} == set(children)
    exits = sup.events("child_exited")
    assert sorted(e["child"] for e in exits) == sorted(children)
    assert all(e["code"] == 0 and e["restart_in_ms"] is None for e in exits)
    assert sup.events("supervisor_stopped")[-1]["code"] == 0
    assert not any(alive(pid) for pid in children)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_killed_child_is_restarted_and_sigterm_drains_every_child(
    sup: Supervised, queue: Queue, client: redis.Redis, qname: str
) -> None:
    """SIGKILL one child mid-job: the supervisor logs its exit and starts another; its job is
    recovered by the sweep and every job completes once. Then SIGTERM to the supervisor with
    a job still running: every child drains (the job finishes once the test lets it), the
    supervisor exits 0 and no child is left."""
    proc = sup.start("--processes", "3", *FAST)
    wait_for(lambda: len(sup.events("started")) == 3, HANG, "three workers to start")
    first = set(sup.children())
    ids = queue.enqueue_many([("work", {"ms": 100}) for _ in range(60)])
    victim = int(wait_for(lambda: client.lindex(runs_key(qname), 0), HANG, "a run").split(":")[2])
    assert victim in first
    os.kill(victim, signal.SIGKILL)
    exited = wait_for(lambda: sup.events("child_exited"), HANG, "the kill to be logged")
    assert exited[0]["child"] == victim and exited[0]["signal"] == "SIGKILL"
    assert exited[0]["restart_in_ms"] == 500
    wait_for(lambda: len(sup.children()) == 4, HANG, "a new child")
    new = sup.children()[-1]
    assert new not in first
    wait_for(lambda: new in {e["pid"] for e in sup.events("started")}, HANG, "it to start")
    wait_for(lambda: queue.counts()["completed"] == 60, HANG * 2, "every job to complete")
    counts = queue.counts()
    assert counts["dead"] == 0 and counts["pending"] == 0 and counts["active"] == 0
    assert set(runs(client, qname, "done")) == set(ids)  # each ran to its end at least once

    gated = queue.enqueue("gated", {})
    wait_for(lambda: runs(client, qname, "start")[gated], HANG, "the gated job to start")
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: sup.events("draining"), HANG, "the child that runs it to drain")
    assert proc.poll() is None  # still waiting for that child
    open_gate(client, qname, 1)
    assert proc.wait(HANG) == 0, sup.log.read_text()[-3000:]
    assert queue.counts()["completed"] == 61
    assert len(sup.events("stopping")) == 3  # every live child got the signal
    children = sup.children()
    assert not any(alive(pid) for pid in children)
    assert sup.events("supervisor_stopped")[-1]["code"] == 0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_second_signal_stops_every_child_at_once_with_130(
    sup: Supervised, queue: Queue, client: redis.Redis, qname: str
) -> None:
    proc = sup.start("--processes", "2")
    wait_for(lambda: len(sup.events("started")) == 2, HANG, "two workers to start")
    gated = queue.enqueue("gated", {})
    wait_for(lambda: runs(client, qname, "start")[gated], HANG, "the gated job to start")
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: sup.events("draining"), HANG, "the child that runs it to drain")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(HANG) == 130, sup.log.read_text()[-3000:]
    assert sup.events("forced")
    assert not any(alive(pid) for pid in sup.children())


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_children_stop_gracefully_when_the_supervisor_is_killed(
    sup: Supervised, queue: Queue, client: redis.Redis, qname: str
) -> None:
    """SIGKILL to the supervisor itself: the kernel sends each child SIGTERM, so each drains
    (the running job finishes once the test lets it) and none is left behind."""
    proc = sup.start("--processes", "2")
    wait_for(lambda: len(sup.events("started")) == 2, HANG, "two workers to start")
    gated = queue.enqueue("gated", {})
    wait_for(lambda: runs(client, qname, "start")[gated], HANG, "the gated job to start")
    proc.kill()
    proc.wait(HANG)
    wait_for(lambda: sup.events("draining"), HANG, "the child that runs it to drain")
    open_gate(client, qname, 1)
    children = sup.children()
    wait_for(lambda: not any(alive(pid) for pid in children), HANG, "every child to exit")
    assert len(sup.events("stopped")) == 2 and not sup.events("forced")
    assert queue.counts()["completed"] == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", ["0", "-2", "257", "100000"])
def test_bad_processes_values_exit_2_with_a_clear_error(tmp_path: Path, value: str) -> None:
    """Refused before anything else: no server is needed (this URL has none)."""
    sup = Supervised("redis://127.0.0.1:9/0", "q", tmp_path)
    proc = sup.start("--burst", "--processes", value)
    assert proc.wait(HANG) == 2
    out = sup.log.read_text()
    assert f"--processes must be 1..256, got {value}" in out and "Traceback" not in out
    assert not sup.events("supervising")
