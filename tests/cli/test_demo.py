"""``emq demo`` on a fresh directory: the embedded server, real worker processes, a kill, a
freeze and a poison job; it must exit 0 (nothing lost) in well under a minute."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emq import Queue
from emq.embedded.standalone import EmbeddedServer


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_demo_runs_on_a_fresh_directory_and_loses_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("EMQ_URL", "EMQ_HOME")}
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-c", "from emq.cli.main import main; main()", "demo"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100,
        )  # fmt: skip
    finally:
        EmbeddedServer(tmp_path / ".emq").stop()
    elapsed = time.monotonic() - t0
    out = done.stdout + done.stderr
    assert done.returncode == 0, out  # how long it took is printed, not asserted: a speed
    for line in (
        "SIGKILL w1 mid-job",
        "SIGSTOP",
        "dead-lettered",
        "stalled 2 times",
        "stale lease",
        "ok   nothing lost",
        "ok   poison job dead after exactly 2 stalls",
    ):
        assert line in out, (line, out)
    assert "FAIL" not in out
    assert "the embedded server is still running" in out and "emq server stop" in out
    print(f"\nemq demo on a fresh directory: {elapsed:.1f} s")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_demo_json_is_one_summary_object(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("EMQ_URL", "EMQ_HOME")}
    try:
        done = subprocess.run(
            [sys.executable, "-c", "from emq.cli.main import main; main()", "demo", "--json"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100,
        )  # fmt: skip
        server = EmbeddedServer(tmp_path / ".emq")
        running = server.status().running
        with Queue.from_url(server.url(), "demo") as q:
            events = list(q.events())
    finally:
        EmbeddedServer(tmp_path / ".emq").stop()
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = done.stdout.splitlines()
    summary = json.loads(line)
    assert summary["ok"] is True and all(c["ok"] for c in summary["checks"])
    assert summary["server"]["embedded"] is True and summary["server"]["left_running"] is True
    assert running, "the summary says the embedded server is left running, and it is"
    # only the poison job is dead-lettered: it comes once every other job has ended, so the
    # two workers it kills hold nothing else (a job that stalled once goes to the head of
    # pending, where the next disruption's victim would take it, and die of its 2nd stall)
    assert summary["other_dead"] == [] and summary["counts"]["dead"] == 1, summary
    (poison,) = {e.job for e in events if e.event == "enqueued" and e.fields["name"] == "poison"}
    at = next(i for i, e in enumerate(events) if e.job == poison)
    assert all(e.event != "claimed" for e in events[at:] if e.job != poison), "none after it"
    assert {e.job for e in events if e.event == "dead"} == {poison}
