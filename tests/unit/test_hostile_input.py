"""Hostile and careless input (docs/input.md): refused before anything is sent, as an InvalidInput
saying what to fix, never half-written, re-sent as an outage or crashed on."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import redis

from emq import (
    AsyncQueue,
    DuplicateConflict,
    InvalidInput,
    InvalidOption,
    InvalidPayload,
    JobSpec,
    Queue,
    QueueOptions,
)
from emq.embedded.standalone import EmbeddedServer
from emq.errors import ConflictInBatch
from emq.model.payloads import MAX_DEPTH, encode_payload, shape_problem

MIB = 1024 * 1024


def _keys_of(client: redis.Redis, name: str) -> list[str]:
    return list(client.scan_iter(match=f"emq:{{{name}}}:*", count=1000))


def _nest(depth: int, kind: str = "list") -> Any:
    payload: Any = 1
    for _ in range(depth - 1):
        payload = [payload] if kind == "list" else {"k": payload}
    return [payload] if kind == "list" else {"k": payload}


# -- a batch that repeats one explicit id ---------------------------------------------------

REPEATS = {
    "payload": JobSpec("a", {"v": 2}),
    "name": JobSpec("b", {"v": 1}),
    "priority": JobSpec("a", {"v": 1}, priority=5),
    "delay_ms": JobSpec("a", {"v": 1}, delay_ms=1000),
    "max_attempts": JobSpec("a", {"v": 1}, max_attempts=9),
    "key": JobSpec("a", {"v": 1}, key="k"),
}


@pytest.mark.parametrize("field", sorted(REPEATS))
def test_a_batch_repeating_an_id_with_other_contents_is_refused_whole(
    queue: Queue, client: redis.Redis, field: str
) -> None:
    """1,100 jobs, the last repeating the 6th job's id with something else: before, the
    first chunk of 1,000 was written and the second raised."""
    ids = queue.new_ids(1099)
    jobs = [JobSpec("a", {"v": 1}, id=i) for i in ids]
    other = REPEATS[field]
    jobs.append(JobSpec(other.name, other.payload, other.delay_ms, other.priority,
                        other.max_attempts, other.key, id=ids[5]))  # fmt: skip
    with pytest.raises(ConflictInBatch) as info:
        queue.enqueue_many(jobs)
    assert ids[5] in str(info.value) and field in str(info.value)
    assert isinstance(info.value, InvalidInput) and isinstance(info.value, DuplicateConflict)
    assert _keys_of(client, queue.name) == []


def test_an_identical_repeat_in_a_batch_is_admitted_once(queue: Queue) -> None:
    ids = queue.new_ids(1099)
    jobs = [JobSpec("a", {"v": 1}, id=i) for i in ids] + [JobSpec("a", {"v": 1}, id=ids[5])]
    out = queue.enqueue_many(jobs)
    assert out == [*ids, ids[5]]
    assert [i.created for i in out].count(False) == 1 and not out[-1].created
    assert queue.counts()["pending"] == 1099


def test_a_later_chunk_refused_by_the_server_says_which_ids_landed(queue: Queue) -> None:
    """The conflict is with a job already stored, so only the server can see it: the first
    chunk is admitted, and the error says so."""
    taken = queue.enqueue("a", {"v": 1})
    ids = queue.new_ids(1099)
    jobs = [JobSpec("a", {"v": 1}, id=i) for i in ids]
    jobs.insert(1050, JobSpec("a", {"v": 2}, id=taken))
    with pytest.raises(DuplicateConflict) as info:
        queue.enqueue_many(jobs)
    landed = info.value.landed  # type: ignore[attr-defined]
    assert landed == ids[:1000]
    assert any("1000 jobs" in note for note in info.value.__notes__)
    assert queue.counts()["pending"] == 1 + 1000


async def test_async_batch_checks_match_the_sync_ones(aqueue: AsyncQueue) -> None:
    ids = await aqueue.new_ids(1099)
    jobs = [JobSpec("a", {"v": 1}, id=i) for i in ids]
    with pytest.raises(ConflictInBatch, match=ids[7]):
        await aqueue.enqueue_many([*jobs, JobSpec("a", {"v": 2}, id=ids[7])])
    assert (await aqueue.counts())["pending"] == 0
    taken = await aqueue.enqueue("a", {"v": 1})
    with pytest.raises(DuplicateConflict) as info:
        await aqueue.enqueue_many([*jobs, JobSpec("a", {"v": 2}, id=taken)])
    assert info.value.landed == ids[:1000]  # type: ignore[attr-defined]
    await aqueue.close()


def test_a_first_chunk_conflict_lands_nothing(queue: Queue) -> None:
    taken = queue.enqueue("a", {"v": 1})
    with pytest.raises(DuplicateConflict) as info:
        queue.enqueue_many([JobSpec("a", {"v": 2}, id=taken)])
    assert info.value.landed == []  # type: ignore[attr-defined]


# -- payloads whose JSON form would differ from what was given -------------------------------

NOT_STRING_KEYS = [
    {1: "x"},
    {1: "a", 2: "b"},  # distinct, but each would come back as a string
    {True: 1},
    {None: 1},
    {1.5: 1},
    {"outer": [{"x": 0}, {2: "i"}]},
    [{"ok": 1}, {7: 1}],
]


@pytest.mark.parametrize("payload", NOT_STRING_KEYS, ids=[repr(p)[:40] for p in NOT_STRING_KEYS])
def test_a_payload_with_a_key_that_is_not_a_string_is_refused(
    queue: Queue, client: redis.Redis, payload: Any
) -> None:
    """Before: ``{1: "x"}`` was written as ``{"1": "x"}`` and the worker got another dict."""
    with pytest.raises(InvalidPayload, match="is not a string; JSON object keys are strings"):
        queue.enqueue("x", payload)
    with pytest.raises(InvalidPayload, match="use string keys"):
        queue.enqueue_many([("ok", {"a": 1}), ("x", payload)])
    assert _keys_of(client, queue.name) == []


def test_a_result_and_a_progress_value_may_still_have_other_keys() -> None:
    """A handler's return value and its progress are encoded as before: only a collision is
    refused (the handler already ran; docs/control.md)."""
    from emq.calls.control import encode_progress
    from emq.calls.results import encode_result

    assert encode_result({1: "a"}, MIB) == encode_progress({1: "a"}) == '{"1":"a"}'
    with pytest.raises(InvalidPayload, match="both become the JSON key"):
        encode_result({1: "a", "1": "b"}, MIB)


LOSSY = [
    {1: "a", "1": "b"},
    {"1": "b", 1: "a"},
    {True: 1, "true": 2},
    {None: 1, "null": 2},
    {1.5: 1, "1.5": 2},
    {-3: 1, "-3": 2},
    {"outer": [{"x": 0}, {"2": "s", 2: "i"}]},
    [{"ok": 1}, {"7": 1, 7: 2}],
    {"s": 'a string with {braces} and "1": inside', 0: "zero", "0": "also zero"},
]


@pytest.mark.parametrize("payload", LOSSY, ids=[repr(p)[:40] for p in LOSSY])
def test_a_payload_whose_json_loses_keys_is_refused(
    queue: Queue, client: redis.Redis, payload: Any
) -> None:
    with pytest.raises(InvalidPayload, match="is not a string"):
        queue.enqueue("x", payload)
    assert _keys_of(client, queue.name) == []


KEPT = [
    {"1": "a", "2": "b"},
    {"2024-01-01": "a date key", "true": "a key spelled true"},
    ["12", "true", {"a": "1"}],
    {"v": 'quoted "1": inside a value'},
    '{"1":1,"1":2}',  # a string that looks like a lossy object is just a string
]


@pytest.mark.parametrize("payload", KEPT, ids=[repr(p)[:40] for p in KEPT])
def test_payloads_that_keep_their_keys_are_accepted(queue: Queue, payload: Any) -> None:
    queue.enqueue("x", payload)
    (job,) = queue.claim(1)
    import json

    assert job.payload == json.loads(json.dumps(payload))


# -- nesting ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_a_100000_deep_payload_is_invalid_not_a_recursion_error(
    queue: Queue, client: redis.Redis, kind: str
) -> None:
    with pytest.raises(InvalidPayload, match="levels"):
        queue.enqueue("x", _nest(100_000, kind))
    assert _keys_of(client, queue.name) == []


def test_a_payload_too_deep_to_decode_in_a_worker_is_refused(queue: Queue) -> None:
    """Before: 985 levels were written, and every claim that took the job raised
    RecursionError while decoding it, leaving the job leased to no one."""
    with pytest.raises(InvalidPayload, match=f"more than {MAX_DEPTH} levels"):
        queue.enqueue("x", _nest(MAX_DEPTH + 1))
    with pytest.raises(InvalidPayload, match=f"more than {MAX_DEPTH} levels"):
        queue.enqueue("x", {"a": [1, 2, {"b": _nest(MAX_DEPTH)}]})
    queue.enqueue("x", _nest(MAX_DEPTH))

    def claim_deep_in_the_stack(depth: int) -> Any:
        return claim_deep_in_the_stack(depth - 1) if depth else queue.claim(1)

    (job,) = claim_deep_in_the_stack(200)
    assert job.payload == _nest(MAX_DEPTH)


def test_the_exact_walk_agrees_with_the_fast_scans() -> None:
    """The fast path skips the walk only when the text rules a problem out: check that on
    shapes around the limits."""
    for payload in [_nest(MAX_DEPTH), _nest(MAX_DEPTH, "dict"), [[0] * 300], {"k": [{}] * 400}]:
        assert shape_problem(payload) is None
        encode_payload(payload, 10 * MIB)
    encode_payload({"flat": _nest(MAX_DEPTH - 1)}, 10 * MIB)  # a flat dict, lists inside
    for payload in [
        _nest(MAX_DEPTH + 1),
        {"flat": _nest(MAX_DEPTH)},
        {1: [], "1": []},
        [[{0: 0, "0": 0}]],
    ]:
        assert shape_problem(payload) is not None
        with pytest.raises(InvalidPayload):
            encode_payload(payload, 10 * MIB)


# -- strings that are not valid Unicode --------------------------------------------------------


def test_a_lone_surrogate_dedup_key_is_invalid(queue: Queue, client: redis.Redis) -> None:
    with pytest.raises(InvalidOption, match="dedup key"):
        queue.enqueue("x", {"a": 1}, key="\ud800")
    with pytest.raises(InvalidOption, match="dedup key"):
        queue.enqueue_many([JobSpec("x", key="ok"), JobSpec("x", key="bad\udfff")])
    assert _keys_of(client, queue.name) == []


def test_a_lone_surrogate_claim_request_is_invalid(queue: Queue) -> None:
    with pytest.raises(InvalidOption, match="request"):
        queue.claim(1, request="\ud800")


def test_a_failure_message_with_a_lone_surrogate_is_kept_escaped(queue: Queue) -> None:
    """A failure is recorded, never refused for its text: the bad code point is escaped."""
    queue.enqueue("x")
    (job,) = queue.claim(1)
    queue.fail(job.id, job.token, "cannot open /tmp/\udcff.txt", retry=False)
    row = queue.job(job.id)
    assert row is not None and row.last_error == "cannot open /tmp/\\udcff.txt"


# -- payloads over the server's own bulk limit -----------------------------------------------


@pytest.fixture
def small_bulk_server(server: EmbeddedServer, tmp_path: Path) -> Any:
    """Our own server (this one is reconfigured) with proto-max-bulk-len at its 1mb floor."""
    own = EmbeddedServer(tmp_path / "srv", binary=server.binary)
    url = own.start()
    admin = redis.Redis.from_url(url, decode_responses=True)
    admin.config_set("proto-max-bulk-len", MIB)
    yield url, admin
    admin.close()
    own.stop()


def _connections(admin: redis.Redis) -> int:
    return int(admin.info("stats")["total_connections_received"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size_mib", [2, 8])
def test_a_payload_over_the_servers_bulk_limit_is_refused_once(
    small_bulk_server: Any, size_mib: int
) -> None:
    """Before: 2 MiB came back as a 'please report' ScriptError ('Protocol error: invalid bulk
    length'); 8 MiB made the server drop the connection, and the enqueue was re-sent eight
    times over 6 s as an outage before raising ServerUnreachable."""
    url, admin = small_bulk_server
    q = Queue.from_url(url, "big", options=QueueOptions(max_payload_bytes=16 * MIB))
    q.enqueue("warm", 1)  # the connection and the id lease exist before we count
    before = _connections(admin)
    with pytest.raises(InvalidPayload, match=f"proto-max-bulk-len of {MIB} bytes"):
        q.enqueue("x", "y" * (size_mib * MIB))
    assert _connections(admin) == before, "nothing re-sent: no reconnection"
    assert q.counts()["pending"] == 1
    q.enqueue("x", "y" * (MIB - 100))  # under the limit: admitted
    assert q.counts()["pending"] == 2
    q.close()


@pytest.mark.timeout(60)
async def test_async_a_payload_over_the_servers_bulk_limit_is_refused_once(
    small_bulk_server: Any,
) -> None:
    url, _ = small_bulk_server
    q = AsyncQueue.from_url(url, "big", options=QueueOptions(max_payload_bytes=16 * MIB))
    with pytest.raises(InvalidPayload, match="proto-max-bulk-len"):
        await q.enqueue_many([("x", 1), ("x", "y" * (3 * MIB))])
    assert (await q.counts())["pending"] == 0
    await q.close()


@pytest.mark.timeout(60)
def test_config_refused_by_acl_leaves_the_limit_unknown_and_big_payloads_pass(
    small_bulk_server: Any,
) -> None:
    """A producer whose ACL forbids CONFIG still enqueues: the limit is unknown, so nothing
    is refused on its account (and the server, raised to 4mb here, accepts 2 MiB)."""
    url, admin = small_bulk_server
    admin.config_set("proto-max-bulk-len", 4 * MIB)
    admin.acl_setuser(
        "producer", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
        commands=["+@all", "-config"],
    )  # fmt: skip
    where = urlparse(url)
    q = Queue.from_url(
        f"redis://producer:pw@{where.hostname}:{where.port}{where.path}",
        "acl",
        options=QueueOptions(max_payload_bytes=16 * MIB),
    )
    with pytest.raises(redis.ResponseError):
        q.client.config_get("proto-max-bulk-len")
    q.enqueue("x", "y" * (2 * MIB))
    assert q.counts()["pending"] == 1
    q.close()
