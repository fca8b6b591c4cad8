#!/usr/bin/env python3
"""Generate the sync shells from the asyncio ones: ``src/emq/queue.py`` (``Queue``) from
``async_queue.py``, ``reads.py`` (``Reads``) from ``async_reads.py`` and ``control.py``
(``Control``) from ``async_control.py``.

The two shells must not drift apart, so only the asyncio one is written by hand; the sync one
is this script's output, checked by ``tests/test_seams.py``. The rewrite is by whole tokens
(names, ``async``/``await``) plus a few exact phrases, so a method of ``AsyncQueue`` and its
twin in ``Queue`` differ only where the I/O does.

    python scripts/unasync.py          # rewrite src/emq/queue.py
    python scripts/unasync.py --check  # exit 1 if it is out of date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "src" / "emq"
PAIRS = [
    (PKG / "async_queue.py", PKG / "queue.py"),
    (PKG / "async_reads.py", PKG / "reads.py"),
    (PKG / "async_control.py", PKG / "control.py"),
    (PKG / "async_deadletters.py", PKG / "deadletters.py"),
    (PKG / "async_partitions.py", PKG / "partitions.py"),
    (PKG / "async_partition_count.py", PKG / "partition_count.py"),
]

# exact phrases, applied first (docstrings and imports that are not a token swap)
PHRASES = [
    (
        '"""``AsyncQueue``: the asyncio shell that sends what :mod:`emq.calls` builds.',
        '"""``Queue``: the sync shell that sends what :mod:`emq.calls` builds.',
    ),
    (
        ":class:`emq.Queue` is its sync twin; methods differ only by ``await``.",
        ":class:`emq.AsyncQueue` is its asyncio twin; methods differ only by ``await``.\n\n"
        "Generated from ``async_queue.py`` by ``scripts/unasync.py``: edit that file, then run\n"
        "the script.",
    ),
    ("A queue on an asyncio redis-py client", "A queue on a sync redis-py client"),
    (
        '"""``AsyncReads``: what ``AsyncQueue`` reads without changing anything.',
        '"""``Reads``: what ``Queue`` reads without changing anything.\n\n'
        "Generated from ``async_reads.py`` by ``scripts/unasync.py``: edit that file, then run\n"
        "the script.",
    ),
    (
        '"""``AsyncControl``: what ``AsyncQueue`` does to single jobs and schedules',
        '"""``Control``: what ``Queue`` does to single jobs and schedules',
    ),
    (
        "The sync twin ``Control`` (of :class:`emq.Queue`) is generated from this file.",
        "Generated from ``async_control.py`` by ``scripts/unasync.py``: edit that file, then run\n"
        "the script.",
    ),
    ("    from .async_queue import AsyncQueue\n", "    from .queue import Queue\n"),
    (
        '"""``AsyncPartitionedQueue``: one queue split into partitions, on an asyncio client.',
        '"""``PartitionedQueue``: one queue split into partitions, on a sync client.\n\n'
        "Generated from ``async_partitions.py`` by ``scripts/unasync.py``: edit that file, then\n"
        "run the script.",
    ),
    (
        ":class:`emq.PartitionedQueue` is its sync twin.",
        ":class:`emq.AsyncPartitionedQueue` is its asyncio twin.",
    ),
    ("from .async_queue import AsyncQueue\n", "from .queue import Queue\n"),
    (
        "on an asyncio client; :mod:`emq.partition_count` is its sync twin.",
        "on a sync client.\n\nGenerated from ``async_partition_count.py`` by "
        "``scripts/unasync.py``: edit that file,\nthen run the script.",
    ),
    ("from .async_partition_count import", "from .partition_count import"),
    ("import asyncio\n", "import threading\n"),
    ("asyncio.Lock()", "threading.Lock()"),
    ("asyncio.sleep(", "time.sleep("),
    ("redis.asyncio.Redis", "redis.Redis"),
    ("import redis.asyncio\n", "import redis\n"),
    ("AsyncIterator[Event]", "Iterator[Event]"),
    ("Awaitable[T]", "T"),
    ("async with ", "with "),
    ("async def ", "def "),
    ("await ", ""),
]

# whole-word renames
NAMES = {
    "AsyncQueue": "Queue",
    "AsyncPartitionedQueue": "PartitionedQueue",
    "agather": "gather",
    "AsyncReads": "Reads",
    "async_reads": "reads",
    "AsyncControl": "Control",
    "async_control": "control",
    "AsyncIterator": "Iterator",
    "Awaitable": "",
    "run_async": "run",
    "run_pipelined_async": "run_pipelined",
    "aiter_events": "iter_events",
    "ahistory": "history",
    "arun": "run",
    "acheck": "check",
    "aclose": "close",
    "aclose_client": "close_client",
    "async_client": "sync_client",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
}


def unasync(text: str) -> str:
    for old, new in PHRASES:
        text = text.replace(old, new)
    for old, new in NAMES.items():
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    # the renames above also hit the source's own name in "Generated from ``async_x.py``"
    text = re.sub(r"from ``(reads|control)\.py`` by", r"from ``async_\1.py`` by", text)
    # an import list that named a removed type (Awaitable) keeps no empty slot
    text = re.sub(r", ,", ",", text)
    text = text.replace("import (, ", "import (").replace("import , ", "import ")
    text = text.replace(", )", ")")
    return text


def main(argv: list[str]) -> int:
    stale = 0
    for source, target in PAIRS:
        wanted = unasync(source.read_text())
        if "--check" not in argv:
            target.write_text(wanted)
        elif not target.exists() or target.read_text() != wanted:
            print(f"{target} is out of date: run python scripts/unasync.py", file=sys.stderr)
            stale = 1
    return stale


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
