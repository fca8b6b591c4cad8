"""``job_log.lua`` driven with raw keys: every place it writes checked afterwards (the list,
its expiry, the logs index and its pruning), a stale or missing lease refused per line, and
the job's locations untouched (docs/lua-contract.md, Adding a transition)."""

from __future__ import annotations

import pytest
import redis

from emq import Queue
from emq.lua import scripts

from ..support.helpers import assert_consistent

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def now_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_job_log_appends_trims_expires_and_indexes_only_under_the_lease(
    queue: Queue, client: redis.Redis
) -> None:
    k = queue.core.keys
    held, other = queue.enqueue("x"), queue.enqueue("x")
    (lease,) = queue.claim(1, lease_ms=30_000)
    assert lease.id == held
    client.zadd(k.logs_index, {"JOB0000000000A": 1})  # an entry whose list expired long ago
    before = now_ms(client)
    token = str(lease.token)
    args = [k.prefix, 3, 60_000]  # max_lines 3, ttl_ms 60 s
    for i in range(4):
        args += [held, token, f"line {i}"]
    args += [held, str(lease.token - 1), "stale", other, "1", "not leased"]
    args += ["JOB00000000ZZZ", "1", "no row"]
    reply = scripts.run(client, "job_log", [k.active, k.logs_index], args)
    assert reply[4:] == ["lost", "lost", "gone"]
    assert all(isinstance(x, int) and x >= before for x in reply[:4])
    stored = client.lrange(k.logs(held), 0, -1)
    kept = [s.split(" ", 2)[1:] for s in stored]  # the oldest line trimmed
    assert kept == [["1", "line 1"], ["1", "line 2"], ["1", "line 3"]]
    assert all(int(s.split(" ", 1)[0]) == reply[0] for s in stored)  # the server's ms
    assert 0 < client.pttl(k.logs(held)) <= 60_000
    index = dict(client.zrange(k.logs_index, 0, -1, withscores=True))
    assert list(index) == [held] and index[held] == reply[0] + 60_000  # the old entry pruned
    assert client.exists(k.logs(other)) == 0
    row = client.hgetall(k.job(held))
    assert row["state"] == "active" and "logs" not in row  # the row is not written
    assert client.zscore(k.active, held) is not None
    assert_consistent(client, queue.name)
