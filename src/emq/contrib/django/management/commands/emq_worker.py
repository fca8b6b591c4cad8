"""``manage.py emq_worker``: run emq workers for the project's Django tasks.

It is ``emq worker emq.contrib.django.entry:worker`` with the queues and the server taken
from the backend's settings: every behaviour of ``emq worker`` (the checks before it starts,
signals and the graceful drain, ``--burst``, ``--processes N`` under a supervisor that
restarts a child that dies, logs, exit codes) is emq's own. ``--queue`` (repeatable) picks
some of the backend's ``QUEUES``; ``--url`` overrides its ``OPTIONS['url']``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...backend import EmqTaskBackend
from ...compat import task_backends
from ...handlers import BACKEND_ENV, QUEUES_ENV

TARGET = "emq.contrib.django.entry:worker"
PASSED = ("concurrency", "processes", "timeout_ms", "lease_ms", "grace_ms", "log_level",
          "log_format")  # fmt: skip


class Command(BaseCommand):  # type: ignore[misc]  # Django is untyped
    help = "Run emq workers for this project's tasks (emq.contrib.django.EmqTaskBackend)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default", help="The TASKS alias (default).")
        parser.add_argument("--queue", "-q", action="append", dest="queues", default=[],
                            help="A queue to serve (repeatable; default: the backend's "
                                 "QUEUES).")  # fmt: skip
        parser.add_argument("--burst", action="store_true",
                            help="Exit once nothing is pending or running.")  # fmt: skip
        parser.add_argument("--processes", type=int, default=None,
                            help="Worker processes under one supervisor (1).")  # fmt: skip
        parser.add_argument("--concurrency", "-c", type=int, default=None,
                            help="Tasks at once per process (10).")  # fmt: skip
        parser.add_argument("--timeout-ms", type=int, default=None,
                            help="Hard limit of one attempt (300000).")  # fmt: skip
        parser.add_argument("--lease-ms", type=int, default=None, help="Lease length (30000).")
        parser.add_argument("--grace-ms", type=int, default=None,
                            help="Shutdown grace period (30000).")  # fmt: skip
        parser.add_argument("--url", default=None, help="The server (default: OPTIONS['url']).")
        parser.add_argument("--log-level", choices=["debug", "info", "warning"], default=None)
        parser.add_argument("--log-format", choices=["json", "text"], default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["backend"]
        backend = task_backends[alias]
        if not isinstance(backend, EmqTaskBackend):
            raise CommandError(f"TASKS[{alias!r}] is not emq.contrib.django.EmqTaskBackend")
        queues = options["queues"] or sorted(backend.queues)
        stray = sorted(set(queues) - backend.queues)
        if stray:
            raise CommandError(f"--queue {stray} not in TASKS[{alias!r}]['QUEUES']")
        os.environ[BACKEND_ENV] = alias  # for this process and each child (--processes)
        os.environ[QUEUES_ENV] = ",".join(queues)
        here = [p for p in (sys.path[0], os.getcwd()) if p]  # the project, for the children
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [*here, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        )
        argv = ["worker", f"--url={options['url'] or backend.url}"]
        if options["burst"]:
            argv.append("--burst")
        for name in PASSED:
            if options[name] is not None:
                argv.append(f"--{name.replace('_', '-')}={options[name]}")
        run_emq([*argv, "--", TARGET])


def run_emq(argv: list[str]) -> None:
    """Run the ``emq`` command with ``argv`` in this process; it exits with its code."""
    from .....cli.main import cli

    cli.main(args=argv, prog_name="emq", standalone_mode=True)
