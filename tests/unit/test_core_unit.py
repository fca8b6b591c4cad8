"""The I/O-free core: ids, validation, backoff arguments, error mapping. No server needed."""

from __future__ import annotations

import random
import time

import pytest
from redis.exceptions import ClusterDownError, MasterDownError, TryAgainError

from emq import Backoff, InvalidId, InvalidName, InvalidOption, InvalidPayload, QueueOptions
from emq.calls.jobs import QueueCore
from emq.errors import (
    DuplicateConflict,
    InvalidUrl,
    JobNotFound,
    LeaseLost,
    ServerRefused,
    WrongState,
    from_reply,
)
from emq.lua.scripts import refusal
from emq.model.ids import EPOCH_MS, Minter, check_id, decode, encode, minted_at_ms
from emq.model.keys import QueueKeys
from emq.model.records import JobSpec
from emq.server.urls import check_url


def _minter() -> Minter:
    m = Minter()
    m.leased(7, time.monotonic())
    return m


def test_ids_are_14_bytes_and_sort_in_mint_order() -> None:
    m = _minter()
    ids = [m.mint() for _ in range(10_000)]
    assert all(len(i) == 14 and i.startswith("JOB") for i in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert abs(minted_at_ms(ids[0]) - time.time() * 1000) < 5_000


def test_id_roundtrip_and_node_bits() -> None:
    value = (12345 << 22) | (7 << 12) | 42
    job_id = encode(value)
    assert decode(job_id) == value
    assert (decode(_minter().mint()) >> 12) & 1023 == 7


def test_same_millisecond_overflow_borrows_the_next_ms() -> None:
    m = _minter()
    now = EPOCH_MS + 10_000
    ids = [m.mint(now) for _ in range(5000)]
    assert len(set(ids)) == 5000 and ids == sorted(ids)


def test_minter_refuses_without_a_valid_lease() -> None:
    m = Minter(ttl_ms=1)
    with pytest.raises(RuntimeError):
        m.mint()
    m.leased(1, time.monotonic() - 1)
    with pytest.raises(RuntimeError):
        m.mint()
    assert m.needs_lease()


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "JOB",
        "job0000000000A",
        "JOB0000000000",
        "JOB0000000000A0",
        "JOB00000000-0A",
        5,
        "JOBzzzzzzzzzzz",
    ],
)
def test_bad_ids_are_refused(bad: object) -> None:
    with pytest.raises(InvalidId):
        check_id(bad)


@pytest.mark.parametrize("value", [0, 10 * 62**10 - 1, 10 * 62**10, (1 << 63) - 1])
def test_ids_at_the_edges_of_the_range_check(value: int) -> None:
    """The fast accept (a first digit of 0-9) and the digit-by-digit check agree at their
    boundary and at the 63-bit limit."""
    job_id = encode(value)
    assert check_id(job_id) == job_id and decode(job_id) == value
    with pytest.raises(InvalidId):
        check_id(encode(value)[:3] + "é" + encode(value)[4:])


@pytest.mark.parametrize("bad", ["", "a b", "a{b", "a}b", "x" * 129, "é", None, "a:b"])
def test_bad_queue_names_are_refused(bad: object) -> None:
    with pytest.raises(InvalidName, match="queue name"):
        QueueKeys.of(bad)  # type: ignore[arg-type]


def test_keys_share_one_hash_tag() -> None:
    k = QueueKeys.of("mail.v2")
    assert k.pending == "emq:{mail.v2}:pending"
    assert k.job("JOB0000000000A") == "emq:{mail.v2}:job:JOB0000000000A"
    assert k.stalled_check == "emq:{mail.v2}:stalled-check"


def test_job_validation() -> None:
    core = QueueCore("v", QueueOptions(max_payload_bytes=100))
    with pytest.raises(InvalidName, match="job name"):
        core.job_spec(JobSpec("bad name"))
    with pytest.raises(InvalidPayload, match="JSON"):
        core.job_spec(JobSpec("ok", {1, 2}))
    with pytest.raises(InvalidPayload, match="JSON"):
        core.job_spec(JobSpec("ok", float("nan")))
    with pytest.raises(InvalidPayload, match="over the limit of 100"):
        core.job_spec(JobSpec("ok", "x" * 200))
    with pytest.raises(InvalidOption, match="delay_ms"):
        core.job_spec(JobSpec("ok", delay_ms=-1))
    with pytest.raises(InvalidOption, match="priority"):
        core.job_spec(JobSpec("ok", priority=2**40))
    with pytest.raises(InvalidOption, match="max_attempts"):
        core.job_spec(JobSpec("ok", max_attempts=0))
    with pytest.raises(InvalidOption, match="dedup key"):
        core.job_spec(JobSpec("ok", key=""))
    with pytest.raises(InvalidId):
        core.job_spec(JobSpec("ok", id="nope"))
    with pytest.raises(InvalidOption, match="lease_ms"):
        core.claim(1, 0)
    with pytest.raises(InvalidOption, match="lease_ms"):
        core.claim(1, -5)
    with pytest.raises(InvalidOption, match="count"):
        core.claim(0, 1000)
    with pytest.raises(InvalidOption, match="unknown location"):
        core.location_key("completed")
    with pytest.raises(InvalidOption, match="token"):
        core.complete([("JOB0000000000A", 0)])


def test_options_are_validated() -> None:
    with pytest.raises(InvalidOption):
        QueueOptions(events_maxlen=-1)
    with pytest.raises(InvalidOption):
        Backoff(jitter=2)
    with pytest.raises(InvalidOption):
        Backoff(kind="linear")  # type: ignore[arg-type]


def test_backoff_arguments() -> None:
    rng = random.Random(1)
    assert Backoff(kind="fixed", base_ms=500, jitter=0).script_args() == (500, 500, 1, 0.0)
    base, cap, factor, draw = Backoff(base_ms=100, cap_ms=5000, jitter=0.5).script_args(rng)
    assert (base, cap, factor) == (100, 5000, 2) and 0 <= draw <= 0.5
    assert Backoff.exactly(250).script_args() == (250, 250, 1, 0.0)


@pytest.mark.parametrize(
    "url", ["http://x", "", "redis://", "redis://host:99999", "unix://", "mysql://h:1"]
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidUrl):
        check_url(url)


def test_valkey_scheme_is_an_alias() -> None:
    assert check_url("valkey://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert check_url("unix:///tmp/v.sock") == "unix:///tmp/v.sock"


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (ClusterDownError("The cluster is down"), "CLUSTERDOWN"),
        (MasterDownError("Link with MASTER is down"), "CLUSTERDOWN"),
        (TryAgainError("Multiple keys request during rehashing of slot"), "TRYAGAIN"),
    ],
)
def test_a_cluster_not_serving_yet_is_a_refusal_not_a_bug(exc: Exception, reason: str) -> None:
    """redis-py drops the error class from these replies; emq names it again. Before: a node
    just restarted answered CLUSTERDOWN and emq raised ScriptError (a bug: please report)."""
    mapped = refusal(exc)  # type: ignore[arg-type]
    assert isinstance(mapped, ServerRefused) and mapped.reason == reason, mapped


def test_error_replies_map_to_one_tree() -> None:
    assert isinstance(from_reply("EMQSTALE lost"), LeaseLost)
    assert isinstance(from_reply("EMQSTATE busy"), WrongState)
    assert isinstance(from_reply("EMQNOJOB x"), JobNotFound)
    assert isinstance(from_reply("EMQCONFLICT x"), DuplicateConflict)
    assert from_reply("ERR something else") is None
