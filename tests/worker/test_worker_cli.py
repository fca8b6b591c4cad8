"""``emq worker`` from the command line, and the runnable example in ``examples/``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emq import Queue

ROOT = Path(__file__).parents[2]
CLI = "from emq.cli.main import main; main()"
HANG = 60  # bounds a hang, never a speed


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
    done = emq("worker", "tests.support.worker_handlers:handlers", "-q", qname, "--burst", url=url)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    events = [r["event"] for r in records]
    assert events[0] == "started" and events[-1] == "stopped"
    assert records[-1]["completed"] == 6 and records[-1]["forced"] is False
    assert queue.counts()["completed"] == 6


@pytest.mark.timeout(60)
def test_worker_text_logs_and_options(url: str, qname: str, queue: Queue) -> None:
    queue.enqueue("fast", {})
    done = emq("worker", "tests.support.worker_handlers:handlers", "-q", qname, "--burst",
               "--log-format", "text", "-c", "4", "--lease-ms", "2000", url=url)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "started: worker started" in done.stderr and "concurrency=4" in done.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nonsense", "expected module:attr"),
        ("no_such_module_xyz:w", "cannot import"),
        ("tests.support.worker_handlers:nothing", "has no attribute"),
        ("tests.support.worker_handlers:runs_key", "expected a Worker"),
    ],
)
def test_worker_bad_target_exits_2_with_a_clear_error(url: str, target: str, message: str) -> None:
    done = emq("worker", target, "--burst", url=url)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
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


TASKS_WITH_URL = """
import os
from emq import Queue, Worker

worker = Worker(os.environ["TEST_QUEUE"], url=os.environ["CODE_URL"])
by_queue = Worker(Queue.from_url(os.environ["CODE_URL"], os.environ["TEST_QUEUE"]))


@worker.handler("ping")
def ping(payload):
    return payload
"""


def _worker_in(
    tmp_path: Path, *args: str, code_url: str, qname: str, env_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "url_tasks.py").write_text(TASKS_WITH_URL)
    env = {k: v for k, v in os.environ.items() if k not in ("EMQ_URL", "EMQ_HOME")}
    env |= {"TEST_QUEUE": qname, "CODE_URL": code_url, "EMQ_HOME": str(tmp_path / "home")}
    env |= {"EMQ_URL": env_url} if env_url else {}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", CLI, "worker", *args, "--burst"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip


NOWHERE = "redis://127.0.0.1:1/0"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_the_command_line_url_wins_over_the_workers_own(
    url: str, qname: str, queue: Queue, tmp_path: Path
) -> None:
    """The README's worker sets ``url=``; ``--url`` (then ``EMQ_URL``) still chooses the
    server. Before the fix the code's URL won and the worker retried it forever."""
    queue.enqueue("ping", 1)
    done = _worker_in(tmp_path, "url_tasks:worker", "--url", url, code_url=NOWHERE, qname=qname)
    assert done.returncode == 0, done.stderr
    assert queue.counts()["completed"] == 1
    queue.enqueue("ping", 2)
    done = _worker_in(tmp_path, "url_tasks:worker", code_url=NOWHERE, qname=qname, env_url=url)
    assert done.returncode == 0, done.stderr
    assert queue.counts()["completed"] == 2


@pytest.mark.timeout(60)
def test_the_workers_own_url_is_used_when_the_command_line_names_none(
    url: str, qname: str, queue: Queue, tmp_path: Path
) -> None:
    queue.enqueue("ping", 1)
    done = _worker_in(tmp_path, "url_tasks:worker", code_url=url, qname=qname)
    assert done.returncode == 0, done.stderr
    assert queue.counts()["completed"] == 1
    assert not (tmp_path / "home").exists(), "no embedded server was started"


@pytest.mark.timeout(60)
def test_url_with_a_worker_of_queue_objects_is_refused_not_ignored(
    url: str, qname: str, tmp_path: Path
) -> None:
    done = _worker_in(tmp_path, "url_tasks:by_queue", "--url", NOWHERE, code_url=url, qname=qname)
    assert done.returncode == 2
    assert "--url cannot be used with a Worker built from Queue objects" in done.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--lease-ms", "999999999999", "lease_ms"),
        ("--max-stalled", "999999999", "max_stalled"),
        ("--concurrency", "0", "concurrency"),
    ],
)
def test_out_of_range_options_are_refused_before_the_worker_starts(
    url: str, qname: str, option: str, value: str, message: str
) -> None:
    done = emq("worker", "tests.support.worker_handlers:handlers", "-q", qname, option, value,
               "--burst", url=url)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert '"started"' not in done.stderr and "worker started" not in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_worker_json_flag_gives_json_lines(url: str, qname: str, queue: Queue) -> None:
    queue.enqueue("fast", {})
    done = emq("worker", "tests.support.worker_handlers:handlers", "-q", qname, "--burst", "--json",
               url=url)  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert records[0]["event"] == "started" and records[-1]["event"] == "stopped"
    clash = emq("worker", "tests.support.worker_handlers:handlers", "--json", "--log-format",
                "text", url=url)  # fmt: skip
    assert clash.returncode == 2 and "contradict" in clash.stderr


TYPED = """
from emq import QueueOptions, Tasks

tasks = Tasks({qname!r}, url={url!r}, options=QueueOptions(result_ttl_ms=60_000))


@tasks.task()
def add(a: int, b: int = 1) -> int:
    return a + b
"""


@pytest.mark.timeout(60)
def test_emq_worker_runs_a_tasks_object_on_its_own_queue_and_url(
    url: str, qname: str, tmp_path: Path
) -> None:
    (tmp_path / "typed_tasks.py").write_text(TYPED.format(qname=qname, url=url))
    env = {k: v for k, v in os.environ.items() if k != "EMQ_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    producer = "import typed_tasks as t; print(t.add.enqueue(2, b=40)); t.tasks.close()"
    sent = subprocess.run([sys.executable, "-c", producer], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=HANG)  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    done = subprocess.run([sys.executable, "-c", CLI, "worker", "typed_tasks:tasks", "--burst"],
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=HANG)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with Queue.from_url(url, qname) as q:
        assert q.result(sent.stdout.strip()) == 42
    refused = subprocess.run([sys.executable, "-c", CLI, "worker", "typed_tasks:tasks", "-q", "x"],
                             cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=HANG)  # fmt: skip
    assert refused.returncode == 2 and "--queue cannot be used with a Tasks" in refused.stderr
