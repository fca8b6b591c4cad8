"""Parts side by side: ``run.py --parallel N`` deals every episode (system, scenario) to one
part, balanced by expected length, and the joined results hold each system's rows in the
run's scenario order, whichever part ran them. No server: this is the bookkeeping only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

FAULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "faults"
sys.path.insert(0, str(FAULTS))

from lab import episodes, report, sides  # noqa: E402

SCENARIOS = episodes.SCENARIOS


def test_every_episode_lands_in_exactly_one_part_and_the_long_ones_spread() -> None:
    slow = {"recovery_s": 90.0, "scenarios": dict.fromkeys(SCENARIOS)}
    fast = {"recovery_s": 4.0, "scenarios": {**dict.fromkeys(SCENARIOS), "fan-in": "no fan-in"}}
    infos = {"emq": fast, "rq": slow, "arq": fast}
    pairs = [(sy, sc) for sy in infos for sc in SCENARIOS]
    costs = {(sy, sc): sides.cost(episodes.QUICK, infos[sy], sc) for sy, sc in pairs}
    parts = sides.split(pairs, 4, costs)
    dealt = [p for part in parts for p in part]
    assert sorted(dealt) == sorted(pairs)
    assert len(dealt) == len(set(dealt))
    assert costs[("emq", "fan-in")] < costs[("emq", "oom")] < costs[("rq", "oom")]
    for part in parts:  # the slow system is spread, not one part's whole length
        assert 1 <= sum(1 for sy, _ in part if sy == "rq") <= 2
        assert part == sorted(part, key=pairs.index)  # a part keeps the run's order
    assert sides.parse_pairs(sides.flag(parts[0])) == parts[0]


def test_a_pair_without_its_scenario_is_refused() -> None:
    with pytest.raises(ValueError, match="SYSTEM:SCENARIO"):
        sides.parse_pairs("emq:cron,rq")


def test_merged_joins_a_systems_rows_from_every_part(tmp_path: Path) -> None:
    def part(name: str, rows: dict[str, list[str]]) -> Path:
        doc = {"quick": True, "scenarios": SCENARIOS, "seed": 1, "date": "2026-12-02 10:00 UTC",
               "command": f"run.py --pairs {name}", "file": f"{name}.json",
               "systems": {sy: {"info": {"promise": sy}, "rows": [{"scenario": sc} for sc in scs]}
                           for sy, scs in rows.items()}}  # fmt: skip
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        return path

    a = part("a", {"emq": ["fan-in", "worker-sigkill"], "rq": ["oom"]})
    b = part("b", {"rq": ["worker-sigkill", "cron"], "emq": ["oom"]})
    doc = report.merged([a, b], ["emq", "rq"], same_sizes=True)
    assert list(doc["systems"]) == ["emq", "rq"]
    assert [r["scenario"] for r in doc["systems"]["emq"]["rows"]] == [
        "worker-sigkill", "oom", "fan-in"]  # fmt: skip
    assert [r["scenario"] for r in doc["systems"]["rq"]["rows"]] == [
        "worker-sigkill", "oom", "cron"]  # fmt: skip
    assert doc["files"] == ["a.json", "b.json"]
