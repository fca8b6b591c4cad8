"""The seams that keep the code small (CONTRIBUTING.md): the core imports none of the extras."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path


def test_the_core_imports_without_the_archive() -> None:
    probe = (
        "import sys, emq; from emq import Queue, AsyncQueue, Worker; "
        "print(sorted(m for m in sys.modules if m.startswith('emq.archive') or m == 'sqlite3'))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    lazy = "import emq; print(emq.Floor.__name__, emq.Archive.__name__)"
    out = subprocess.run([sys.executable, "-c", lazy], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["Floor", "Archive"]


def test_the_sync_queue_is_generated_from_the_async_one() -> None:
    """``Queue`` is ``scripts/unasync.py``'s output from ``AsyncQueue``: they cannot drift."""
    root = Path(__file__).parents[2]
    out = subprocess.run(
        [sys.executable, str(root / "scripts" / "unasync.py"), "--check"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr


def test_both_queues_have_the_same_methods_and_signatures() -> None:
    from emq import AsyncQueue, Queue

    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(fn)
            for name, fn in vars(cls).items()
            if callable(fn) and not name.startswith("_")
        }

    sync, aio = public(Queue), public(AsyncQueue)
    assert set(sync) == set(aio)
    for name in sync:
        assert str(sync[name]).replace("AsyncQueue", "Queue") == str(aio[name]).replace(
            "AsyncQueue", "Queue"
        ).replace("AsyncIterator", "Iterator"), name
