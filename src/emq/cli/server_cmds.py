"""``emq server start|stop|status|url``: the embedded Valkey under ./.emq.

The server requires a password (kept in ``<dir>/password``, 0600). ``emq server url`` is the one
command that prints it, inside the URL (that is its job: ``export EMQ_URL=$(emq server url)``);
``start`` and ``status`` show the URL with the password redacted.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict

import click

from ..config import redact_url
from ..server import EmbeddedServer
from .common import console, emit_json, json_option


def _server(data_dir: str | None) -> EmbeddedServer:
    return EmbeddedServer(data_dir or os.environ.get("EMQ_HOME", ".emq"))


dir_option = click.option(
    "--dir", "data_dir", default=None, help="Data directory (default: $EMQ_HOME, else ./.emq)."
)


@click.group()
def server() -> None:
    """Manage the embedded Valkey server (data under ./.emq, AOF on)."""


@server.command()
@dir_option
@click.option(
    "--appendfsync",
    type=click.Choice(["everysec", "always"]),
    default=None,
    help="everysec (a power cut may lose the last second) or always (fsync before each "
    "reply; what QueueOptions(durability='aof') needs). Kept for later starts.",
)
@json_option
def start(data_dir: str | None, appendfsync: str | None, as_json: bool) -> None:
    """Start the embedded server, or reuse the one already running (URL shown redacted)."""
    srv = EmbeddedServer(data_dir or os.environ.get("EMQ_HOME", ".emq"), appendfsync=appendfsync)
    url = redact_url(srv.start())
    if as_json:
        emit_json({"url": url, "data_dir": str(srv.data_dir)})
    else:
        console.print(
            f"embedded Valkey running at {url} (data in {srv.data_dir}); "
            "'emq server url' prints the URL with its password",
            markup=False,
            highlight=False,
        )


@server.command()
@dir_option
@json_option
def stop(data_dir: str | None, as_json: bool) -> None:
    """Stop the embedded server (its AOF is flushed first)."""
    stopped = _server(data_dir).stop()
    if as_json:
        emit_json({"stopped": stopped})
    else:
        console.print("stopped" if stopped else "not running")


@server.command()
@dir_option
@json_option
def status(data_dir: str | None, as_json: bool) -> None:
    """Say whether the embedded server is running, and where."""
    st = _server(data_dir).status()
    if as_json:
        emit_json(asdict(st))
    else:
        shown = st.note + (f" at {st.url} (pid {st.pid})" if st.running else "")
        console.print(shown, markup=False, highlight=False)
    if not st.running:
        sys.exit(1)


@server.command()
@dir_option
@json_option
def url(data_dir: str | None, as_json: bool) -> None:
    """Print the embedded server's URL, password included (for EMQ_URL)."""
    found = _server(data_dir).url()
    if as_json:
        emit_json({"url": found})
    else:
        click.echo(found)


def register(group: click.Group) -> None:
    group.add_command(server)
