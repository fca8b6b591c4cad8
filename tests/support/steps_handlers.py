"""A handler of durable steps for worker child processes (``emq worker
tests.support.steps_handlers:handlers``), for tests/worker/test_steps_procs.py.

``steps`` runs the steps A, B and C; each records its run as a line ``<step> <pid>`` in the
file ``EMQTEST_DIR/effects``, so a test counts how many times each step's side effect ran and
in which process (files, not keys: the test runs on a cluster too). Its first run
(``ctx.stalled == 0``) stops at the named pause point ``after-A`` (recorded as ``paused``)
until the file ``EMQTEST_DIR/gate`` exists or the test kills the process there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from emq.worker import JobContext

from .procs import append_line, wait_for_file

HERE = Path(os.environ.get("EMQTEST_DIR", "."))


def _effect(what: str) -> str:
    append_line(HERE / "effects", f"{what} {os.getpid()}")
    return what


def steps(payload: Any, ctx: JobContext) -> list[str]:
    done = [ctx.step("A", _effect, "A")]
    if ctx.stalled == 0:  # the pause point after-A, on the first run only
        _effect("paused")
        wait_for_file(HERE / "gate")
    done.append(ctx.step("B", _effect, "B"))
    done.append(ctx.step("C", _effect, "C"))
    return done


handlers = {"steps": steps}
