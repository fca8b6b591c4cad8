"""Django for these tests only: settings are configured once per test process from the
project's settings module (no other test imports Django), and each test points the task
backend at its own server and queue with ``override_settings``. The worker runs as a real
``manage.py emq_worker`` subprocess with the same settings from the environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django_tasks")

import django
from django.conf import settings
from django.test.utils import override_settings

ROOT = Path(__file__).parents[3]
MANAGE = Path(__file__).parent / "project" / "manage.py"
SETTINGS = "tests.contrib.django.project.settings"


@pytest.fixture(scope="module", autouse=True)
def _django() -> None:
    if not settings.configured:
        from tests.contrib.django.project import settings as project

        settings.configure(**{k: getattr(project, k) for k in dir(project) if k.isupper()})
        django.setup()


@pytest.fixture
def tasks(_django: None) -> Any:
    """The project's tasks module (imported once Django is set up)."""
    from tests.contrib.django.project import tasks

    return tasks


@pytest.fixture
def backend(tasks: Any, url: str, qname: str) -> Iterator[Any]:
    """The ``default`` backend on ``url``, serving ``qname`` (and ``default``, the queue the
    tasks are declared on)."""
    from django_tasks import task_backends

    queues = ["default", qname]
    tasks = {"default": {"BACKEND": "emq.contrib.django.EmqTaskBackend", "QUEUES": queues,
                         "OPTIONS": {"url": url}}}  # fmt: skip
    with override_settings(TASKS=tasks):
        yield task_backends["default"]


def manage(
    *args: str, url: str, qname: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python manage.py ARGS`` of the test project, on ``url`` with queue ``qname``."""
    env = dict(
        os.environ, DJANGO_SETTINGS_MODULE=SETTINGS, EMQ_URL=url, EMQ_TEST_QUEUES=f"default,{qname}"
    )
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, str(MANAGE), *args], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip
