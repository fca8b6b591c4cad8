"""The fixtures of ``pytest -p emq.testing`` and the server they share.

One server per test session (per pytest-xdist worker process): a private embedded Valkey
(:class:`~emq.embedded.standalone.EmbeddedServer`, in a temporary directory, on a free
loopback port), started the first time a test asks for it and stopped when the session
ends; or, with ``--emq-url URL`` or ``$EMQ_TEST_URL``, a server of yours, whose database the
plugin flushes (at the start of the session and after every test that uses ``emq_url``): so
never point it at data you keep. It reads ``EMQ_TEST_URL``, not ``EMQ_URL``, for that reason.
Under pytest-xdist, worker ``gwN`` uses database ``N`` above the URL's own, so the workers
never flush each other's keys.

Isolation: each test that takes ``emq_url`` (or a fixture built on it) finds its database
empty of what earlier tests wrote, because the database is flushed after each such test.
A fixture of a wider scope takes ``emq_session_url``, which is not flushed by itself.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest

if TYPE_CHECKING:
    from emq import AsyncQueue, Queue

ENV_URL = "EMQ_TEST_URL"
_DB = re.compile(r"/(\d*)")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("emq", "emq.testing")
    group.addoption(
        "--emq-url",
        default=None,
        metavar="URL",
        help=f"a server for the emq_url fixture, flushed after each test (default: ${ENV_URL}, "
        "else a private embedded Valkey started on first use)",
    )


def worker_url(url: str, worker: str | None) -> str:
    """``url`` for pytest-xdist worker ``worker`` (``"gw3"``): its database number plus 3.
    Outside xdist (None, ``"master"``) the URL itself."""
    if worker is None or not worker.startswith("gw"):
        return url
    n = int(worker[2:])
    if n == 0:
        return url
    parsed = urlparse(url)
    db = _DB.fullmatch(parsed.path or "/")
    if parsed.scheme not in ("redis", "rediss", "valkey", "valkeys") or db is None:
        raise pytest.UsageError(
            f"{ENV_URL} with pytest-xdist needs a redis:// URL whose path is a database "
            "number (worker gwN uses database N above it); or leave it unset for one embedded "
            "server per worker"
        )
    return parsed._replace(path=f"/{int(db.group(1) or 0) + n}").geturl()


def _flush(url: str) -> None:
    from emq.server.clients import close_client, sync_client

    client = sync_client(url)
    try:
        client.flushdb()
    finally:
        close_client(client)


@pytest.fixture(scope="session")
def emq_session_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The session's server URL (password included): ``--emq-url`` / ``$EMQ_TEST_URL``
    (flushed now), else an embedded Valkey started now and stopped when the session ends."""
    given = request.config.getoption("emq_url") or os.environ.get(ENV_URL)
    if given:
        from emq.server.urls import check_url

        worker = getattr(request.config, "workerinput", {}).get("workerid")  # xdist's "gwN"
        url = worker_url(check_url(given), worker)
        _flush(url)
        yield url
        return
    from emq.embedded.standalone import EmbeddedServer

    server = EmbeddedServer(tmp_path_factory.mktemp("emq-server"))
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
def emq_url(emq_session_url: str) -> Iterator[str]:
    """The session's server for this test; its database is flushed after the test, so the
    next test does not see this one's keys."""
    yield emq_session_url
    _flush(emq_session_url)


def _fresh_name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def emq_queue(emq_url: str, request: pytest.FixtureRequest) -> Iterator[Queue]:
    """A :class:`~emq.Queue` on a fresh name (the test's name and 8 random hex digits),
    closed after the test."""
    from emq import Queue

    queue = Queue.from_url(emq_url, _fresh_name(request))
    yield queue
    queue.close()


async def _aqueue(emq_url: str, request: pytest.FixtureRequest) -> AsyncIterator[AsyncQueue]:
    """An :class:`~emq.AsyncQueue` on a fresh name, closed after the test on its loop."""
    from emq import AsyncQueue

    queue = AsyncQueue.from_url(emq_url, _fresh_name(request))
    yield queue
    await queue.close()


def _needs_asyncio() -> None:
    pytest.fail("the emq_aqueue fixture needs pytest-asyncio: pip install pytest-asyncio")


def _async_fixture() -> Any:
    """``emq_aqueue`` as a pytest-asyncio fixture (in its strict mode as in auto), or, with no
    pytest-asyncio installed, a fixture that fails saying so."""
    try:
        import pytest_asyncio
    except ImportError:  # pragma: no cover - emq's suite has it
        return pytest.fixture(_needs_asyncio, name="emq_aqueue")
    return pytest_asyncio.fixture(_aqueue, name="emq_aqueue")


emq_aqueue = _async_fixture()
