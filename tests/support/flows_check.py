"""The flow invariants, checked over the raw keyspace at the end of every flow test.

Not a test module: :func:`check_flows` reads every row and flow record of one queue (SCAN is
fine in a test) and asserts the bookkeeping equals what is really there.
"""

from __future__ import annotations

import json

import redis

from emq.model.keys import QueueKeys

from .helpers import assert_consistent

FINAL = {"completed", "dead", "removed", "cancelled"}


def _where(queue: str, ref: str) -> tuple[QueueKeys, str]:
    """A flow record's child (``<id>`` or ``<id>@<queue>``) -> its queue's keys and id."""
    cid, _, other = ref.partition("@")
    return QueueKeys.of(other or queue), cid


def check_flows(client: redis.Redis, queue: str) -> dict[str, dict[str, str]]:
    """Assert, for one queue:

    1. G1 (tests/support/helpers.py ``assert_consistent``), with ``waiting`` a location;
    2. each parent's ``children_left`` equals its number of unfinished children (status ''),
       so no child was counted twice and none was missed;
    3. no parent is pending, active or scheduled while a child is unfinished, and every
       parent in ``waiting`` has at least one unfinished child;
    4. an unfinished child still has its row, not completed, or (a child in another queue)
       its end waits in its queue's outbox: no end is lost between the two steps;
    5. each child row names a parent whose record lists it (``<id>@<queue>`` across queues);
    6. every entry of this queue's outbox is readable and names a queue.

    Returns each parent's record (child ref -> status).
    """
    k = QueueKeys.of(queue)
    locs = assert_consistent(client, queue)
    records: dict[str, dict[str, str]] = {}
    for key in client.scan_iter(match=k.prefix + "flow:*", count=1000):
        if key.endswith(":results"):
            continue
        parent = key.rsplit(":", 1)[1]
        records[parent] = client.hgetall(key)
    for parent, kids in records.items():
        row = client.hgetall(k.job(parent))
        assert row, f"flow record of {parent} outlives its row"
        unfinished = [c for c, s in kids.items() if s == ""]
        assert all(s in FINAL for s in kids.values() if s), (parent, kids)
        assert int(row["children_left"]) == len(unfinished), (parent, row, kids)
        if unfinished:
            assert row["state"] in ("waiting", "dead"), (parent, row["state"], unfinished)
        if parent in locs["waiting"]:
            assert unfinished, f"{parent} waits with no unfinished child"
        for ref in unfinished:
            ck, child = _where(queue, ref)
            state = client.hget(ck.job(child), "state")
            if ck.queue != queue and state in (None, "completed", "dead"):
                assert client.hexists(ck.outbox, "done:" + child) or state == "dead", (
                    f"{ref}'s end ({state}) is neither counted nor in its outbox"
                )
                continue
            assert state not in (None, "completed"), (parent, ref, state)
    for loc in ("pending", "active", "schedule", "dead", "waiting"):
        for job_id in locs[loc]:
            up = client.hget(k.job(job_id), "parent")
            if up is None:
                continue
            pk, pid = _where(queue, up)
            if pk.queue == queue:
                if pid in records:
                    assert job_id in records[pid], (job_id, up)
            elif client.exists(pk.flow(pid)):
                assert client.hexists(pk.flow(pid), f"{job_id}@{queue}"), (job_id, up)
    for name, text in client.hgetall(k.outbox).items():
        entry = json.loads(text)
        assert name.split(":", 1)[0] in ("done", "cancel"), name
        QueueKeys.of(entry["q"])
    return records
