"""The lane invariants, checked over the raw keyspace at the end of every lane test.

Not a test module: :func:`check_lanes` is called by the tests of lanes and limits. It reads
every key of one queue (SCAN is fine in a test) and asserts that the lane bookkeeping equals
what is really there, whatever mix of transitions ran before.
"""

from __future__ import annotations

import redis

from emq.model.keys import QueueKeys
from emq.model.lanes import DEFAULT_LANE

from .helpers import assert_consistent, packed_ids


def _lane_of(client: redis.Redis, k: QueueKeys, job_id: str) -> str:
    return client.hget(k.job(job_id), "lane") or DEFAULT_LANE


def check_lanes(client: redis.Redis, queue: str) -> dict[str, dict[str, set[str]]]:
    """Assert, for one queue:

    1. G1 over every lane: each id in exactly one location, its row's state matching;
    2. each lane's waiting set holds exactly the waiting jobs whose row names that lane (the
       default lane's: with the packed jobs, which have no row);
    3. in lane mode, each lane's active set holds exactly its leased jobs (a slot is taken by a
       job that is really leased, and by nothing else);
    4. every lane with waiting jobs can be served: it is in the ring, held (later), parked at
       its concurrency limit (full), or paused;
    5. when the queue has no job left, no lane key is left but settings, holds, the ring and
       claim logs (which expire): no lane is parked at a concurrency limit (no leaked slot).

    Returns per lane its ``pending`` and ``active`` ids.
    """
    k = QueueKeys.of(queue)
    locs = assert_consistent(client, queue)
    lane_mode = client.hget(k.meta, "lanes") == "1"
    lanes: dict[str, dict[str, set[str]]] = {}

    def lane(name: str) -> dict[str, set[str]]:
        return lanes.setdefault(name, {"pending": set(), "active": set()})

    for job_id in locs["pending"]:
        lane(_lane_of(client, k, job_id))["pending"].add(job_id)
    for job_id in locs["active"]:
        lane(_lane_of(client, k, job_id))["active"].add(job_id)
    packed = packed_ids(client, queue)  # the default lane's, waiting without a row
    for name, ids in lanes.items():
        key = k.lane_pending(name)
        waiting = set(client.zrange(key, 0, -1)) | (packed if name == DEFAULT_LANE else set())
        assert waiting == ids["pending"], f"lane {name}: waiting set"
    seen_active = {
        key.split(":")[-2]: set(client.smembers(key))
        for key in client.scan_iter(match=k.prefix + "lane:*:active", count=1000)
    }
    if lane_mode:
        for name in set(seen_active) | set(lanes):
            real = lanes.get(name, {"active": set()})["active"]
            assert seen_active.get(name, set()) == real, f"lane {name}: active set != leased"
        ring = set(client.zrange(k.lanes("ring"), 0, -1))
        later = set(client.zrange(k.lanes("later"), 0, -1))
        full = set(client.smembers(k.lanes("full")))
        conf = client.hgetall(k.lanes("conf"))
        paused = {name for name, text in conf.items() if text.endswith(" 1")}
        for name, ids in lanes.items():
            if ids["pending"]:
                assert name in ring | later | full | paused, f"lane {name} can not be served"
    else:
        assert not seen_active, "active sets of lanes outside lane mode"
        assert set(lanes) <= {DEFAULT_LANE}, "named lanes outside lane mode"
    if not any(locs.values()):
        left = {
            key.removeprefix(k.prefix)
            for key in client.scan_iter(match=k.prefix + "lane*", count=1000)
        }
        allowed = {"lanes:conf", "lanes:later", "lanes:ring"}  # settings, holds, the ring
        stray = {key for key in left if key not in allowed and not key.endswith(":rate")}
        assert not stray, f"empty queue keeps lane keys {sorted(stray)}"
    return lanes
