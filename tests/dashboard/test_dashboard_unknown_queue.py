"""A queue's page and its actions for a name that is no queue (docs/dashboard.md, Queue): 404,
and nothing written, on real servers. Before, ``/queues/<typo>`` rendered an empty queue and
its Pause wrote ``meta`` and an event for a queue that no listing shows."""

from __future__ import annotations

import pytest
import redis

from emq import Queue
from emq.model.keys import KNOWN_QUEUES

from .test_dashboard import post, serve

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def test_a_name_with_no_keys_is_404_and_its_actions_write_nothing(
    url: str, qname: str, client: redis.Redis
) -> None:
    typo = f"{qname}-typo"
    with serve(url) as c:
        assert c.get(f"/queues/{typo}").status_code == 404
        for action in ("pause", "resume", "drain"):
            assert post(c, f"/queues/{typo}/{action}").status_code == 404
        assert list(client.scan_iter(match=f"emq:{{{typo}}}:*", count=1000)) == []
        client.sadd(KNOWN_QUEUES, typo)  # a known name (a worker serves it) with no jobs yet
        assert c.get(f"/queues/{typo}").status_code == 200
        q = Queue(client, qname)  # a queue with keys that is not among the known queues
        q.enqueue("x", None)
        client.srem(KNOWN_QUEUES, qname)  # (made by an emq older than the known queues)
        assert c.get(f"/queues/{qname}").status_code == 200
        r = post(c, f"/queues/{qname}/pause")
        assert r.status_code == 303 and q.is_paused()
