"""``emq worker``'s logging: a handler's own records in the worker's stream, with their job;
``--log-level``, ``--log-config``; the server named at start and the embedded default said.

Each test runs a real ``emq worker`` subprocess on a module written into its own temporary
directory (the current directory is importable), against a real server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emq import Queue
from emq.server.urls import redact_url

CLI = "from emq.cli.main import main; main()"

HANDLERS = """
import logging

log = logging.getLogger("myapp")


async def alog(payload):
    log.info("async info %s", payload["n"])
    log.warning("async warning %s", payload["n"])


def slog(payload):
    log.info("sync info %s", payload["n"])
    log.warning("sync warning %s", payload["n"])


handlers = {"alog": alog, "slog": slog}
"""


def emq(cwd: Path, *args: str, url: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("EMQ_URL", "EMQ_HOME")}
    if url is not None:
        env["EMQ_URL"] = url
    return subprocess.run(
        [sys.executable, "-c", CLI, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "logapp.py").write_text(HANDLERS)
    return tmp_path


def enqueue_both(queue: Queue) -> dict[str, str]:
    return {"alog": queue.enqueue("alog", {"n": 1}), "slog": queue.enqueue("slog", {"n": 2})}


def run(app: Path, url: str, qname: str, *args: str) -> str:
    done = emq(app, "worker", "logapp:handlers", "-q", qname, "--burst", *args, url=url)
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.mark.timeout(60)
def test_handler_records_come_out_as_json_with_their_job(
    app: Path, url: str, qname: str, queue: Queue
) -> None:
    ids = enqueue_both(queue)
    err = run(app, url, qname)
    lines = err.splitlines()
    assert all(line.startswith("{") for line in lines), err  # no bare last-resort line
    records = [json.loads(line) for line in lines]
    mine = {r["msg"]: r for r in records if r["logger"] == "myapp"}
    for kind, n in (("async", 1), ("sync", 2)):
        name = "alog" if kind == "async" else "slog"
        for level in ("info", "warning"):
            r = mine[f"{kind} {level} {n}"]
            assert r["level"] == level
            assert (r["job"], r["job_name"], r["queue"], r["attempt"]) == (
                ids[name], name, qname, 1
            )  # fmt: skip
    started = next(r for r in records if r.get("event") == "started")
    assert started["server"] == redact_url(url)


@pytest.mark.timeout(60)
def test_text_format_has_the_pid_and_the_job_and_log_level_hides_info(
    app: Path, url: str, qname: str, queue: Queue
) -> None:
    ids = enqueue_both(queue)
    err = run(app, url, qname, "--log-format", "text")
    info = next(line for line in err.splitlines() if "async info 1" in line)
    assert info.split()[2] == "info" and info.split()[3] == "myapp:"
    pid = int(info.split()[1])
    assert pid != os.getpid() and f"job={ids['alog']}" in info
    assert f"queue={qname}" in info and "job_name=alog" in info and "attempt=1" in info
    assert f"server={redact_url(url)}" in err

    enqueue_both(queue)
    err = run(app, url, qname, "--log-level", "warning")
    records = [json.loads(line) for line in err.splitlines()]
    shown = {r["msg"] for r in records if r["logger"] == "myapp"}
    assert shown == {"async warning 1", "sync warning 2"}


@pytest.mark.timeout(60)
def test_log_config_hands_logging_to_the_user(
    app: Path, url: str, qname: str, queue: Queue
) -> None:
    ids = enqueue_both(queue)
    out = app / "app.log"
    config = {
        "version": 1,
        "filters": {"job": {"()": "emq.worker.log.JobFields"}},
        "formatters": {"plain": {"format": "%(name)s|%(message)s|%(job_id)s"}},
        "handlers": {
            "file": {
                "class": "logging.FileHandler",
                "filename": str(out),
                "formatter": "plain",
                "filters": ["job"],
            },
        },
        "root": {"level": "INFO", "handlers": ["file"]},
    }
    (app / "log.json").write_text(json.dumps(config))
    err = run(app, url, qname, "--log-config", "log.json")
    written = out.read_text().splitlines()
    assert f"myapp|async info 1|{ids['alog']}" in written
    assert f"myapp|sync warning 2|{ids['slog']}" in written
    assert any(line.startswith("emq.") for line in written)  # emq's own records, the user's way
    assert "{" not in err and "myapp" not in err  # emq's format is not used

    (app / "bad.toml").write_text("version = [")
    bad = emq(app, "worker", "logapp:handlers", "--burst", "--log-config", "bad.toml", url=url)
    assert bad.returncode == 2 and "bad.toml: not valid TOML" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_embedded_default_is_said_once_and_a_given_url_is_not(
    app: Path, url: str, qname: str
) -> None:
    notice = "emq: no --url or EMQ_URL: using the embedded Valkey in ./.emq"
    try:
        first = emq(app, "worker", "logapp:handlers", "-q", qname, "--burst", url=None)
        assert first.returncode == 0, first.stderr
        assert first.stderr.count(notice) == 1 and "(started now)" in first.stderr
        started = next(
            json.loads(line) for line in first.stderr.splitlines() if '"started"' in line
        )
        password = (app / ".emq" / "password").read_text().strip()
        assert started["server"].startswith("redis://") and password not in first.stderr
        stats = emq(app, "stats", qname, url=None)
        assert stats.returncode == 0, stats.stderr
        assert stats.stderr.count(notice) == 1 and "(already running)" in stats.stderr
        given = emq(app, "stats", qname, "--url", url, url=None)
        assert given.returncode == 0 and "embedded" not in given.stderr
    finally:
        emq(app, "server", "stop", url=None)
