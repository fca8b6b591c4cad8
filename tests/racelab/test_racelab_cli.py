"""``emq race`` through click's runner, against real servers."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from emq.cli.main import cli

pytestmark = pytest.mark.servers("valkey", "redis", "cluster")


def _lines(output: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_race_scenario_json_one_object(url: str) -> None:
    res = CliRunner().invoke(cli, ["race", "two-sweeps", "--mode", "naive", "--json", "--url", url])
    assert res.exit_code == 0, res.output
    (obj,) = _lines(res.output)
    assert {k: obj[k] for k in ("scenario", "mode", "recover_count", "stalled")} == {
        "scenario": "two-sweeps",
        "mode": "naive",
        "recover_count": 2,
        "stalled": 2,
    }
    for key in ("expected_stalled", "lost_increments", "double_delivered", "steps"):
        assert key in obj


def test_race_all_scenarios_both_modes(url: str) -> None:
    res = CliRunner().invoke(cli, ["race", "--json", "--url", url])
    assert res.exit_code == 0, res.output
    objs = _lines(res.output)
    assert [(o["scenario"], o["mode"]) for o in objs] == [
        (s, m)
        for s in ("two-sweeps", "counter", "worked-example", "claim-between")
        for m in ("atomic", "naive")
    ]
    atomic = [o for o in objs if o["mode"] == "atomic"]
    assert all(o["lost_increments"] == 0 and o["double_delivered"] is False for o in atomic)


def test_race_picture_without_json(url: str) -> None:
    res = CliRunner().invoke(cli, ["race", "counter", "--url", url])
    assert res.exit_code == 0, res.output
    for text in ("sweep A", "sweep B", "worker", "sweep_stalled.lua", "HGET", "readout"):
        assert text in res.output
    assert "1 increment lost" in res.output


def test_race_unknown_scenario_is_a_usage_error(url: str) -> None:
    res = CliRunner().invoke(cli, ["race", "three-sweeps", "--url", url])
    assert res.exit_code == 2
    assert "three-sweeps" in res.output


def test_race_explore_atomic_json_all_zeros(url: str) -> None:
    res = CliRunner().invoke(cli, ["race", "explore", "--mode", "atomic", "--json", "--url", url])
    assert res.exit_code == 0, res.output
    (obj,) = _lines(res.output)
    rows = obj["rows"]
    assert [r["interleavings"] for r in rows] == [2, 6]
    for row in rows:
        assert all(row[c] == 0 for c in ("recovered_twice", "lost_increment", "delivered_twice"))
        assert row["in_two_sets"] == row["in_none"] == 0


def test_race_explore_tables(url: str) -> None:
    res = CliRunner().invoke(cli, ["race", "explore", "--mode", "atomic", "--url", url])
    assert res.exit_code == 0, res.output
    assert "atomic form" in res.output and "interleavings" in res.output


@pytest.mark.slow
def test_race_stress_json(url: str) -> None:
    args = ["race", "stress", "--mode", "atomic", "--procs", "2", "--seconds", "1", "--json"]
    res = CliRunner().invoke(cli, [*args, "--url", url])
    assert res.exit_code == 0, res.output
    (obj,) = _lines(res.output)
    (row,) = obj["rows"]
    assert row["mode"] == "atomic" and row["recoveries"] > 0
    assert all(v == 0 for v in row["per_10k"].values())
