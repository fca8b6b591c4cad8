"""``emq archive run|status|ship|restore|release`` and ``emq history`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import redis
from click.testing import CliRunner

from emq import Queue
from emq.cli.main import cli


def _run(*args: str) -> str:
    out = CliRunner().invoke(cli, list(args))
    assert out.exit_code == 0, out.output
    return out.output


def test_archive_run_status_history_ship_restore(
    url: str, queue: Queue, client: redis.Redis, tmp_path: Path
) -> None:
    job = queue.enqueue("report", {"month": 5}, max_attempts=1)
    (c,) = queue.claim(1)
    queue.fail(c.id, c.token, "no data")
    queue.enqueue_many([("other", i) for i in range(10)])
    floor = str(tmp_path / "floor.sqlite3")
    q, u = queue.name, ["--url", url]

    out = json.loads(_run("archive", "run", q, "--once", "--floor", floor, "--json", *u))
    assert out["folded"] == 13 and out["trimmed"] == 3  # entries: one per call, W's kept
    st = json.loads(_run("archive", "status", q, "--floor", floor, "--json", *u))
    assert st["floor_rows"] == 13 and st["lag"] == 0 and st["stream_length"] == 1
    assert "watermark" in _run("archive", "status", q, "--floor", floor, *u)

    out = _run("history", q, job, "--floor", floor, "--json", *u)
    story = [json.loads(line) for line in out.splitlines()]  # one object per line
    assert [e["event"] for e in story] == ["enqueued", "claimed", "dead"]
    assert story[-1]["fields"]["error"] == "no data"
    assert "dead" in _run("history", q, job, "--floor", floor, *u)

    bucket = str(tmp_path / "bucket")
    shipped = json.loads(_run("archive", "ship", q, "--to", bucket, "--flush", "--floor", floor,
                              "--json"))  # fmt: skip
    assert shipped == {"closed": 1, "shipped": 1, "events": 13}
    restored = tmp_path / "restored.sqlite3"
    r = json.loads(_run("archive", "restore", q, "--from", bucket, "--floor", str(restored),
                        "--json"))  # fmt: skip
    assert r["events"] == 13 and r["watermark"] == st["watermark"]
    again = _run("history", q, job, "--floor", str(restored), "--json", *u)
    assert [json.loads(line) for line in again.splitlines()] == story

    _run("archive", "release", q, "--floor", floor, *u)
    assert not client.exists(queue.core.keys.events_archived)


def test_cli_errors_are_one_line(url: str, queue: Queue, tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["history", queue.name, "not-an-id", "--url", url])
    assert out.exit_code == 2 and "error" in out.output
    out = CliRunner().invoke(
        cli, ["archive", "restore", queue.name, "--from", str(tmp_path), "--floor", "/dev/null/x"]
    )
    assert out.exit_code == 2 and "cannot open the floor" in out.output
