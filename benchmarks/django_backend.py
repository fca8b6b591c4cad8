"""The Django task backend's cost over plain emq, and a Django worker's rate.

    .venv/bin/python benchmarks/django_backend.py [--tasks 5000]

On one private ``EmbeddedServer``, with the test project of ``tests/contrib/django``: the
time per ``Task.enqueue`` against a plain ``Queue.enqueue`` of the same payload, per
``get_result`` against ``Queue.job``, then the wall time of ``manage.py emq_worker --burst``
on ``--tasks`` ``add`` tasks (one process, concurrency 10) minus that of an empty burst run
(the start: Python, Django, the checks). Figures move with the machine's load; compare runs
of one machine only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]
SETTINGS = "tests.contrib.django.project.settings"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=5000)
    n = parser.parse_args().tasks
    sys.path.insert(0, str(ROOT))
    from emq import Queue
    from emq.embedded.standalone import EmbeddedServer

    server = EmbeddedServer(tempfile.mkdtemp())
    url = server.start()
    os.environ.update(EMQ_URL=url, EMQ_TEST_QUEUES="default,bench", DJANGO_SETTINGS_MODULE=SETTINGS)
    try:
        import django

        django.setup()
        from django_tasks import task_backends
        from tests.contrib.django.project import tasks

        add, plain = tasks.add.using(queue_name="bench"), Queue.from_url(url, "plain")
        add.enqueue(0, 0), plain.enqueue("x", {})  # connect, lease a node: not timed
        t0 = time.perf_counter()
        ids = [add.enqueue(i, i).id for i in range(n)]
        t1 = time.perf_counter()
        for i in range(n):
            plain.enqueue("x", {"args": [i, i], "kwargs": {}})
        t2 = time.perf_counter()
        backend, bench = task_backends["default"], Queue.from_url(url, "bench")
        for job_id in ids:
            backend.get_result(job_id)
        t3 = time.perf_counter()
        for job_id in ids:
            bench.job(job_id)
        t4 = time.perf_counter()
        full, empty = _burst(), _burst()
        assert all(backend.get_result(j).return_value == 2 * i for i, j in enumerate(ids))
        us = 1e6 / n
        print(f"enqueue {us * (t1 - t0):.0f} us/task (Queue.enqueue {us * (t2 - t1):.0f} us)")
        print(f"get_result {us * (t3 - t2):.0f} us (Queue.job {us * (t4 - t3):.0f} us)")
        print(f"burst: {n} tasks {full:.2f} s, empty {empty:.2f} s: "
              f"{n / (full - empty):.0f} tasks/s")  # fmt: skip
    finally:
        server.stop()


def _burst() -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    manage = ROOT / "tests" / "contrib" / "django" / "project" / "manage.py"
    start = time.perf_counter()
    argv = [sys.executable, str(manage), "emq_worker", "--burst", "--queue", "bench"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
