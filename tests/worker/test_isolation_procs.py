"""Handlers in their own process, run as a user runs them: an app module with every
documented decorator form under ``emq worker app:worker``, a script that defines its handler
in ``__main__``, a burst run past a timeout, and every way a worker ends (one SIGTERM, two,
SIGINT, SIGKILL) while an isolated handler runs: no child outlives its worker. Real worker
processes on a real server; each test ends with the invariant check."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from emq import Queue, QueueOptions

from ..support.helpers import assert_consistent, log_records

pytestmark = [pytest.mark.servers("valkey"), pytest.mark.slow]

CLI = "from emq.cli.main import main; main()"
HANG = 60.0  # bounds a hang (a worker or child that never ends), never a speed
KEEP = QueueOptions(result_ttl_ms=600_000)

APP = """
import os, time
from pathlib import Path

from emq import Tasks, Worker

URL, QUEUE = os.environ["EMQ_URL"], os.environ["APP_QUEUE"]
tasks = Tasks(QUEUE, url=URL)
worker = Worker(QUEUE, url=URL, tasks=tasks)


@tasks.task(isolation="process", max_attempts=1)
def typed(n: int) -> dict:
    return {"pid": os.getpid(), "n": n}


@worker.handler("plain", isolation="process")
def plain(payload):
    return os.getpid()


@worker.task(isolation="process")
async def on_worker(n: int) -> int:
    return n + 1


TIMEOUT_MS = int(os.environ.get("APP_TIMEOUT", "0")) or None


def hang(payload):
    Path(payload["started"]).write_text(str(os.getpid()))
    time.sleep(120)


worker.register("hang", hang, isolation="process", timeout_ms=TIMEOUT_MS)


if __name__ == "__main__":
    typed.enqueue(n=1)
    worker.run_sync()
"""


def app_env(url: str, qname: str, **extra: str) -> dict[str, str]:
    return dict(os.environ, EMQ_URL=url, APP_QUEUE=qname, **extra)


def worker(tmp: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    (tmp / "app.py").write_text(APP)
    with (tmp / "worker.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", CLI, "worker", "app:worker", "--lease-ms", "5000", *args],
            cwd=tmp, env=env, stdout=log, stderr=log,
        )  # fmt: skip


def gone(pid: int) -> bool:
    """True once ``pid`` has ended (a zombie that nobody reaps has ended too)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_for(cond: object, what: str) -> None:
    deadline = time.monotonic() + HANG
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what} after {HANG:.0f} s")
        time.sleep(0.05)


def test_every_decorator_form_runs_in_children_under_emq_worker(
    url: str, qname: str, client: redis.Redis, tmp_path: Path
) -> None:
    with Queue.from_url(url, qname, options=KEEP) as q:
        typed = q.enqueue("typed", {"n": 5})
        plain = q.enqueue("plain")
        on_worker = q.enqueue("on_worker", {"n": 41})
        proc = worker(tmp_path, app_env(url, qname), "--burst")
        assert proc.wait(HANG) == 0, (tmp_path / "worker.log").read_text()
        assert q.result(typed)["n"] == 5
        assert q.result(typed)["pid"] not in (proc.pid, os.getpid())
        assert q.result(plain) not in (proc.pid, os.getpid())
        assert q.result(on_worker) == 42
        assert q.counts()["completed"] == 3  # the import by `emq worker` enqueued nothing
    assert_consistent(client, qname)


def test_a_handler_in_the_script_itself_is_refused_before_anything_is_written(
    url: str, qname: str, client: redis.Redis, tmp_path: Path
) -> None:
    script = tmp_path / "script.py"
    script.write_text(APP.replace('if __name__ == "__main__":\n', "if True:\n"))  # no guard
    run = subprocess.run(
        [sys.executable, str(script)], env=app_env(url, qname), capture_output=True,
        text=True, timeout=HANG,
    )  # fmt: skip
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert "InvalidOption: handler 'typed'" in last and "move it into a module" in last, last
    assert client.keys(f"emq:{{{qname}}}:*") == []


def test_a_burst_run_ends_after_an_isolated_handler_timed_out(
    url: str, qname: str, client: redis.Redis, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    with Queue.from_url(url, qname, options=KEEP) as q:
        stuck = q.enqueue("hang", {"started": str(started)}, max_attempts=1)
        after = q.enqueue("plain")
        # the timeout counts from the claim: long enough for a child to start on a busy machine
        proc = worker(tmp_path, app_env(url, qname, APP_TIMEOUT="5000"), "--burst", "-c", "1")
        wait_for(lambda: started.exists() and started.read_text(), "the isolated handler")
        assert proc.wait(HANG) == 0, (tmp_path / "worker.log").read_text()
        job = q.job(stuck)
        assert job is not None and job.state == "dead" and "timeout" in (job.last_error or "")
        assert isinstance(q.result(after), int)
        assert gone(int(started.read_text()))
    assert_consistent(client, qname)


@pytest.mark.parametrize(
    ("signals", "grace_ms", "code"),
    [
        ((signal.SIGTERM,), 300, 0),
        ((signal.SIGTERM, signal.SIGTERM), 60_000, 130),  # the second does not wait the grace
        ((signal.SIGINT,), 300, 0),
        ((signal.SIGKILL,), 60_000, -signal.SIGKILL),
    ],
    ids=["sigterm", "sigterm-twice", "sigint", "sigkill"],
)
def test_no_child_outlives_its_worker_however_the_worker_ends(
    url: str, qname: str, client: redis.Redis, tmp_path: Path,
    signals: tuple[signal.Signals, ...], grace_ms: int, code: int,
) -> None:  # fmt: skip
    started = tmp_path / "started"
    with Queue.from_url(url, qname) as q:
        job = q.enqueue("hang", {"started": str(started)}, max_attempts=3)
        proc = worker(tmp_path, app_env(url, qname), "--grace-ms", str(grace_ms))
        wait_for(started.exists, "the isolated handler to start")
        wait_for(lambda: started.read_text(), "the child's pid")
        child = int(started.read_text())
        for sig in signals:
            proc.send_signal(sig)
            if sig != signals[-1] or len(signals) > 1:  # the next one once this one was seen
                wait_for(lambda: log_records(tmp_path / "worker.log", "stopping"), "stopping")
        assert proc.wait(HANG) == code, (tmp_path / "worker.log").read_text()
        wait_for(lambda: gone(child), f"the child {child} to end")
        if code == 0:  # a graceful stop: the interrupted attempt waits for its retry
            got = q.job(job)
            assert got is not None and got.state in ("scheduled", "pending"), got
    assert_consistent(client, qname)
