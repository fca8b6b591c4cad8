"""The embedded server is private to its owner (docs/security.md) and URLs never show their password
outside ``emq server url``.

Each test starts its own server (Valkey, and Redis where ``redis-server`` is on the PATH) in a
temporary directory: data directory 0700, every file in it 0600 (AOF files the server writes
later too), a password required, kept across restarts, never on a command line.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from emq import Queue
from emq.embedded.standalone import EmbeddedServer
from emq.errors import InvalidUrl, ServerError
from emq.server.urls import check_url, redact_url

SECRET = "Hunter2-Tr0ub4dor-correct-horse"


def modes(root: Path) -> dict[str, int]:
    """Permission bits of ``root`` and of everything below it, by relative path."""
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(dirpath, name)
            out[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def assert_private(root: Path) -> None:
    found = modes(root)
    wrong = {p: oct(m) for p, m in found.items() if m != (0o700 if (root / p).is_dir() else 0o600)}
    assert not wrong, f"not private to the owner: {wrong}"


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def raw_reply(port: int, command: bytes) -> bytes:
    """The server's first reply line to ``command`` on a fresh connection (no AUTH sent)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(command)
        return s.recv(200)


def wait_rewrite_done(client: redis.Redis) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        info = client.info("persistence")
        if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
            return
        time.sleep(0.02)
    raise AssertionError("AOF rewrite did not finish within 10 s")


@pytest.fixture
def own(server: EmbeddedServer, tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A private server of the same kind as ``server`` (valkey, redis), stopped after."""
    srv = EmbeddedServer(tmp_path / "srv", binary=server.binary)
    yield srv
    srv.stop()


@pytest.mark.timeout(60)
def test_data_dir_and_every_file_are_private_after_start_and_after_writes(
    own: EmbeddedServer,
) -> None:
    url = own.start()
    assert_private(own.data_dir)
    assert {"password", "server.json", "server.pid", "server.log", "appendonlydir"} <= set(
        os.listdir(own.data_dir)
    )
    with Queue.from_url(url, "perms") as q:
        q.enqueue_many([("job", {"secret payload": i}) for i in range(200)])
        wait_rewrite_done(q.client)
        q.client.bgrewriteaof()  # the server writes new AOF files after start
        wait_rewrite_done(q.client)
    assert_private(own.data_dir)
    own.stop()
    assert own.start() == url
    assert_private(own.data_dir)


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_unauthenticated_and_wrong_password_clients_are_refused(own: EmbeddedServer) -> None:
    url = own.start()
    port = port_of(url)
    assert raw_reply(port, b"PING\r\n").startswith(b"-NOAUTH"), "no password: refused"
    assert raw_reply(port, b"GET emq:{x}:meta\r\n").startswith(b"-NOAUTH")
    assert raw_reply(port, b"AUTH not-the-password\r\n").startswith(b"-WRONGPASS")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=port, password="not-the-password").ping()
    assert redis.Redis.from_url(url).ping(), "the URL emq hands out carries the password"
    password = (own.data_dir / "password").read_text().strip()
    assert len(password) >= 40 and f":{password}@" in url


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_restart_keeps_port_password_and_data(own: EmbeddedServer) -> None:
    url = own.start()
    password = (own.data_dir / "password").read_text()
    redis.Redis.from_url(url).set("kept", "1")
    assert own.stop()
    assert own.start() == url, "same port, same password"
    assert (own.data_dir / "password").read_text() == password
    assert redis.Redis.from_url(url).get("kept") == b"1"
    assert own.start() == url, "a running server is reused"
    assert own.url() == url


@pytest.mark.timeout(30)
def test_a_directory_made_0755_by_hand_is_tightened_at_start(own: EmbeddedServer) -> None:
    d = own.data_dir
    (d / "floor").mkdir(parents=True)
    (d / "floor" / "orders.sqlite3").write_text("old payloads")
    (d / "notes.txt").write_text("left by an older emq")
    for path, mode in [(d, 0o755), (d / "floor", 0o755)]:
        path.chmod(mode)
    for path in (d / "notes.txt", d / "floor" / "orders.sqlite3"):
        path.chmod(0o644)
    assert modes(d)["."] == 0o755
    own.start()
    assert_private(d)


@pytest.mark.timeout(30)
def test_a_running_server_left_open_by_an_older_emq_gets_its_password(
    own: EmbeddedServer,
) -> None:
    url = own.start()
    redis.Redis.from_url(url).config_set("requirepass", "")  # as an older emq ran it
    (own.data_dir / "password").unlink()
    assert raw_reply(port_of(url), b"PING\r\n").startswith(b"+PONG")
    new = own.start()
    assert new != url and port_of(new) == port_of(url), "same server, new password"
    assert raw_reply(port_of(new), b"PING\r\n").startswith(b"-NOAUTH")
    assert redis.Redis.from_url(new).ping()


@pytest.mark.timeout(30)
def test_the_password_is_never_on_a_command_line(own: EmbeddedServer) -> None:
    url = own.start()
    password = (own.data_dir / "password").read_text().strip()
    pid = json.loads((own.data_dir / "server.json").read_text())["pid"]
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert cmdline and password.encode() not in cmdline
    assert password not in (own.data_dir / "server.log").read_text()
    assert password in url


def test_a_malformed_password_file_is_a_clear_error(tmp_path: Path) -> None:
    d = tmp_path / "srv"
    d.mkdir()
    (d / "password").write_text("short\n")
    with pytest.raises(ServerError, match="does not hold a password"):
        EmbeddedServer(d).start()


def emq(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from emq.cli.main import main; main()", *args],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_cli_finds_the_embedded_server_and_only_server_url_prints_the_password(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("EMQ_URL", "EMQ_HOME")}
    env["EMQ_HOME"] = str(home)
    try:
        started = emq("server", "start", env=env)
        assert started.returncode == 0, started.stderr
        password = (home / "password").read_text().strip()
        enqueued = emq("enqueue", "cli-q", "job", "--json", env=env)  # no URL given
        assert enqueued.returncode == 0, enqueued.stderr
        stats = emq("stats", "cli-q", "--json", env=env)
        assert stats.returncode == 0 and json.loads(stats.stdout)["pending"] == 1, stats.stderr
        shown = [
            started,
            emq("server", "start", "--json", env=env),
            emq("server", "status", env=env),
            emq("server", "status", "--json", env=env),
            enqueued,
            stats,
        ]
        for done in shown:
            assert password not in done.stdout + done.stderr, done.args
        assert ":***@127.0.0.1:" in json.loads(shown[1].stdout)["url"]
        assert ":***@127.0.0.1:" in json.loads(shown[3].stdout)["url"]
        url = emq("server", "url", env=env)
        assert url.returncode == 0 and f":{password}@127.0.0.1:" in url.stdout
        assert redis.Redis.from_url(url.stdout.strip()).ping()
        as_json = emq("server", "url", "--json", env=env)
        assert json.loads(as_json.stdout) == {"url": url.stdout.strip()}
    finally:
        EmbeddedServer(home).stop()


# -- InvalidUrl and every message showing a URL redact its password ----------------

BAD_URLS = [
    f"http://user:{SECRET}@127.0.0.1:6379/0",  # wrong scheme
    f"redis://:{SECRET}@127.0.0.1:99999/0",  # port out of range
    f"redis://:{SECRET}@127.0.0.1:port/0",  # port not a number
    f"redis://:{SECRET}@/0",  # no host
    f"redis://:{SECRET[:5]}/{SECRET[5:]}@127.0.0.1/0",  # an unescaped "/" in the password
    f"redis://:{SECRET[:5]}?{SECRET[5:]}@127.0.0.1/0",  # an unescaped "?"
    f"unix://:{SECRET}@",  # no socket path
    f"rediss://u:{SECRET}@[::1/0",  # unparseable
    f"nonsense://x/?password={SECRET}",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_invalid_url_never_contains_the_password(url: str) -> None:
    with pytest.raises(InvalidUrl) as info:
        check_url(url)
    message = str(info.value)
    for piece in (SECRET, SECRET[:5], SECRET[5:]):
        assert piece not in message, message
    assert "***" in message


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("rediss://alice:p%40ss@host:6380/2", "rediss://alice:***@host:6380/2"),
        ("redis://alice@host/0", "redis://alice@host/0"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("redis://:p@ss@host/0", "redis://:***@host/0"),
        ("redis://host/0?password=pw&db=1", "redis://host/0?password=***&db=1"),
        (
            "rediss://:pw@h:6380/0?ssl_ca_certs=/tmp/ca.crt",
            "rediss://:***@h:6380/0?ssl_ca_certs=/tmp/ca.crt",
        ),
        ("unix://:pw@/run/valkey.sock?db=0", "unix://:***@/run/valkey.sock?db=0"),
    ],
)
def test_redact_url_keeps_user_host_port_and_db(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [f"redis://:{SECRET}@127.0.0.1:1/0", f"redis://127.0.0.1:1/0?password={SECRET}"],
)
def test_cli_error_lines_never_contain_the_password(url: str) -> None:
    from click.testing import CliRunner

    from emq.cli.main import cli

    result = CliRunner().invoke(cli, ["stats", "q", "--url", url])
    assert result.exit_code == 2 and "cannot reach the server" in result.output, result.output
    assert SECRET not in result.output and "***" in result.output, result.output
