"""The local cluster of embedded servers (``emq server start --cluster N --replicas R``): it
forms with every slot covered and every replica following a primary, restarts with the same
shape, refuses another shape, and a cluster-aware client reaches every primary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from emq.cli.main import cli
from emq.embedded.cluster import SLOTS, EmbeddedCluster
from emq.errors import ServerError
from emq.server.clients import close_client, is_cluster_client, sync_client

pytestmark = pytest.mark.servers("cluster")  # clusters of its own


def _slot_owners(client: redis.RedisCluster) -> dict[int, str]:
    """slot -> primary node name, from CLUSTER SLOTS."""
    owners: dict[int, str] = {}
    for (first, last), info in client.cluster_slots().items():
        for slot in range(first, last + 1):
            owners[slot] = f"{info['primary'][0]}:{info['primary'][1]}"
    return owners


def test_cluster_forms_restarts_and_keeps_its_shape(tmp_path: Path) -> None:
    cluster = EmbeddedCluster(tmp_path / "cluster", primaries=3, replicas=1)
    url = cluster.start()
    try:
        roles = [n.role for n in cluster.status()]
        assert roles == ["primary"] * 3 + ["replica"] * 3
        rc = redis.RedisCluster.from_url(url, decode_responses=True)
        try:
            owners = _slot_owners(rc)
            assert len(owners) == SLOTS
            assert len(set(owners.values())) == 3
            for name in ("a", "b", "c", "d", "e", "f"):
                rc.set(f"emq:{{{name}}}:probe", name)
            assert [rc.get(f"emq:{{{n}}}:probe") for n in "abcdef"] == list("abcdef")
        finally:
            rc.close()
        assert json.loads((tmp_path / "cluster" / "cluster.json").read_text())["replicas"] == 1
        assert (tmp_path / "cluster" / "password").stat().st_mode & 0o777 == 0o600
        with pytest.raises(ServerError, match="holds a cluster of 3 primaries with 1"):
            EmbeddedCluster(tmp_path / "cluster", primaries=2, replicas=2).start()
        assert cluster.stop() is True
        assert not any(n.running for n in cluster.status())
        assert cluster.start() == url  # same ports, same password, same slots
        roles = sorted(n.role for n in cluster.status())
        assert roles == ["primary"] * 3 + ["replica"] * 3
        rc = redis.RedisCluster.from_url(url, decode_responses=True)
        try:
            assert rc.get("emq:{a}:probe") == "a"  # kept in the AOF across the restart
        finally:
            rc.close()
    finally:
        cluster.stop()


def test_cli_starts_and_stops_a_cluster(tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"EMQ_HOME": str(tmp_path)}
    started = runner.invoke(cli, ["server", "start", "--cluster", "2", "--json"], env=env)
    try:
        assert started.exit_code == 0, started.output
        shown = json.loads(started.output)
        assert shown["cluster"] is True and "***" in shown["url"]
        status = runner.invoke(cli, ["server", "status", "--cluster", "--json"], env=env)
        assert status.exit_code == 0
        assert [n["role"] for n in json.loads(status.output)["nodes"]] == ["primary"] * 2
        url = runner.invoke(cli, ["server", "url", "--cluster"], env=env).output.strip()
        assert url.startswith("redis+cluster://") and url.count(",") == 1  # both nodes seeds
        rc = sync_client(url)
        try:
            assert rc.ping() and is_cluster_client(rc)
        finally:
            close_client(rc)
        refused = runner.invoke(cli, ["server", "start", "--replicas", "1"], env=env)
        assert refused.exit_code == 2 and "--replicas goes with --cluster" in refused.output
    finally:
        stopped = runner.invoke(cli, ["server", "stop", "--json"], env=env)
    assert json.loads(stopped.output) == {"stopped": True}
    status = runner.invoke(cli, ["server", "status", "--cluster"], env=env)
    assert status.exit_code == 1 and "stopped" in status.output
