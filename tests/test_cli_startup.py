"""Startup: ``import emq`` and ``emq --help`` import none of emq's modules, redis or rich
(their time is what a CLI user waits for), and the table ``emq --help`` is drawn from
cannot drift from the commands themselves. Import costs are checked by what is imported,
never by a clock."""

from __future__ import annotations

import subprocess
import sys
from importlib import import_module

import click

import emq
from emq.cli.main import COMMANDS, LazyGroup

HEAVY = ("redis", "rich", "emq.queue", "emq.async_queue", "emq.worker", "emq.cli.common")


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


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
