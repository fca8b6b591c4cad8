"""The emq command, driven through click's runner against real servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from emq.cli.main import cli

from ..support.helpers import expire_leases

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def run_json(*args: str) -> dict:  # type: ignore[type-arg]
    code, out = run(*args, "--json")
    assert code == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


def test_queue_commands_round_trip(url: str, qname: str, client: redis.Redis) -> None:
    made = run_json("enqueue", qname, "send", '{"to": "a@b"}', "--url", url)
    assert made["created"] is True
    again = run_json("enqueue", qname, "send", '{"to": "x"}', "--key", "k1", "--url", url)
    dup = run_json("enqueue", qname, "send", '{"to": "x"}', "--key", "k1", "--url", url)
    assert dup == {"id": again["id"], "created": False}
    assert run_json("stats", qname, "--url", url)["pending"] == 2
    listed = run_json("jobs", qname, "pending", "--url", url)["jobs"]
    assert [j["id"] for j in listed] == [made["id"], again["id"]]
    assert run_json("job", qname, made["id"], "--url", url)["payload"] == {"to": "a@b"}

    from emq import Queue

    q = Queue.from_url(url, qname)
    q.claim(count=2)
    expire_leases(client, qname)
    swept = run_json("sweep", qname, "--max-stalled", "1", "--url", url)
    assert swept == {"recovered": [], "dead": sorted(swept["dead"])} and len(swept["dead"]) == 2
    assert len(run_json("dead", qname, "list", "--url", url)["jobs"]) == 2
    assert run_json("dead", qname, "redrive", "--url", url) == {"redrive": 2}
    assert run_json("pause", qname, "--url", url)["paused"] is True
    assert q.claim() == []
    run_json("resume", qname, "--url", url)
    assert run_json("drain", qname, "--url", url) == {"drained": 2}
    everything = run_json("stats", "--url", url)
    assert qname in everything
    q.close()


def test_human_output_is_tables(url: str, qname: str) -> None:
    run("enqueue", qname, "send", "--url", url)
    code, out = run("stats", qname, "--url", url)
    assert code == 0 and "emq queues" in out and "pending" in out and "│" in out


@pytest.mark.parametrize(
    "args,needle",
    [
        (["enqueue", "bad name", "x"], "queue name"),
        (["enqueue", "q", "x", "{not json"], "not valid JSON"),
        (["job", "q", "JOB-nope"], "job id"),
        (["sweep", "q", "--limit", "0"], "limit"),
    ],
)
def test_bad_input_is_one_clear_line(url: str, args: list[str], needle: str) -> None:
    result = CliRunner().invoke(cli, [*args, "--url", url])
    assert result.exit_code == 2
    assert needle in result.output and "Traceback" not in result.output


def test_bad_url_is_refused(qname: str) -> None:
    result = CliRunner().invoke(cli, ["stats", qname, "--url", "http://nowhere"])
    assert result.exit_code == 2 and "scheme" in result.output


def test_unreachable_server_is_one_clear_line(qname: str) -> None:
    result = CliRunner().invoke(cli, ["stats", qname, "--url", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 2 and "cannot reach the server" in result.output


@pytest.mark.slow
def test_server_lifecycle(tmp_path: Path) -> None:
    d = str(tmp_path / "emq")
    code, out = run("server", "status", "--dir", d)
    assert code == 1 and "not started" in out
    started = run_json("server", "start", "--dir", d)
    assert started["url"].startswith("redis://:***@127.0.0.1:"), "password redacted"
    assert run_json("server", "start", "--dir", d)["url"] == started["url"], "reused"
    full = run_json("server", "url", "--dir", d)["url"]  # the one place showing the password
    assert run("server", "url", "--dir", d) == (0, full + "\n")
    assert redis.Redis.from_url(full).ping()
    assert run_json("server", "status", "--dir", d)["running"] is True
    assert (tmp_path / "emq" / "appendonlydir").is_dir(), "AOF is on"
    assert run_json("server", "stop", "--dir", d) == {"stopped": True}
    assert run_json("server", "stop", "--dir", d) == {"stopped": False}


def test_stale_pid_file_is_explained_and_recovered(tmp_path: Path) -> None:
    d = tmp_path / "emq"
    d.mkdir()
    (d / "server.json").write_text(json.dumps({"port": 1, "pid": 999_999_999}))
    code, out = run("server", "status", "--dir", str(d))
    assert code == 1 and "stale pid file" in out
    run_json("server", "start", "--dir", str(d))
    assert redis.Redis.from_url(run_json("server", "url", "--dir", str(d))["url"]).ping()
    run("server", "stop", "--dir", str(d))


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    from emq.embedded.standalone import EmbeddedServer
    from emq.errors import ServerError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ServerError, match=f"port {port} is already in use"):
            EmbeddedServer(tmp_path, port=port).start()


def test_missing_binary_is_a_clear_error(tmp_path: Path) -> None:
    from emq.embedded.standalone import EmbeddedServer
    from emq.errors import ServerError

    with pytest.raises(ServerError, match="could not run"):
        EmbeddedServer(tmp_path, binary=tmp_path / "no-such-valkey-server").start()


def test_embedded_server_is_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMQ_URL", raising=False)
    monkeypatch.setenv("EMQ_HOME", str(tmp_path / "home"))
    try:
        result = CliRunner().invoke(cli, ["enqueue", "embedded", "send", "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["created"]  # the notice is on stderr, once
        assert result.stderr.count("emq: no --url or EMQ_URL: using the embedded Valkey") == 1
        assert (tmp_path / "home" / "server.json").exists()
    finally:
        run("server", "stop", "--dir", str(tmp_path / "home"))
