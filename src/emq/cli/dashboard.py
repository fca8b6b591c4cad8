"""``emq dashboard``: serve the web dashboard (docs/dashboard.md) with uvicorn.

It binds to loopback unless told otherwise, and refuses any other host unless
``EMQ_DASHBOARD_TOKEN`` is set (every page then asks for the token once). The web stack is
the ``emq[dashboard]`` extra, imported only when this command runs. SIGTERM or SIGINT stops
it gracefully, exit 0; a second signal stops it at once, exit 130 (docs/cli.md, Exit codes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import click

from ..errors import EmqError
from .common import resolve_url, say, url_option
from .exits import DONE, INTERRUPTED

TOKEN_ENV = "EMQ_DASHBOARD_TOKEN"
MIN_TOKEN = 16  # characters: a shorter token is refused off loopback
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback ``host`` without a token of at least :data:`MIN_TOKEN`."""
    from ..dashboard.security import is_loopback

    if is_loopback(host):
        return
    if not token:
        raise click.UsageError(
            f"--host {host} is not a loopback address: set {TOKEN_ENV} (a long random secret, "
            "e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`) to serve "
            "other hosts; every page then asks for it once"
        )
    if len(token) < MIN_TOKEN:
        raise click.UsageError(f"{TOKEN_ENV} is too short: use at least {MIN_TOKEN} characters")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port to listen on (0: any free port).",
)
@click.option(
    "--read-only", is_flag=True, help="Render no action and refuse every POST action (403)."
)
@click.option(
    "--floor-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory of the queues' floors, <dir>/<queue>.sqlite3 (default: $EMQ_HOME/floor, "
    "$EMQ_HOME being .emq unless set).",
)
@url_option
def dashboard(
    host: str, port: int, read_only: bool, floor_dir: Path | None, url: str | None
) -> None:
    """Serve the web dashboard: queues, jobs, search, dead letters, workers, race lab."""
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:  # an emq refusal: `error: ...` and exit 2 (docs/cli.md)
        raise EmqError(f"the dashboard needs {exc.name}: pip install 'emq[dashboard]'") from None
    token = os.environ.get(TOKEN_ENV) or None
    check_bind(host, token)
    from ..dashboard.app import create_app

    resolved = resolve_url(url)
    floors = floor_dir or Path(os.environ.get("EMQ_HOME", ".emq")) / "floor"
    app = create_app(resolved, read_only=read_only, token=token, floor_dir=str(floors))
    shown = f"[{host}]" if ":" in host else host
    mode = " (read-only)" if read_only else ""
    say(f"emq dashboard on http://{shown}:{port}/{mode}; Ctrl-C stops it")
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=2,
        proxy_headers=False,
    )
    sys.exit(serve(config))


def serve(config: Any) -> int:
    """Serve until SIGTERM or SIGINT, then shut down gracefully (open requests get up to the
    config's grace period) and return :data:`~emq.cli.exits.DONE`; a second signal stops it
    at once: :data:`~emq.cli.exits.INTERRUPTED`. uvicorn's own handlers would raise the
    signal again once it stopped (the process then dies of it: 143 for SIGTERM)."""
    import uvicorn

    stops: list[int] = []

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            before = {sig: signal.signal(sig, self.on_signal) for sig in STOP_SIGNALS}
            try:
                yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)

        def on_signal(self, sig: int, frame: FrameType | None) -> None:
            stops.append(sig)
            self.force_exit = self.should_exit  # the second one: at once
            self.should_exit = True

    Server(config).run()
    return INTERRUPTED if len(stops) > 1 else DONE


def register(group: click.Group) -> None:
    group.add_command(dashboard)
