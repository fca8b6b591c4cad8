"""``emq`` behaves as one tool (docs/cli.md, Errors are one line; Exit codes), on real servers
and real processes: a usage error is one ``error:`` line and exit 2 for every command and
group; each exit code of ``emq.cli.exits`` means one thing whatever the command; the
obliterate refusal says its sentence once; a job's stored error names emq's classes as a
user imports them."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

import emq
from emq import Queue, Worker, WorkerOptions
from emq.cli import exits
from emq.cli.main import cli
from emq.embedded.standalone import free_port
from emq.observe.registry import WORKERS, worker_key

pytestmark = pytest.mark.servers("valkey")
ROOT = Path(__file__).parents[2]
CLI = "from emq.cli.main import main; main()"


def run(*args: str, **options: Any) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), prog_name="emq", catch_exceptions=False, **options)
    return result.exit_code, result.output


def one_line(code: int, out: str, expected: int, *needles: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert code == expected and len(lines) == 1 and lines[0].startswith("error: "), (code, out)
    assert "Traceback" not in out and all(n in lines[0] for n in needles), out
    return lines[0]


def keys_of(client: redis.Redis, name: str) -> list[str]:
    return list(client.scan_iter(match=f"emq:{{{name}}}:*", count=1000))


# -- 1. a usage error is one line, exit 2, for every command and group ----------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--bogus"], "No such option '--bogus' (see emq --help)"),
        (["nosuch"], "No such command 'nosuch'"),
        (["stats", "--bogus"], "(see emq stats --help)"),
        (["job", "q"], "Missing argument 'JOB_ID'"),
        (["jobs", "q", "nowhere"], "'nowhere' is not one of"),
        (["server", "nosuch"], "No such command 'nosuch'"),
        (["server", "status", "--bogus"], "No such option '--bogus'"),
        (["repeat", "q", "list", "--bogus"], "No such option '--bogus'"),
        (["repeat", "q", "nosuch"], "No such command 'nosuch'"),
        (["events", "tail"], "Missing argument 'QUEUE'"),
        (["race", "run", "nosuch"], "is not one of"),
        (["dashboard", "--port", "99999"], "Invalid value for '--port'"),
        (["configure", "q", "--durability", "sometimes"], "'sometimes' is not one of"),
    ],
)
def test_a_usage_error_is_one_error_line_and_exit_2(args: list[str], needle: str) -> None:
    """Before: click's three lines, ``Usage: ...``, ``Try 'emq ... --help' for help.`` and
    ``Error: ...``, where docs/cli.md promises one ``error: ...`` line."""
    code, out = run(*args)
    one_line(code, out, exits.ERROR, needle)
    assert "Usage:" not in out and "Try '" not in out


def test_a_usage_error_of_a_real_process_is_one_line_on_stderr() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CLI, "jobs", "q", "nowhere"], capture_output=True, text=True
    )
    assert done.stdout == ""
    one_line(done.returncode, done.stderr, exits.ERROR, "'nowhere' is not one of")


# -- 2. one table of exit codes -------------------------------------------------------------


def test_the_exit_codes_are_one_table_and_docs_cli_md_shows_it() -> None:
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = page.split("**Exit codes.**", 1)[1].split("\n\n", 2)[1]
    shown = {int(m) for m in re.findall(r"^\| `(\d+)` \|", section, re.M)}
    assert shown == set(exits.TABLE), section
    assert (exits.DONE, exits.NO, exits.ERROR, exits.LIVE) == (0, 1, 2, 3)
    assert (exits.INTERRUPTED, exits.PIPE_CLOSED) == (128 + signal.SIGINT, 128 + signal.SIGPIPE)
    literal = re.compile(r"(sys\.exit|SystemExit|ctx\.exit)\(\s*\d")
    for path in (ROOT / "src" / "emq" / "cli").glob("*.py"):
        assert not literal.search(path.read_text(encoding="utf-8")), f"{path.name}: a literal"


def test_not_found_is_exit_2_for_every_command(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    """Before: ``emq job`` of an unknown id exited 1 while ``emq remove`` exited 2; ``emq
    history`` of one printed a line and exited 0, ``emq repeat remove`` of an unknown key 1;
    ``emq obliterate`` and ``emq upgrade`` of a mistyped queue exited 0 (``upgrade`` wrote
    the typo's ``meta``)."""
    queue.enqueue("a", None)
    unknown = "JOB0000000000A"
    for args in (
        ["job", qname, unknown],
        ["job", qname, unknown, "--logs", "--json"],
        ["remove", qname, unknown],
        ["cancel", qname, unknown],
        ["flow", qname, unknown],
        ["result", qname, unknown],
        ["history", qname, unknown],
        ["repeat", qname, "remove", "nokey"],
    ):
        code, out = run(*args, "--url", url)
        one_line(code, out, exits.ERROR)
    typo = f"{qname}-typo"
    for args, needle in (
        (["obliterate", typo, "--yes"], "nothing deleted"),
        (["obliterate", typo], "nothing deleted"),  # before the --yes question
        (["upgrade", typo], "nothing upgraded"),
    ):
        code, out = run(*args, "--url", url)
        one_line(code, out, exits.ERROR, f"no queue '{typo}'", needle)
    assert keys_of(client, typo) == []


def test_refused_because_something_is_live_is_exit_3_said_once(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    """Before: these exited 2, and the obliterate refusal said its sentence twice (the
    command line's, then the script's own words in brackets)."""
    job_id = queue.enqueue("a", None)
    queue.claim(1, lease_ms=60_000)
    code, out = run("obliterate", qname, "--yes", "--url", url)
    line = one_line(code, out, exits.LIVE, "has leased jobs", "pass --force")
    assert line.count("stop its workers") == 1 and "use force" not in line, line
    assert queue.counts()["active"] == 1
    code, out = run("forget", qname, "--url", url)
    one_line(code, out, exits.LIVE, "still has keys")
    code, out = run("result", qname, job_id, "--url", url)
    assert code == exits.LIVE, out
    entry = {"id": "old:7:ab", "host": "old", "pid": 7, "queues": [qname], "concurrency": 1,
             "running": 0, "started_ms": 1, "beat_ms": 2, "version": "0.1.0"}  # fmt: skip
    client.set(worker_key(entry["id"]), json.dumps(entry), px=30_000)
    client.zadd(WORKERS, {entry["id"]: time.time() * 1000 + 30_000})
    try:
        code, out = run("upgrade", qname, "--url", url)
        one_line(code, out, exits.LIVE, "old:7")
    finally:
        client.delete(worker_key(entry["id"]))
        client.zrem(WORKERS, entry["id"])


def test_the_answer_is_no_is_exit_1(url: str, qname: str, queue: Queue, tmp_path: Path) -> None:
    code, out = run("server", "status", "--dir", str(tmp_path / "none"))
    assert code == exits.NO and "Traceback" not in out, out
    job_id = queue.enqueue("a", None, max_attempts=1)
    (held,) = queue.claim(1, lease_ms=60_000)
    queue.fail(job_id, held.token, "boom")
    code, out = run("result", qname, job_id, "--url", url)
    assert code == exits.NO and "ended dead" in out, out


def test_the_dashboard_stops_cleanly_on_sigterm(url: str) -> None:
    """Before: uvicorn raised SIGTERM again once it had stopped, so the process died of it
    (143) instead of exiting 0."""
    port = free_port()
    env = {**os.environ, "EMQ_URL": url}
    with subprocess.Popen(
        [sys.executable, "-c", CLI, "dashboard", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None and proc.stderr is not None
            assert "emq dashboard on" in proc.stdout.readline()
            for _ in range(300):  # bounds a hang only: until it answers
                try:
                    socket.create_connection(("127.0.0.1", port), 1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == exits.DONE, proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()


# -- 4. a stored error names emq's classes as a user imports them ---------------------------


class PaymentDeclined(Exception):
    """A user's own exception: it keeps the name Python gives it."""


def test_a_permanent_failure_is_stored_and_shown_as_permanent(url: str, queue: Queue) -> None:
    """Before: ``emq.worker.options.Permanent: card expired`` in ``emq job``, ``emq history``,
    the dashboard and the event stream."""

    def permanent(payload: Any) -> None:
        raise emq.Permanent("card expired")

    def declined(payload: Any) -> None:
        raise PaymentDeclined("no funds")

    first = queue.enqueue("permanent", None)
    second = queue.enqueue("declined", None, max_attempts=1)
    w = Worker(queue.name, {"permanent": permanent, "declined": declined}, url=url,
               options=WorkerOptions(burst=True))  # fmt: skip
    w.run_sync(handle_signals=False)
    for job_id, shown in ((first, "Permanent: card expired"),
                          (second, f"{__name__}.PaymentDeclined: no funds")):  # fmt: skip
        row = queue.job(job_id)
        assert row is not None and (row.last_error or "").startswith(f"{shown}\n"), row
        code, out = run("job", queue.name, job_id, "--url", url)
        assert code == 0 and f"last_error: {shown}" in out, out
        code, out = run("history", queue.name, job_id, "--url", url)
        assert code == 0 and shown in out, out
    assert "emq.worker.options" not in (queue.job(first).last_error or "")  # type: ignore[union-attr]
    from ..dashboard.test_dashboard import serve

    with serve(url) as c:
        page = c.get(f"/queues/{queue.name}/jobs/{first}")
        assert page.status_code == 200 and "Permanent: card expired" in page.text
        assert "emq.worker.options.Permanent" not in page.text
