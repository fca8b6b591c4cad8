"""A refused login (a wrong or missing password) is a refusal, not an outage: ``Queue`` and
``AsyncQueue`` calls raise :class:`~emq.AuthenticationFailed` (a ``ServerRefused``, never the
you-may-retry ``ServerUnreachable``), and every command says the server refused the login in
one line, the password masked, exit 2 (docs/cli.md). The suite's servers require a password
(the embedded server's own, docs/security.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from emq import AsyncQueue, AuthenticationFailed, Queue, ServerRefused, ServerUnreachable
from emq.cli.main import cli

pytestmark = pytest.mark.servers("valkey", "redis")

ROOT = Path(__file__).parents[2]
CLI = "from emq.cli.main import main; main()"
WRONG = "not-the-password-4f2a"


def wrong_password(url: str) -> str:
    head, _, rest = url.partition("@")
    return f"{head.rsplit(':', 1)[0]}:{WRONG}@{rest}"


def no_password(url: str) -> str:
    return "redis://" + url.partition("@")[2]


LOGINS = {"wrong": wrong_password, "missing": no_password}


def _refused(exc: BaseException) -> None:
    assert isinstance(exc, AuthenticationFailed) and isinstance(exc, ServerRefused)
    assert not isinstance(exc, ServerUnreachable | ConnectionError), "not the retry class"
    assert exc.reason == "AUTH" and "refused the login" in str(exc)
    assert "could not be reached" not in str(exc) and WRONG not in str(exc)


@pytest.mark.parametrize("login", list(LOGINS))
def test_queue_calls_raise_a_refused_login(url: str, qname: str, login: str) -> None:
    """Before: ServerUnreachable ('the server could not be reached: invalid username-password
    pair'), so a caller retrying on it looped forever."""
    q = Queue.from_url(LOGINS[login](url), qname)
    try:
        for call in (lambda: q.enqueue("x", 1), q.counts, lambda: q.claim(1)):
            with pytest.raises(AuthenticationFailed) as refused:
                call()
            _refused(refused.value)
    finally:
        q.close()


@pytest.mark.parametrize("login", list(LOGINS))
async def test_async_queue_calls_raise_a_refused_login(url: str, qname: str, login: str) -> None:
    q = AsyncQueue.from_url(LOGINS[login](url), qname)
    try:
        for call in (lambda: q.enqueue("x", 1), q.counts, lambda: q.claim(1)):
            with pytest.raises(AuthenticationFailed) as refused:
                await call()
            _refused(refused.value)
    finally:
        await q.close()


def _one_line(output: str, code: int) -> str:
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    line = lines[0]
    assert "refused the login" in line and "could not be reached" not in line, line
    assert "cannot reach" not in line and "Traceback" not in output, line
    assert WRONG not in output and ":***@" in line, line
    return line


@pytest.mark.parametrize("args", [["stats"], ["stats", "q"], ["enqueue", "q", "x", "{}"]])
def test_commands_say_the_server_refused_the_login(url: str, args: list[str]) -> None:
    result = CliRunner().invoke(cli, [*args, "--url", wrong_password(url)])
    _one_line(result.output, result.exit_code)


@pytest.mark.slow
@pytest.mark.servers("valkey")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("burst", [False, True])
def test_emq_worker_fails_fast_on_a_refused_login(url: str, qname: str, burst: bool) -> None:
    """A long-running worker waits for a server that is not up yet; a wrong password is not
    that, and fails at once, with or without ``--burst``."""
    env = dict(os.environ, EMQ_URL=wrong_password(url))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", CLI, "worker", "tests.support.worker_handlers:handlers",
         "-q", qname, *(["--burst"] if burst else [])],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    _one_line(done.stderr, done.returncode)
