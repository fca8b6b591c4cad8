"""Nothing that comes from a user, a job or a server is read as Rich markup (docs/cli.md): names,
payloads, handler errors and hints are printed literally, through the real ``emq``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from emq import Queue, Worker, WorkerOptions
from emq.cli.main import cli

ROOT = Path(__file__).parents[2]
# Closing tags that match nothing (Rich raises MarkupError), tags that would style or vanish,
# and an emoji code that Rich would replace.
NASTY = "boom [/red] [bold]b[/bold] [/] :smile:"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def assert_clean(result: Result, code: int, *, shows_a_traceback: bool = False) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == code, result.output
    assert "MarkupError" not in result.output
    assert shows_a_traceback or "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["stats", "[/x]"], "'[/x]'"),
        (["enqueue", "q1", "[/x]", "{}"], "'[/x]'"),
        (["enqueue", "q[b]", "send"], "'q[b]'"),
        (["jobs", "q[/b]", "dead"], "'q[/b]'"),
        (["job", "q", "JOB[/x]:smile:"], "'JOB[/x]:smile:'"),
    ],
)
def test_user_text_in_an_error_is_printed_literally(url: str, args: list[str], shown: str) -> None:
    result = invoke(*args, "--url", url)
    assert_clean(result, 2)
    assert shown in result.output


@pytest.fixture
def dead_job(url: str, queue: Queue) -> str:
    """A job whose real handler raised ``ValueError(NASTY)``: dead after its one attempt."""

    def handler(payload: Any) -> None:
        raise ValueError(NASTY)

    job_id = queue.enqueue("explode", {"note": "[/x] :smile:"}, max_attempts=1)
    w = Worker(queue.name, {"explode": handler}, url=url, options=WorkerOptions(burst=True))
    w.run_sync(handle_signals=False)
    row = queue.job(job_id)
    assert row is not None and row.state == "dead" and NASTY in (row.last_error or "")
    return job_id


def test_a_handler_error_with_markup_is_listed_literally(
    url: str, queue: Queue, dead_job: str
) -> None:
    for args in (["dead", queue.name, "list"], ["jobs", queue.name, "dead"]):
        result = invoke(*args, "--url", url)
        assert_clean(result, 0)
        assert dead_job in result.output and f"ValueError: {NASTY}" in result.output


def test_one_job_shows_its_error_and_payload_literally(
    url: str, queue: Queue, dead_job: str
) -> None:
    result = invoke("job", queue.name, dead_job, "--url", url)
    assert_clean(result, 0, shows_a_traceback=True)  # the job's own, in full
    assert f"ValueError: {NASTY}" in result.output
    assert "Traceback (most recent call last)" in result.output
    assert '"[/x] :smile:"' in result.output


def test_a_job_name_and_payload_are_printed_literally(url: str, queue: Queue) -> None:
    result = invoke("enqueue", queue.name, "a:smile:b", '"[/x]"', "--url", url)
    assert_clean(result, 0)
    job_id = result.output.strip()
    shown = invoke("job", queue.name, job_id, "--url", url)
    assert_clean(shown, 0)
    assert "a:smile:b" in shown.output and '"[/x]"' in shown.output


def test_the_s3_hint_keeps_its_extra(tmp_path: Path) -> None:
    """Without boto3, ``--to s3://...`` says ``pip install 'emq[s3]'`` (Rich once ate
    ``[s3]`` as a style tag)."""
    code = "import sys; sys.modules['boto3'] = None; from emq.cli.main import main; main()"
    floor = str(tmp_path / "f.sqlite3")
    done = subprocess.run(
        [sys.executable, "-c", code, "archive", "ship", "q", "--to", "s3://b/p", "--floor", floor],
        cwd=tmp_path, env=dict(os.environ), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "pip install 'emq[s3]'" in done.stderr and "Traceback" not in done.stderr
