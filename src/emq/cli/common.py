"""What every command shares: resolving the server URL, opening a queue, printing."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
import redis
from rich.console import Console

from ..config import check_url
from ..errors import EmqError
from ..queue import Queue
from ..server import EmbeddedServer

F = TypeVar("F", bound=Callable[..., Any])

console = Console()
err_console = Console(stderr=True)


def resolve_url(url: str | None) -> str:
    """``--url``, else ``EMQ_URL``, else the embedded server (started if needed)."""
    chosen = url or os.environ.get("EMQ_URL")
    if chosen:
        return check_url(chosen)
    data_dir = os.environ.get("EMQ_HOME", ".emq")
    return EmbeddedServer(data_dir).start()


def url_option(f: F) -> F:
    return click.option(
        "--url",
        default=None,
        metavar="URL",
        help="Server URL (default: $EMQ_URL, else the embedded Valkey under ./.emq).",
    )(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")(f)


def open_queue(url: str | None, name: str) -> Queue:
    return Queue.from_url(resolve_url(url), name)


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, default=str))


def handle_errors(f: F) -> F:
    """Turn emq's errors into one clear line on stderr and exit code 2, not a traceback."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except EmqError as exc:
            err_console.print(f"[red]error:[/red] {exc}", highlight=False)
            sys.exit(2)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            err_console.print(f"[red]error:[/red] cannot reach the server: {exc}", highlight=False)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]
