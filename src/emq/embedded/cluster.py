"""A local Valkey Cluster of embedded servers: for tests, and to try emq on a cluster.

``EmbeddedCluster(primaries=3, replicas=1).start()`` runs ``primaries`` primaries with
``replicas`` replicas each, every node an
:class:`~emq.embedded.standalone.EmbeddedServer` (loopback, AOF,
private data directory, one shared password) with ``cluster-enabled yes``. The slots are split
evenly over the primaries, every node meets every other, each replica follows its primary,
and ``start`` returns only once every node reports ``cluster_state:ok`` and every replica's
link to its primary is up. It returns the URL of the first node; a cluster-aware client finds
the others from it. :meth:`EmbeddedCluster.seeds_url` names every node as a seed
(``redis+cluster://``), so a client made from it starts while any node answers.

Layout under the data directory (default ``./.emq/cluster``)::

    cluster.json   {primaries, replicas, node_timeout_ms}: the shape, fixed at first start
    password       the password every node requires (0600), also each node's masterauth
    node-<i>/      node i's data directory: nodes 0..primaries-1 are the primaries; node
                   primaries + r*primaries + p is replica r of primary p (at first start)

The nodes keep their membership in ``node-<i>/nodes.conf``, so a stopped cluster restarts with
the same slots, ports and roles (after a failover, roles stay as they are then). A node's port
is chosen so that its cluster bus port (port + 10000) is free too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis

from ..errors import ServerError
from .standalone import (
    DEFAULT_DIR,
    EmbeddedServer,
    _port_in_use,
    _write_private,
    free_port,
    make_private,
)

SLOTS = 16384
FORM_TIMEOUT_S = 30.0
BUS_OFFSET = 10000  # a node's cluster bus listens on its port + 10000


@dataclass(frozen=True, slots=True)
class NodeStatus:
    index: int
    port: int | None
    running: bool
    role: str  # "primary" | "replica" | "unknown"


def _bus_safe_port() -> int:
    """A free loopback port whose cluster bus port is free too."""
    for _ in range(200):
        port = free_port()
        if port + BUS_OFFSET < 65536 and not _port_in_use(port + BUS_OFFSET):
            return port
    raise ServerError("found no free port pair (port and port + 10000) on 127.0.0.1")


class EmbeddedCluster:
    """``primaries`` primaries with ``replicas`` replicas each, under ``data_dir``.
    ``node_timeout_ms`` is ``cluster-node-timeout``: how long a primary may be silent before
    its replica takes over (Valkey's default is 15 s; 2 s here, for a local cluster)."""

    def __init__(
        self,
        data_dir: Path | str = DEFAULT_DIR / "cluster",
        *,
        primaries: int = 3,
        replicas: int = 0,
        node_timeout_ms: int = 2000,
        binary: Path | str | None = None,
    ) -> None:
        if not (1 <= primaries <= 16 and 0 <= replicas <= 4):
            raise ServerError(
                f"a local cluster takes 1-16 primaries and 0-4 replicas each, got "
                f"{primaries} and {replicas}"
            )
        if not 100 <= node_timeout_ms <= 60_000:
            raise ServerError(f"node_timeout_ms must be 100-60000, got {node_timeout_ms}")
        self.data_dir = Path(data_dir).absolute()
        self.primaries, self.replicas = primaries, replicas
        self.node_timeout_ms = node_timeout_ms
        self._binary = binary
        self.shape_file = self.data_dir / "cluster.json"
        self.password_file = self.data_dir / "password"

    def _shape(self) -> dict[str, int] | None:
        try:
            data = json.loads(self.shape_file.read_text())
            return {k: int(data[k]) for k in ("primaries", "replicas", "node_timeout_ms")}
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _password(self) -> str:
        node = EmbeddedServer(self.data_dir)  # reads and checks <dir>/password
        return node._password() or node._new_password()

    def nodes(self, password: str | None = None) -> list[EmbeddedServer]:
        """Every node's server, in node order (primaries first, as at first start)."""
        shape = self._shape() or {"primaries": self.primaries, "replicas": self.replicas}
        count = shape["primaries"] * (1 + shape["replicas"])
        config: tuple[str, ...] = (
            "cluster-enabled yes",
            "cluster-config-file nodes.conf",
            f"cluster-node-timeout {self.node_timeout_ms}",
            "repl-diskless-sync-delay 0",  # a replica (re)joining syncs at once, not after 5 s
        )
        if password:
            config += (f"masterauth {password}",)
        return [
            EmbeddedServer(self.data_dir / f"node-{i}", binary=self._binary, config=config)
            for i in range(count)
        ]

    def start(self) -> str:
        """Start (or reuse) the cluster; returns the first node's URL, password included."""
        make_private(self.data_dir)
        shape = self._shape()
        wanted = {
            "primaries": self.primaries,
            "replicas": self.replicas,
            "node_timeout_ms": self.node_timeout_ms,
        }
        if shape is not None and (shape["primaries"], shape["replicas"]) != (
            self.primaries,
            self.replicas,
        ):
            raise ServerError(
                f"{self.data_dir} holds a cluster of {shape['primaries']} primaries with "
                f"{shape['replicas']} replicas each; stop it and remove the directory to make "
                "another shape"
            )
        password = self._password()
        _write_private(self.shape_file, json.dumps(shape or wanted))
        nodes = self.nodes(password)
        for node in nodes:
            make_private(node.data_dir)
            _write_private(node.password_file, password + "\n")
            if not node._state():
                node.port = _bus_safe_port()
            node.start()
        clients = [self._client(n) for n in nodes]
        try:
            if _slots_assigned(clients[0]) == 0:
                self._form(clients)
            self._wait_ok(clients, nodes)
        finally:
            for c in clients:
                c.close()
        return nodes[0].url()

    def stop(self) -> bool:
        """Stop every node (each flushes its AOF). False if none was running."""
        stopped = [node.stop() for node in self.nodes()]
        return any(stopped)

    def status(self) -> list[NodeStatus]:
        """Each node: its port, whether it runs and its role now."""
        out = []
        for i, node in enumerate(self.nodes()):
            st = node.status()
            port = node._state().get("port")
            role = "unknown"
            if st.running:
                client = self._client(node)
                try:
                    role = (
                        "primary" if client.info("replication")["role"] == "master" else ("replica")
                    )
                except redis.RedisError:
                    pass
                finally:
                    client.close()
            out.append(NodeStatus(i, port, st.running, role))
        return out

    def url(self) -> str:
        """The first node's URL, password included (keep it out of logs)."""
        return self.nodes()[0].url()

    def seeds_url(self, nodes: Iterable[int] | None = None) -> str:
        """A ``redis+cluster://`` URL naming nodes ``nodes`` (indices, in that order; by
        default every node) as its seeds, password included (keep it out of logs). A client
        of it reaches the cluster while any one of them answers; they need not run now."""
        servers = self.nodes()
        ports = [servers[i]._state().get("port") for i in range(len(servers))]
        picked = list(range(len(servers))) if nodes is None else list(nodes)
        if not picked or any(not 0 <= i < len(servers) or ports[i] is None for i in picked):
            raise ServerError(f"the local cluster in {self.data_dir} has not been started")
        seeds = ",".join(f"127.0.0.1:{ports[i]}" for i in picked)
        return f"redis+cluster://:{quote(self._password(), safe='')}@{seeds}/"

    def _client(self, node: EmbeddedServer) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=node._state()["port"],
            password=node._password(),
            socket_timeout=5,
            decode_responses=True,
        )

    def _form(self, clients: list[redis.Redis]) -> None:
        """Assign the slots, introduce the nodes, make the replicas follow their primaries."""
        p = self.primaries
        for i in range(p):
            first, last = SLOTS * i // p, SLOTS * (i + 1) // p - 1
            _cluster_cmd(clients[i], "ADDSLOTSRANGE", first, last)
        ports = [int(c.connection_pool.connection_kwargs["port"]) for c in clients]
        for port in ports[1:]:
            _cluster_cmd(clients[0], "MEET", "127.0.0.1", port)
        ids = [str(_cluster_cmd(c, "MYID")) for c in clients]

        def everyone_known() -> bool:  # by its real id: a node still in handshake has another
            return all(set(ids) <= {line.split()[0] for line in _known(c)} for c in clients)

        self._until(everyone_known, "every node to know every other")
        for i in range(p, len(clients)):
            primary = (i - p) % p

            def follow(replica: redis.Redis = clients[i], of: str = ids[primary]) -> bool:
                return _cluster_cmd(replica, "REPLICATE", of) is not None

            # retried: a gossip round may be needed before the replica knows the primary's id
            self._until(follow, f"node {i} to follow node {primary}")

    def _wait_ok(self, clients: list[redis.Redis], nodes: list[EmbeddedServer]) -> None:
        def ready() -> bool:
            for c in clients:
                info = _cluster_cmd(c, "INFO")
                text = info if isinstance(info, str) else info.decode()
                if "cluster_state:ok" not in text:
                    return False
                rep = c.info("replication")
                if rep["role"] != "master" and rep.get("master_link_status") != "up":
                    return False
            return True

        self._until(ready, "cluster_state:ok on every node, every replica in sync")

    def _until(self, cond: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + FORM_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if cond():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise ServerError(
            f"the local cluster in {self.data_dir} did not come up: waited "
            f"{FORM_TIMEOUT_S:.0f} s for {what}; see node-*/server.log"
        )


def _cluster_cmd(client: redis.Redis, *args: str | int) -> Any:
    """``CLUSTER <args>`` on one node."""
    return client.execute_command("CLUSTER", *args)  # type: ignore[no-untyped-call]


def _slots_assigned(client: redis.Redis) -> int:
    info = _cluster_cmd(client, "INFO")
    text = info if isinstance(info, str) else info.decode()
    for line in text.splitlines():
        if line.startswith("cluster_slots_assigned:"):
            return int(line.split(":", 1)[1])
    return 0


def _known(client: redis.Redis) -> list[str]:
    text = _cluster_cmd(client, "NODES")
    text = text if isinstance(text, str) else text.decode()
    return [line for line in text.splitlines() if line.strip()]
