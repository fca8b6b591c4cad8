"""A batch handler's worker for child processes (``emq worker
tests.support.batch_handlers:worker``, its queue named by ``EMQTEST_QUEUE``).

``bulk`` records each job of its batch as a line ``start <id> <pid>`` in the file
``EMQTEST_DIR/runs``, waits until the file ``EMQTEST_DIR/gate`` exists (so a test can kill
the process while the whole batch is surely running), then records ``done <id> <pid>``.
Files, not keys: the test runs on a cluster too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from emq import BatchContext, Worker

from .procs import append_line, wait_for_file

QUEUE = os.environ.get("EMQTEST_QUEUE", "emqtest-batches")
HERE = Path(os.environ.get("EMQTEST_DIR", "."))
worker = Worker(QUEUE, url=os.environ.get("EMQ_URL"))


@worker.handler("bulk", batch_size=6, batch_wait_ms=60_000)
def bulk(payloads: list[Any], ctx: BatchContext) -> None:
    for job in ctx.ids:
        append_line(HERE / "runs", f"start {job} {os.getpid()}")
    wait_for_file(HERE / "gate")
    for job in ctx.ids:
        append_line(HERE / "runs", f"done {job} {os.getpid()}")
