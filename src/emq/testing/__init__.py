"""emq's testing kit: a pytest plugin and helpers for testing code that uses emq.

Load the plugin with ``pytest -p emq.testing``; installing emq registers it as a pytest
entry point too, so it is loaded in every pytest run of an environment that has emq (both
ways register the one plugin, once). It adds fixtures only; none is autouse, so a suite
that does not ask for them is not changed:

- ``emq_url``: the URL of a server for this test, whose database is flushed after it;
- ``emq_queue``: a :class:`~emq.Queue` on a fresh name on that server, closed after;
- ``emq_aqueue``: its :class:`~emq.AsyncQueue` twin (with pytest-asyncio installed);
- ``emq_session_url``: the same server for fixtures wider than a test (never flushed by
  itself; the next test's flush empties it).

The server is a private embedded Valkey started on first use and stopped when the session
ends (one per pytest-xdist worker), or the one ``--emq-url`` / ``$EMQ_TEST_URL`` names.

The helpers: :func:`run_worker` / :func:`arun_worker` run a worker in burst mode in this
process and say what became of each job it claimed; :func:`enqueued` / :func:`aenqueued`
list the jobs waiting in a queue, for a test of what code enqueued. ``docs/testing.md``
shows all of it. Importing this module is cheap (pytest imports it at every start): the
helpers load emq's worker on first use.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .plugin import (
    emq_aqueue,
    emq_queue,
    emq_session_url,
    emq_url,
    pytest_addoption,
)

if TYPE_CHECKING:
    from .runs import JobRun, WorkerRun, arun_worker, run_worker
    from .waiting import aenqueued, enqueued

__all__ = [
    "JobRun",
    "WorkerRun",
    "aenqueued",
    "arun_worker",
    "emq_aqueue",
    "emq_queue",
    "emq_session_url",
    "emq_url",
    "enqueued",
    "pytest_addoption",
    "run_worker",
]

_WHERE = {
    "JobRun": "runs",
    "WorkerRun": "runs",
    "arun_worker": "runs",
    "run_worker": "runs",
    "aenqueued": "waiting",
    "enqueued": "waiting",
}


def __getattr__(name: str) -> Any:
    """Import a helper's module on first use (PEP 562). There is no ``__dir__``: pytest and
    pluggy walk ``dir()`` of a plugin, and that walk must not import the worker."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'emq.testing' has no attribute {name!r}")
    value = getattr(import_module(f".{where}", __name__), name)
    globals()[name] = value
    return value
