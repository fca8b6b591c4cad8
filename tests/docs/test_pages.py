"""Every Python block of README.md and docs/*.md runs, page by page, against the suite's Valkey
(tests/support/docs.py says how a page is read; CONTRIBUTING.md, "The docs' code", how to
write one). A page's blocks run in order in one namespace, which starts with the names below,
so a snippet may use them as the docs do without defining them:

- ``url``: the suite's server (``redis://127.0.0.1:6379/0`` in a block, and ``EMQ_URL`` in
  the environment, are the same server);
- ``queue`` and ``q``: a :class:`~emq.Queue` named ``emails``; ``aqueue``: its
  :class:`~emq.AsyncQueue` twin; ``worker``: a :class:`~emq.Worker` of ``emails``;
- ``emq_url``, ``emq_queue``, ``emq_aqueue``: the same as ``url``, ``queue`` and ``aqueue``,
  under the names of emq's pytest fixtures (docs/testing.md);
- ``client``: a redis-py client of the server (``decode_responses=True``);
- ``smtp_send(to, ...)``: the reader's mail call, a stand-in that records what it was given
  (in ``sent``);
- ``monkeypatch``: pytest's, for a block that is a test of the reader's;
- ``serve(worker)``: runs ``worker`` in a thread until the page ends or ``.stop()`` of what
  it returns, for a block that waits for what another process's worker does
  (``q.result(job, timeout_s=30)``).

The page runs as a script does (``__name__ == "__main__"``) on an empty server, in a
temporary working directory; a tracer provider it sets is OpenTelemetry's global one for the
page only. Any worker a block runs, other than a served one, stops once its queues are idle
(burst mode), so a block's ``worker.run_sync()`` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import AsyncQueue, PartitionedQueue, Queue, Tasks, Worker
from emq.archive import Archive
from emq.queue._async.partitions import AsyncPartitionedQueue
from tests.support.docs import NOT_PYTHON, ROOT, Page, languages, pages, run_page

ALL = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]


class Serving:
    """A worker run in a thread by ``serve(worker)``, until :meth:`stop` or the page's end."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.thread = threading.Thread(target=worker.run_sync, kwargs={"handle_signals": False})

    def stop(self) -> None:
        """Stop the worker gracefully and wait for its thread."""
        self.worker.stop()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), f"{self.worker.queue_names} did not stop"


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Worker], Serving]]:
    """``serve(worker)`` runs it in a thread until it is stopped or the test ends; every other
    worker run ends once nothing is claimable and nothing is held (burst mode)."""
    served: list[Serving] = []
    run = Worker.run

    async def bounded(self: Worker, *, handle_signals: bool = False) -> None:
        if all(self is not s.worker for s in served):
            self.configure(burst=True)
        await run(self, handle_signals=handle_signals)

    monkeypatch.setattr(Worker, "run", bounded)

    def start(worker: Worker) -> Serving:
        served.append(serving := Serving(worker))  # listed first: its run is not a burst
        serving.thread.start()
        return serving

    yield start
    for serving in served:
        serving.stop()


@pytest.fixture
def names(
    url: str,
    client: redis.Redis,
    serve: Callable[[Worker], Serving],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[dict[str, Any]]:
    """The names a page starts with (this module's docstring), closed after the page."""
    client.flushall()  # each page on an empty server: the pages share queue names
    monkeypatch.setenv("EMQ_URL", url)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # where a block's relative paths (.emq/floor/...) go
    sent: list[tuple[Any, ...]] = []

    async def smtp_send(*args: Any, **kwargs: Any) -> None:
        sent.append((*args, *kwargs.values()))

    q, aq = Queue.from_url(url, "emails"), AsyncQueue.from_url(url, "emails")
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "url": url,
        "queue": q,
        "q": q,
        "aqueue": aq,
        "emq_url": url,
        "emq_queue": q,
        "emq_aqueue": aq,
        "worker": Worker("emails", url=url),
        "client": client,
        "smtp_send": smtp_send,
        "sent": sent,
        "serve": serve,
        "monkeypatch": monkeypatch,
    }
    with _own_tracer_provider():
        yield namespace
        _close(namespace)


@contextlib.contextmanager
def _own_tracer_provider() -> Iterator[None]:
    """A page may set OpenTelemetry's global tracer provider (once per process, says the API):
    it is the page's only, shut down and put back afterwards, as tests/observe does."""
    from opentelemetry import trace
    from opentelemetry.util._once import Once

    saved = trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    try:
        yield
    finally:
        provider = trace._TRACER_PROVIDER
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved
        if provider is not saved[0] and hasattr(provider, "shutdown"):
            provider.shutdown()


def _close(namespace: dict[str, Any]) -> None:
    """Close what the page opened, on the loop its async objects ran on."""
    page: Page | None = namespace.get("__page__")
    loop = page.loop if page is not None else asyncio.Runner()
    try:
        for value in {id(v): v for v in namespace.values()}.values():
            if isinstance(value, AsyncQueue | AsyncPartitionedQueue):
                loop.run(value.close())
            elif isinstance(value, Executor):
                value.shutdown()
            elif isinstance(value, Queue | PartitionedQueue | Archive | redis.Redis):
                value.close()
            elif isinstance(value, Tasks):
                value.close()
                loop.run(value.aclose())
    finally:
        loop.close()


@pytest.mark.servers("valkey")
@pytest.mark.parametrize(
    "path",
    pages(),
)
def test_the_page_runs(path: str, names: dict[str, Any], url: str, tmp_path: Path) -> None:
    page = Page(url=url, loop=asyncio.Runner(), files=tmp_path / "files")
    names["__page__"] = page
    failed = None
    try:
        run_page(ROOT / path, names, page)
    except Exception as exc:
        failed = _from_the_page(exc)
    if failed is not None:
        pytest.fail(failed, pytrace=False)


def _from_the_page(exc: BaseException) -> str:
    """The traceback from the failing block down, its first line the page's."""
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.endswith(".md"):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__, chain=False))


@pytest.mark.parametrize("path", ALL)
def test_every_fenced_block_names_a_known_language(path: str) -> None:
    """A block of Python under another name (``py``, ``pycon``) would not run: refuse it."""
    assert languages(Path(ROOT / path)) - NOT_PYTHON - {"python"} == set()


SENTENCE = re.compile(r"(?<=[.;])\s+")
ABOUT_TESTS = re.compile(r"\b(lanes?|suite|tests?)\b")
FIGURE = re.compile(r"\b\d[\d,.]*\s*(s|seconds?|minutes?)\b|\b\d[\d,]*\s+tests\b")


@pytest.mark.parametrize("path", ["README.md", "CONTRIBUTING.md", "docs/testing.md"])
def test_no_page_states_a_count_of_tests_or_a_lane_time(path: str) -> None:
    """Such figures drift with every change of the suite; `./scripts/test` prints its wall
    time, and pytest its counts, on every run."""
    text = (ROOT / path).read_text()
    found = [s for s in SENTENCE.split(text) if ABOUT_TESTS.search(s) and FIGURE.search(s)]
    assert found == []
