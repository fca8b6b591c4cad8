"""celery on its Redis transport, configured the way its docs ask for reliable delivery.

Late acks (``task_acks_late``) with ``task_reject_on_worker_lost``, one prefetched message per
pool child, and a visibility timeout short enough that a dead worker's messages come back
inside a bounded run. The prefork pool (celery's default): a worker is one main process plus
its pool children, so a fault kills the process group. Fan-in is a chord on the Redis result
backend (the same server); cron is beat embedded in the worker (``-B``).

On Redis, kombu pops a message (BRPOP) and only then writes it to its ``unacked`` hash, in a
second round trip: a worker killed between the two, its reply still in the socket, takes the
message with it (lost, not late), whatever the ack settings.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from typing import Any

from celery import Celery, chord
from celery.signals import before_task_publish

NAME = "celery"
DISTS = ["celery", "kombu", "redis", "hiredis"]
QUEUE = "faults"
VISIBILITY_S = 10
RESTORE_S = 1
PROMISE = (
    "at least once with task_acks_late: 'the task will be redelivered to another worker in "
    "the event of the machine losing power, or the worker instance being killed "
    "mid-execution'; on Redis a message not acked within visibility_timeout is redelivered "
    "(docs.celeryq.dev glossary 'late acknowledgment', 'acknowledged'; "
    "getting-started/backends-and-brokers/redis 'Visibility Timeout')"
)
SETTINGS = {
    "task_acks_late=True": "ack after the task returns, so a worker killed mid-task leaves "
    "its message unacked and redeliverable (the default acks before the task runs: at most "
    "once)",
    "task_reject_on_worker_lost=True": "a pool child killed (SIGKILL, OOM) makes the main "
    "process reject and requeue its message at once instead of acking it as failed",
    "worker_prefetch_multiplier=1": "each pool child reserves one message: a dead worker "
    "strands no more than its concurrency (the docs' advice for long tasks with late acks)",
    f"broker_transport_options.visibility_timeout={VISIBILITY_S}": "an unacked message "
    "returns to the queue this many seconds after delivery (the default is 3600 s; "
    "shortened so a run stays bounded; every job here is far shorter, so no live job is "
    "redelivered)",
    f"unacked_restore_interval={RESTORE_S}, unacked_restore_throttle=1": "each worker sweeps "
    "the unacked index every second (the default sweeps every 10 x 10 s = 100 s, which kombu "
    "advises lowering with a low visibility_timeout)",
    "autoretry_for=(Exception,), max_retries=None, retry_backoff=True": "a task that raises "
    "is retried, never dropped (a handler here never raises)",
    "worker_cancel_long_running_tasks_on_connection_loss=True": "on a lost broker "
    "connection running late-ack tasks are cancelled, since their messages are redelivered "
    "anyway (the default celery 6 will take)",
    "result_backend=<the same Redis>": "chords need a result backend; fan-in only",
}
RECOVERY_S = float(VISIBILITY_S + RESTORE_S)
SCHEDULERS = "one"  # the cron scenario's two schedulers are more than celery beat allows
SCHEDULERS_DOC = (
    "'You have to ensure only a single scheduler is running for a schedule at a time, "
    "otherwise you'd end up with duplicate tasks' (docs.celeryq.dev, User Guide, Periodic "
    "Tasks, Introduction)"
)
SCENARIOS: dict[str, str | None] = {
    "worker-sigkill": None,
    "worker-sigstop": None,
    "server-kill": None,
    "power-loss": None,
    "partition": None,
    "oom": None,
    "cron": None,
    "fan-in": None,
}

app = Celery("faults")
_ledger: Any = None
_job_s = 0.05


def _configure(url: str, results: bool = True) -> None:
    app.conf.update(
        broker_url=url,
        result_backend=url if results else None,
        task_default_queue=QUEUE,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": VISIBILITY_S,
            "unacked_restore_interval": RESTORE_S,
            "unacked_restore_throttle": 1,
        },
        result_backend_transport_options={"visibility_timeout": VISIBILITY_S},
        worker_hijack_root_logger=False,
        task_ignore_result=False,
    )


RETRY = {"autoretry_for": (Exception,), "max_retries": None, "retry_backoff": True}


@app.task(name="job", **RETRY)
def job(ident: int) -> None:
    import time

    _ledger.started(ident)
    time.sleep(_job_s)
    _ledger.finished(ident)


@app.task(name="callback", **RETRY)
def callback(group: int) -> None:
    _ledger.callback(group)


@app.task(name="tick", **RETRY)
def tick(due: int | None = None) -> None:
    _ledger.tick(str(due))


@before_task_publish.connect
def _stamp_tick(sender: str | None = None, body: Any = None, **_: Any) -> None:
    """Beat sends ``tick`` with no arguments: give it the second it was sent in, its key."""
    import time

    if sender == "tick" and isinstance(body, tuple) and isinstance(body[1], dict):
        body[1].setdefault("due", int(time.time()))


def produce(url: str, ledger: Any, first: int, count: int, rate: float) -> None:
    import time

    _configure(url)
    start = time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        ident = first + i
        try:
            job.apply_async(args=[ident], task_id=f"J{ident:012d}", queue=QUEUE,
                            ignore_result=True)  # fmt: skip
        except Exception:
            ledger.refused(ident)
            continue
        ledger.acked(ident)


def _worker_argv(concurrency: int) -> list[str]:
    return ["worker", "--pool=prefork", f"--concurrency={concurrency}", f"--queues={QUEUE}",
            "--loglevel=WARNING", "--without-gossip", "--without-mingle"]  # fmt: skip


def work(url: str, ledger: Any, concurrency: int, job_ms: int) -> None:
    global _ledger, _job_s
    _ledger, _job_s = ledger, job_ms / 1000
    _configure(url)
    app.worker_main(_worker_argv(concurrency))


def _client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)


def inflight(url: str) -> int | None:
    """Messages delivered and not acked: kombu's ``unacked`` hash (reserved or running)."""
    with _client(url) as r:
        return int(r.hlen("unacked"))


def waiting(url: str) -> int | None:
    """Messages in the queue's lists (its priority sub-queues included)."""
    with _client(url) as r:
        keys = [k for k in r.scan_iter(match=f"{QUEUE}*") if r.type(k) == b"list"]
        return sum(int(r.llen(k)) for k in keys)


def cron(url: str, ledger: Any, every_s: float, seconds: float) -> None:
    """Beat embedded in a worker (``-B``), an interval entry every ``every_s`` seconds.

    A tick's key is the whole second beat sent it in (stamped into its kwargs as it is
    published): a redelivered tick keeps it, two beats firing the same tick share it.
    """
    global _ledger
    _ledger = ledger
    _configure(url, results=False)
    where = tempfile.mkdtemp(prefix="celery-beat-")
    app.conf.beat_schedule = {"tick": {"task": "tick", "schedule": every_s,
                                       "options": {"queue": QUEUE}}}  # fmt: skip
    app.conf.beat_schedule_filename = os.path.join(where, "schedule")
    stop = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGTERM))
    stop.daemon = True
    stop.start()
    app.worker_main([*_worker_argv(2), "--beat"])


def fanin(url: str, ledger: Any, first: int, count: int, width: int) -> None:
    """``count`` chords: ``width`` ``job`` children, the ``callback`` task as the body."""
    _configure(url)
    for g in range(first, first + count):
        chord([job.si(g * 1000 + i) for i in range(width)])(callback.si(g))
