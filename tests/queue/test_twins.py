"""One scenario set run over both shells: ``Queue`` and ``AsyncQueue`` must answer alike.

Each scenario is written once, against :class:`Shell`, which awaits what the async queue
returns and passes the sync queue's results through.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

from emq import Answer, AsyncQueue, InvalidOption, JobNotFound, JobSpec, LeaseLost, Queue

from ..support.helpers import assert_consistent, expire_leases, expiring, where


class Shell:
    """Calls a method of either queue and returns its (awaited) result."""

    def __init__(self, q: Queue | AsyncQueue) -> None:
        self.q = q

    async def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.q, method)(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, AsyncIterator):
            result = [e async for e in result]
        elif method == "events":
            result = list(result)
        return result


@pytest.fixture(params=["sync", "async"])
async def shell(request: pytest.FixtureRequest, url: str, qname: str) -> AsyncIterator[Shell]:
    q = Queue.from_url(url, qname) if request.param == "sync" else AsyncQueue.from_url(url, qname)
    yield Shell(q)
    if isinstance(q, AsyncQueue):
        await q.close()
    else:
        q.close()


async def test_lifecycle_answers_alike(shell: Shell, client: redis.Redis, qname: str) -> None:
    a, b, c, d = await shell("enqueue_many", [("x", 1), ("x", 2), ("x", 3), ("x", 4)])
    again = await shell("enqueue", "x", 1, id=a)
    assert again == a and not again.created  # idempotent admission
    claims = await shell("claim", 4, 30_000)
    tokens = {j.id: j.token for j in claims}
    assert [j.id for j in claims] == [a, b, c, d] and claims.missing == []
    assert (await shell("extend_many", [(a, tokens[a])], 60_000))[0] > 0
    await shell("complete", a, tokens[a])
    with pytest.raises(JobNotFound):
        await shell("complete", a, tokens[a])
    assert await shell("fail", b, tokens[b], "boom", retry=False) == "dead"
    assert await shell("delay", c, tokens[c], 60_000) == "scheduled"
    expire_leases(client, qname, d)
    with pytest.raises(LeaseLost):
        await shell("complete", d, tokens[d])
    swept = await shell("sweep_all")
    assert swept.recovered == [d]
    assert await shell("redrive", b)
    assert sorted(await shell("redrive_many", [b])) == []
    counts = await shell("counts")
    assert (counts["pending"], counts["schedule"], counts["completed"]) == (2, 1, 1)
    job = await shell("job", d)
    assert job is not None and job.stalled == 1 and job.state == "pending"
    assert {j.id for j in await shell("jobs", "pending")} == {b, d}
    assert await shell("remove", c) == "schedule"
    events = [e.event for e in await shell("events")]
    assert events[:4] == ["enqueued"] * 4 and "stalled" in events and "removed" in events
    assert await shell("pause") and await shell("is_paused")
    assert await shell("claim", 5) == []
    assert await shell("resume")
    assert await shell("drain") == 2
    assert where(client, qname, d) == []
    assert_consistent(client, qname)


async def test_batches_and_bulk_alike(shell: Shell, client: redis.Redis, qname: str) -> None:
    ids = await shell("enqueue_many", [JobSpec("x", i) for i in range(2_500)])
    assert len(set(ids)) == 2_500 and all(i.created for i in ids)
    claims = await shell("claim", 1_000, 30_000)
    answers = await shell("complete_many", [(j.id, j.token) for j in claims])
    assert answers == [Answer.COMPLETED] * 1_000
    more = await shell("claim", 10, 30_000)
    failed = await shell("fail_many", [(j.id, j.token, "e", True, None) for j in more])
    assert set(failed) == {Answer.SCHEDULED}
    assert await shell("obliterate", force=True) == 1_500
    left = client.keys(f"emq:{{{qname}}}:*")
    # only the claims' stored replies remain, and they expire by themselves (at most 60 s)
    assert all(expiring(k) and 0 < client.pttl(k) <= 60_000 for k in left)


async def test_a_server_that_went_away_is_an_emq_error_with_its_cause(url: str) -> None:
    from emq import ServerUnreachable
    from emq.embedded.standalone import free_port

    for q in (Queue.from_url(f"redis://127.0.0.1:{free_port()}/0", "gone"),
              AsyncQueue.from_url(f"redis://127.0.0.1:{free_port()}/0", "gone")):  # fmt: skip
        shell = Shell(q)
        for method, args in (("counts", ()), ("job", ("JOB0000000000A",)), ("claim", (1,))):
            with pytest.raises(ServerUnreachable) as err:
                await shell(method, *args)
            assert isinstance(err.value.__cause__, redis.ConnectionError)
            assert isinstance(err.value, ConnectionError)  # also the builtin: except works


async def test_a_location_is_named_by_its_set_or_its_state(shell: Shell) -> None:
    later = await shell("enqueue", "x", 1, delay_ms=60_000)
    assert [j.id for j in await shell("jobs", "schedule")] == [later]
    assert [j.id for j in await shell("jobs", "scheduled")] == [later]
    with pytest.raises(InvalidOption, match="unknown location 'finished'"):
        await shell("jobs", "finished")
