"""``emq server start|stop|status|url``: the embedded Valkey under ./.emq.

The server requires a password (kept in ``<dir>/password``, 0600). ``emq server url`` is the one
command that prints it, inside the URL (that is its job: ``export EMQ_URL=$(emq server url)``);
``start`` and ``status`` show the URL with the password redacted.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..embedded.cluster import EmbeddedCluster
from ..embedded.standalone import EmbeddedServer
from ..server.urls import redact_url

if TYPE_CHECKING:
    from ..embedded.sentinel import EmbeddedSentinel
from .common import console, emit_json, json_option
from .exits import NO


def _home(data_dir: str | None) -> Path:
    return Path(data_dir or os.environ.get("EMQ_HOME", ".emq"))


def _server(data_dir: str | None) -> EmbeddedServer:
    return EmbeddedServer(_home(data_dir))


def _cluster(data_dir: str | None, primaries: int = 3, replicas: int = 0) -> EmbeddedCluster:
    """The local cluster under ``<dir>/cluster``."""
    return EmbeddedCluster(_home(data_dir) / "cluster", primaries=primaries, replicas=replicas)


def _has_cluster(data_dir: str | None) -> bool:
    return (_home(data_dir) / "cluster" / "cluster.json").exists()


def _sentinel(data_dir: str | None, replicas: int = 2) -> EmbeddedSentinel:
    """The local primary, replicas and sentinels under ``<dir>/sentinel``."""
    from ..embedded.sentinel import EmbeddedSentinel

    return EmbeddedSentinel(_home(data_dir) / "sentinel", replicas=replicas)


def _has_sentinel(data_dir: str | None) -> bool:
    return (_home(data_dir) / "sentinel" / "sentinel.json").exists()


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
@click.option(
    "--cluster",
    "primaries",
    type=click.IntRange(1, 16),
    default=None,
    help="Start a local Valkey Cluster of this many primaries instead (under <dir>/cluster).",
)
@click.option(
    "--sentinel",
    is_flag=True,
    help="Start a primary with replicas and 3 sentinels instead (under <dir>/sentinel).",
)
@click.option(
    "--replicas",
    type=click.IntRange(0, 4),
    default=None,
    help="With --cluster: replicas per primary (0). With --sentinel: replicas (2).",
)
@json_option
def start(
    data_dir: str | None,
    appendfsync: str | None,
    primaries: int | None,
    sentinel: bool,
    replicas: int | None,
    as_json: bool,
) -> None:
    """Start the embedded server, or reuse the one already running (URL shown redacted).
    With --cluster N: a local cluster of N primaries (and --replicas R each), slots assigned
    and every node ready; its redis+cluster:// URL (every node a seed) is shown. With
    --sentinel: a primary, its replicas and 3 sentinels watching it; the redis+sentinel://
    URL is shown."""
    if sentinel:
        if primaries is not None:
            raise click.UsageError("--sentinel and --cluster are two different set-ups")
        watched = _sentinel(data_dir, 2 if replicas is None else replicas)
        shown = redact_url(watched.start())
        if as_json:
            emit_json({"url": shown, "data_dir": str(watched.data_dir), "sentinel": True})
        else:
            console.print(
                f"local primary with {watched.replicas} replicas and {watched.sentinels} "
                f"sentinels at {shown} (data in {watched.data_dir}); 'emq server url "
                "--sentinel' prints the URL with its password",
                markup=False,
                highlight=False,
            )
        return
    replicas = replicas or 0
    if primaries is not None:
        cluster = _cluster(data_dir, primaries, replicas)
        cluster.start()
        url = redact_url(cluster.seeds_url())
        if as_json:
            emit_json({"url": url, "data_dir": str(cluster.data_dir), "cluster": True})
        else:
            console.print(
                f"local Valkey Cluster of {primaries} primaries with {replicas} replicas each "
                f"at {url} (data in {cluster.data_dir}); 'emq server url --cluster' prints "
                "the URL with its password",
                markup=False,
                highlight=False,
            )
        return
    if replicas:
        raise click.UsageError("--replicas goes with --cluster N or --sentinel")
    srv = EmbeddedServer(_home(data_dir), appendfsync=appendfsync)
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
    """Stop the embedded server, and the local cluster and sentinel set, if any (AOF
    flushed first)."""
    stopped = _server(data_dir).stop()
    if _has_cluster(data_dir):
        stopped = _cluster(data_dir).stop() or stopped
    if _has_sentinel(data_dir):
        stopped = _sentinel(data_dir).stop() or stopped
    if as_json:
        emit_json({"stopped": stopped})
    else:
        console.print("stopped" if stopped else "not running")


@server.command()
@dir_option
@click.option("--cluster", is_flag=True, help="Each node of the local cluster.")
@json_option
def status(data_dir: str | None, cluster: bool, as_json: bool) -> None:
    """Say whether the embedded server (or with --cluster each node of the local cluster)
    is running, and where; exit 1 when not (any node, for the cluster)."""
    if cluster:
        nodes = _cluster(data_dir).status()
        if as_json:
            emit_json({"nodes": [asdict(n) for n in nodes]})
        else:
            for n in nodes:
                state = f"{n.role} on port {n.port}" if n.running else "stopped"
                console.print(f"node {n.index}: {state}", markup=False, highlight=False)
        if not nodes or not all(n.running for n in nodes):
            sys.exit(NO)
        return
    st = _server(data_dir).status()
    if as_json:
        emit_json(asdict(st))
    else:
        shown = st.note + (f" at {st.url} (pid {st.pid})" if st.running else "")
        console.print(shown, markup=False, highlight=False)
    if not st.running:
        sys.exit(NO)


@server.command()
@dir_option
@click.option(
    "--cluster", is_flag=True, help="The local cluster's redis+cluster:// URL (every node a seed)."
)
@click.option("--sentinel", is_flag=True, help="The local sentinel set's redis+sentinel:// URL.")
@json_option
def url(data_dir: str | None, cluster: bool, sentinel: bool, as_json: bool) -> None:
    """Print the embedded server's URL, password included (for EMQ_URL)."""
    if sentinel:
        found = _sentinel(data_dir).url()
    else:
        found = _cluster(data_dir).seeds_url() if cluster else _server(data_dir).url()
    if as_json:
        emit_json({"url": found})
    else:
        click.echo(found)


def register(group: click.Group) -> None:
    group.add_command(server)
