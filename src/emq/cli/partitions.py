"""What ``emq stats`` shows of partitioned queues (docs/partitions.md): one row per queue,
its partitions' counts summed, and with ``--partitions`` a row per partition after it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import redis

from ..calls.partitions import split_name, sum_counts
from ..queue._sync.partition_count import stored_counts
from .lanes import stats_limits

if TYPE_CHECKING:
    from ..queue._sync.queue import Queue


def fold(
    client: redis.Redis, names: list[str], *, parts: bool = True
) -> tuple[list[str], dict[str, int]]:
    """The rows of ``emq stats`` for ``names``: with ``parts``, a partition's name folds into
    its queue's when the server holds that queue as partitioned (a plain queue that only
    looks like a partition keeps its row); and each partitioned queue's count."""
    bases = {s[0] for name in names if parts and (s := split_name(name))}
    held = stored_counts(client, bases | set(names))
    rows: list[str] = []
    for name in names:
        s = split_name(name) if parts else None
        if s is not None and s[1] < held.get(s[0], 0):
            name = s[0]
        if name not in rows:
            rows.append(name)
    return sorted(rows), held


def partitioned_stats(
    client: redis.Redis, name: str, show_parts: bool
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], str | None]:
    """``(row, partition rows, limits line)`` of partitioned queue ``name``: the row sums the
    counts of its partitions and of the plain queue of its name, and says how many partitions;
    a partition's row has its own counts, limits and cluster slot; limits hold per partition,
    and the line shows partition 0's."""
    from redis.crc import key_slot

    from ..queue._sync.partitions import PartitionedQueue
    from ..queue._sync.queue import Queue

    pq = PartitionedQueue(client, name)
    parts: list[Queue] = pq.partitions()
    each = pq.partition_counts()
    total: dict[str, Any] = dict(sum_counts([*each, Queue(client, name).counts()]))
    limits, note = stats_limits(parts[0])
    total |= {"limits": limits, "partitions": len(parts)}
    rows: dict[str, dict[str, Any]] = {}
    if show_parts:
        for q, counts in zip(parts, each, strict=True):
            slot = key_slot(q.core.keys.meta.encode())  # CLUSTER KEYSLOT of its keys
            rows[q.name] = {**counts, "limits": stats_limits(q)[0], "slot": slot}
    return total, rows, (f"per partition: {note}" if note else None)
