"""Startup: ``import emq`` and ``emq --help`` import none of emq's modules, redis or rich
(their time is what a CLI user waits for), and the table ``emq --help`` is drawn from
cannot drift from the commands themselves. ``emq stats`` imports rich only to print its
table, and not the OpenTelemetry SDK that redis-py would import (while redis-py's own metrics
and a worker's imports are as without emq's CLI). Import costs are checked by what is
imported, never by a clock."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import import_module

import click
import pytest

import emq
from emq import Queue
from emq.cli.main import COMMANDS, LazyGroup

HEAVY = ("redis", "rich", "emq.queue._sync.queue", "emq.queue._async.queue", "emq.worker",
         "emq.cli.common")  # fmt: skip
# what `emq stats` on a plain queue never needs (nor rich, with --json): the OpenTelemetry
# SDK, the archive floor's SQLite, the embedded server (a URL is given), partitioned queues,
# the asyncio twin, the worker
NOT_FOR_STATS = (
    "opentelemetry.sdk",
    "sqlite3",
    "emq.embedded.standalone",
    "emq.queue._sync.partitions",
    "emq.queue._async.queue",
    "emq.worker",
    "emq.archive",
)


def run_probe(code: str) -> tuple[str, set[str]]:
    """What a fresh interpreter prints running ``code``, and the modules it then holds."""
    probe = f"{code}\nimport sys\nprint()\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    *printed, _, modules = out.stdout.splitlines()
    return "\n".join(printed), set(modules.split())


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    return run_probe(code)[1]


def output_and_loaded(*args: str) -> tuple[str, set[str]]:
    """What ``emq ARGS`` prints, and the modules its process holds when it is done."""
    return run_probe(
        "import sys\nfrom emq.cli.main import main\n"
        f"sys.argv = ['emq', *{list(args)!r}]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code"
    )


def among(loaded: set[str], packages: tuple[str, ...]) -> list[str]:
    """The modules of ``loaded`` that are one of ``packages`` or inside one."""
    return sorted(m for m in loaded if any(m == p or m.startswith(f"{p}.") for p in packages))


def test_import_emq_loads_no_module_of_its_own_nor_redis() -> None:
    loaded = loaded_after("import emq")
    assert not [m for m in HEAVY if m in loaded]


def test_emq_help_imports_no_command_module() -> None:
    code = (
        "from emq.cli.main import cli\n"
        "try:\n    cli.main(['--help'], prog_name='emq')\nexcept SystemExit:\n    pass"
    )
    loaded = loaded_after(code)
    assert not [m for m in HEAVY if m in loaded]
    assert not [m for m in loaded if m.startswith("emq.cli.") and m != "emq.cli.main"]


def test_the_help_table_is_the_commands_own() -> None:
    group = LazyGroup()
    for module in sorted({m for m, _ in COMMANDS.values()}):
        import_module(f"emq.cli.{module}").register(group)
    assert sorted(group.commands) == sorted(COMMANDS), "add or remove the command in COMMANDS"
    for name, command in group.commands.items():
        module, short = COMMANDS[name]
        where = command.callback.__module__ if command.callback else type(command).__module__
        assert where == f"emq.cli.{module}", name
        assert command.get_short_help_str(limit=10_000) == short, name


def test_every_public_name_is_there_on_first_use() -> None:
    assert set(emq.__all__) == set(emq._WHERE)
    for name in emq.__all__:
        assert getattr(emq, name) is not None
    assert isinstance(emq.Queue, type) and "Queue" in dir(emq)


def test_a_command_still_runs_and_refuses_cleanly() -> None:
    from click.testing import CliRunner

    from emq.cli.main import cli

    result = CliRunner().invoke(cli, ["stats", "bad{name}", "--url", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 2 and result.output.startswith("error: "), result.output
    assert isinstance(cli, click.Group)


def test_emq_stats_json_imports_no_rich_nor_otel_sdk(url: str, qname: str) -> None:
    with Queue.from_url(url, qname) as q:
        q.enqueue("job", 1)
    printed, loaded = output_and_loaded("stats", qname, "--url", url, "--json")
    assert json.loads(printed)["pending"] == 1
    assert among(loaded, ("rich", *NOT_FOR_STATS)) == []
    assert "redis" in loaded and "emq.queue._sync.queue" in loaded  # the command did run


def test_emq_stats_table_imports_rich_and_nothing_else_it_does_not_need(
    url: str, qname: str
) -> None:
    with Queue.from_url(url, qname) as q:
        q.enqueue("job", 1)
    printed, loaded = output_and_loaded("stats", qname, "--url", url)
    assert qname in printed and "pending" in printed
    assert among(loaded, NOT_FOR_STATS) == []
    assert "rich.table" in loaded


def test_redis_py_metrics_still_work_after_the_cli_imported_redis(url: str) -> None:
    pytest.importorskip("opentelemetry.sdk.metrics")
    code = f"""
import sys
from emq.cli.main import import_redis
import_redis("stats")
assert "redis" in sys.modules and "opentelemetry.sdk.metrics" not in sys.modules
import redis
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from redis.observability.config import MetricGroup, OTelConfig
from redis.observability.providers import get_observability_instance
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
get_observability_instance().init(OTelConfig(metric_groups=[MetricGroup.COMMAND]))
client = redis.Redis.from_url({url!r})
client.ping()
data = reader.get_metrics_data()
print(sorted({{m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}}))
"""
    printed, loaded = run_probe(code)
    assert printed == "['db.client.operation.duration']"  # redis-py's command metric
    assert "opentelemetry.sdk.metrics" in loaded  # imported normally once redis was in


def test_a_worker_and_an_instrumented_process_import_redis_as_usual() -> None:
    otel = ("opentelemetry",)
    then = "from emq.cli.main import import_redis\nimport_redis({!r})\nimport redis"
    plain = among(loaded_after("import redis"), otel)
    assert among(loaded_after(then.format("worker")), otel) == plain
    instrumented = "import opentelemetry.trace\n" + then.format("stats")
    assert set(plain) <= set(among(loaded_after(instrumented), otel))
