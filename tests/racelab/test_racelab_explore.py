"""The explorer: every interleaving, each run on a real server.

The atomic form's table is all zeros. The naive form's counts are checked against a model
that needs no server: two naive sweeps recover one lease twice exactly when both probes come
before either removal, and lose an increment exactly when, in addition, both reads come
before either write.
"""

from __future__ import annotations

import pytest
import redis

from emq.racelab.explorer import COLUMNS, explore_one, schedules
from emq.racelab.schedule import Schedule


def _at(schedule: Schedule, token: str) -> int:
    return [str(t) for t in schedule.tokens].index(token)


def _model(schedule: Schedule) -> tuple[bool, bool]:
    def first(step: str) -> int:
        return min(_at(schedule, f"A.{step}"), _at(schedule, f"B.{step}"))

    def last(step: str) -> int:
        return max(_at(schedule, f"A.{step}"), _at(schedule, f"B.{step}"))

    twice = last("probe") < first("remove")
    return twice, twice and last("read") < first("write")


def test_atomic_tables_are_all_zeros(client: redis.Redis) -> None:
    for with_worker, runs in ((False, 2), (True, 6)):
        row = explore_one(client, "atomic", with_worker)
        assert row.interleavings == runs
        assert row.counts == dict.fromkeys(COLUMNS, 0)
        assert row.clean and row.examples == {}


@pytest.mark.slow
def test_naive_two_sweeps_match_the_model(client: redis.Redis) -> None:
    expected = [_model(s) for s in schedules("naive", with_worker=False)]
    row = explore_one(client, "naive", with_worker=False)
    assert row.interleavings == 924
    assert row.counts["recovered_twice"] == sum(t for t, _ in expected) == 420
    assert row.counts["lost_increment"] == sum(lost for _, lost in expected) == 240
    # without a worker nothing is handed out, and a sorted set never holds the job twice;
    # but the job is in neither set between the first ZREM and the first ZADD, every time
    assert row.counts["delivered_twice"] == row.counts["in_two_sets"] == 0
    assert row.counts["in_none"] == 924


@pytest.mark.slow
def test_naive_with_a_claiming_worker_delivers_twice(client: redis.Redis) -> None:
    row = explore_one(client, "naive", with_worker=True)
    assert row.interleavings == 12_012
    assert row.counts["recovered_twice"] == 420 * 13  # W's claim can sit in any of 13 gaps
    assert row.counts["lost_increment"] == 240 * 13
    assert 0 < row.counts["in_two_sets"] <= row.counts["delivered_twice"]
    example = row.examples["in_two_sets"].split()
    # leased and pending at once: B removed before W's claim, and requeued after it
    assert _pos(example, "B.remove") < _pos(example, "W.claim") < _pos(example, "B.requeue")
    assert leftover_lab_keys(client) == []


def _pos(tokens: list[str], token: str) -> int:
    return tokens.index(token)


def leftover_lab_keys(client: redis.Redis) -> list[str]:
    return list(client.scan_iter(match="emq:{race-x-*", count=1000))
