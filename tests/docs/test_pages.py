"""Every Python block of README.md and docs/*.md runs, page by page, against the suite's Valkey
(tests/support/docs.py says how a page is read; CONTRIBUTING.md, "The docs' code", how to
write one). A page's blocks run in order in one namespace, which starts with the names below,
so a snippet may use them as the docs do without defining them:

- ``url``: the suite's server (``redis://127.0.0.1:6379/0`` in a block is the same server);
- ``queue`` and ``q``: a :class:`~emq.Queue` named ``emails``; ``aqueue``: its
  :class:`~emq.AsyncQueue` twin; ``worker``: a :class:`~emq.Worker` of ``emails``;
- ``client``: a redis-py client of the server (``decode_responses=True``);
- ``smtp_send(to, ...)``: the reader's mail call, a stand-in that records what it was given.

The page runs as a script does (``__name__ == "__main__"``) on an empty server. A worker a
block runs stops once its queues are idle (burst mode), so a block's ``worker.run_sync()``
returns.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import AsyncQueue, PartitionedQueue, Queue, Tasks, Worker
from emq.queue._async.partitions import AsyncPartitionedQueue
from tests.support.docs import NOT_PYTHON, ROOT, Page, languages, pages, run_page

NOT_YET = {  # the pages whose blocks do not run yet; each goes when its page is fixed
    "README.md", "docs/asgi.md", "docs/cluster.md", "docs/control.md", "docs/django.md",
    "docs/events.md", "docs/flows.md", "docs/observability.md", "docs/partitions.md",
    "docs/search.md", "docs/tasks.md", "docs/testing.md", "docs/worker.md",
}  # fmt: skip
ALL = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]


@pytest.fixture
def burst(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every worker run ends once nothing is claimable and nothing is held."""
    run = Worker.run

    async def bounded(self: Worker, *, handle_signals: bool = False) -> None:
        self.configure(burst=True)
        await run(self, handle_signals=handle_signals)

    monkeypatch.setattr(Worker, "run", bounded)


@pytest.fixture
def names(url: str, client: redis.Redis, burst: None) -> Iterator[dict[str, Any]]:
    """The names a page starts with (this module's docstring), closed after the page."""
    client.flushall()  # each page on an empty server: the pages share queue names
    sent: list[tuple[Any, ...]] = []

    async def smtp_send(*args: Any, **kwargs: Any) -> None:
        sent.append((*args, *kwargs.values()))

    q = Queue.from_url(url, "emails")
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "url": url,
        "queue": q,
        "q": q,
        "aqueue": AsyncQueue.from_url(url, "emails"),
        "worker": Worker("emails", url=url),
        "client": client,
        "smtp_send": smtp_send,
        "sent": sent,
    }
    yield namespace
    _close(namespace)


def _close(namespace: dict[str, Any]) -> None:
    """Close what the page opened, on the loop its async objects ran on."""
    page: Page | None = namespace.get("__page__")
    loop = page.loop if page is not None else asyncio.Runner()
    try:
        for value in {id(v): v for v in namespace.values()}.values():
            if isinstance(value, AsyncQueue | AsyncPartitionedQueue):
                loop.run(value.close())
            elif isinstance(value, Queue | PartitionedQueue | Tasks):
                value.close()
    finally:
        loop.close()


@pytest.mark.servers("valkey")
@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=pytest.mark.xfail(strict=True)) if p in NOT_YET else p for p in pages()],
)
def test_the_page_runs(path: str, names: dict[str, Any], url: str) -> None:
    page = Page(url=url, loop=asyncio.Runner())
    names["__page__"] = page
    failed = None
    try:
        run_page(ROOT / path, names, page)
    except Exception as exc:
        failed = _from_the_page(exc)
    if failed is not None:
        pytest.fail(failed, pytrace=False)
    assert page.ran, f"{path}: no block ran"


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
