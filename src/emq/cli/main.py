"""The ``emq`` command group; each command group lives in its own module."""

from __future__ import annotations

import click

from .. import __version__
from . import (
    archive_cmds,
    cancel_cmd,
    demo,
    flow_cmd,
    lanes_cmds,
    queue_cmds,
    race,
    repeat_cmds,
    result_cmd,
    server_cmds,
    worker_cmd,
)
from .common import EmqGroup


@click.group(cls=EmqGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="emq")
def cli() -> None:
    """emq: a reliable job queue on Valkey and Redis."""


server_cmds.register(cli)
queue_cmds.register(cli)
lanes_cmds.register(cli)
result_cmd.register(cli)
demo.register(cli)
archive_cmds.register(cli)
worker_cmd.register(cli)
race.register(cli)
cancel_cmd.register(cli)
flow_cmd.register(cli)
repeat_cmds.register(cli)


def main() -> None:
    cli()
