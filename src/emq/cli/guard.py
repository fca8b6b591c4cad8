"""How every ``emq`` command ends (docs/cli.md, Errors are one line; Exit codes).

:func:`guarded` runs each command (the ``emq`` group's :meth:`invoke` wraps every command and
sub-group in it) and is the one place that turns a failure into one ``error: <line>`` on
stderr and the exit code of :mod:`emq.cli.exits`: a usage error (an unknown option, command
or choice, a missing argument), a refusal, emq's own errors, a server that cannot be reached
or answers with an error, a file that cannot be read. A bug keeps its traceback. Long
values in the line are cut (:func:`~emq.cli.common.clip`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

import click
import redis

from ..errors import EmqError, ServerUnreachable
from ..queue.shared import UNREACHABLE
from ..server.clients import cluster_unreachable
from ..server.urls import redact_url
from .common import URL_KEY, error
from .exits import ERROR, INTERRUPTED, NO, PIPE_CLOSED, Refusal

T = TypeVar("T")


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in out and len(out) < 10:
        out.append(seen)
        seen = seen.__cause__ or seen.__context__
    return out


def failure_line(exc: BaseException, url: str | None) -> str | None:
    """The one line a command prints for ``exc``, or None when ``exc`` is a bug (which then
    keeps its traceback). Covers emq's own errors, a server that cannot be reached, a port
    that does not speak the Redis protocol, a server's error reply, and a file that cannot
    be read or written."""
    at = f" at {redact_url(url)}" if url else ""
    chain = _causes(exc)
    if any(isinstance(e, redis.exceptions.InvalidResponse) for e in chain):
        return (
            f"the server{at} does not answer as Valkey or Redis would (is it the right host "
            f"and port?): {chain[-1]}"
        )
    auth = next((e for e in chain if isinstance(e, redis.exceptions.AuthenticationError)), None)
    if auth is not None or "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
        why = auth if auth is not None else exc  # redis-py's own words, never the password
        return f"the server{at} refused the login (wrong or missing password or user name): {why}"
    if isinstance(exc, UNREACHABLE) or cluster_unreachable(exc):
        cause = exc.__cause__ if isinstance(exc, ServerUnreachable) and exc.__cause__ else exc
        if cluster_unreachable(cause):  # redis-py's words, then the last node's error
            return f"cannot reach any node of the cluster{at}: {cause.__cause__ or cause}"
        return f"cannot reach the server{at}: {cause}"
    if isinstance(exc, EmqError | Refusal):
        return str(exc)
    if isinstance(exc, redis.RedisError):
        return f"the server{at} replied with an error: {exc}"
    if isinstance(exc, OSError):
        return str(exc)
    sqlite3 = sys.modules.get("sqlite3")  # not imported: no floor was opened, no such error
    if sqlite3 is not None and isinstance(exc, sqlite3.Error):
        return f"the floor (SQLite) failed: {exc}"
    return None


def usage_line(exc: click.ClickException) -> str:
    """A usage error as one line: click's message, then where the help is (click's own
    three lines, ``Usage:``, ``Try ... --help`` and ``Error:``, say no more)."""
    message = exc.format_message().strip().rstrip(".")
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        return f"{message} (see {ctx.command_path} --help)"
    return message


def stdout_closed(ctx: click.Context) -> NoReturn:
    """Exit :data:`~emq.cli.exits.PIPE_CLOSED` with nothing on stderr: not an error of the
    server or of the command. stdout is pointed at /dev/null first, so the interpreter's
    last flush is quiet."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: no file descriptor (a test)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    ctx.exit(PIPE_CLOSED)


def refuse_usage(ctx: click.Context, exc: click.ClickException) -> NoReturn:
    """Say a usage error in one line and exit :data:`~emq.cli.exits.ERROR`; a group called
    with no command still prints its help (click's ``no_args_is_help``)."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        raise exc
    error(usage_line(exc))
    ctx.exit(ERROR)


def guarded(ctx: click.Context, call: Callable[[], T]) -> T:
    """Run a command: every failure becomes one ``error: <line>`` and its exit code
    (:mod:`emq.cli.exits`); a stdout whose reader went away ends it quietly
    (:func:`stdout_closed`); Ctrl-C ends it with :data:`~emq.cli.exits.INTERRUPTED`."""
    try:
        return call()
    except click.ClickException as exc:
        refuse_usage(ctx, exc)
    except click.Abort as exc:  # a prompt met Ctrl-C or the end of its input
        if not isinstance(exc.__context__, KeyboardInterrupt | EOFError):
            raise
        click.echo(err=True)  # past the terminal's ^C
        ctx.exit(INTERRUPTED)
    except KeyboardInterrupt:
        click.echo(err=True)
        ctx.exit(INTERRUPTED)
    except BrokenPipeError:  # the server's own errors come wrapped by redis-py: this is stdout
        stdout_closed(ctx)
    except Exception as exc:
        message = failure_line(exc, ctx.meta.get(URL_KEY))
        if message is None:
            raise
        error(message)
        ctx.exit(exc.code if isinstance(exc, Refusal) else ERROR)


def declined(ctx: click.Context, what: str) -> NoReturn:
    """A question at the terminal answered no: say so and exit :data:`~emq.cli.exits.NO`."""
    click.echo(f"not confirmed: {what}", err=True)
    ctx.exit(NO)
