"""``emq metrics serve|show``: the queues' Prometheus metrics (:mod:`emq.observe.prometheus`)
for a fleet
without a dashboard, or printed once."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

import click

from ..model.keys import check_queue_name
from .common import resolve_url, say, url_option

Start = Callable[[str, list[tuple[str, str]]], Any]


@click.group()
def metrics() -> None:
    """Prometheus metrics of the queues: counts per location, lifetime counters, oldest
    waiting job's age, paused (docs: observability.md)."""


@metrics.command()
@click.option("--port", type=click.IntRange(0, 65535), required=True, help="Port (0: any free).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--queue", "queues", multiple=True, help="Only this queue (repeatable).")
@url_option
def serve(port: int, host: str, queues: tuple[str, ...], url: str | None) -> None:
    """Serve GET /metrics on HOST:PORT until Ctrl-C; every scrape reads the server afresh."""
    from wsgiref.simple_server import make_server

    from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

    from ..observe.prometheus import render_queue_metrics

    resolved = resolve_url(url)
    names = [check_queue_name(q) for q in queues] or None  # a bad name: one error line now

    def app(environ: dict[str, Any], start: Start) -> Iterable[bytes]:
        if environ.get("PATH_INFO") not in ("/metrics", "/"):
            start("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: try /metrics\n"]
        try:
            body, ctype = render_queue_metrics(resolved, names)
        except Exception as exc:  # the server is away or refuses: say so to the scraper
            start("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [f"emq: cannot read the server: {type(exc).__name__}\n".encode()]
        start("200 OK", [("Content-Type", ctype), ("Content-Length", str(len(body)))])
        return [body]

    httpd = make_server(host, port, app, ThreadingWSGIServer, handler_class=_SilentHandler)
    shown = f"[{host}]" if ":" in host else host
    say(f"emq metrics on http://{shown}:{httpd.server_port}/metrics; Ctrl-C stops it")
    sys.stdout.flush()
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()


@metrics.command()
@click.argument("queues", nargs=-1)
@url_option
def show(queues: tuple[str, ...], url: str | None) -> None:
    """Print the Prometheus text of QUEUES (default: every known queue) once."""
    from ..observe.prometheus import render_queue_metrics

    body, _ = render_queue_metrics(resolve_url(url), list(queues) or None)
    click.echo(body.decode(), nl=False)


def register(group: click.Group) -> None:
    group.add_command(metrics)
