"""A wrong endpoint or a broken tasks module is one line on stderr and exit 2 for every command,
never a traceback (docs/cli.md). The endpoints are local stand-ins: an HTTP server (it answers, but
not in the Redis protocol), a listener that hangs up at once, and a port nobody listens on."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from emq.cli.main import cli

ROOT = Path(__file__).parents[2]
CLI = "from emq.cli.main import main; main()"
JOB = "JOB0123456789a"


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"redis://127.0.0.1:{srv.server_address[1]}/0"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def hangup_url() -> Iterator[str]:
    """Accepts every connection and closes it at once."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"redis://127.0.0.1:{sock.getsockname()[1]}/0"
    stop.set()
    sock.close()


@pytest.fixture(scope="module")
def refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"  # closed again: nothing listens there


COMMANDS = [
    ["stats"],
    ["stats", "q"],
    ["enqueue", "q", "x", "{}"],
    ["sweep", "q"],
    ["jobs", "q", "dead"],
    ["job", "q", JOB],
    ["dead", "q", "list"],
    ["dead", "q", "redrive"],
    ["pause", "q"],
    ["drain", "q"],
    ["events", "tail", "q"],
    ["history", "q", JOB],
    ["archive", "run", "q", "--once"],
    ["archive", "status", "q"],
    ["archive", "release", "q"],
    ["race", "two-sweeps"],
    ["race", "explore"],
    ["worker", "tests.support.worker_handlers:handlers", "--burst"],
]
EXPECTED = {
    "http_url": "does not answer as Valkey or Redis",
    "hangup_url": "cannot reach the server at",
    "refused_url": "cannot reach the server at",
}


def _one_clear_line(output: str, code: int, needle: str) -> None:
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert needle in lines[0] and "Traceback" not in output


@pytest.mark.timeout(120)
@pytest.mark.parametrize("endpoint", list(EXPECTED))
@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
def test_every_command_fails_on_a_wrong_endpoint_in_one_line(
    endpoint: str, args: list[str], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue(endpoint)
    floor = ["--floor", str(tmp_path / "f.sqlite3")] if args[0] == "archive" else []
    result = CliRunner().invoke(cli, [*args, *floor, "--url", url])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    _one_clear_line(result.output, result.exit_code, EXPECTED[endpoint])
    assert url in result.output


def _worker(tmp_path: Path, target: str, url: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, EMQ_URL=url)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", CLI, "worker", target, "--burst"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("def handler(payload:\n    pass\n", "SyntaxError"),
        ("import no_such_dependency_xyz\n", "No module named 'no_such_dependency_xyz'"),
        ("raise RuntimeError('no config here')\n", "RuntimeError: no config here"),
        ("handlers = {}\n1 / 0\n", "ZeroDivisionError"),
    ],
)
def test_a_broken_tasks_module_is_one_line_and_exit_2(
    url: str, tmp_path: Path, source: str, needle: str
) -> None:
    (tmp_path / "broken_tasks.py").write_text(source)
    done = _worker(tmp_path, "broken_tasks:handlers", url)
    _one_clear_line(done.stderr, done.returncode, needle)
    assert "cannot import 'broken_tasks'" in done.stderr
