"""A rolling deploy onto this keyspace layout (docs/keyspace.md, Layout versions): workers of a
previous release, installed from its commit in a second venv, and of this one serve one queue
at once, then the queue is upgraded. Nothing is lost, nothing runs twice, and the previous
release refuses the upgraded queue with one line instead of touching it. Two previous releases:
the last one of layout 1 (the first with layout checks) and the last one of layout 2 (before
packed waiting jobs)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
import venv
from collections import Counter
from io import BytesIO
from pathlib import Path

import pytest
import redis

from emq import Queue
from emq.model.layout import LAYOUT
from emq.observe.registry import list_workers
from tests.support.helpers import assert_consistent
from tests.support.worker_handlers import runs_key

pytestmark = [pytest.mark.servers("valkey"), pytest.mark.slow]

ROOT = Path(__file__).parents[2]
# commit -> the layout a queue it makes is in (None: layout 1, the field absent)
PREVIOUS = {
    "023324e10e3861d14a4de802443f90617e0fcf72": None,  # the release before layout 2
    "9339da512ee714772989b3558b6d39f0038b72c1": "2",  # the release before layout 3
}
HANDLERS = "tests.support.worker_handlers:handlers"


@pytest.fixture(scope="module", params=list(PREVIOUS))
def previous(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A previous release's interpreter: a venv of its own holding emq as of a commit of
    PREVIOUS, with this venv's dependencies (redis-py, click, ...) on its path."""
    home = tmp_path_factory.mktemp("previous-emq")
    venv.create(home / "venv", with_pip=False)
    python = home / "venv" / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", request.param, "src/emq"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(home, filter="data")
    shutil.copytree(home / "src" / "emq", Path(site) / "emq")
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (home / "layout").write_text(PREVIOUS[request.param] or "")
    return python


def start(python: Path | str, url: str, queue: str, log: Path) -> subprocess.Popen[bytes]:
    argv = [str(python), "-c", "from emq.cli.main import main; main()", "worker", HANDLERS,
            "-q", queue, "-c", "2", "--lease-ms", "5000"]  # fmt: skip
    env = {**os.environ, "EMQ_URL": url, "PYTHONPATH": str(ROOT)}
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(argv, cwd=ROOT, env=env, stderr=out, stdout=out)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        assert p.wait(timeout=60) == 0


def produce(python: Path | str, url: str, queue: str, n: int) -> list[str]:
    code = (
        "import sys; from emq import Queue; q = Queue.from_url(sys.argv[1], sys.argv[2]); "
        "print(*q.enqueue_many([('work', {'ms': 20})] * int(sys.argv[3])), sep='\\n')"
    )
    out = subprocess.run(
        [str(python), "-c", code, url, queue, str(n)],
        check=True, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    return out.stdout.split()


def finished(client: redis.Redis, queue: str, ids: list[str]) -> Counter[str]:
    """Runs ended per job, once every id in ``ids`` has ended (bounded wait)."""
    for _ in range(1200):
        done = Counter(r.split(":")[1] for r in client.lrange(runs_key(queue), 0, -1) if
                       r.startswith("done:"))  # fmt: skip
        if all(done[i] for i in ids):
            return done
        time.sleep(0.1)
    raise AssertionError(f"{sum(1 for i in ids if not done[i])} of {len(ids)} jobs never ran")


def test_old_and_new_workers_share_a_queue_then_it_is_upgraded(
    previous: Path, url: str, qname: str, client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "workers.log"
    made = (previous.parents[2] / "layout").read_text() or None  # the previous release's layout
    ids = produce(previous, url, qname, 50)  # a queue the previous release made
    new_python = sys.executable
    procs = [start(previous, url, qname, log) for _ in range(2)]
    procs += [start(new_python, url, qname, log) for _ in range(2)]
    for _ in range(600):  # all four serve the queue before the work arrives
        if len([w for w in list_workers(client) if qname in w.queues]) == 4:
            break
        time.sleep(0.1)
    ids += produce(new_python, url, qname, 150) + produce(previous, url, qname, 100)
    done = finished(client, qname, ids)
    assert client.hget(f"emq:{{{qname}}}:meta", "layout") == made, "a mixed fleet keeps its layout"
    assert not client.exists(f"emq:{{{qname}}}:packed"), "nothing packed before the upgrade"
    pids = {r.split(":")[2] for r in client.lrange(runs_key(qname), 0, -1)}
    old_pids, new_pids = {str(p.pid) for p in procs[:2]}, {str(p.pid) for p in procs[2:]}
    assert pids & old_pids and pids & new_pids, "both releases ran jobs"
    assert sorted(done.values()) == [1] * len(ids), "each job ran to its end once"

    stop(procs[:2])  # the old workers leave; then the queue moves to this layout
    upgrade = subprocess.run(
        [Path(new_python).parent / "emq", "upgrade", qname, "--url", url],
        capture_output=True, text=True,
    )  # fmt: skip
    assert upgrade.returncode == 0, upgrade.stderr
    assert client.hget(f"emq:{{{qname}}}:meta", "layout") == str(LAYOUT)
    later = produce(new_python, url, qname, 100)
    done = finished(client, qname, ids + later)
    assert sorted(done.values()) == [1] * len(ids + later)

    refused = subprocess.run(  # a worker of the previous release started now changes nothing
        [str(previous), "-c", "from emq.cli.main import main; main()", "worker", HANDLERS,
         "-q", qname, "--burst"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "EMQ_URL": url,
                                                       "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert refused.returncode == 2
    told = [ln for ln in (refused.stdout + refused.stderr).splitlines() if not ln.startswith("{")]
    assert len(told) == 1 and f"keyspace layout {LAYOUT}" in told[0], told
    assert "upgrade emq" in told[0], told
    stop(procs[2:])

    with Queue.from_url(url, qname) as q:
        assert q.counts()["pending"] == 0 and q.counts()["active"] == 0
        first, last = q.history(ids[0]), q.history(later[-1])
    assert [e.event for e in first] == ["enqueued", "claimed", "completed"]
    assert [e.event for e in last] == ["enqueued", "claimed", "completed"]
    assert_consistent(client, qname)
