"""The embedded server's appendfsync: chosen at start, kept across restarts, switched on a
running server; with ``always`` it can serve ``durability="aof"`` on Valkey."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from emq import Queue, QueueOptions
from emq.embedded.standalone import EmbeddedServer
from emq.errors import ServerError

from ..conftest import _binary


def _fsync(srv: EmbeddedServer) -> str:
    c = redis.Redis.from_url(srv.url(), decode_responses=True)
    try:
        return str(c.config_get("appendfsync")["appendfsync"])
    finally:
        c.close()


@pytest.mark.slow
def test_appendfsync_is_chosen_kept_and_switched(tmp_path: Path) -> None:
    srv = EmbeddedServer(tmp_path / "d", binary=_binary("valkey"), appendfsync="always")
    srv.start()
    try:
        assert _fsync(srv) == "always"
        with Queue.from_url(srv.url(), "q", options=QueueOptions(durability="aof")) as q:
            assert q.enqueue("x").created  # WAITAOF can be trusted under always
        srv.stop()
        again = EmbeddedServer(tmp_path / "d", binary=_binary("valkey"))
        again.start()  # no choice given: the last one is kept
        assert _fsync(again) == "always"
        EmbeddedServer(tmp_path / "d", appendfsync="everysec").start()  # running: switched
        assert _fsync(again) == "everysec"
    finally:
        srv.stop()
    with pytest.raises(ServerError, match="appendfsync must be one of"):
        EmbeddedServer(tmp_path / "d", appendfsync="no")


@pytest.mark.slow
def test_cli_server_start_appendfsync(tmp_path: Path) -> None:
    env = dict(os.environ, EMQ_HOME=str(tmp_path / "cli"))
    cli = [sys.executable, "-c", "from emq.cli.main import main; main()", "server"]
    started = subprocess.run([*cli, "start", "--appendfsync", "always"], env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    try:
        assert started.returncode == 0, started.stderr
        assert _fsync(EmbeddedServer(tmp_path / "cli")) == "always"
    finally:
        subprocess.run([*cli, "stop"], env=env, capture_output=True, timeout=60)
