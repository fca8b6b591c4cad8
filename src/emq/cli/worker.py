"""``emq worker module:attr``: run a :class:`~emq.worker.Worker` from an import string.

``attr`` is a ``Worker``, a ``Tasks`` (a worker of its queue runs its tasks, on its ``url=``
unless ``--url`` or ``EMQ_URL`` is given) or a mapping of job names to handlers (then
``--queue`` names the queues, default ``default``). Logs are structured: one JSON object per
line on stderr (or ``--log-format text``). The server is ``--url``, else ``EMQ_URL``, else
the worker's own ``url=``, else the embedded server: the command line wins over code.
Everything is checked before the worker starts: the import, the options (built into a
validated :class:`~emq.worker.WorkerOptions`) and one PING of the server. A server that
cannot be reached yet is waited for (the worker logs the outage once and serves once it
answers), except by a ``--burst`` run. Exit codes: 0 after a graceful stop or a finished
``--burst`` run, 2 for bad usage (import string, a module that fails to import, options, a
server that refuses the login or is not Valkey/Redis, with ``--burst`` one that cannot be
reached), 130 after a second signal forced the exit. ``--processes N`` (N > 1) checks the
same, then runs N such workers under a supervisor (:mod:`.supervisor`), which restarts a
child that dies and passes signals on.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import click

from ..errors import InvalidOption
from ..worker import Worker
from ..worker.startup import not_up_yet
from ..worker.tasks import Tasks
from .common import connect, resolve_url, url_option
from .exits import DONE, INTERRUPTED
from .logsetup import apply_log_config, setup_logging
from .supervisor import MAX_PROCESSES, Supervisor


def load_target(spec: str) -> Worker | Tasks | Mapping[str, Any]:
    """Import ``module:attr`` (the current directory is importable, as with ``python -m``)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidOption(f"expected module:attr (e.g. myapp.tasks:worker), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidOption(f"cannot import {module_name!r}: {exc}") from None
    except Exception as exc:  # the module itself is broken: SyntaxError, an error at import
        raise InvalidOption(
            f"cannot import {module_name!r}: it raised {type(exc).__name__}: {exc}"
        ) from None
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InvalidOption(f"{module_name!r} has no attribute {attr!r}") from None
    if isinstance(target, Worker | Tasks | Mapping):
        return target
    raise InvalidOption(
        f"{spec} is a {type(target).__name__}; expected a Worker, a Tasks or a mapping"
    )


def choose_url(w: Worker, url: str | None) -> None:
    """Set ``w.url``: ``--url``, else ``EMQ_URL``, else the worker's own ``url=``, else the
    embedded server. A worker built from Queue objects uses their connections; ``--url``
    is refused for it rather than ignored."""
    if not w.needs_url:
        if url:
            raise InvalidOption(
                "--url cannot be used with a Worker built from Queue objects (they carry "
                "their own connection); build it from queue names to choose the server here"
            )
        return
    w.url = resolve_url(url, code_default=w.url)


def check_server(w: Worker) -> None:
    """One PING before the worker starts: a server that refuses the login or does not speak
    the protocol is one line and exit 2, not a worker retrying it forever; one that cannot be
    reached (yet) is too for a ``--burst`` run, and is waited for by any other (the worker's
    start rides it out like any outage). (The options were checked when they were built:
    :class:`~emq.worker.WorkerOptions` holds the same bounds the scripts' calls enforce.)"""
    if w.url is None:
        return
    try:
        client = connect(w.url)  # a cluster client reads the slot map here
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        if w.options.burst or not not_up_yet(exc):
            raise


def child_args(ctx: click.Context) -> list[str]:
    """One child's arguments: this command's, without ``--processes`` and ``--url`` (the
    supervisor resolved the URL once and passes it in ``EMQ_URL``, off the process list).
    Built from the parsed options, so every option a worker takes reaches its children."""
    args = ["worker"]
    target = ""
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if param.name in ("processes", "url") or value is None or value is False:
            continue
        if isinstance(param, click.Argument):
            target = str(value)
            continue
        opt = max(param.opts, key=len)
        if isinstance(param, click.Option) and param.is_flag:
            args.append(opt)
        else:
            values = value if isinstance(value, tuple) else (value,)
            args.extend(f"{opt}={v}" for v in values)
    return [*args, "--", target]


@click.command("worker")
@click.argument("target", metavar="MODULE:ATTR")
@click.option(
    "--queue",
    "-q",
    "queues",
    multiple=True,
    help="Queue to serve (repeatable), for a handlers mapping only (default: default); "
    "refused with a Worker, which names its own queues.",
)
@click.option("--concurrency", "-c", type=int, default=None, help="Handlers at once (10).")
@click.option("--lease-ms", type=int, default=None, help="Lease length in ms (30000).")
@click.option("--prefetch", type=int, default=None, help="Extra jobs claimed ahead (0).")
@click.option("--burst", is_flag=True, help="Exit 0 once nothing is pending or running.")
@click.option("--stalled-interval-ms", type=int, default=None, help="Sweep period (5000).")
@click.option("--max-stalled", type=int, default=None, help="Stalls before dead (2).")
@click.option("--grace-ms", type=int, default=None, help="Shutdown grace period (30000).")
@click.option("--timeout-ms", type=int, default=None, help="Default attempt timeout (300000).")
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="Serve this worker's Prometheus histograms on 127.0.0.1:PORT (0: any free port; "
    "with --processes, 0 only: each process binds its own, listed by emq workers).",
)
@click.option(
    "--log-format",
    type=click.Choice(["json", "text"]),
    default=None,
    help="Log lines on stderr: JSON objects (default) or text.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning"]),
    default="info",
    show_default=True,
    help="The least severe log records shown.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON-lines logs (the default format).")
@click.option(
    "--log-config",
    type=click.Path(dir_okay=False),
    default=None,
    help="A logging.config.dictConfig file (JSON, or TOML if *.toml) that sets up logging "
    "instead of emq: emq then adds no handler (--log-format and --json are refused).",
)
@click.option(
    "--processes",
    type=int,
    default=1,
    show_default=True,
    help=f"Worker processes under one supervisor (1..{MAX_PROCESSES}).",
)
@url_option
def worker(
    target: str,
    queues: tuple[str, ...],
    concurrency: int | None,
    lease_ms: int | None,
    prefetch: int | None,
    burst: bool,
    stalled_interval_ms: int | None,
    max_stalled: int | None,
    grace_ms: int | None,
    timeout_ms: int | None,
    metrics_port: int | None,
    log_format: str | None,
    log_level: str,
    as_json: bool,
    log_config: str | None,
    processes: int,
    url: str | None,
) -> None:
    """Run the Worker, Tasks or handlers mapping at MODULE:ATTR until SIGTERM/SIGINT.

    A first signal stops claiming, gives back unstarted jobs and lets running ones finish
    (up to the grace period); a second one exits at once. With --processes N, N worker
    processes run under one supervisor that restarts a child that dies and passes signals on.
    """
    if not 1 <= processes <= MAX_PROCESSES:
        raise InvalidOption(f"--processes must be 1..{MAX_PROCESSES}, got {processes}")
    if processes > 1 and metrics_port:
        raise InvalidOption("--metrics-port with --processes must be 0 (each process binds a "
                            "free port of its own; emq workers lists them)")  # fmt: skip
    if as_json and log_format == "text":
        raise InvalidOption("--json and --log-format text contradict each other; pick one")
    if log_config is None:
        setup_logging(log_format or "json", log_level)
    elif log_format or as_json:
        raise InvalidOption("--log-config sets up logging itself; drop --log-format and --json")
    else:
        apply_log_config(log_config)
    loaded = load_target(target)
    if isinstance(loaded, Worker):
        w = loaded
        if queues:
            raise InvalidOption("--queue cannot be used with a Worker (it names its queues)")
    elif isinstance(loaded, Tasks):  # its queue, and its url= unless --url / EMQ_URL
        if queues:
            raise InvalidOption("--queue cannot be used with a Tasks (it names its queue)")
        w = Worker(loaded.queue_name, url=loaded.url, tasks=loaded,
                   queue_options=loaded.options)  # fmt: skip
    else:
        w = Worker(list(queues) or ["default"], loaded)
    w.configure(
        concurrency=concurrency,
        lease_ms=lease_ms,
        prefetch=prefetch,
        burst=burst or None,
        stalled_interval_ms=stalled_interval_ms,
        max_stalled=max_stalled,
        grace_ms=grace_ms,
        timeout_ms=timeout_ms,
        metrics_port=metrics_port,
    )
    choose_url(w, url)
    check_server(w)
    if processes > 1:
        env = dict(os.environ, **({"EMQ_URL": w.url} if w.url else {}))
        args = child_args(click.get_current_context())
        sys.exit(Supervisor(args, processes, env).run())
    w.run_sync(handle_signals=True)
    code = INTERRUPTED if w.forced else DONE
    if w.forced or w.stats.abandoned:
        # handler threads that outlived their attempt (or a forced stop) cannot be joined:
        # run the atexit handlers ourselves, then leave without waiting for those threads
        # (the worker's "stopped" log line already counts them as ``abandoned``)
        atexit._run_exitfuncs()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def register(group: click.Group) -> None:
    group.add_command(worker)
