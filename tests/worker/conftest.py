"""Fixtures of the worker's tests: ``procs``, the worker processes a crash test starts and
kills (:class:`~tests.support.procs.WorkerProcs`), all killed at the test's end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.procs import WorkerProcs


@pytest.fixture
def procs(url: str, tmp_path: Path) -> Iterator[WorkerProcs]:
    p = WorkerProcs(url, tmp_path)
    yield p
    p.close()
