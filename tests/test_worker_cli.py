"""``emq worker`` from the command line, and the runnable example in ``examples/``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emq import Queue

ROOT = Path(__file__).parent.parent
CLI = "from emq.cli.main import main; main()"


def emq(*args: str, url: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, EMQ_URL=url)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", CLI, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


@pytest.mark.timeout(60)
def test_worker_burst_with_a_handlers_mapping_logs_json_and_exits_0(
    url: str, qname: str, queue: Queue
) -> None:
    queue.enqueue_many([("work", {"ms": 1}) for _ in range(5)] + [("fast", {})])
    done = emq("worker", "tests.test_worker_support:handlers", "-q", qname, "--burst", url=url)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    events = [r["event"] for r in records]
    assert events[0] == "started" and events[-1] == "stopped"
    assert records[-1]["completed"] == 6 and records[-1]["forced"] is False
    assert queue.counts()["completed"] == 6


@pytest.mark.timeout(60)
def test_worker_text_logs_and_options(url: str, qname: str, queue: Queue) -> None:
    queue.enqueue("fast", {})
    done = emq("worker", "tests.test_worker_support:handlers", "-q", qname, "--burst",
               "--log-format", "text", "-c", "4", "--lease-ms", "2000", url=url)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "started: worker started" in done.stderr and "concurrency=4" in done.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nonsense", "expected module:attr"),
        ("no_such_module_xyz:w", "cannot import"),
        ("tests.test_worker_support:nothing", "has no attribute"),
        ("tests.test_worker_support:runs_key", "expected a Worker"),
    ],
)
def test_worker_bad_target_exits_2_with_a_clear_error(url: str, target: str, message: str) -> None:
    done = emq("worker", target, "--burst", url=url)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.timeout(60)
def test_example_worker_via_cli_and_as_a_script(url: str) -> None:
    with Queue.from_url(url, "example") as q:
        q.obliterate(force=True)
        q.enqueue("send_email", {"to": "ada@example.com"})
        q.enqueue("thumbnail", {"image": "a.png"})
        done = emq("worker", "examples.tasks:worker", "--burst", url=url)
        assert done.returncode == 0, done.stderr
        assert q.counts()["completed"] == 2
        q.obliterate(force=True)
        script = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "tasks.py")], cwd=ROOT, timeout=60,
            env=dict(os.environ, EMQ_URL=url), capture_output=True, text=True,
        )  # fmt: skip
        assert script.returncode == 0, script.stdout + script.stderr
        assert "completed 3, dead 1" in script.stdout
        q.obliterate(force=True)
