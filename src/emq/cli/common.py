"""What every command shares: resolving the server URL, opening a queue, printing.

Printing guarantee: nothing that comes from a user, a job or a server is ever read as Rich
markup or as an emoji code. Commands print through :func:`say` and :func:`show`, whose plain
``str`` parts are literal text; only ``(text, style)`` pairs written in the code are styled.
Output is never wrapped by Rich (a terminal wraps long lines itself; a pipe or a file gets
each line whole), and a table is printed at its natural width when stdout is not a terminal.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
import redis

from ..model.checks import MAX_SHOWN
from ..server.urls import check_url

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.table import Table
    from rich.text import Text

    from ..queue._sync.partitions import PartitionedQueue
    from ..queue._sync.queue import Queue

    console: Console  # made on first use (see __getattr__): rich is imported only to print
    err_console: Console

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

URL_KEY = "emq.url"  # click's ctx.meta key: the server URL the command resolved
NOTICE_KEY = "emq.embedded_said"  # ctx.meta: the embedded server's notice was printed
TRACEBACK = "Traceback (most recent call last)"
CONNECT_TIMEOUT_S = 5.0
SOCKET_TIMEOUT_S = 30.0  # above the 5 s XREAD BLOCK of `events tail -f`


# -- the server --------------------------------------------------------------------------


def embedded_home(url: str | None) -> str | None:
    """The embedded server's data directory when neither ``--url`` nor ``EMQ_URL`` is given."""
    if url or os.environ.get("EMQ_URL"):
        return None
    return os.environ.get("EMQ_HOME", ".emq")


def resolve_url(url: str | None, code_default: str | None = None) -> str:
    """``--url``, else ``EMQ_URL``, else ``code_default`` (a URL set in the user's code),
    else the embedded server (started if needed): the command line wins over code. The URL
    is remembered for the command's error line (password redacted)."""
    home = embedded_home(url)
    if home is None:
        chosen = check_url(url or os.environ["EMQ_URL"])
    elif code_default:
        chosen = check_url(code_default)
    else:
        chosen = _embedded(home)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[URL_KEY] = chosen
    return chosen


def _embedded(home: str) -> str:
    """The embedded server's URL (started if needed), said on stderr once per command: a
    user who forgot ``EMQ_URL`` learns it here, not from an empty table."""
    from ..embedded.standalone import EmbeddedServer

    server = EmbeddedServer(home)
    how = "already running" if server.status().running else "started now"
    url = server.start()
    ctx = click.get_current_context(silent=True)
    if ctx is None or not ctx.meta.get(NOTICE_KEY):
        if ctx is not None:
            ctx.meta[NOTICE_KEY] = True
        where = home if os.path.isabs(home) or home.startswith("./") else f"./{home}"
        click.echo(
            f"emq: no --url or EMQ_URL: using the embedded Valkey in {where} ({how}); "
            "set EMQ_URL=redis://... to use your server",
            err=True,
        )
    return url


def connect(url: str) -> redis.Redis:
    """A client for an already resolved URL, with bounded connect and read timeouts (a port
    that accepts and never answers gives an error, not a hang)."""
    from ..server.clients import sync_client

    return sync_client(
        url,
        decode_responses=True,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=SOCKET_TIMEOUT_S,
    )


def open_queue(url: str | None, name: str) -> Queue:
    from ..queue._sync.queue import Queue

    return Queue(connect(resolve_url(url)), name)


def open_routed(url: str | None, name: str) -> Queue | PartitionedQueue:
    """The queue ``name``, or the partitioned queue of that name when the server holds a
    partition count for it (docs/partitions.md), so a job enqueued or looked up by the
    command line reaches the partition its id or key routes to."""
    from ..queue._sync.partition_count import stored_counts
    from ..queue._sync.queue import Queue

    client = connect(resolve_url(url))
    if stored_counts(client, [name]):
        from ..queue._sync.partitions import PartitionedQueue

        return PartitionedQueue(client, name)
    return Queue(client, name)


def require_queue(client: redis.Redis, name: str, nothing: str) -> None:
    """Refuse (:class:`~emq.cli.exits.NotFound`, exit 2) a queue that is neither among the
    known queues nor holds any key: a mistyped name, before a command writes keys for it.
    ``nothing`` says what was not done (``nothing deleted``)."""
    from ..server.discovery import has_keys, is_known
    from .exits import NotFound

    if not (is_known(client, name) or has_keys(client, name)):
        raise NotFound(f"no queue {name!r} (emq stats lists the queues); {nothing}")


# -- options -----------------------------------------------------------------------------


def url_option(f: F) -> F:
    return click.option(
        "--url",
        default=None,
        metavar="URL",
        help="Server URL (default: $EMQ_URL, else the embedded Valkey under ./.emq).",
    )(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(f)


# -- printing ----------------------------------------------------------------------------
# rich is imported on the first line printed through it: a command that prints JSON (or
# nothing) never loads it. ``console`` and ``err_console`` are made then, once.


def _console(stderr: bool = False) -> Console:
    """``console`` (or ``err_console``), made on first use; a test may set either."""
    name = "err_console" if stderr else "console"
    made: Console | None = globals().get(name)
    if made is None:
        from rich.console import Console

        made = globals()[name] = Console(stderr=stderr, soft_wrap=True)
        made.on_broken_pipe = _pipe_closed  # type: ignore[method-assign]  # one exit code
    return made


def __getattr__(name: str) -> Any:
    """``console`` and ``err_console`` on first use (PEP 562), for ``from .common import``."""
    if name in ("console", "err_console"):
        return _console(name == "err_console")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, default=str))


def line(*parts: object) -> Text:
    """One line of output: every part is literal text (``str(part)``: never markup, never
    an emoji code), except a ``(text, style)`` pair, which is styled, and a :class:`Text`."""
    from rich.text import Text

    out = Text()
    for part in parts:
        if isinstance(part, Text):
            out.append_text(part)
        elif isinstance(part, tuple) and len(part) == 2:
            out.append(str(part[0]), style=str(part[1]))
        else:
            out.append(str(part))
    return out


def say(*parts: object, err: bool = False) -> None:
    """Print :func:`line` of ``parts`` on stdout (or stderr)."""
    _console(err).print(line(*parts))


def error(message: str) -> None:
    """``error: message`` on stderr, long values cut (see :func:`clip`)."""
    say(("error:", "red"), " ", clip(message), err=True)


def table(title: str, *columns: str, **options: Any) -> Table:
    """A table whose title and headers are literal text; ``options`` go to :class:`Table`."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(title), **options)
    for column in columns:
        t.add_column(Text(column))
    return t


def row(t: Table, *cells: object) -> None:
    """Add a row of literal cells (a :class:`Text` cell keeps its styles)."""
    from rich.text import Text

    t.add_row(*(c if isinstance(c, Text) else Text(str(c)) for c in cells))


def show(renderable: RenderableType, *, fit: bool = False) -> None:
    """Print a table (or any renderable): squeezed to fit a terminal, at its natural width
    when stdout is a pipe or a file. No header or cell is cut: on a narrow terminal a table's
    cells fold onto more lines instead of ending in an ellipsis (``fit``: always squeezed,
    for a picture whose cells fold)."""
    from rich.measure import Measurement
    from rich.table import Table

    console = _console()
    if isinstance(renderable, Table):
        for column in renderable.columns:
            column.overflow = "fold" if column.overflow == "ellipsis" else column.overflow
    if fit or console.is_terminal:
        console.print(renderable, soft_wrap=False)
        return
    width = console.width
    wide = console.options.update_width(1_000_000)
    console.width = max(width, Measurement.get(console, wide, renderable).maximum)
    try:
        console.print(renderable, soft_wrap=False)
    finally:
        console.width = width


_LONG = re.compile(rf"\S{{{MAX_SHOWN + 1},}}")


def clip(message: str, limit: int = MAX_SHOWN) -> str:
    """``message`` with every run of more than ``limit`` non-space characters cut as
    :func:`emq.model.checks.shown` cuts a refused value (``...`` and the full length), and at most
    ten such runs' worth of text overall. The core already cuts the values it repeats; this
    also covers click's usage errors and messages from redis-py or the OS."""
    cut = _LONG.sub(lambda m: f"{m[0][: limit - 3]}... ({len(m[0])} characters)", message)
    overall = 10 * limit
    return cut if len(cut) <= overall else f"{cut[: overall - 3]}..."


def one_line(value: str) -> str:
    """A multi-line value as one line. An error stored by a worker (its exception line, then
    the traceback) keeps the exception line and says how many traceback lines were left out;
    a bare traceback becomes its last line; other text keeps every line, joined by `` ⏎ ``."""
    lines = [ln.rstrip() for ln in value.strip().splitlines() if ln.strip()]
    if len(lines) <= 1:
        return value.strip()
    if lines[0].startswith(TRACEBACK):
        return f"{lines[-1].strip()} (traceback: {len(lines)} lines)"
    cut = next((i for i, ln in enumerate(lines) if ln.startswith((TRACEBACK, "..."))), 0)
    head = " ⏎ ".join(ln.strip() for ln in (lines[:cut] if cut else lines))
    return f"{head} (traceback: {len(lines) - cut} lines)" if cut else head


def _pipe_closed() -> None:
    """Rich's hook for a write that met a closed pipe: raised on, for
    :func:`emq.cli.guard.guarded`."""
    raise BrokenPipeError(errno.EPIPE, "stdout was closed")
