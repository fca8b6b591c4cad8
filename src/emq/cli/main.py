"""The ``emq`` command group. Each command lives in its own module, imported only when that
command runs: ``emq --help`` lists them from :data:`COMMANDS` without importing any of them
(nor redis, rich or the queue), so it starts fast; ``tests/cli/test_cli_startup.py`` checks the
table against the commands themselves."""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Any

import click

from .. import __version__

COMMANDS: dict[str, tuple[str, str]] = {
    "archive": (
        "archive",
        "Fold the event stream into the durable floor before trimming it.",
    ),
    "cancel": (
        "cancel",
        "Cancel job ID on QUEUE: a waiting or scheduled job never runs, a running one is "
        "stopped by its worker.",
    ),
    "configure": (
        "settings",
        "Show QUEUE's stored settings, or change the ones given for every process that serves "
        "it (within about 10 s).",
    ),
    "dashboard": (
        "dashboard",
        "Serve the web dashboard: queues, jobs, search, dead letters, workers, race lab.",
    ),
    "dead": (
        "queues",
        "Dead-letter set of QUEUE: list, redrive (IDS or all), purge (IDS or all).",
    ),
    "dead-letters": (
        "dead",
        "Dead jobs of QUEUE grouped by error; redrive or purge every one matching a filter.",
    ),
    "demo": (
        "demo",
        "Crash, freeze and poison workers on the embedded server (or --url); lose nothing.",
    ),
    "drain": ("queues", "Delete every waiting job (pending and scheduled) of QUEUE."),
    "enqueue": ("queues", "Enqueue job NAME with a JSON PAYLOAD on QUEUE."),
    "events": ("archive", "Read a queue's event stream."),
    "forget": (
        "delete",
        "Remove QUEUE from the known queues (emq stats, the dashboard, /metrics); refused for a "
        "queue that still has jobs, events, counters or settings (obliterate it first).",
    ),
    "flow": (
        "flow",
        "Show the flow tree of job ID on QUEUE: each job's state, and its children's.",
    ),
    "history": (
        "archive",
        "Every event of JOB_ID: the floor and the live stream merged, in order (one line "
        "each, or one JSON object per line with --json).",
    ),
    "job": ("queues", "Show one job: its id, state and times (server clock, UTC), then its row."),
    "jobs": (
        "queues",
        "List QUEUE's jobs in STATE (pending, active, scheduled or dead), in the set's "
        "order; `completed`: the kept completed jobs (keep_completed), newest first.",
    ),
    "lanes": ("lanes", "List QUEUE's lanes and its limits (docs: lanes.md)."),
    "limits": (
        "lanes",
        "Show or change the limits of QUEUE, or of one lane with --lane (docs: lanes.md).",
    ),
    "metrics": (
        "metrics",
        "Prometheus metrics of the queues: counts per location, lifetime counters, oldest "
        "waiting job's age, paused (docs: observability.md).",
    ),
    "obliterate": (
        "delete",
        "Delete QUEUE: every job in every state, its events, counters, limits and schedules, "
        "then forget its name (emq stats, the dashboard and /metrics stop listing it).",
    ),
    "pause": ("queues", "Stop claims on QUEUE, or of one --lane (checked inside the claim)."),
    "race": (
        "race",
        "The race lab: emq's one-script stalled recovery against the naive round-trip loop.",
    ),
    "remove": (
        "delete",
        "Delete job ID of QUEUE wherever it is (waiting, scheduled, leased, dead or a kept "
        "completed job); an unknown id is one error line, exit 2.",
    ),
    "repeat": ("repeat", "QUEUE's repeating jobs and cron schedules: list, add, remove."),
    "result": (
        "result",
        "Print the result of job ID on QUEUE (kept when the queue or its handler sets "
        "result_ttl_ms), waiting up to --wait seconds for it to end.",
    ),
    "resume": ("queues", "Let claims on QUEUE (or of one --lane) go on."),
    "search": (
        "search",
        "Search QUEUE's jobs by text, id, name, state and time, live rows and archive floor.",
    ),
    "server": ("server", "Manage the embedded Valkey server (data under ./.emq, AOF on)."),
    "stats": (
        "queues",
        "Counts per location for QUEUE, or for every queue on the server, and the limits "
        "of each queue that has any (docs: lanes.md).",
    ),
    "sweep": (
        "queues",
        "Recover expired leases on QUEUE (to pending, or dead past --max-stalled).",
    ),
    "upgrade": (
        "settings",
        "Move QUEUE to this emq's newest keyspace layout, in one step (docs: keyspace.md, "
        "Layout versions).",
    ),
    "worker": (
        "worker",
        "Run the Worker, Tasks or handlers mapping at MODULE:ATTR until SIGTERM/SIGINT.",
    ),
    "workers": (
        "workers",
        "List the live workers: host, pid, queues, concurrency, jobs running now, last beat.",
    ),
}
"""Every command: its module (whose ``register(group)`` adds it) and its short help."""


OTEL_SDK_METRICS = "opentelemetry.sdk.metrics"
USER_CODE = frozenset({"worker"})  # commands that import the user's code (which may turn OTel on)
COMMAND_KEY = "emq.command"  # click's ctx.meta key: the sub-command's name, once parsed


def import_redis(command: str | None) -> None:
    """Import redis-py without the OpenTelemetry metrics SDK when nothing uses OpenTelemetry.

    redis-py 8 try-imports ``opentelemetry.sdk.metrics`` in ``redis/observability/providers``
    on ``import redis`` when the SDK is installed (about 0.1 s of CPU), only for a type hint
    and a flag nothing reads (redis-py 8.1); its metrics import the SDK themselves when they
    are turned on. A command that runs no user code, in a process where no ``opentelemetry``
    module is loaded yet (no auto-instrumentation), has nothing that could turn OpenTelemetry
    on, so there the SDK module is made unimportable for the duration of ``import redis``
    only: the try-import falls back, and the SDK imports normally afterwards (redis-py's
    metrics still work: ``tests/cli/test_cli_startup.py``). ``emq worker``, which imports the
    user's code, imports redis as any program does."""
    if command in USER_CODE or {"redis", "opentelemetry", OTEL_SDK_METRICS} & set(sys.modules):
        return
    sys.modules[OTEL_SDK_METRICS] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        import redis  # noqa: F401
    finally:
        if sys.modules.get(OTEL_SDK_METRICS, False) is None:
            del sys.modules[OTEL_SDK_METRICS]


def _short(name: str, text: str, width: int) -> str:
    """``text`` cut as click cuts a command's short help for the list."""
    return click.Command(name, short_help=text).get_short_help_str(width)


class LazyGroup(click.Group):
    """Loads a command's module on first use. Every command runs inside
    :func:`~emq.cli.guard.guarded`: a usage error or a refusal is one ``error: <line>`` and
    the exit code of :mod:`emq.cli.exits` (docs/cli.md, Exit codes)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS:
            import_module(f".{COMMANDS[name][0]}", __package__).register(self)
        return self.commands.get(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        width = formatter.width - 6 - max(len(n) for n in COMMANDS)
        with formatter.section("Commands"):
            formatter.write_dl([(n, _short(n, h, width)) for n, (_, h) in sorted(COMMANDS.items())])

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # the group's own options are flags: its first other argument names the command
        ctx.meta[COMMAND_KEY] = next((a for a in args if not a.startswith("-")), None)
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as exc:  # `emq --bogus`: one line, as for a command's
            from .guard import refuse_usage

            refuse_usage(ctx, exc)

    def invoke(self, ctx: click.Context) -> Any:
        import_redis(ctx.meta.get(COMMAND_KEY))
        from .guard import guarded

        return guarded(ctx, lambda: super(LazyGroup, self).invoke(ctx))


DOCS_URL = "https://github.com/emq-dev/emq/tree/main/docs"
"""Where ``(docs: NAME.md)`` in a help text is: the wheel ships no docs (the project's
Documentation URL, which ``tests/unit/test_packaging.py`` keeps equal to this)."""


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=f"\b\nThe docs (docs: NAME.md in a help text):\n{DOCS_URL}",
)
@click.version_option(__version__, prog_name="emq")
def cli() -> None:
    """emq: a reliable job queue on Valkey and Redis."""


def main() -> None:
    cli()
